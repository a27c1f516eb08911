//! toolgate's agent runtimes: one file per runtime, each with its
//! [`RuntimeInfo`] (what toolgate knows of it as data) and its [`Adapter`]
//! (translation), over the wire types only — this crate links no engine
//! and no wasmtime, and the engine re-exports it as `hooks`.
//!
//! Self-protection, `toolgate setup system` and `doctor` read the
//! [`RuntimeInfo`]s ([`RUNTIMES`]) and no adapter. An adapter only
//! translates: it parses the runtime's event into an [`Event`] (a new
//! prompt, a call to decide, a call that ran, or nothing), writes the
//! runtime's answer to a decision, and says what its settings need. The
//! engine's driver (`service::hook`) does the work: turns, decisions,
//! outcomes, gates. Adding a runtime is one file here (with its `mod`
//! line) and one line in the wire's list, `toolgate_wire::for_each_runtime!`
//! (its variant, its name and its module here): the enum, its names, this
//! crate's one `match` and [`RUNTIMES`] are made from that list; nothing
//! else matches on the runtime or names its variant (`toolgate hook`'s subcommands, their help, the failure answers
//! the thin hook client gives, and what `hook install` and `doctor` run
//! come from [`RUNTIMES`]).
//!
//! An internal failure must never silently allow (a crashed hook lets most
//! runtimes run the tool), so every error becomes the runtime's failure
//! answer for the configured `--on-error`, and "no decision" is still an
//! answer (`{}`): the installed command line treats no output as a failure.

// A runtime's file is a `mod` here, outside the list's macro: rustfmt
// (and `cargo fmt`) reach a file only through a `mod` item it can see. A
// file left out of the list fails the architecture test; a list line
// without its `mod`, the build.
pub mod claude_code;
pub mod codex;
pub mod copilot;
pub mod cursor;
pub mod gemini_cli;
pub mod opencode;
pub mod path_text;
pub mod transcript;

use toolgate_wire::{decision, gates, output, request};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::decision::{Decision, Outcome};
use crate::gates::PendingGate;
use crate::request::ToolRequest;
pub use toolgate_wire::InvalidRequest;
pub use toolgate_wire::protocol::{HookRuntime, OnError};

/// What reading a runtime's event comes to: an event it cannot be, is an
/// [`InvalidRequest`] naming the event and the field.
pub type Result<T, E = InvalidRequest> = std::result::Result<T, E>;

/// Makes [`adapter`] and [`RUNTIMES`] from the wire's one list
/// ([`toolgate_wire::for_each_runtime!`]), in [`HookRuntime::ALL`] order:
/// each runtime's module named there, whose type named as the variant is
/// the adapter and whose `INFO` is its [`RuntimeInfo`].
macro_rules! runtimes {
    ($($(#[$attr:meta])* $variant:ident = $name:literal in $module:ident,)+) => {
        /// The adapter of `runtime`: the one place a runtime is matched.
        pub fn adapter(runtime: HookRuntime) -> &'static dyn Adapter {
            match runtime {
                $(HookRuntime::$variant => &$module::$variant,)+
            }
        }

        /// Every runtime's [`RuntimeInfo`], in [`HookRuntime::ALL`] order.
        pub const RUNTIMES: [&RuntimeInfo; HookRuntime::ALL.len()] = [$(&$module::INFO),+];
    };
}

toolgate_wire::for_each_runtime!(runtimes);

/// What `runtime`'s hook prints when toolgate itself failed on an event
/// (`error`): always something (`{}` for "no decision"), because the
/// installed command line blocks on an empty answer. The thin hook client,
/// which loads no policies, answers with this too, so it answers exactly as
/// the daemon would.
pub fn failure_answer(runtime: HookRuntime, on_error: OnError, error: &str) -> Value {
    let reason = format!(
        "toolgate failed, so this call was not checked: {error}. Diagnose with `toolgate \
         check` on the same call, or rerun with TOOLGATE_LOG=debug."
    );
    (info(runtime).failure_answer)(on_error, &reason)
}

/// What toolgate knows of `runtime` as data.
pub fn info(runtime: HookRuntime) -> &'static RuntimeInfo {
    // From the list, not through the adapter: the thin hook client reads
    // this (`failure_answer`) and so links no adapter.
    RUNTIMES
        .into_iter()
        .find(|info| info.runtime == runtime)
        .expect("RUNTIMES lists every runtime (a unit test checks)")
}

/// One agent runtime's hooks, as translation only (see the module docs).
pub trait Adapter: Sync {
    /// What toolgate knows of the runtime as data.
    fn info(&self) -> &'static RuntimeInfo;

    /// The channel its calls come from (pauses raised for them name it).
    fn channel(&self) -> &'static str {
        self.info().runtime.name()
    }

    /// Parse one event as the runtime sends it.
    fn parse(&self, input: &str) -> Result<Event>;

    /// The answer to a decided call; `can_ask` is false for events the
    /// runtime cannot ask a person about.
    fn answer(&self, decision: &Decision, can_ask: bool) -> Value;

    /// The answer to a call that ran, when the policies that check output
    /// changed what the model may read of it; `None` when this runtime's
    /// answer cannot change it (its events then carry no output).
    fn output_answer(&self, _check: &crate::output::OutputCheck) -> Option<Value> {
        None
    }

    /// Whether its answer can make the call run with the arguments a
    /// policy rewrote it to ([`Decision::arguments`]). A runtime that
    /// cannot is answered with a deny that gives the agent the arguments
    /// to call with instead: never the call as proposed.
    fn applies_rewrites(&self) -> bool {
        false
    }

    /// The answer to a new prompt.
    fn new_turn_answer(&self) -> Value {
        json!({})
    }

    /// How to tell, from what the runtime records, that the person declined
    /// a paused call in its own prompt (a runtime that runs no hook then).
    fn decline_detector(&self) -> Option<fn(&PendingGate) -> bool> {
        None
    }

    /// The answer that leaves `request` to the runtime's own permission
    /// rules, when in its mode the runtime enforces them and asks a person
    /// for what they do not allow (see `[approvals] follow_client_rules`);
    /// none where it would then run the call unasked.
    fn own_rules_answer(&self, _request: &ToolRequest) -> Option<Value> {
        None
    }
}

/// What toolgate knows of one runtime as data, not translation: what
/// self-protection guards and refuses, where install writes and `doctor`
/// reads. One constant per runtime, in its file ([`RUNTIMES`] lists them).
#[derive(Debug, Clone, Copy)]
pub struct RuntimeInfo {
    /// Which runtime this is.
    pub runtime: HookRuntime,
    /// The event a call is decided on: installed hooks without toolgate on
    /// it decide nothing.
    pub deciding_event: &'static str,
    /// The user's config directory, by the runtime's own rules.
    pub config_dir: ConfigDir,
    /// Where `toolgate hook install` writes the runtime's hooks for the
    /// user running it, in [`RuntimeInfo::config_dir`]: what `toolgate
    /// doctor` reads, with [`RuntimeInfo::system_hooks`]'s file.
    pub user_hooks: &'static str,
    /// What holds or switches off the hooks (or runs inside the runtime
    /// without them), relative to the home, which self-protection guards
    /// by what it is (real path, inode, parents); see
    /// [`RuntimeInfo::guarded_in_home`] and [`RuntimeInfo::guarded_moved`]
    /// (those outside the config directory, Copilot CLI's `.cache/copilot`,
    /// are guarded under the home only).
    pub guarded: &'static [&'static str],
    /// The files that hold or switch off the runtime's hooks, as a tool's
    /// text names them: self-protection refuses calls that touch them (an
    /// agent could remove toolgate's hook).
    pub settings_files: &'static [SettingsFile],
    /// Where system mode (`toolgate setup system`, as root) writes the
    /// runtime's hooks: an admin-controlled file the runtime reads whatever
    /// its user configures, and what else must be true there for the user
    /// to be unable to switch them off; `None` where the runtime has no
    /// such place.
    pub system_hooks: Option<SystemHooks>,
    /// What one of a command's words must hold for
    /// [`RuntimeInfo::switches_off`] to find a switch (the program's name,
    /// and any variable that is a switch on its own): self-protection skips
    /// text that holds none.
    pub switch_off_marks: &'static [&'static str],
    /// What one command (its words, as the shell passes them, or a text's
    /// whitespace-separated words) does that starts the runtime with
    /// toolgate's hooks off (OpenCode's `--pure`, a relocated config), for
    /// self-protection to refuse; `None` if nothing.
    pub switches_off: fn(&[&str]) -> Option<&'static str>,
    /// How long the runtime waits for a hook, seconds, when it runs the tool
    /// after that (Copilot CLI, Codex CLI): the installed hook answers with
    /// the failure answer a few seconds before.
    pub hook_timeout_secs: Option<u64>,
    /// Whether the runtime can call hooks over HTTP (the daemon's
    /// `/v1/hooks/RUNTIME`).
    pub http_hooks: bool,
    /// What its hook prints when toolgate itself failed, saying `reason`
    /// (see [`failure_answer`]). A runtime that cannot ask denies for
    /// [`OnError::Ask`].
    pub failure_answer: fn(OnError, &str) -> Value,
    /// What `toolgate hook RUNTIME --help` says: a line, then what the hook
    /// does with each event.
    pub hook_help: &'static str,
    /// What `toolgate hook install` and `doctor` run for it.
    pub install: Install,
}

/// What `toolgate hook install` and `doctor` run for a runtime: its own
/// code (in its file), named as data, so the installer and doctor in the
/// CLI are the same for every runtime. [`Install::hooks`] is what a runtime
/// that needs nothing more than its hooks has.
#[derive(Debug, Clone, Copy)]
pub struct Install {
    /// The hooks `hook install` merges into the runtime's settings.
    pub settings: fn(&InstallPlan<'_>) -> Value,
    /// For a runtime whose hooks are a plugin of toolgate's (OpenCode): the
    /// plugin's source, which `hook install` writes whole instead of
    /// merging [`Install::settings`].
    pub plugin: fn(&InstallPlan<'_>) -> Option<String>,
    /// After the installer wrote the hooks (whose commands contain
    /// `marker`) to `written`: what else makes the runtime run them, done;
    /// what was done, for the person. Codex runs no hook of a user's a
    /// person has not trusted.
    pub trust_installed: fn(&str, &std::path::Path) -> std::result::Result<Option<String>, String>,
    /// What the user has installed beside the user settings file
    /// `settings` that runs inside the runtime and can answer or rewrite a
    /// tool call without its hooks (Claude Code's mods and plugins), one
    /// name each: `doctor` names them in user mode, where nothing keeps
    /// them out.
    pub extensions_beside: fn(&std::path::Path) -> Vec<String>,
    /// What of this user's (or the project's in the working directory, or
    /// the environment) switches toolgate's hooks off, each with where it
    /// is: `doctor` names them. `locked`: the hooks are the system's, under
    /// the runtime's lock, so only what the lock cannot keep out counts.
    pub switched_off_by_user: fn(bool) -> Vec<(String, &'static str)>,
    /// Whether the installed release has what toolgate relies on (it says
    /// what to upgrade to when it does not); an absent one counts as the
    /// current release.
    pub release_is_current: fn() -> bool,
}

impl Install {
    /// The hooks merged into the settings by `settings`, and nothing more:
    /// each runtime names its own `settings` (a runtime without them would
    /// install nothing), the rest has defaults.
    pub const fn hooks(settings: fn(&InstallPlan<'_>) -> Value) -> Install {
        Install {
            settings,
            plugin: |_| None,
            trust_installed: |_, _| Ok(None),
            extensions_beside: |_| Vec::new(),
            switched_off_by_user: |_| Vec::new(),
            release_is_current: || true,
        }
    }
}

impl RuntimeInfo {
    /// Where `toolgate hook install` writes its hooks for the user running
    /// it; `None` without a home.
    pub fn user_hooks(&self) -> Option<std::path::PathBuf> {
        Some(self.config_dir.path()?.join(self.user_hooks))
    }

    /// [`RuntimeInfo::guarded`] under the home.
    pub fn guarded_in_home(&self) -> Vec<std::path::PathBuf> {
        let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
            return Vec::new();
        };
        let home = std::path::PathBuf::from(home);
        self.guarded.iter().map(|rel| home.join(rel)).collect()
    }

    /// Those of [`RuntimeInfo::guarded`] in the config directory, where its
    /// variable moves it (none if it is not set): the runtime an agent
    /// starts reads them there.
    pub fn guarded_moved(&self) -> Vec<std::path::PathBuf> {
        let Some(moved) = self.config_dir.moved() else {
            return Vec::new();
        };
        self.guarded
            .iter()
            .filter_map(|rel| {
                std::path::Path::new(rel)
                    .strip_prefix(self.config_dir.under_home)
                    .ok()
            })
            .map(|in_config| moved.join(in_config))
            .collect()
    }
}

/// A runtime's user config directory: the value of its variable (with
/// `then` joined) when set, else `under_home` in the home.
#[derive(Debug, Clone, Copy)]
pub struct ConfigDir {
    /// The environment variable that moves it (`CLAUDE_CONFIG_DIR`).
    pub variable: Option<&'static str>,
    /// What follows the variable's value (Gemini CLI's variable stands for
    /// the home: `.gemini`).
    pub then: &'static str,
    /// The directory relative to the home.
    pub under_home: &'static str,
}

impl ConfigDir {
    /// Where the variable moves it, if set.
    pub fn moved(&self) -> Option<std::path::PathBuf> {
        let value = std::env::var_os(self.variable?).filter(|v| !v.is_empty())?;
        Some(std::path::PathBuf::from(value).join(self.then))
    }

    /// Where the runtime reads it: [`ConfigDir::moved`], else under the
    /// home; `None` without either.
    pub fn path(&self) -> Option<std::path::PathBuf> {
        self.moved().or_else(|| {
            let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
            Some(std::path::PathBuf::from(home).join(self.under_home))
        })
    }
}

/// For a runtime without a switch-off to find.
pub(crate) fn no_switch_off(_words: &[&str]) -> Option<&'static str> {
    None
}

/// A runtime's hook settings as a tool's text names them: a directory, a
/// separator, then the start of a file name (`.codex` `/` `hooks…`).
#[derive(Debug, Clone, Copy)]
pub struct SettingsFile {
    /// The directory (its last components).
    pub dir: &'static str,
    /// How the file's (or directory's) name starts.
    pub file: &'static str,
    /// What it is, for the refusal's message.
    pub what: &'static str,
}

impl SettingsFile {
    /// `dir/file…`, which is `what`.
    pub const fn new(dir: &'static str, file: &'static str, what: &'static str) -> Self {
        Self { dir, file, what }
    }
}

/// Whether `words` start the program `name` (a word whose file name it is)
/// with one of `switches`: an option (`--pure`, a word that is one or
/// starts with one followed by `=`) or an environment variable (upper
/// case, set: `NAME=…`): how a runtime is started without toolgate's hooks.
pub(crate) fn starts_with_any(words: &[&str], name: &str, switches: &[&str]) -> bool {
    runs(words, name)
        && words.iter().any(|word| {
            let word = word.trim_start_matches(['"', '\'']);
            switches.iter().any(|switch| {
                let variable = switch.starts_with(|c: char| c.is_ascii_uppercase());
                (word == *switch && !variable)
                    || (variable && word == ANY_VARIABLE)
                    || word
                        .strip_prefix(switch)
                        .is_some_and(|rest| rest.starts_with('='))
            })
        })
}

/// Among the words [`RuntimeInfo::switches_off`] is given: the text set a
/// variable whose name is known only when it runs, so it may be any of a
/// runtime's (no shell word holds a NUL).
pub const ANY_VARIABLE: &str = "\0any variable\0=";

/// Programs that start the package or script named after them (`npx
/// @openai/codex`, `node …/claude-code/cli.js`, `pnpm dlx opencode-ai`).
const LAUNCHERS: &[&str] = &["npx", "bunx", "pnpx", "dlx", "node", "bun", "deno"];

/// Whether one of `words` is the program `name`, quotes the text left
/// around it aside: a word whose file name it is; its versioned binary (a
/// version in a folder named for it: `~/.local/share/claude/versions/2.1.332`);
/// or, after a launcher, its package or script (a word through a folder,
/// or a package, named for it: `claude-code`, `opencode-ai`). A path that
/// merely passes through such a folder (`codex-rs/Cargo.toml`, a
/// Dockerfile's `npm i -g @anthropic-ai/claude-code`) is not it.
pub(crate) fn runs(words: &[&str], name: &str) -> bool {
    // Each way below finds `name` within a word: most texts name no
    // runtime at all.
    if !words.iter().any(|word| word.contains(name)) {
        return false;
    }
    let named = |part: &std::ffi::OsStr| {
        part.to_str().is_some_and(|part| {
            part == name
                || part
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
    };
    let mut launched = false;
    words.iter().any(|word| {
        let path = std::path::Path::new(word.trim_matches(['"', '\'']));
        let file = crate::path_text::file_name(word.trim_matches(['"', '\''])).unwrap_or("");
        let versioned = file.starts_with(|c: char| c.is_ascii_digit())
            && path.parent().is_some_and(|dir| dir.iter().any(named));
        let found = file == name || versioned || (launched && path.iter().any(named));
        launched |= LAUNCHERS.contains(&file) && !word.contains('=');
        found
    })
}

/// The JSON settings files at `paths` that exist and parse, with their
/// path as shown.
pub(crate) fn settings_at(
    paths: impl IntoIterator<Item = std::path::PathBuf>,
) -> Vec<(String, Value)> {
    paths
        .into_iter()
        .filter_map(|path| {
            let text = crate::transcript::read_small(&path, 1 << 20).ok()?;
            Some((
                path.display().to_string(),
                serde_json::from_str(&text).ok()?,
            ))
        })
        .collect()
}

/// Every runtime's hook settings, in [`HookRuntime::ALL`] order.
pub fn settings_files() -> impl Iterator<Item = &'static SettingsFile> {
    RUNTIMES.into_iter().flat_map(|info| info.settings_files)
}

/// A runtime's admin-controlled hooks (see [`RuntimeInfo::system_hooks`]).
#[derive(Debug, Clone, Copy)]
pub struct SystemHooks {
    /// The file `toolgate hook install --write` writes them (or the
    /// plugin) to, root-owned.
    pub file: &'static str,
    /// What else must hold for the user to be unable to switch them off.
    pub lock: Option<SystemLock>,
}

/// A root-owned file of the runtime's, edited in place by system mode.
#[derive(Debug, Clone, Copy)]
pub struct SystemLock {
    /// The file.
    pub file: &'static str,
    /// Its new text from its current one (`None`: there is none yet), or
    /// why it cannot be edited; everything else in it is kept.
    pub edit: fn(Option<&str>) -> std::result::Result<String, String>,
    /// What the edit does, for the person.
    pub does: &'static str,
    /// Files the runtime merges over `file`, which could undo it.
    pub drop_ins: Option<DropIns>,
}

/// A folder of files a runtime merges over a [`SystemLock`]'s file, in
/// name order (Claude Code's `managed-settings.d/*.json`): any of them can
/// undo what the lock holds, so each is checked, and none may be the
/// user's.
#[derive(Debug, Clone, Copy)]
pub struct DropIns {
    /// The folder.
    pub dir: &'static str,
    /// The extension of the files in it the runtime reads.
    pub extension: &'static str,
    /// What one file's text sets that undoes the lock, if anything.
    pub undoes: fn(&str) -> Option<&'static str>,
}

impl DropIns {
    /// Its files the runtime reads, in name order (none if the folder is
    /// missing).
    pub fn files(&self) -> Vec<std::path::PathBuf> {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(self.dir)
            .into_iter()
            .flatten()
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| {
                path.extension()
                    .is_some_and(|e| e == std::ffi::OsStr::new(self.extension))
            })
            .collect();
        files.sort();
        files
    }

    /// Each of its files that undoes the lock, with what it sets.
    pub fn undoing(&self) -> Vec<(std::path::PathBuf, &'static str)> {
        self.files()
            .into_iter()
            .filter_map(|path| {
                let text = std::fs::read_to_string(&path).ok()?;
                Some((path, (self.undoes)(&text)?))
            })
            .collect()
    }
}

/// `text` (a JSON object, or nothing) with `change` made to it, pretty.
pub(crate) fn edit_json_object(
    text: Option<&str>,
    change: impl FnOnce(&mut serde_json::Map<String, Value>) -> std::result::Result<(), String>,
) -> std::result::Result<String, String> {
    let mut value: Value = match text {
        Some(text) => serde_json::from_str(text).map_err(|e| format!("is not JSON ({e})"))?,
        None => json!({}),
    };
    change(value.as_object_mut().ok_or("must hold a JSON object")?)?;
    Ok(serde_json::to_string_pretty(&value).expect("JSON serializes") + "\n")
}

/// Managed settings (Claude Code's, Copilot CLI's) with
/// `allowManagedHooksOnly`: only the admin's hooks run.
pub(crate) fn allow_managed_hooks_only(text: Option<&str>) -> std::result::Result<String, String> {
    edit_json_object(text, |settings| {
        settings.insert("allowManagedHooksOnly".into(), json!(true));
        Ok(())
    })
}

/// What `toolgate hook install` puts into a runtime's settings.
#[derive(Debug, Clone)]
pub struct InstallPlan<'a> {
    /// The shell line that runs the hook, failing closed.
    pub command: &'a str,
    /// The daemon's HTTP hook URL, when the tool events go over HTTP.
    pub url: Option<&'a str>,
}

/// One hook event, as the engine needs it.
#[derive(Debug, Clone)]
pub struct Event {
    /// The session (and thread) it belongs to.
    pub session: String,
    /// The runtime's id of the user prompt it follows, if it names one:
    /// binds calls to their prompt's turn (the engine's `Toolgate::turn_of`).
    pub prompt: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

/// What a hook event reports.
#[derive(Debug, Clone)]
pub enum EventKind {
    /// Nothing toolgate acts on (a session start, an unknown event).
    Nothing,
    /// A new user prompt: the session's next turn.
    NewTurn,
    /// A proposed call, to decide.
    Decide {
        /// The call (its turn is set by the driver).
        request: ToolRequest,
        /// Whether the runtime can ask a person about it.
        can_ask: bool,
    },
    /// A call that ran.
    Ran {
        /// The call (its turn is set by the driver).
        request: ToolRequest,
        /// How it went.
        outcome: Outcome,
        /// A short summary of its result.
        summary: String,
        /// Its output as the model would read it, from runtimes whose
        /// answer can change that (see [`Adapter::output_answer`]).
        output: Option<String>,
    },
}

impl EventKind {
    /// A call that ran, with its outcome and summary as the runtime
    /// reported them (see [`outcome_of`]).
    pub fn ran(request: ToolRequest, (outcome, summary): (Outcome, String)) -> Self {
        Self::Ran {
            request,
            outcome,
            summary,
            output: None,
        }
    }

    /// [`EventKind::ran`], with the runtime's whole `response`, whose text
    /// the policies that check output see before the model does.
    pub fn ran_with_output(request: ToolRequest, response: Option<&Value>) -> Self {
        let (outcome, summary) = outcome_of(response);
        Self::Ran {
            request,
            outcome,
            summary,
            output: Some(response.map(text_of).unwrap_or_default()),
        }
    }
}

impl Event {
    /// An event of `session` that toolgate does not act on.
    pub fn nothing(session: String) -> Self {
        Self {
            session,
            prompt: None,
            kind: EventKind::Nothing,
        }
    }

    /// What answering this event needs.
    pub fn needs(&self) -> Needs {
        match self.kind {
            EventKind::Nothing => Needs::Nothing,
            EventKind::NewTurn => Needs::Store,
            EventKind::Decide { .. } | EventKind::Ran { .. } => Needs::Policies,
        }
    }
}

/// What answering an event needs: a new turn touches only the store, so a
/// hook process answering it in-process loads no policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing to do: answer nothing.
    Nothing,
    /// Only the store (the session's next turn).
    Store,
    /// The policies (a call to decide or observe).
    Policies,
}

/// Whether the person declined `gate`'s call in the prompt of the runtime
/// it came from (only runtimes whose records say so can tell).
pub fn declined_in_prompt(gate: &PendingGate) -> bool {
    HookRuntime::ALL
        .into_iter()
        .map(adapter)
        .find(|adapter| adapter.channel() == gate.source_channel)
        .and_then(|adapter| adapter.decline_detector())
        .is_some_and(|declined| declined(gate))
}

/// Parse one hook event of `runtime`; what is not one gets an error that
/// says what was expected.
pub(crate) fn parse_event<T: DeserializeOwned>(text: &str, runtime: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|err| {
        let field = misfit::<T>(text).map_or(String::new(), |f| format!("`{f}` is malformed: "));
        InvalidRequest(format!(
            "not a {runtime} hook event ({field}{err}); expected a JSON object with session_id \
             and hook_event_name"
        ))
    })
}

/// The top-level field of `text` (a JSON object of at most 64 fields) that
/// keeps it from being a `T`: the one without which it parses, or whose
/// absence is what is then missing. So a refusal names the field.
fn misfit<T: DeserializeOwned>(text: &str) -> Option<String> {
    let Ok(mut event @ Value::Object(_)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let keys: Vec<String> = event.as_object()?.keys().cloned().collect();
    if keys.len() > 64 {
        return None;
    }
    // Each field taken out and put back in place: no copy of the event.
    keys.into_iter().find(|key| {
        let fields = event.as_object_mut().expect("an object");
        let value = fields.remove(key).unwrap_or_default();
        let fits = match T::deserialize(&event) {
            Ok(_) => true,
            Err(err) => err.to_string().contains(&format!("missing field `{key}`")),
        };
        event
            .as_object_mut()
            .expect("an object")
            .insert(key.clone(), value);
        fits
    })
}

/// A tool event's `tool_input` (Claude Code's, Codex's and Gemini CLI's
/// name), which must be a JSON object: see [`object_input`].
pub(crate) fn tool_input(event: &str, value: Option<&Value>) -> Result<Value> {
    object_input(event, "tool_input", value, false).map(Value::Object)
}

/// For a tool input field: present as `null` is `Some(Null)`, not absent,
/// so [`object_input`] refuses it as the wrong type it is.
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// A tool event's input, `field` of `event`: a JSON object (absent: no
/// arguments), or, where the runtime sends it as text (`as_text`), a
/// string holding one. Anything else is a malformed event and an error
/// naming the field: judged as if it were empty, `{"tool_input": "rm -rf
/// /"}` would be allowed while the runtime runs what it makes of it.
pub(crate) fn object_input(
    event: &str,
    field: &str,
    value: Option<&Value>,
    as_text: bool,
) -> Result<serde_json::Map<String, Value>> {
    let kind = match value {
        None => return Ok(serde_json::Map::new()),
        Some(Value::Object(object)) => return Ok(object.clone()),
        Some(Value::String(text)) if as_text => match serde_json::from_str(text) {
            Ok(Value::Object(object)) => return Ok(object),
            _ => "a string that is not a JSON object",
        },
        Some(Value::String(_)) => "a string",
        Some(Value::Array(_)) => "an array",
        Some(Value::Number(_)) => "a number",
        Some(Value::Bool(_)) => "a boolean",
        Some(Value::Null) => "null",
    };
    Err(InvalidRequest(format!(
        "malformed {event} event: `{field}` must be a JSON object of the tool's arguments, not \
         {kind}; the call is refused"
    )))
}

/// The tool name of a tool event, which must be there and not empty.
pub(crate) fn required_tool_name<'a>(event: &str, name: Option<&'a str>) -> Result<&'a str> {
    name.filter(|n| !n.is_empty())
        .ok_or_else(|| InvalidRequest(format!("{event} event without tool_name")))
}

/// The notes of `decision` as one text for the agent, if it has any.
pub(crate) fn notes_text(decision: &Decision) -> Option<String> {
    (!decision.notes.is_empty()).then(|| {
        let texts: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
        texts.join("\n\n")
    })
}

/// A runtime's arguments (`args`, an object) with toolgate's names for
/// them set from the runtime's own (`(ours, value)`): the policies and the
/// guard read Claude Code's names (`file_path`, `command`, ...). Set, never
/// merely added: the model writes the arguments, and a decoy `file_path`
/// beside the real `path` must not be what toolgate judges.
pub(crate) fn with_our_names<const N: usize>(args: Value, fields: [(&str, Value); N]) -> Value {
    let mut object = match args {
        Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    for (ours, value) in fields {
        object.insert(ours.to_string(), value);
    }
    Value::Object(object)
}

/// What every runtime's pause answer begins with: that toolgate asks,
/// which policy, and about what ("toolgate (lease-gate asks): Allow
/// `Write`? …").
pub(crate) fn who_asks(decision: &Decision) -> String {
    let asker = decision.decided_by.as_deref().unwrap_or("a policy");
    let reason = decision.reason.as_deref().unwrap_or_default();
    format!("toolgate ({asker} asks): {reason}.")
}

/// What a pause's reason adds for a runtime that cannot ask: how a person
/// approves it (from a terminal of their own; the request id is enough,
/// `gates resolve` finds the rest) and that the agent should retry.
pub fn how_to_approve(decision: &Decision) -> String {
    decision.pause.as_ref().map_or(String::new(), |pause| {
        format!(
            " A person can approve it from a terminal of their own with `toolgate gates resolve \
             --request-id {}`; then retry the same call.",
            pause.request_id
        )
    })
}

/// The text in a runtime's tool response: a string as it is; otherwise
/// every string in it, one per line (a command's stdout and stderr, a
/// file's content, an MCP result's text blocks).
pub fn text_of(response: &Value) -> String {
    fn collect<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
        match value {
            Value::String(text) => out.push(text),
            Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
            Value::Object(fields) => fields.values().for_each(|item| collect(item, out)),
            _ => {}
        }
    }
    let mut texts = Vec::new();
    collect(response, &mut texts);
    texts.retain(|text| !text.is_empty());
    texts.join("\n")
}

/// A tool's outcome and a short summary, from the result a runtime
/// reports (`is_error`, `error` or `success: false` mean it failed).
pub fn outcome_of(response: Option<&Value>) -> (Outcome, String) {
    let Some(response) = response else {
        return (Outcome::Succeeded, String::new());
    };
    let failed = response.get("is_error").and_then(Value::as_bool) == Some(true)
        || response.get("error").is_some_and(|e| !e.is_null())
        || response.get("success").and_then(Value::as_bool) == Some(false);
    let summary = match response {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let outcome = if failed {
        Outcome::Failed
    } else {
        Outcome::Succeeded
    };
    (outcome, summary.chars().take(1000).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_runtime_has_its_adapter_under_its_own_name() {
        for (runtime, info) in HookRuntime::ALL.into_iter().zip(RUNTIMES) {
            assert_eq!(adapter(runtime).info().runtime, runtime);
            assert_eq!(info.runtime, runtime);
            assert_eq!(adapter(runtime).channel(), runtime.name());
        }
    }

    /// What `toolgate hook install` writes is what self-protection
    /// guards, under the home and where the runtime's variable moves it.
    #[test]
    fn the_installed_hooks_are_guarded_wherever_the_config_is() {
        for info in RUNTIMES {
            let config = &info.config_dir;
            let written = std::path::Path::new(config.under_home).join(info.user_hooks);
            assert!(
                info.guarded.iter().any(|g| written.starts_with(g)),
                "{}: {} is not guarded",
                info.runtime.name(),
                written.display()
            );
            assert!(
                config.variable.is_none() || written.starts_with(config.under_home),
                "{}: its variable moves the config, but not where the hooks are written",
                info.runtime.name()
            );
        }
    }

    #[test]
    fn outcomes_come_from_the_response() {
        assert_eq!(
            outcome_of(Some(&json!({"is_error": true}))).0,
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(Some(&json!({"success": false}))).0,
            Outcome::Failed
        );
        assert_eq!(
            outcome_of(Some(&json!({"stdout": "ok"}))).0,
            Outcome::Succeeded
        );
        assert_eq!(outcome_of(None).0, Outcome::Succeeded);
    }
}
