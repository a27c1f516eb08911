//! Matching a call's argument fields.
//!
//! A field is named by a dotted path into the arguments (`command`,
//! `options.force`). A pattern is a glob (`"git push*"`: `*` is any run of
//! characters, anchored at both ends) or a regex (`{ regex = '…' }`:
//! unanchored, the `regex` crate's syntax without Unicode classes). A
//! string field is matched as it is; a number or boolean as its JSON text;
//! a list matches when any element does. A field the call does not have
//! never matches.
//!
//! These match the *text* of an argument. A shell command can say the same
//! thing in many spellings (`git push`, `git  push`, `g=git; $g push`): a
//! rule about shell text is a convenience, not a wall.

use std::cell::OnceCell;

use regex_lite::Regex;
use serde_json::Value;
use toolgate_guest::glob::Glob;

/// One field's compiled pattern.
pub enum FieldMatcher {
    Glob(Glob),
    Regex(Regex),
}

impl FieldMatcher {
    /// Compile a pattern as written: a string (a glob), `{ glob = "…" }` or
    /// `{ regex = "…" }`. The error says what is wrong and the fix.
    pub fn compile(pattern: &Value) -> Result<Self, String> {
        let object = match pattern {
            Value::String(glob) => return Ok(Self::Glob(Glob::new(glob))),
            Value::Object(object) if object.len() == 1 => object,
            _ => return Err(SHAPE.into()),
        };
        match object.iter().next() {
            Some((kind, Value::String(text))) if kind == "glob" => Ok(Self::Glob(Glob::new(text))),
            Some((kind, Value::String(text))) if kind == "regex" => Regex::new(text)
                .map(Self::Regex)
                .map_err(|err| format!("not a valid regex: {err}")),
            _ => Err(SHAPE.into()),
        }
    }

    fn matches(&self, text: &str) -> bool {
        match self {
            Self::Glob(glob) => glob.matches(text),
            Self::Regex(regex) => regex.is_match(text),
        }
    }

    /// Whether the field's value matches (a list: any element).
    fn matches_value(&self, value: &Value) -> bool {
        match value {
            Value::String(text) => self.matches(text),
            Value::Array(items) => items.iter().any(|item| self.matches_value(item)),
            other => self.matches(&other.to_string()),
        }
    }
}

const SHAPE: &str =
    "a pattern is a glob string (\"git push*\"), { glob = \"…\" } or { regex = \"…\" }";

/// A call's arguments, parsed from JSON on the first rule that reads a
/// field (a call no argument rule reaches is never parsed).
pub struct Arguments<'a> {
    json: &'a str,
    parsed: OnceCell<Option<Value>>,
}

impl<'a> Arguments<'a> {
    pub fn new(json: &'a str) -> Self {
        Self {
            json,
            parsed: OnceCell::new(),
        }
    }

    /// Whether the field at `path` exists and matches. Arguments that are
    /// not a JSON object have no fields.
    pub fn field_matches(&self, path: &str, matcher: &FieldMatcher) -> bool {
        let parsed = self
            .parsed
            .get_or_init(|| serde_json::from_str(self.json).ok());
        let mut value = match parsed {
            Some(value) => value,
            None => return false,
        };
        for step in path.split('.') {
            match value.get(step) {
                Some(next) => value = next,
                None => return false,
            }
        }
        matcher.matches_value(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matcher(pattern: Value) -> FieldMatcher {
        FieldMatcher::compile(&pattern).unwrap()
    }

    #[test]
    fn globs_are_anchored_and_regexes_are_not() {
        let args = Arguments::new(r#"{"command": "git push origin main"}"#);
        assert!(args.field_matches("command", &matcher(json!("git push*"))));
        assert!(!args.field_matches("command", &matcher(json!("push*"))));
        assert!(args.field_matches("command", &matcher(json!({"regex": r"\bpush\b"}))));
        assert!(!args.field_matches("command", &matcher(json!({"regex": "^push"}))));
    }

    #[test]
    fn paths_lists_and_scalars() {
        let args = Arguments::new(r#"{"o": {"force": true}, "files": ["a.rs", ".env"], "n": 7}"#);
        assert!(args.field_matches("o.force", &matcher(json!("true"))));
        assert!(args.field_matches("files", &matcher(json!(".env"))));
        assert!(!args.field_matches("files", &matcher(json!("*.md"))));
        assert!(args.field_matches("n", &matcher(json!({"glob": "7"}))));
        assert!(!args.field_matches("missing", &matcher(json!("*"))));
        assert!(!args.field_matches("o.force.deeper", &matcher(json!("*"))));
        assert!(!Arguments::new("not json").field_matches("x", &matcher(json!("*"))));
    }

    #[test]
    fn a_bad_pattern_says_what_a_pattern_is() {
        for bad in [
            json!(3),
            json!({"regx": "a"}),
            json!({"glob": "a", "regex": "b"}),
        ] {
            assert!(
                FieldMatcher::compile(&bad)
                    .err()
                    .unwrap()
                    .contains("glob string")
            );
        }
        let err = FieldMatcher::compile(&json!({"regex": "("})).err().unwrap();
        assert!(err.starts_with("not a valid regex"), "{err}");
    }
}
