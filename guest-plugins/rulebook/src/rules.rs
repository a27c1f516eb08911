//! The rules: what a pack (or the operator's config) writes, compiled once
//! in `open`, and matched against what a call does.
//!
//! A rule matches one of four things:
//! - `command`: a program (after wrappers) and, with `args`, a regular
//!   expression over its arguments joined by single spaces; `unless` lifts
//!   it, and `safe_targets` lifts it when every target (each argument that
//!   is not an option) is a path those globs cover; `outside_project`
//!   makes it fire only when some target leaves the project;
//! - `paths`: a file read (`access = "read"`) or written (`"write"`), by
//!   a file tool or by a shell command naming it;
//! - `code`: interpreter one-liners (`python -c`), by regular expression;
//! - `tool`: any other tool by action name (`mcp:github/delete_repo`), and
//!   with `args` its arguments' JSON.
//!
//! Regular expressions compile on first use: a call pays only for the rules
//! its programs can reach.

use std::cell::OnceCell;

use regex_lite::Regex;
use serde::Deserialize;
use toolgate_guest::ConfigError;
use toolgate_guest::glob::Glob;

use crate::paths::{PathGlob, PathRead};

/// What kind of harm a rule's call can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Destroys work or data: history, files, databases, infrastructure.
    Destructive,
    /// Reads credentials, keys, tokens or env files.
    Secret,
    /// Makes something run later: shell rc files, cron, units, hooks.
    Persistence,
    /// Sends data off the machine.
    Egress,
    /// Changes the system: firewall, users, mounts, services, packages.
    System,
    /// Publishes: packages, images, releases.
    Publish,
}

impl Class {
    /// Every class, for the config's `classes` table.
    pub const ALL: [Class; 6] = [
        Class::Destructive,
        Class::Secret,
        Class::Persistence,
        Class::Egress,
        Class::System,
        Class::Publish,
    ];

    /// Its name, as the config and the reasons spell it.
    pub fn name(self) -> &'static str {
        match self {
            Class::Destructive => "destructive",
            Class::Secret => "secret",
            Class::Persistence => "persistence",
            Class::Egress => "egress",
            Class::System => "system",
            Class::Publish => "publish",
        }
    }
}

/// What happens to a call a rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Let it run (an operator's way to turn a rule or class off).
    Allow,
    /// Pause it for a person (denied where nobody can answer).
    Ask,
    /// Refuse it, with the rule's reason.
    Deny,
}

/// Which file access a path rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Reading the file's content.
    Read,
    /// Changing the file.
    Write,
}

/// A rule as a pack or the config writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    name: String,
    class: Class,
    reason: String,
    /// Overrides the class's action for this rule.
    action: Option<Action>,
    command: Option<OneOrMany>,
    args: Option<String>,
    unless: Option<String>,
    safe_targets: Option<Vec<String>>,
    /// `safe_targets` looks only at the words before the first option
    /// (`find DIR -delete`).
    #[serde(default)]
    leading_targets: bool,
    /// The rule fires only when a target is outside the project
    /// (absolute, in a home directory, or up with `..`).
    #[serde(default)]
    outside_project: bool,
    paths: Option<Vec<String>>,
    #[serde(default)]
    except: Vec<String>,
    access: Option<Access>,
    code: Option<String>,
    tool: Option<OneOrMany>,
}

/// A config value that is one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    /// The strings, one or many.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(one) => vec![one],
            Self::Many(many) => many,
        }
    }
}

/// A regular expression compiled when first needed.
#[derive(Debug)]
pub struct LazyRegex {
    source: String,
    /// What every match starts with, when that is known: see
    /// [`anchored_literals`].
    starts: Option<Vec<String>>,
    compiled: OnceCell<Regex>,
}

impl LazyRegex {
    fn new(source: String) -> Result<Self, String> {
        // Checked now, so a bad pattern is a config error, not a surprise.
        Regex::new(&source)
            .map_err(|err| format!("`{source}` is not a regular expression: {err}"))?;
        Ok(Self::unchecked(source))
    }

    fn unchecked(source: String) -> Self {
        Self {
            starts: anchored_literals(&source),
            source,
            compiled: OnceCell::new(),
        }
    }

    /// Whether it matches `text`.
    pub fn is_match(&self, text: &str) -> bool {
        if let Some(starts) = &self.starts
            && !starts.iter().any(|start| text.starts_with(start.as_str()))
        {
            return false;
        }
        self.regex().is_match(text)
    }

    /// The compiled expression, compiled now if it was not yet.
    pub fn regex(&self) -> &Regex {
        self.compiled
            .get_or_init(|| Regex::new(&self.source).expect("checked when the rule was built"))
    }

    /// What every match starts with, if [`anchored_literals`] knows.
    pub fn starts(&self) -> Option<&[String]> {
        self.starts.as_deref()
    }
}

/// The texts every match of `source` starts with, when each of its
/// top-level branches begins `^` and then literal text, or literal text and
/// a group whose every alternative starts with literal text (`^reset\b…`,
/// `^stash (drop|clear)\b`, `^(unpublish|state (rm|push))\b`). Most of a
/// program's rules are written so, and a call meets all of them: this test
/// sends most of them past without running the regular expression engine,
/// which has no literal optimizations of its own. `None` (run the engine)
/// for anything less plain.
pub fn anchored_literals(source: &str) -> Option<Vec<String>> {
    let (branches, None) = branches(source)? else {
        return None;
    };
    let mut all = Vec::new();
    for branch in branches {
        let starts = branch_literals(branch.strip_prefix('^')?);
        if starts.iter().any(String::is_empty) {
            return None;
        }
        all.extend(starts);
    }
    Some(all)
}

/// `text` split at its top-level `|`s, up to the `)` closing the group it
/// is inside (its position returned too) or its end. `None` where its
/// brackets are more than this reading follows (a class inside a class).
fn branches(text: &str) -> Option<(Vec<&str>, Option<usize>)> {
    let (mut found, mut depth, mut start) = (Vec::new(), 0usize, 0);
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next()?;
            }
            '[' => {
                // A class: a leading `^` and `]` are its own, and it ends
                // at the next unescaped `]`.
                chars.next_if(|(_, c)| *c == '^');
                chars.next_if(|(_, c)| *c == ']');
                loop {
                    match chars.next()?.1 {
                        '\\' => {
                            chars.next()?;
                        }
                        '[' => return None,
                        ']' => break,
                        _ => {}
                    }
                }
            }
            '(' => depth += 1,
            ')' if depth == 0 => {
                found.push(&text[start..at]);
                return Some((found, Some(at)));
            }
            ')' => depth -= 1,
            '|' if depth == 0 => {
                found.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    found.push(&text[start..]);
    (depth == 0).then_some((found, None))
}

/// One literal character at the start of `text` (`a`, or an escaped
/// punctuation mark such as `\.`), and how many bytes it took.
fn literal_char(text: &str) -> Option<(char, usize)> {
    let mut chars = text.chars();
    match chars.next()? {
        '\\' => chars
            .next()
            .filter(char::is_ascii_punctuation)
            .map(|c| (c, 2)),
        c if c.is_ascii_alphanumeric() || " _-:/=,@%'\"<>!&#~;".contains(c) => Some((c, 1)),
        _ => None,
    }
}

/// The literal characters `text` starts with, as far as each is surely
/// there (one that a quantifier may repeat zero times is not), what
/// follows them, and whether what follows may extend them.
fn literal_run(text: &str) -> (String, &str, bool) {
    let mut run = String::new();
    let mut rest = text;
    while let Some((c, len)) = literal_char(rest) {
        let after = &rest[len..];
        if after.starts_with(['?', '*', '{']) {
            return (run, after, false);
        }
        run.push(c);
        rest = after;
        if rest.starts_with('+') {
            return (run, rest, false);
        }
    }
    (run, rest, true)
}

/// The literal starts of a branch after its `^`: its literal characters,
/// and, if a group follows that must match, each alternative's literal
/// start after them.
fn branch_literals(branch: &str) -> Vec<String> {
    let (prefix, rest, more) = literal_run(branch);
    let group = rest
        .strip_prefix('(')
        .filter(|g| more && !g.starts_with('?'));
    let Some((alternatives, Some(end))) = group.and_then(branches) else {
        return vec![prefix];
    };
    if group.is_some_and(|g| g[end + 1..].starts_with(['?', '*', '{'])) {
        return vec![prefix];
    }
    let mut starts = Vec::new();
    for alternative in alternatives {
        let (run, _, _) = literal_run(alternative);
        if run.is_empty() {
            return vec![prefix];
        }
        starts.push(format!("{prefix}{run}"));
    }
    starts
}

/// What a compiled rule matches.
#[derive(Debug)]
pub enum Matcher {
    Command {
        programs: Vec<String>,
        args: Option<LazyRegex>,
        unless: Option<LazyRegex>,
        safe_targets: Option<Vec<PathGlob>>,
        leading_targets: bool,
        outside_project: bool,
    },
    Paths {
        globs: Vec<PathGlob>,
        except: Vec<PathGlob>,
        access: Access,
    },
    Code(LazyRegex),
    Tool {
        tools: Vec<Glob>,
        args: Option<LazyRegex>,
    },
}

/// A compiled rule.
#[derive(Debug)]
pub struct Rule {
    /// `PACK.NAME` (or `config.NAME`).
    pub name: String,
    pub class: Class,
    pub action: Option<Action>,
    pub reason: String,
    pub matcher: Matcher,
}

impl Rule {
    /// Compile `spec` from `pack`. `checked`: regular expressions are
    /// checked now (the operator's rules); the bundled packs are checked
    /// by their tests, so opening an instance compiles none of theirs.
    pub fn compile(pack: &str, spec: RuleSpec, checked: bool) -> Result<Self, String> {
        let regex = |source: Option<String>| -> Result<Option<LazyRegex>, String> {
            source
                .map(|s| {
                    if checked {
                        LazyRegex::new(s)
                    } else {
                        Ok(LazyRegex::unchecked(s))
                    }
                })
                .transpose()
        };
        let kinds = [
            spec.command.is_some(),
            spec.paths.is_some(),
            spec.code.is_some(),
            spec.tool.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(
                "a rule matches exactly one of `command`, `paths`, `code` or `tool`".into(),
            );
        }
        let matcher = if let Some(programs) = spec.command {
            Matcher::Command {
                programs: programs.into_vec(),
                args: regex(spec.args)?,
                unless: regex(spec.unless)?,
                safe_targets: spec
                    .safe_targets
                    .map(|globs| globs.iter().map(|g| PathGlob::new(g)).collect()),
                leading_targets: spec.leading_targets,
                outside_project: spec.outside_project,
            }
        } else if let Some(globs) = spec.paths {
            Matcher::Paths {
                globs: globs.iter().map(|g| PathGlob::new(g)).collect(),
                except: spec.except.iter().map(|g| PathGlob::new(g)).collect(),
                access: spec
                    .access
                    .ok_or("a `paths` rule needs `access = \"read\"` or `\"write\"`")?,
            }
        } else if let Some(code) = spec.code {
            Matcher::Code(regex(Some(code))?.expect("given"))
        } else {
            let tools = spec.tool.expect("one kind").into_vec();
            Matcher::Tool {
                tools: tools.iter().map(|t| Glob::new(t)).collect(),
                args: regex(spec.args)?,
            }
        };
        Ok(Self {
            name: format!("{pack}.{}", spec.name),
            class: spec.class,
            action: spec.action,
            reason: spec.reason,
            matcher,
        })
    }

    /// Whether this command rule matches `words` (program first), whose
    /// arguments [`joined_arguments`] joined.
    pub fn matches_command(&self, words: &[String], joined: &str) -> bool {
        let Matcher::Command {
            programs,
            args,
            unless,
            safe_targets,
            leading_targets,
            outside_project,
        } = &self.matcher
        else {
            return false;
        };
        let Some((program, rest)) = words.split_first() else {
            return false;
        };
        if !programs.iter().any(|p| p == program) {
            return false;
        }
        if args.as_ref().is_some_and(|r| !r.is_match(joined)) {
            return false;
        }
        if unless.as_ref().is_some_and(|r| r.is_match(joined)) {
            return false;
        }
        let targets: Vec<&String> = if *leading_targets {
            rest.iter().take_while(|w| !w.starts_with('-')).collect()
        } else {
            rest.iter().filter(|w| !w.starts_with('-')).collect()
        };
        if *outside_project && !targets.iter().any(|t| crate::paths::outside_project(t)) {
            return false;
        }
        if let Some(safe) = safe_targets {
            let all_safe = !targets.is_empty()
                && targets
                    .iter()
                    .all(|t| safe.iter().any(|glob| glob.matches(t)));
            if all_safe {
                return false;
            }
        }
        true
    }

    /// Whether this path rule matches `path` accessed as `access`.
    pub fn matches_path(&self, path: &PathRead, access: Access) -> bool {
        let Matcher::Paths {
            globs,
            except,
            access: wanted,
        } = &self.matcher
        else {
            return false;
        };
        *wanted == access
            && globs.iter().any(|g| g.matches_read(path))
            && !except.iter().any(|g| g.matches_read(path))
    }
}

/// What a command rule's `args` and `unless` read: the words after the
/// program joined by single spaces, and what the command reads on standard
/// input (`psql <<EOF`) as if it followed them. Made once per command for
/// all the rules about its program.
pub fn joined_arguments(words: &[String], input: Option<&str>) -> String {
    let mut joined = words.get(1..).unwrap_or_default().join(" ");
    if let Some(input) = input {
        joined.push(' ');
        joined.push_str(input);
    }
    joined
}

/// Compile a list of rule specs (JSON values), naming the bad one.
pub fn compile_list(
    pack: &str,
    key: &str,
    specs: Vec<serde_json::Value>,
    checked: bool,
) -> Result<Vec<Rule>, ConfigError> {
    specs
        .into_iter()
        .enumerate()
        .map(|(index, raw)| {
            let label = raw
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| format!("rule {}", index + 1), |n| format!("rule `{n}`"));
            RuleSpec::deserialize(raw)
                .map_err(|err| err.to_string())
                .and_then(|spec| Rule::compile(pack, spec, checked))
                .map_err(|why| {
                    ConfigError::at(format!("{key}[{index}]"), format!("{label}: {why}"))
                })
        })
        .collect()
}
