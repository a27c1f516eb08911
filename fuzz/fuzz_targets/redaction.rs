//! Redaction keeps its promise: a secret of a shape it names, standing as
//! a word anywhere in any text, never reaches a person or the log. The
//! input picks the shape, the secret's characters and the text around it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::redact::{for_display, redact, redact_json};

/// The shapes `redact` promises, as (prefix, alphabet, length of the rest).
const SHAPES: &[(&str, &[u8], usize)] = &[
    ("ghp_", ALNUM, 36),
    ("github_pat_", ALNUM_UNDERSCORE, 40),
    ("glpat-", ALNUM_DASH, 20),
    ("sk-ant-", ALNUM_DASH, 40),
    ("sk-proj-", ALNUM_DASH, 24),
    ("AKIA", UPPER_DIGIT, 16),
    ("xoxb-", ALNUM_DASH, 24),
    ("AIza", ALNUM_DASH, 35),
];
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const ALNUM_UNDERSCORE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_";
const ALNUM_DASH: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-";
const UPPER_DIGIT: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (prefix, alphabet, len) = SHAPES[data[0] as usize % SHAPES.len()];
    let rest = &data[1..];
    let mut secret = prefix.to_string();
    for i in 0..len {
        let byte = rest.get(i).copied().unwrap_or(i as u8);
        secret.push(alphabet[byte as usize % alphabet.len()] as char);
    }
    let around = String::from_utf8_lossy(rest.get(len..).unwrap_or_default());
    let (before, after) = around.split_at(around.floor_char_boundary(around.len() / 2));
    // A word: spaces on both sides.
    let text = format!("{before} {secret} {after}");

    // The promise is for the secret as a word: the same characters glued
    // to others (`xghp_…`) are no token of that shape.
    let word = format!(" {secret} ");
    let redacted = redact(&text);
    assert!(!redacted.contains(&word), "{secret} survived in {redacted}");
    let shown = for_display(&text);
    assert!(!shown.contains(&word), "{secret} survived display");
    let json = serde_json::json!({"command": text, "nested": [{"x": text}]});
    let redacted = redact_json(&json).to_string();
    assert!(!redacted.contains(&word), "{secret} survived in JSON {redacted}");
});
