//! Likely secrets out of what people and logs see.
//!
//! An agent's tool call can carry credentials (a token in a `curl` header, a
//! password on a command line). toolgate shows calls to people (approval
//! descriptions, `gates list`), writes them to the decision log and returns
//! them in decisions; each of those goes through [`redact`] first, and
//! through [`for_display`] where a size cap matters too. Matching is by
//! shape (well-known token formats) and by name (`password=…`,
//! `"api_key": "…"`, `--token …`, `Authorization: Bearer …`). It is a best
//! effort, not a guarantee: a secret with no recognisable shape or name
//! passes through.

use std::sync::LazyLock;

use regex::Regex;

/// What a redacted secret becomes.
pub const MARK: &str = "[REDACTED]";

/// The most text [`for_display`] keeps.
pub const MAX_DISPLAY_BYTES: usize = 2048;

#[path = "../../../guest-plugins/toolgate-guest/src/secret_shapes.rs"]
mod secret_shapes;

/// Secrets recognisable by their shape alone (the list the policies use).
static SHAPES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&secret_shapes::SECRET_SHAPES.join("|"))
        .expect("the secret shapes are valid regexes")
});

/// A value after a secret-sounding name: `password=v`, `"token": "v"`,
/// `--api-key v`, `Authorization: Bearer v`, `https://user:v@host`.
static NAMED: LazyLock<Regex> = LazyLock::new(|| {
    const NAME: &str = r"[a-z0-9_-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|auth)s?";
    let pattern = format!(
        r#"(?i)((?:bearer|basic)\s+|://[^/\s:@"'\\]+:|--{NAME}(?:\s+|=)|{NAME}(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)([^\s"'\\&,;}}@]{{3,}})"#
    );
    Regex::new(&pattern).expect("the named-secret pattern is a valid regex")
});

/// `text` with likely secrets replaced by [`MARK`].
pub fn redact(text: &str) -> String {
    let shaped = SHAPES.replace_all(text, MARK);
    NAMED
        .replace_all(&shaped, |caps: &regex::Captures<'_>| {
            let value = &caps[2];
            if value == MARK || value.eq_ignore_ascii_case("bearer") {
                caps[0].to_string()
            } else {
                format!("{}{MARK}", &caps[1])
            }
        })
        .into_owned()
}

/// [`redact`], then cut to [`MAX_DISPLAY_BYTES`] (on a character boundary),
/// saying how much was cut.
pub fn for_display(text: &str) -> String {
    let redacted = redact(text);
    if redacted.len() <= MAX_DISPLAY_BYTES {
        return redacted;
    }
    let mut end = MAX_DISPLAY_BYTES;
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [{} more bytes not shown]",
        &redacted[..end],
        redacted.len() - end
    )
}

/// Every string in a JSON value, [`redact`]ed.
pub fn redact_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => Value::String(redact(text)),
        Value::Array(items) => Value::Array(items.iter().map(redact_json).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = match value {
                        Value::String(_) if NAMED.is_match(&format!("{key}=xxx")) => {
                            Value::String(MARK.into())
                        }
                        other => redact_json(other),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_token_shapes_are_redacted() {
        for secret in [
            "ghp_0123456789abcdefABCDEF0123456789abcd",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
            "sk-proj-abcdefghijklmnop1234",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-123456789012-abcdefghij",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
        ] {
            let text = format!("curl -H 'X: {secret}' https://example.com");
            let redacted = redact(&text);
            assert!(!redacted.contains(secret), "{secret} -> {redacted}");
            assert!(redacted.contains(MARK), "{redacted}");
        }
    }

    #[test]
    fn values_of_secret_names_are_redacted() {
        for (text, secret) in [
            ("mysql -u root password=hunter22 db", "hunter22"),
            ("export API_KEY=abc123def456", "abc123def456"),
            (r#"{"password": "s3cr3t!!"}"#, "s3cr3t!!"),
            (r#"{\"token\":\"tok-998877\"}"#, "tok-998877"),
            ("deploy --token abcdef12345", "abcdef12345"),
            (
                "curl -H 'Authorization: Bearer abc.def.ghi123'",
                "abc.def.ghi123",
            ),
            (
                "git clone https://alice:pa55word@example.com/r.git",
                "pa55word",
            ),
        ] {
            let redacted = redact(text);
            assert!(!redacted.contains(secret), "{text} -> {redacted}");
        }
    }

    #[test]
    fn ordinary_commands_are_left_alone() {
        for text in [
            "ls -la /tmp",
            "git commit -m 'fix tokenizer'",
            "cargo test --workspace",
            "credential `test_api_key` is required: Provide your API key",
        ] {
            assert_eq!(redact(text), text);
        }
    }

    #[test]
    fn display_text_is_capped_on_a_character_boundary() {
        let long = "é".repeat(MAX_DISPLAY_BYTES);
        let shown = for_display(&long);
        assert!(shown.len() < MAX_DISPLAY_BYTES + 64);
        assert!(shown.ends_with("more bytes not shown]"));
    }

    #[test]
    fn json_values_under_secret_keys_are_redacted() {
        let value = serde_json::json!({"command": "echo ok", "env": {"GITHUB_TOKEN": "plain"}});
        let redacted = redact_json(&value);
        assert_eq!(redacted["command"], "echo ok");
        assert_eq!(redacted["env"]["GITHUB_TOKEN"], MARK);
    }
}
