//! The few argument fields a call is read by (its shell text, the paths a
//! file tool names), taken from the arguments' JSON text without building
//! its tree: each call is read so, and most of its arguments (an edit's old
//! and new text) are skipped over rather than copied.
//!
//! Read as the JSON tree would answer `get(field)`: a repeated field is its
//! last value, `null` is a value (not an absent field), and text that is
//! not a JSON object has none of them. Where the tree cannot be built but
//! the text can be skipped through (a number past `f64`, a lone surrogate,
//! nesting past 128 levels, each in a field not read), the fields are still
//! read: such padding hid a call's command from the tree's reading, and
//! hides nothing here.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use toolgate_guest::serde_json;

use crate::SHELL_TOOLS;

/// Argument fields that hold a file path, in the order they are read.
const PATH_FIELDS: [&str; 6] = [
    "file_path",
    "path",
    "notebook_path",
    "absolute_path",
    "filePath",
    "paths",
];

/// One field's value, as far as the reading needs it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Field<'a> {
    /// Not in the arguments.
    #[default]
    Absent,
    Text(Cow<'a, str>),
    /// A list: its members that are text.
    List(Vec<Cow<'a, str>>),
    /// Anything else (`null`, a number, an object).
    Other,
}

impl<'a> Field<'a> {
    fn text(&self) -> Option<&str> {
        match self {
            Field::Text(text) => Some(text),
            _ => None,
        }
    }

    fn is_absent(&self) -> bool {
        *self == Field::Absent
    }
}

/// The fields of a call's arguments its reading looks at.
#[derive(Debug, Default)]
pub struct ArgumentFields<'a> {
    command: Field<'a>,
    cmd: Field<'a>,
    /// By [`PATH_FIELDS`].
    paths: [Field<'a>; 6],
}

impl<'a> ArgumentFields<'a> {
    /// The fields of `arguments` (a JSON object's text); none when it is
    /// not one.
    pub fn of(arguments: &'a str) -> Self {
        serde_json::from_str(arguments).unwrap_or_default()
    }

    /// The `command` field, when it is text.
    pub fn command(&self) -> Option<&str> {
        self.command.text()
    }

    /// The shell text of a shell tool's arguments: `command` as a string,
    /// or as an argv (`["bash", "-lc", "…"]`, as Codex sends it); `cmd`
    /// when there is no `command`.
    pub fn shell_text(&self) -> Option<String> {
        let command = match self.command.is_absent() {
            true => &self.cmd,
            false => &self.command,
        };
        match command {
            Field::Text(text) => Some(text.to_string()),
            Field::List(argv) => Some(
                argv.iter()
                    .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        }
    }

    /// The shell text a call of `tool` runs: a shell tool's (see
    /// [`ArgumentFields::shell_text`]), and any tool's `command` string (an
    /// MCP server's shell tool runs it as surely as Bash does).
    pub fn call_shell_text(&self, tool: &str) -> Option<String> {
        match SHELL_TOOLS.contains(&tool) {
            true => self.shell_text(),
            false => self.command.text().map(str::to_string),
        }
    }

    /// The paths a file tool's arguments name.
    pub fn paths(&self) -> Vec<String> {
        let mut found = Vec::new();
        for field in &self.paths {
            match field {
                Field::Text(path) => found.push(path.to_string()),
                Field::List(paths) => found.extend(paths.iter().map(|p| p.to_string())),
                _ => {}
            }
        }
        found
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ArgumentFields<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldsVisitor(std::marker::PhantomData))
    }
}

struct FieldsVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for FieldsVisitor<'a> {
    type Value = ArgumentFields<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut fields = ArgumentFields::default();
        // A key borrowed from the text where it holds no escapes.
        while let Some(key) = map.next_key::<Field<'de>>()? {
            let slot = match key.text().unwrap_or_default() {
                "command" => &mut fields.command,
                "cmd" => &mut fields.cmd,
                key => match PATH_FIELDS.iter().position(|f| *f == key) {
                    Some(at) => &mut fields.paths[at],
                    None => {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                },
            };
            // A repeated field: its last value, as the JSON tree keeps it.
            *slot = map.next_value()?;
        }
        Ok(fields)
    }

    // Any other JSON value is refused (serde's default), and so read as
    // none of the fields, as the tree's `get` answers for it.
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FieldVisitor(std::marker::PhantomData))
    }
}

struct FieldVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for FieldVisitor<'a> {
    type Value = Field<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(Field::Text(Cow::Borrowed(text)))
    }

    // Text with escapes is unescaped into a copy.
    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Field::Text(Cow::Owned(text.to_string())))
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut texts = Vec::new();
        while let Some(member) = seq.next_element::<Field<'a>>()? {
            if let Field::Text(text) = member {
                texts.push(text);
            }
        }
        Ok(Field::List(texts))
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Field::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Field::Other)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// What the JSON tree answers for the same questions.
    fn by_tree(arguments: &str, tool: &str) -> (Option<String>, Vec<String>) {
        let tree: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
        let command = tree.get("command").or_else(|| tree.get("cmd"));
        let shell = match (SHELL_TOOLS.contains(&tool), command) {
            (true, Some(Value::String(text))) => Some(text.clone()),
            (true, Some(Value::Array(argv))) => Some(
                argv.iter()
                    .filter_map(Value::as_str)
                    .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            (true, _) => None,
            (false, _) => tree
                .get("command")
                .and_then(Value::as_str)
                .map(String::from),
        };
        let mut paths = Vec::new();
        for field in PATH_FIELDS {
            match tree.get(field) {
                Some(Value::String(path)) => paths.push(path.clone()),
                Some(Value::Array(list)) => {
                    paths.extend(list.iter().filter_map(Value::as_str).map(String::from))
                }
                _ => {}
            }
        }
        (shell, paths)
    }

    #[test]
    fn fields_are_what_the_json_tree_holds() {
        let deep = format!(
            "{{\"command\": {}\"x\"{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        let cases = [
            r#"{"command": "git status"}"#,
            r#"{"command": ["bash", "-lc", "rm -rf '/'"], "workdir": "/x"}"#,
            r#"{"cmd": "ls"}"#,
            r#"{"command": null, "cmd": "rm -rf /"}"#,
            r#"{"command": 7, "cmd": "ls"}"#,
            r#"{"command": "ls", "command": "rm -rf /"}"#,
            r#"{"comm\u0061nd": "r\u006d -rf /", "description": {"a": [1, {"b": null}]}}"#,
            r#"{"command": ["a", 1, null, ["b"], {"c": "d"}, "e"]}"#,
            r#"{"file_path": "/p/.env", "old_string": "a\nb", "new_string": "\"c\""}"#,
            r#"{"paths": ["a", 2, "b"], "path": "c", "filePath": "d", "absolute_path": "e"}"#,
            r#"{"notebook_path": "n.ipynb", "path": null, "file_path": true}"#,
            r#"["command", "rm -rf /"]"#,
            r#""rm -rf /""#,
            "42",
            "null",
            "",
            r#"{"command": "rm -rf /""#,
            r#"{"command": "ls"} trailing"#,
            "not json",
            &deep,
        ];
        for arguments in cases {
            let fields = ArgumentFields::of(arguments);
            for tool in ["Bash", "mcp_tool", "Read"] {
                let (shell, paths) = by_tree(arguments, tool);
                assert_eq!(fields.call_shell_text(tool), shell, "{tool} {arguments}");
                assert_eq!(fields.paths(), paths, "{arguments}");
            }
        }
    }

    /// Padding the tree cannot parse does not hide the command.
    #[test]
    fn padding_the_tree_cannot_parse_hides_nothing() {
        let deep = format!(
            "{{\"x\": {}0{}, \"command\": \"rm -rf /\"}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        for arguments in [
            r#"{"command": "rm -rf /", "x": 1e400}"#,
            r#"{"x": "\ud800", "command": "rm -rf /"}"#,
            &deep,
        ] {
            assert!(
                serde_json::from_str::<Value>(arguments).is_err(),
                "{arguments}"
            );
            let text = ArgumentFields::of(arguments).call_shell_text("Bash");
            assert_eq!(text.as_deref(), Some("rm -rf /"), "{arguments}");
        }
    }
}
