//! safeguards: judges each call by what it does, not by which tool it uses.
//!
//! Ordinary work — reading, searching, building, testing, writing inside
//! the project — runs without asking. A call that destroys work or data,
//! reads a secret, makes something run later, sends data out, changes the
//! system or publishes is denied with a reason the agent can act on, or
//! paused for a person, by class ([`rules::Class`]) and rule.
//!
//! The judgment is data: rule packs (`packs/*.toml`, bundled) plus the
//! operator's own `rule` list in the config, in one syntax ([`rules`]).
//! Shell commands are read as the shell would split them ([`shell`]),
//! wrappers, `sh -c`, heredocs and interpreter one-liners included; file
//! tools are judged by the path they touch ([`paths`]).
//!
//! The permission mode does not change a verdict: a deny is a deny in
//! `bypassPermissions` too. Only where nobody can answer (autonomous) does
//! a pause become a deny. Fail-closed: if this policy fails, the call is
//! denied.

pub mod paths;
pub mod rules;
pub mod shell;

use std::collections::BTreeMap;

use rules::{Access, Action, Class, Rule};
use serde::Deserialize;
use toolgate_guest::glob::Glob;
use toolgate_guest::serde_json::{self, Value};
use toolgate_guest::{
    BudgetStatus, Config, ConfigError, Decision, ExecutionMode, FailMode, Policy, PolicyInfo,
    Resolution, Risk, ToolCall, action_name,
};

/// The bundled packs, as `build.rs` turned them into JSON: pack name →
/// `{ "rule": [...] }`.
const PACKS: &str = include_str!(concat!(env!("OUT_DIR"), "/packs.json"));

/// Programs that look at a file's name or metadata, never its content: a
/// secret path among their words is not a read.
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

/// Shell text longer than this is not judged: it is refused (the guard in
/// front refuses a `command` this long already).
const MAX_SHELL_TEXT: usize = 64 * 1024;

/// Programs that write the files they name (all non-option words), and
/// those that write only their last one (`cp SRC… DEST`).
const WRITES_ALL: &[&str] = &["tee", "truncate", "touch", "sponge"];
const WRITES_LAST: &[&str] = &["cp", "mv", "install", "ln", "rsync", "scp"];

/// Tools whose `command` argument is shell text, in the runtimes toolgate
/// speaks for.
const SHELL_TOOLS: &[&str] = &[
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
const READ_TOOLS: &[&str] = &[
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
const WRITE_TOOLS: &[&str] = &[
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "write_file",
    "replace",
    "edit",
    "write",
    "str_replace_based_edit_tool",
    "create",
];
/// Argument fields that hold a file path.
const PATH_FIELDS: &[&str] = &[
    "file_path",
    "path",
    "notebook_path",
    "absolute_path",
    "filePath",
    "paths",
];

/// The policy's config table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SafeguardsConfig {
    /// Class → action, over the defaults ([`default_action`]).
    pub classes: BTreeMap<String, Action>,
    /// The operator's own rules, in the packs' syntax; checked before the
    /// packs'.
    pub rule: Vec<Value>,
    /// Rules (by `PACK.NAME`, or a glob such as `cloud.*`) switched off.
    pub disable: Vec<String>,
}

/// What a class does unless the config says otherwise: what cannot be
/// undone is refused with a reason; what a person may well want is asked.
pub fn default_action(class: Class) -> Action {
    match class {
        Class::Destructive | Class::Secret => Action::Deny,
        Class::Persistence | Class::Egress | Class::System | Class::Publish => Action::Ask,
    }
}

/// The policy: its rules, operator's first, and each class's action.
pub struct Safeguards {
    rules: Vec<Rule>,
    index: RuleIndex,
    actions: BTreeMap<Class, Action>,
}

/// Positions in [`Safeguards::rules`] by what each rule is about, in the
/// rules' order, so a call meets only the rules that could match it (a
/// command only those naming its program).
#[derive(Default)]
struct RuleIndex {
    by_program: BTreeMap<String, Vec<usize>>,
    reads: Vec<usize>,
    writes: Vec<usize>,
    code: Vec<usize>,
    tools: Vec<usize>,
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
                rules::Matcher::Paths { access, .. } => match access {
                    Access::Read => index.reads.push(at),
                    Access::Write => index.writes.push(at),
                },
                rules::Matcher::Code(_) => index.code.push(at),
                rules::Matcher::Tool { .. } => index.tools.push(at),
            }
        }
        index
    }

    fn paths(&self, access: Access) -> &[usize] {
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
    /// What it does to the call.
    pub action: Action,
}

impl Safeguards {
    /// Build from the config: the operator's rules, then the bundled packs
    /// less what `disable` names.
    pub fn from_config(config: SafeguardsConfig) -> Result<Self, ConfigError> {
        let mut actions: BTreeMap<Class, Action> = Class::ALL
            .iter()
            .map(|c| (*c, default_action(*c)))
            .collect();
        for (name, action) in &config.classes {
            let class = Class::ALL
                .iter()
                .find(|c| c.name() == name)
                .ok_or_else(|| {
                    ConfigError::at(
                        format!("classes.{name}"),
                        format!(
                            "there is no class `{name}`; the classes are destructive, secret, \
                             persistence, egress, system and publish"
                        ),
                    )
                })?;
            actions.insert(*class, *action);
        }
        let mut rules = rules::compile_list("config", "rule", config.rule, true)?;
        let packs: BTreeMap<String, PackFile> =
            serde_json::from_str(PACKS).expect("build.rs wrote the packs as JSON");
        let disabled: Vec<Glob> = config.disable.iter().map(|d| Glob::new(d)).collect();
        for (pack, file) in packs {
            for rule in rules::compile_list(&pack, "pack", file.rule, false).map_err(|err| {
                ConfigError::whole(format!("bundled pack `{pack}`: {}", err.message))
            })? {
                if !disabled.iter().any(|d| d.matches(&rule.name)) {
                    rules.push(rule);
                }
            }
        }
        for name in &config.disable {
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
            actions,
        })
    }

    /// Every rule that matches what `call` does.
    pub fn hits(&self, call: &ToolCall) -> Vec<Hit<'_>> {
        let mut hits = Vec::new();
        let arguments: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
        let tool = call.tool.as_str();
        // Any tool's `command` string is shell text (an MCP server's shell
        // tool runs it as surely as Bash does).
        let shell = match SHELL_TOOLS.contains(&tool) {
            true => shell_text(&arguments),
            false => arguments
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        if let Some(text) = shell {
            self.judge_shell(&text, &mut hits);
        } else if READ_TOOLS.contains(&tool) {
            for path in path_arguments(&arguments) {
                self.judge_path(&path, Access::Read, &mut hits);
            }
        } else if WRITE_TOOLS.contains(&tool) {
            for path in path_arguments(&arguments) {
                self.judge_path(&path, Access::Write, &mut hits);
            }
        }
        let action = action_name(call);
        for rule in self.index.tools.iter().map(|&at| &self.rules[at]) {
            if let rules::Matcher::Tool { tools, args } = &rule.matcher
                && tools.iter().any(|t| t.matches(&action))
                && args.as_ref().is_none_or(|r| r.is_match(&call.arguments))
            {
                self.hit(rule, action.clone(), &mut hits);
            }
        }
        hits
    }

    fn hit<'r>(&self, rule: &'r Rule, subject: String, hits: &mut Vec<Hit<'r>>) {
        let action = rule.action.unwrap_or(self.actions[&rule.class]);
        if !hits.iter().any(|h| std::ptr::eq(h.rule, rule)) {
            hits.push(Hit {
                rule,
                subject,
                action,
            });
        }
    }

    fn judge_path<'r>(&'r self, path: &str, access: Access, hits: &mut Vec<Hit<'r>>) {
        // A pattern (`~/.ssh/*`, `.env*`) names what its directory and its
        // literal start name.
        let mut candidates = vec![path.to_string()];
        if let Some(wild) = path.find(['*', '?', '[']) {
            let cut = path[..wild].rfind('/').map_or(0, |slash| slash + 1);
            let (parent, stem) = (&path[..cut], &path[cut..wild]);
            candidates.push(parent.trim_end_matches('/').to_string());
            candidates.push(format!("{parent}{stem}"));
        }
        let candidates: Vec<paths::PathRead> = candidates
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| paths::PathRead::new(c))
            .collect();
        for rule in self.index.paths(access).iter().map(|&at| &self.rules[at]) {
            if candidates.iter().any(|c| rule.matches_path(c, access)) {
                self.hit(rule, path.to_string(), hits);
            }
        }
    }

    fn judge_shell<'r>(&'r self, text: &str, hits: &mut Vec<Hit<'r>>) {
        let reading = shell::read(text);
        for command in &reading.commands {
            let program = command.program();
            let rules = self.index.commands(program);
            let joined = match rules.is_empty() {
                true => String::new(),
                false => rules::joined_arguments(&command.words, command.input.as_deref()),
            };
            for rule in rules.iter().map(|&at| &self.rules[at]) {
                if rule.matches_command(&command.words, &joined) {
                    self.hit(rule, command.words.join(" "), hits);
                }
            }
            for redirect in &command.redirects {
                let access = if redirect.write {
                    Access::Write
                } else {
                    Access::Read
                };
                self.judge_path(&redirect.target, access, hits);
            }
            let targets = path_words(command.args());
            let in_place = matches!(program, "sed" | "perl" | "ruby")
                && command.args().iter().any(|w| is_in_place(w));
            // `cp SRC DEST` reads the source, not the destination.
            let read = match WRITES_LAST.contains(&program) {
                true => &targets[..targets.len().saturating_sub(1)],
                false => &targets[..],
            };
            if !METADATA_ONLY.contains(&program) {
                for path in read {
                    self.judge_path(path, Access::Read, hits);
                }
            }
            let written: &[&str] = if WRITES_ALL.contains(&program) || in_place {
                &targets
            } else if WRITES_LAST.contains(&program) {
                targets.last().map(std::slice::from_ref).unwrap_or(&[])
            } else {
                &[]
            };
            for path in written {
                self.judge_path(path, Access::Write, hits);
            }
            if program == "dd" {
                for arg in command.args() {
                    if let Some(path) = arg.strip_prefix("of=") {
                        self.judge_path(path, Access::Write, hits);
                    }
                }
            }
        }
        for code in &reading.code {
            for rule in self.index.code.iter().map(|&at| &self.rules[at]) {
                if let rules::Matcher::Code(regex) = &rule.matcher
                    && regex.is_match(&code.text)
                {
                    self.hit(rule, format!("{} code", code.interpreter), hits);
                }
            }
            for path in code
                .text
                .split(|c: char| !(c.is_alphanumeric() || "._~/$-".contains(c)))
                .filter(|w| w.contains('/') || w.starts_with('.'))
            {
                self.judge_path(path, Access::Read, hits);
            }
        }
    }

    /// The verdict over `hits`: the strongest action wins; the reason is
    /// the first rule's with that action.
    fn verdict(&self, call: &ToolCall, hits: &[Hit<'_>]) -> Decision {
        let Some(strongest) = hits.iter().map(|h| h.action).max() else {
            return Decision::allow();
        };
        let first = hits
            .iter()
            .find(|h| h.action == strongest)
            .expect("the strongest is one of them");
        let rule = first.rule;
        let said = format!(
            "{} (toolgate safeguards: {} rule `{}`)",
            rule.reason,
            rule.class.name(),
            rule.name
        );
        match strongest {
            Action::Allow => Decision::allow(),
            Action::Deny => Decision::deny(said),
            Action::Ask => {
                let approved = call
                    .resolutions
                    .iter()
                    .any(|r| matches!(r, Resolution::Approved(_)));
                if approved {
                    Decision::allow()
                } else if call.caller.mode == ExecutionMode::Autonomous {
                    Decision::deny(format!(
                        "{said}. This needs a person's approval and this agent runs with \
                         nobody to ask."
                    ))
                } else {
                    let preview: String = first.subject.chars().take(200).collect();
                    Decision::pause_for_approval(
                        format!("[{}] {preview} — {}", rule.class.name(), rule.reason),
                        // A person may make it a standing approval: the host
                        // keeps it as a rule for this exact call in this
                        // project.
                        true,
                    )
                }
            }
        }
    }
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

/// The shell text of a shell tool's arguments: `command` as a string, or
/// as an argv (`["bash", "-lc", "…"]`, as Codex sends it).
fn shell_text(arguments: &Value) -> Option<String> {
    let command = arguments.get("command").or_else(|| arguments.get("cmd"))?;
    match command {
        Value::String(text) => Some(text.clone()),
        Value::Array(argv) => Some(
            argv.iter()
                .filter_map(Value::as_str)
                .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The path arguments of a file tool.
fn path_arguments(arguments: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for field in PATH_FIELDS {
        match arguments.get(field) {
            Some(Value::String(path)) => found.push(path.clone()),
            Some(Value::Array(paths)) => {
                found.extend(paths.iter().filter_map(Value::as_str).map(str::to_string));
            }
            _ => {}
        }
    }
    found
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

impl Policy for Safeguards {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "safeguards".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "judges each call by what it does: ordinary work runs; destructive, \
                          secret, persistence, egress, system and publishing calls are refused \
                          or asked, in every permission mode"
                .into(),
            default_fail_mode: FailMode::Closed,
            commands: vec!["rules".into(), "explain".into()],
        }
    }

    fn open(config: Config) -> Result<Self, ConfigError> {
        Self::from_config(config.parse()?)
    }

    fn decide(&self, call: &ToolCall, _risk: &Risk, _budget: &BudgetStatus) -> Decision {
        if call.arguments.len() > MAX_SHELL_TEXT
            && serde_json::from_str::<Value>(&call.arguments)
                .ok()
                .and_then(|a| shell_text(&a))
                .is_some_and(|text| text.len() > MAX_SHELL_TEXT)
        {
            return Decision::deny(format!(
                "This shell text is longer than the {} KiB safeguards judges. Write a long \
                 script to a file with the Write tool and run the file. (toolgate safeguards)",
                MAX_SHELL_TEXT / 1024
            ));
        }
        let hits = self.hits(call);
        self.verdict(call, &hits)
    }

    fn command(&self, name: &str, args: &str) -> Result<String, String> {
        match name {
            "rules" => {
                let listed: Vec<Value> = self
                    .rules
                    .iter()
                    .map(|rule| {
                        serde_json::json!({
                            "name": rule.name,
                            "class": rule.class.name(),
                            "action": format!("{:?}", rule.action.unwrap_or(self.actions[&rule.class])).to_lowercase(),
                            "reason": rule.reason,
                        })
                    })
                    .collect();
                serde_json::to_string(&listed).map_err(|e| e.to_string())
            }
            "explain" => {
                let text: String = serde_json::from_str::<Value>(args)
                    .ok()
                    .and_then(|v| v.get("command").and_then(Value::as_str).map(str::to_string))
                    .ok_or("explain takes {\"command\": \"SHELL TEXT\"}")?;
                let reading = shell::read(&text);
                let mut hits = Vec::new();
                self.judge_shell(&text, &mut hits);
                serde_json::to_string(&serde_json::json!({
                    "commands": reading.commands.iter().map(|c| c.words.join(" ")).collect::<Vec<_>>(),
                    "code": reading.code.iter().map(|c| &c.interpreter).collect::<Vec<_>>(),
                    "hits": hits.iter().map(|h| serde_json::json!({
                        "rule": h.rule.name, "class": h.rule.class.name(), "subject": h.subject,
                    })).collect::<Vec<_>>(),
                }))
                .map_err(|e| e.to_string())
            }
            other => Err(format!(
                "safeguards has no command `{other}`; it has rules and explain"
            )),
        }
    }
}

toolgate_guest::export_policy!(Safeguards);

#[cfg(test)]
mod tests;
