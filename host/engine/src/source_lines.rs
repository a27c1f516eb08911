//! Where a key is written in the config file, so a refusal can name its
//! line: a policy refusing its table names a key path inside it
//! (`rule[2].args.command`, see `config-error` in the WIT), and the
//! operator is pointed at the line to fix rather than at the table.

use std::ops::Range;

use toml_edit::{Item, Value};

/// The 1-based line of `path` (dotted keys, `[n]` indexes) under the table
/// at `table` in the TOML `text`. A path that goes deeper than the file
/// (a policy's own sub-path inside a string key) stops at the deepest part
/// found; none when not even the first part is there.
pub fn line_of(text: &str, table: &[&str], path: &str) -> Option<usize> {
    let document = toml_edit::Document::parse(text).ok()?;
    let mut node = Node::Item(document.as_item());
    for key in table {
        node = node.key(key)?.0;
    }
    let mut found = None;
    for step in steps(path) {
        let next = match step {
            Step::Key(key) => node.key(key),
            Step::Index(index) => node.index(index).map(|next| (next, None)),
        };
        let Some((next, key_span)) = next else { break };
        found = next.span().or(key_span).or(found);
        node = next;
    }
    found.map(|span| text[..span.start].matches('\n').count() + 1)
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// `rule[2].args.command` → `rule`, `2`, `args`, `command`.
fn steps(path: &str) -> impl Iterator<Item = Step<'_>> {
    path.split('.').flat_map(|part| {
        let mut pieces = part.split('[');
        let key = pieces.next().filter(|k| !k.is_empty()).map(Step::Key);
        let indexes =
            pieces.filter_map(|index| index.strip_suffix(']')?.parse().ok().map(Step::Index));
        key.into_iter().chain(indexes.collect::<Vec<_>>())
    })
}

/// A place in the document: a table, an array of tables, or a value.
#[derive(Clone, Copy)]
enum Node<'a> {
    Item(&'a Item),
    Table(&'a toml_edit::Table),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    /// The child under `key`, with the span of the key itself (a table's
    /// own span may be missing when it is only implied by a dotted header).
    fn key(self, key: &str) -> Option<(Node<'a>, Option<Range<usize>>)> {
        match self {
            Node::Item(Item::Table(table)) => Node::Table(table).key(key),
            Node::Item(Item::Value(value)) => Node::Value(value).key(key),
            Node::Table(table) => table
                .get_key_value(key)
                .map(|(k, item)| (Node::Item(item), k.span())),
            Node::Value(Value::InlineTable(table)) => table
                .get_key_value(key)
                .map(|(k, item)| (Node::Item(item), k.span())),
            _ => None,
        }
    }

    fn index(self, index: usize) -> Option<Node<'a>> {
        match self {
            Node::Item(Item::ArrayOfTables(tables)) => tables.get(index).map(Node::Table),
            Node::Item(Item::Value(value)) => Node::Value(value).index(index),
            Node::Value(Value::Array(array)) => array.get(index).map(Node::Value),
            _ => None,
        }
    }

    fn span(self) -> Option<Range<usize>> {
        match self {
            Node::Item(item) => item.span(),
            Node::Table(table) => table.span(),
            Node::Value(value) => value.span(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# a config
[plugins.rules]
path = "bundled:rules"

[[plugins.rules.config.rule]]
name = "first"
action = "allow"

[[plugins.rules.config.rule]]
name = "second"
action = "dny"
args = { command = { regex = "(" } }
limit = { calls = 3, per = "week" }

[plugins.other.config]
list = [
  { a = 1 },
  { a = 2 },
]
"#;

    fn line(table: &[&str], path: &str) -> Option<usize> {
        line_of(TEXT, table, path)
    }

    #[test]
    fn paths_lead_to_their_lines() {
        let rules = ["plugins", "rules", "config"];
        assert_eq!(line(&rules, "rule[0]"), Some(5));
        assert_eq!(line(&rules, "rule[1]"), Some(9));
        assert_eq!(line(&rules, "rule[1].action"), Some(11));
        assert_eq!(line(&rules, "rule[1].args.command"), Some(12));
        assert_eq!(line(&rules, "rule[1].limit"), Some(13));
        assert_eq!(line(&["plugins", "other", "config"], "list[1].a"), Some(18));
    }

    #[test]
    fn a_path_deeper_than_the_file_stops_at_what_is_there() {
        let rules = ["plugins", "rules", "config"];
        assert_eq!(line(&rules, "rule[1].args.command.deeper"), Some(12));
        assert_eq!(
            line(&rules, "rule[7]"),
            Some(5),
            "no rule[7]: where `rule` is"
        );
        assert_eq!(line(&rules, "nothing"), None);
        assert_eq!(line(&["plugins", "absent"], "x"), None);
        assert_eq!(line_of("not = [toml", &rules, "rule"), None);
    }
}
