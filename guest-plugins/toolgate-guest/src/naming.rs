//! The names policies share: how a call's action is spelled, and how a state
//! key is built from untrusted parts.

use crate::{ToolCall, ToolOrigin};

/// The call's action name, the vocabulary operators write patterns in: a
/// built-in tool keeps its name (`Bash`), an MCP tool is `mcp:SERVER/TOOL`,
/// so one pattern can address a whole server (`mcp:github/*`). The server
/// comes from the call's origin, never from the tool's spelling.
pub fn action_name(call: &ToolCall) -> String {
    action_name_of(&call.tool, &call.origin)
}

/// The action name of tool `name` from `origin` (see [`action_name`]): what
/// the `visibility` phase matches a tool descriptor by.
pub fn action_name_of(name: &str, origin: &ToolOrigin) -> String {
    match origin {
        ToolOrigin::Mcp(server) => format!("mcp:{server}/{name}"),
        _ => name.to_string(),
    }
}

/// A state key of `parts` joined by `/`, each part escaped (`%` → `%25`,
/// `/` → `%2F`) so that no part can reach into another's keys: session
/// `a/b` never lists session `a`'s counters.
pub fn state_key(parts: &[&str]) -> String {
    let mut key = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push('/');
        }
        // Most parts (ids, tool names) need no escaping: copied whole.
        if !part.bytes().any(|b| b == b'%' || b == b'/') {
            key.push_str(part);
            continue;
        }
        for c in part.chars() {
            match c {
                '%' => key.push_str("%25"),
                '/' => key.push_str("%2F"),
                c => key.push(c),
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::state_key as key;

    #[test]
    fn key_parts_are_escaped_so_none_reaches_into_another() {
        assert_eq!(key(&["lease", "t-1", "l-9"]), "lease/t-1/l-9");
        assert_eq!(key(&["lease", "a/b"]), "lease/a%2Fb");
        assert_eq!(key(&["lease", "a%2Fb"]), "lease/a%252Fb");
        assert_eq!(key(&["lease", "100%/é"]), "lease/100%25%2Fé");
        assert_eq!(key(&[""]), "");
        // Thread `a/b`'s prefix is not under thread `a`'s.
        assert!(!key(&["lease", "a/b"]).starts_with(&format!("{}/", key(&["lease", "a"]))));
    }
}
