//! Glob matching for tool names: `*` matches any run of characters
//! (including none); everything else matches literally, in order, anchored
//! at both ends. Deliberately tiny: tool names are not paths.

/// Whether `value` matches `pattern`.
pub fn matches(pattern: &str, value: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == value; // no `*` at all
    };
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    for part in middle.iter().filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_match_runs_in_order() {
        assert!(matches("mcp:*/file_*", "mcp:myserver/file_read"));
        assert!(matches("mcp:*/file_*", "mcp:other/file_write"));
        assert!(!matches("mcp:*/file_*", "builtin:shell"));
        assert!(matches("*", "anything"));
        assert!(matches("*", ""));
        assert!(matches("*write*", "fs-test_write_file"));
        assert!(matches("a*b*c", "a-b-c"));
        assert!(!matches("a*b*c", "a-c-b"));
    }

    #[test]
    fn without_stars_it_is_equality() {
        assert!(matches("builtin:shell", "builtin:shell"));
        assert!(!matches("builtin:shell", "builtin:write"));
    }

    #[test]
    fn prefix_and_suffix_may_not_overlap() {
        assert!(!matches("abc*c", "abc"));
        assert!(matches("abc*c", "abcc"));
    }
}
