//! Glob matching for tool names: `*` matches any run of characters
//! (including none); everything else matches literally, in order, anchored
//! at both ends. Deliberately tiny: tool names are not paths.
//!
//! A policy that matches the same patterns on every call compiles them once
//! (in `open`) into [`Glob`]s: a match then allocates nothing and builds no
//! substring searcher. [`matches`] is for a pattern used once.

use memchr::memmem::Finder;

/// Whether `value` matches `pattern`.
pub fn matches(pattern: &str, value: &str) -> bool {
    let Some((first, after_first)) = pattern.split_once('*') else {
        return pattern == value; // no `*` at all
    };
    let (middle, last) = after_first.rsplit_once('*').unwrap_or(("", after_first));
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    for part in middle.split('*').filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A compiled pattern; matches exactly as [`matches`] does. Deserialises
/// from the pattern's text, so a config field can hold globs directly.
#[derive(Clone)]
pub struct Glob {
    text: String,
    /// What must come before the first `*`, and after the last; `None`
    /// when there is no `*` (the pattern is the whole value).
    ends: Option<(String, String)>,
    /// The non-empty parts between the first and last `*`, in order.
    middle: Vec<Finder<'static>>,
}

impl Glob {
    /// Compile `pattern`.
    pub fn new(pattern: &str) -> Self {
        let Some((first, after_first)) = pattern.split_once('*') else {
            return Self {
                text: pattern.into(),
                ends: None,
                middle: Vec::new(),
            };
        };
        let (middle, last) = after_first.rsplit_once('*').unwrap_or(("", after_first));
        Self {
            text: pattern.into(),
            ends: Some((first.into(), last.into())),
            middle: middle
                .split('*')
                .filter(|p| !p.is_empty())
                .map(|p| Finder::new(p).into_owned())
                .collect(),
        }
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        let Some((first, last)) = &self.ends else {
            return self.text == value;
        };
        let Some(mut rest) = value.strip_prefix(first.as_str()) else {
            return false;
        };
        for part in &self.middle {
            match part.find(rest.as_bytes()) {
                // A match of valid UTF-8 starts and ends on char boundaries.
                Some(at) => rest = &rest[at + part.needle().len()..],
                None => return false,
            }
        }
        rest.len() >= last.len() && rest.ends_with(last.as_str())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl std::fmt::Debug for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Glob({:?})", self.text)
    }
}

impl std::fmt::Display for Glob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Glob {}

impl<'de> serde::Deserialize<'de> for Glob {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|text| Self::new(&text))
    }
}

#[cfg(test)]
mod tests {
    use super::{Glob, matches};

    /// Both matchers, which must always agree.
    fn both(pattern: &str, value: &str) -> bool {
        let once = matches(pattern, value);
        assert_eq!(
            Glob::new(pattern).matches(value),
            once,
            "{pattern:?} against {value:?}"
        );
        once
    }

    #[test]
    fn stars_match_runs_in_order() {
        assert!(both("mcp:*/file_*", "mcp:myserver/file_read"));
        assert!(both("mcp:*/file_*", "mcp:other/file_write"));
        assert!(!both("mcp:*/file_*", "builtin:shell"));
        assert!(both("*", "anything"));
        assert!(both("*", ""));
        assert!(both("*write*", "fs-test_write_file"));
        assert!(both("a*b*c", "a-b-c"));
        assert!(!both("a*b*c", "a-c-b"));
        assert!(both("**", "x"));
        assert!(both("a**b", "ab"));
        assert!(both("*é*", "café-au-lait"));
    }

    #[test]
    fn without_stars_it_is_equality() {
        assert!(both("builtin:shell", "builtin:shell"));
        assert!(!both("builtin:shell", "builtin:write"));
        assert!(both("", ""));
        assert!(!both("", "x"));
    }

    #[test]
    fn prefix_and_suffix_may_not_overlap() {
        assert!(!both("abc*c", "abc"));
        assert!(both("abc*c", "abcc"));
        assert!(!both("ab*ba", "aba"));
        assert!(both("ab*ba", "abba"));
        assert!(both("a*b*a", "aba"));
    }

    #[test]
    fn a_glob_deserialises_from_its_text_and_shows_it() {
        let globs: Vec<Glob> = serde_json::from_str(r#"["*shell*", "Bash"]"#).unwrap();
        assert_eq!(globs, [Glob::new("*shell*"), Glob::new("Bash")]);
        assert_eq!(globs[0].to_string(), "*shell*");
        assert!(globs[0].matches("builtin:shell_exec") && !globs[1].matches("bash"));
    }
}
