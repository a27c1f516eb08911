//! What a tool call does, read the same way by every policy that judges
//! calls by their effect (safeguards refuses or asks by class; flow follows
//! what a session took in to where it sends it).
//!
//! Shell commands are read as the shell would split them ([`shell`]),
//! wrappers, `sh -c`, heredocs and interpreter one-liners included; file
//! tools are read by the paths they touch ([`paths`]). What is harmful is
//! data: the bundled rule packs (`packs/*.toml`) plus an operator's own
//! rules, in one syntax ([`rules`]).

mod arguments;
pub mod paths;
pub mod rules;
pub mod shell;

pub use arguments::ArgumentFields;

use std::cell::OnceCell;
use std::collections::BTreeMap;

use rules::{Access, Rule};
use serde::Deserialize;
use toolgate_guest::glob::Glob;
use toolgate_guest::serde_json::{self, Value};
use toolgate_guest::{ConfigError, ToolCall, action_name};

/// The bundled packs, as `build.rs` turned them into JSON: pack name →
/// `{ "rule": [...] }`.
const PACKS: &str = include_str!(concat!(env!("OUT_DIR"), "/packs.json"));

/// Programs that look at a file's name or metadata, never its content: a
/// path among their words is not a read.
const METADATA_ONLY: &[&str] = &[
    "ls",
    "stat",
    "test",
    "[",
    "[[",
    "file",
    "du",
    "find",
    "which",
    "realpath",
    "readlink",
    "dirname",
    "basename",
    "mkdir",
    "touch",
    "echo",
    "printf",
    "chmod",
    "type",
    "exa",
    "eza",
    "tree",
    "cd",
    "pushd",
    "rm",
    "mv",
    "unlink",
    "git",
    "ssh-keygen",
    "source",
    ".",
    "ssh",
    "ssh-add",
];

/// Programs that write the files they name (all non-option words), and
/// those that write only their last one (`cp SRC… DEST`).
const WRITES_ALL: &[&str] = &["tee", "truncate", "touch", "sponge"];
const WRITES_LAST: &[&str] = &["cp", "mv", "install", "ln", "rsync", "scp"];

/// Tools whose `command` argument is shell text, in the runtimes toolgate
/// speaks for.
pub const SHELL_TOOLS: &[&str] = &[
    "Bash",
    "bash",
    "shell",
    "Shell",
    "run_shell_command",
    "exec_command",
    "local_shell",
    "shell_command",
    "builtin:shell",
];
/// Tools that read the file at their path argument.
pub const READ_TOOLS: &[&str] = &[
    "Read",
    "NotebookRead",
    "Grep",
    "read_file",
    "read_many_files",
    "view",
    "read",
    "grep",
    "search_file_content",
];
/// Tools that write the file at their path argument.
pub const WRITE_TOOLS: &[&str] = &[
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "write_file",
    "replace",
    "edit",
    "write",
    "create",
];
/// Tools whose `command` says what they do to their `path` (the text
/// editor tool of Anthropic's API): `view` reads it, every other command
/// (`create`, `str_replace`, `insert`, `undo_edit`) writes it. Their
/// `command` is no shell text.
pub const EDITOR_TOOLS: &[&str] = &["str_replace_based_edit_tool"];
/// The rules, the operator's first, indexed by what each is about.
pub struct RuleBook {
    rules: Vec<Rule>,
    index: RuleIndex,
}

/// Positions in [`RuleBook::rules`] by what each rule is about, in the
/// rules' order, so a call meets only the rules that could match it (a
/// command only those naming its program).
#[derive(Default)]
struct RuleIndex {
    by_program: BTreeMap<String, Vec<usize>>,
    reads: PathRules,
    writes: PathRules,
    code: Vec<usize>,
    tools: Vec<usize>,
}

/// The path rules of one access, their globs by the name they end in: a
/// path meets dozens of globs (the secret rules alone have ~70), most of
/// them a plain file name its own name is not, so only the globs ending in
/// its name or in a wildcard are tried.
#[derive(Default)]
struct PathRules {
    /// (rule, glob) positions of the globs ending in a plain name.
    by_name: BTreeMap<String, Vec<(usize, usize)>>,
    /// Those of the others (a wildcard, `**`, or nothing last), by where
    /// they start: a path outside any home meets none of the home's.
    wild: [Vec<(usize, usize)>; 3],
}

/// The anchors of [`PathRules::wild`], in order.
const ANCHORS: [paths::Anchor; 3] = [
    paths::Anchor::Home,
    paths::Anchor::Root,
    paths::Anchor::Anywhere,
];

impl PathRules {
    fn add(&mut self, at: usize, globs: &[paths::PathGlob]) {
        for (glob_at, glob) in globs.iter().enumerate() {
            match glob.last_name() {
                Some(name) => self
                    .by_name
                    .entry(name.to_string())
                    .or_default()
                    .push((at, glob_at)),
                None => {
                    let slot = ANCHORS.iter().position(|a| *a == glob.anchor());
                    self.wild[slot.expect("every anchor has a list")].push((at, glob_at));
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.by_name.is_empty() && self.wild.iter().all(Vec::is_empty)
    }

    /// The positions of the rules in `rules` that `path` matches as
    /// `access` (see [`Rule::matches_path`]), in order.
    fn matching(&self, rules: &[Rule], path: &paths::PathRead, access: Access) -> Vec<usize> {
        // A glob ending in a plain name matches only a path of that name.
        let named = path.name().and_then(|name| self.by_name.get(name));
        let wild = (ANCHORS.iter().zip(&self.wild))
            .filter(|(anchor, _)| path.is_at(**anchor))
            .flat_map(|(_, globs)| globs);
        let mut found: Vec<usize> = named
            .into_iter()
            .flatten()
            .chain(wild)
            .filter(|&&(at, glob)| match &rules[at].matcher {
                rules::Matcher::Paths { globs, .. } => globs[glob].matches_read(path),
                _ => false,
            })
            .map(|&(at, _)| at)
            .collect();
        found.sort_unstable();
        found.dedup();
        // Rare: a glob matched; the rule's exceptions decide.
        found.retain(|&at| rules[at].matches_path(path, access));
        found
    }
}

impl RuleIndex {
    fn new(rules: &[Rule]) -> Self {
        let mut index = Self::default();
        for (at, rule) in rules.iter().enumerate() {
            match &rule.matcher {
                rules::Matcher::Command { programs, .. } => {
                    for program in programs {
                        index
                            .by_program
                            .entry(program.clone())
                            .or_default()
                            .push(at);
                    }
                }
                rules::Matcher::Paths { access, globs, .. } => match access {
                    Access::Read => index.reads.add(at, globs),
                    Access::Write => index.writes.add(at, globs),
                },
                rules::Matcher::Code(_) => index.code.push(at),
                rules::Matcher::Tool { .. } => index.tools.push(at),
            }
        }
        index
    }

    fn paths(&self, access: Access) -> &PathRules {
        match access {
            Access::Read => &self.reads,
            Access::Write => &self.writes,
        }
    }

    fn commands(&self, program: &str) -> &[usize] {
        self.by_program.get(program).map_or(&[], Vec::as_slice)
    }
}

/// One rule that matched, and what it matched.
#[derive(Debug)]
pub struct Hit<'r> {
    /// The rule.
    pub rule: &'r Rule,
    /// What it saw: the command, or the path.
    pub subject: String,
}

/// The files a call reads and writes, as the call names them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Effects {
    pub reads: Vec<String>,
    pub writes: Vec<String>,
}

impl RuleBook {
    /// The operator's rules (`rule`, under the config key `key`), then the
    /// bundled packs less what `disable` names (`PACK.RULE`, or a glob).
    pub fn new(operator: Vec<Value>, disable: &[String]) -> Result<Self, ConfigError> {
        let mut rules = rules::compile_list("config", "rule", operator, true)?;
        let packs: BTreeMap<String, PackFile> =
            serde_json::from_str(PACKS).expect("build.rs wrote the packs as JSON");
        let disabled: Vec<Glob> = disable.iter().map(|d| Glob::new(d)).collect();
        for (pack, file) in packs {
            for rule in rules::compile_list(&pack, "pack", file.rule, false).map_err(|err| {
                ConfigError::whole(format!("bundled pack `{pack}`: {}", err.message))
            })? {
                if !disabled.iter().any(|d| d.matches(&rule.name)) {
                    rules.push(rule);
                }
            }
        }
        for name in disable {
            if !name.contains('*') && !rules_named(name) {
                return Err(ConfigError::at(
                    "disable",
                    format!(
                        "there is no bundled rule `{name}` to disable (names are PACK.RULE, \
                         e.g. `git.reset-hard`; `toolgate command safeguards rules` lists them)"
                    ),
                ));
            }
        }
        Ok(Self {
            index: RuleIndex::new(&rules),
            rules,
        })
    }

    /// The rules `first` keeps and the rest, as two books: a policy that
    /// needs some rules for every call and the others only sometimes
    /// checks the others only then.
    pub fn partition(self, first: impl Fn(&Rule) -> bool) -> (Self, Self) {
        let (kept, rest): (Vec<Rule>, Vec<Rule>) = self.rules.into_iter().partition(first);
        let book = |rules: Vec<Rule>| Self {
            index: RuleIndex::new(&rules),
            rules,
        };
        (book(kept), book(rest))
    }

    /// Every rule, in the order they are checked.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every rule that matches what `call` does, each once.
    pub fn hits(&self, call: &ToolCall) -> Vec<Hit<'_>> {
        self.hits_of(&CallReading::new(call))
    }

    /// [`RuleBook::hits`] of a call already read.
    pub fn hits_of(&self, read: &CallReading<'_>) -> Vec<Hit<'_>> {
        let mut hits = Vec::new();
        if let Some(reading) = &read.shell {
            self.judge_reading(reading, &mut hits);
        }
        if let Some(access) = read.file_access {
            for path in &read.paths {
                self.judge_path(path, access, &mut hits);
            }
        }
        if self.index.tools.is_empty() {
            return hits;
        }
        let action = action_name(read.call);
        for rule in self.index.tools.iter().map(|&at| &self.rules[at]) {
            if let rules::Matcher::Tool { tools, args } = &rule.matcher
                && tools.iter().any(|t| t.matches(&action))
                && args
                    .as_ref()
                    .is_none_or(|r| r.is_match(&read.call.arguments))
            {
                hit(rule, action.clone(), &mut hits);
            }
        }
        hits
    }

    fn judge_path<'r>(&'r self, path: &str, access: Access, hits: &mut Vec<Hit<'r>>) {
        let rules = self.index.paths(access);
        if rules.is_empty() || path.is_empty() {
            return;
        }
        // A pattern (`~/.ssh/*`, `.env*`) names what its directory and its
        // literal start name.
        let mut candidates = vec![paths::PathRead::new(path)];
        if let Some(wild) = path.find(['*', '?', '[']) {
            let cut = path[..wild].rfind('/').map_or(0, |slash| slash + 1);
            let (parent, stem) = (&path[..cut], &path[cut..wild]);
            for named in [parent.trim_end_matches('/'), &format!("{parent}{stem}")] {
                if !named.is_empty() {
                    candidates.push(paths::PathRead::new(named));
                }
            }
        }
        let mut matched: Vec<usize> = candidates
            .iter()
            .flat_map(|c| rules.matching(&self.rules, c, access))
            .collect();
        if candidates.len() > 1 {
            matched.sort_unstable();
            matched.dedup();
        }
        for at in matched {
            hit(&self.rules[at], path.to_string(), hits);
        }
    }

    /// The rules `text`, as shell, matches.
    pub fn shell_hits(&self, text: &str) -> Vec<Hit<'_>> {
        let mut hits = Vec::new();
        self.judge_reading(&shell::read(text), &mut hits);
        hits
    }

    fn judge_reading<'r>(&'r self, reading: &shell::Reading, hits: &mut Vec<Hit<'r>>) {
        for command in &reading.commands {
            let program = command.program();
            let rules = self.index.commands(program);
            let joined = match rules.is_empty() {
                true => String::new(),
                false => rules::joined_arguments(&command.words, command.input.as_deref()),
            };
            for rule in rules.iter().map(|&at| &self.rules[at]) {
                if rule.matches_command(&command.words, &joined) {
                    hit(rule, command.words.join(" "), hits);
                }
            }
            let effects = command_effects(command);
            for path in &effects.reads {
                self.judge_path(path, Access::Read, hits);
            }
            for path in &effects.writes {
                self.judge_path(path, Access::Write, hits);
            }
        }
        for code in &reading.code {
            for rule in self.index.code.iter().map(|&at| &self.rules[at]) {
                if let rules::Matcher::Code(regex) = &rule.matcher
                    && regex.is_match(&code.text)
                {
                    hit(rule, format!("{} code", code.interpreter), hits);
                }
            }
            for path in code_paths(&code.text) {
                self.judge_path(path, Access::Read, hits);
            }
        }
    }
}

fn hit<'r>(rule: &'r Rule, subject: String, hits: &mut Vec<Hit<'r>>) {
    if !hits.iter().any(|h| std::ptr::eq(h.rule, rule)) {
        hits.push(Hit { rule, subject });
    }
}

/// A call read once: its shell text as the shell would split it (when it
/// runs one) and the paths it names.
pub struct CallReading<'c> {
    /// The call.
    pub call: &'c ToolCall,
    /// What its shell text runs, when it has some.
    pub shell: Option<shell::Reading>,
    /// The paths it names, when it is a file tool (read once: both the
    /// rules and [`CallReading::effects`] look at them), whatever else its
    /// arguments hold: a `command` beside them does not hide them.
    pub paths: Vec<String>,
    /// How a file tool touches its paths; none for another tool.
    file_access: Option<Access>,
    /// Its arguments as JSON, parsed when first asked for.
    arguments: OnceCell<Value>,
}

impl<'c> CallReading<'c> {
    /// Read `call`.
    pub fn new(call: &'c ToolCall) -> Self {
        let fields = ArgumentFields::of(&call.arguments);
        let tool = call.tool.as_str();
        let editor = EDITOR_TOOLS.contains(&tool);
        let shell = match editor {
            true => None,
            false => fields.call_shell_text(tool).map(|text| shell::read(&text)),
        };
        let file_access =
            if READ_TOOLS.contains(&tool) || editor && fields.command() == Some("view") {
                Some(Access::Read)
            } else if WRITE_TOOLS.contains(&tool) || editor {
                Some(Access::Write)
            } else {
                None
            };
        let paths = match file_access {
            Some(_) => fields.paths(),
            None => Vec::new(),
        };
        Self {
            call,
            shell,
            paths,
            file_access,
            arguments: OnceCell::new(),
        }
    }

    /// Its arguments (null when they are not JSON).
    pub fn arguments(&self) -> &Value {
        self.arguments
            .get_or_init(|| serde_json::from_str(&self.call.arguments).unwrap_or(Value::Null))
    }

    /// The files the call reads and writes: a file tool's paths, and what
    /// its shell text's commands read and write (redirections, the files a
    /// program names, an interpreter one-liner's paths as reads).
    pub fn effects(&self) -> Effects {
        // The file tool's own paths first: a count that caps how many are
        // followed reaches them before any the shell text names.
        let mut effects = Effects::default();
        match self.file_access {
            Some(Access::Read) => effects.reads.extend(self.paths.iter().cloned()),
            Some(Access::Write) => effects.writes.extend(self.paths.iter().cloned()),
            None => {}
        }
        if let Some(reading) = &self.shell {
            for command in &reading.commands {
                let more = command_effects(command);
                effects.reads.extend(more.reads);
                effects.writes.extend(more.writes);
            }
            for code in &reading.code {
                effects
                    .reads
                    .extend(code_paths(&code.text).map(str::to_string));
            }
        }
        effects
    }
}

/// What one simple command reads and writes.
fn command_effects(command: &shell::Command) -> Effects {
    let mut effects = Effects::default();
    let program = command.program();
    for redirect in &command.redirects {
        match redirect.write {
            true => effects.writes.push(redirect.target.clone()),
            false => effects.reads.push(redirect.target.clone()),
        }
    }
    let targets = path_words(command.args());
    let in_place =
        matches!(program, "sed" | "perl" | "ruby") && command.args().iter().any(|w| is_in_place(w));
    // `cp SRC DEST` reads the source, not the destination.
    let read = match WRITES_LAST.contains(&program) {
        true => &targets[..targets.len().saturating_sub(1)],
        false => &targets[..],
    };
    if !METADATA_ONLY.contains(&program) {
        effects.reads.extend(read.iter().map(|p| p.to_string()));
    }
    let written: &[&str] = if WRITES_ALL.contains(&program) || in_place {
        &targets
    } else if WRITES_LAST.contains(&program) {
        targets.last().map(std::slice::from_ref).unwrap_or(&[])
    } else {
        &[]
    };
    effects.writes.extend(written.iter().map(|p| p.to_string()));
    if program == "dd" {
        for arg in command.args() {
            if let Some(path) = arg.strip_prefix("of=") {
                effects.writes.push(path.to_string());
            }
        }
    }
    effects
}

/// The words of an interpreter one-liner that may be paths.
fn code_paths(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_alphanumeric() || "._~/$-".contains(c)))
        .filter(|w| w.contains('/') || w.starts_with('.'))
}

/// Bundled rule names, for `disable`'s check.
fn rules_named(name: &str) -> bool {
    let packs: BTreeMap<String, PackFile> =
        serde_json::from_str(PACKS).expect("build.rs wrote the packs as JSON");
    packs.iter().any(|(pack, file)| {
        file.rule.iter().any(|r| {
            r.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| format!("{pack}.{n}") == name)
        })
    })
}

#[derive(Deserialize)]
struct PackFile {
    #[serde(default)]
    rule: Vec<Value>,
}

/// The paths among a command's arguments, less what a program loads
/// without printing (`--env-file .env`).
fn path_words(args: &[String]) -> Vec<&str> {
    let mut paths = Vec::new();
    let mut loaded = false;
    for word in args {
        if std::mem::take(&mut loaded) {
            continue;
        }
        if word == "--env-file" {
            loaded = true;
            continue;
        }
        if word.starts_with("--env-file=") {
            continue;
        }
        paths.extend(path_word(word));
    }
    paths
}

/// `-i`, `-i.bak`, `-pi`, `--in-place`: an in-place edit of the files named.
fn is_in_place(word: &str) -> bool {
    word.starts_with("--in-place")
        || word.strip_prefix('-').is_some_and(|flags| {
            !flags.starts_with('-') && flags.split('.').next().is_some_and(|f| f.contains('i'))
        })
}

/// The path in a shell word, if it may be one: `--file=PATH`'s value,
/// curl's `@PATH`, `of=PATH`, or the word itself when it is not an option.
fn path_word(word: &str) -> Option<&str> {
    let word = match word.strip_prefix('-') {
        Some(option) => option.split_once('=')?.1,
        None => word,
    };
    let word = word.trim_start_matches(['@', '<']);
    let word = word.split_once('=').map_or(word, |(key, value)| {
        // `name=@file` (curl -F) and `if=PATH` (dd).
        if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            value.trim_start_matches(['@', '<'])
        } else {
            word
        }
    });
    (!word.is_empty()).then_some(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paths made from every bundled glob (its wildcards filled in, under
    /// each kind of anchor) and some that are nobody's.
    fn paths_of_the_packs() -> Vec<String> {
        let mut found: Vec<String> = ["", "/", "~", "src/main.rs", "../x/.env", ".pem", "a.pub"]
            .map(String::from)
            .to_vec();
        let packs: BTreeMap<String, PackFile> = serde_json::from_str(PACKS).expect("JSON");
        let rules = packs.into_values().flat_map(|file| file.rule);
        let globs = rules.flat_map(|rule| {
            let list = |key| rule.get(key).and_then(Value::as_array).cloned();
            list("paths").into_iter().chain(list("except")).flatten()
        });
        for glob in globs {
            let glob = glob.as_str().expect("a glob is a string");
            let shape = glob.replace("**", "a/b").replace(['*', '?'], "x");
            for place in ["", "app/", "/home/u/", "/root/", "$HOME/"] {
                found.push(format!("{place}{}", shape.trim_start_matches("~/")));
            }
            found.push(shape.replace('x', ""));
            found.push(format!("{shape}/more"));
        }
        found
    }

    #[test]
    fn the_path_index_finds_what_every_rule_tried_in_turn_finds() {
        let book = RuleBook::new(Vec::new(), &[]).expect("the packs open");
        let paths = paths_of_the_packs();
        let mut reached = std::collections::BTreeSet::new();
        for path in &paths {
            let read = paths::PathRead::new(path);
            for access in [Access::Read, Access::Write] {
                let every: Vec<usize> = (0..book.rules.len())
                    .filter(|&at| book.rules[at].matches_path(&read, access))
                    .collect();
                let indexed = book
                    .index
                    .paths(access)
                    .matching(&book.rules, &read, access);
                assert_eq!(indexed, every, "{path} ({access:?})");
                reached.extend(every);
            }
        }
        // The corpus reaches every path rule.
        for (at, rule) in book.rules.iter().enumerate() {
            if matches!(rule.matcher, rules::Matcher::Paths { .. }) {
                assert!(reached.contains(&at), "no path reaches {}", rule.name);
            }
        }
    }
}
