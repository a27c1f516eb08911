//! Self-protection: tool calls aimed at toolgate's own control plane are
//! denied before any policy runs.
//!
//! The agent runs tools as the same OS user as the person, so without this
//! it could edit toolgate's config, replace its plugins or store, remove
//! the hook from Claude Code's settings, or run `toolgate gates resolve`
//! to approve its own pause. Those calls reach toolgate first (that is what
//! the hook is for), and this module refuses them. It is built in: no
//! config key turns it off, and the config file is one of the things it
//! protects.
//!
//! What it recognises, in every string a non-read-only tool is given:
//! - a path (absolute, `~/…`, `$HOME/…`, `${HOME}/…`, or relative: matched
//!   as a suffix) at or under a protected location: the config file, the
//!   plugin directory and plugin files, the store and every file beside it
//!   that starts with its name (socket, lock, log), the compiled-artifact
//!   cache, the toolgate binary, and the agent runtimes' hook settings
//!   (each adapter in `hooks/` names its own: Claude Code, Gemini CLI,
//!   Cursor, Codex, Copilot CLI, OpenCode);
//! - in shell text, the same locations anywhere in the text, any of those
//!   settings files named as a directory and a file (`.codex/hooks`,
//!   `.copilot/settings`, `opencode.json`, ...), a command that starts a
//!   runtime with its hooks off (`opencode --pure`, `COPILOT_HOME=… copilot`),
//!   and a `toolgate` command with an administrative word (resolve, approve,
//!   command, serve, hook, reload, install, open, lease-grant, ...).
//!
//! Then it judges what a path *is*, not how it is spelled ([`resolve`]):
//! shell text is read as the shell reads it ([`shell`]: quotes removed,
//! `~user`, `$HOME`, braces, globs against the real filesystem, `cd`
//! followed, `sh -c` read), every word is made absolute against the tool's
//! directory and resolved through symlinks and `/proc/…/root`, and compared
//! with the protected locations by real path and by inode (a hard link).
//! A command that renames or removes (`mv`, `rm`, `ln`, `cp` into, …) may
//! not name a directory that holds a protected location either (the root,
//! top-level directories and the home directory excepted: they hold
//! everything, and the policies judge such commands). Shell text the
//! reader cannot follow is refused, not waved through.
//!
//! What it cannot see (see docs/src/safety/ in the book): commands assembled
//! at run time (`base64 -d | sh`, a variable read from a file, a program
//! that does the same without naming any of these). Per-user mode rests on
//! this guard; system mode puts toolgate's files out of the agent's reach,
//! and the guard is then a seatbelt. The daemon's own checks (authenticated
//! resolutions) hold independently of it.

pub(crate) mod resolve;
pub(crate) mod shell;

use std::path::{Component, Path, PathBuf};

use crate::config::Config;
use crate::hooks;
use crate::request::ToolRequest;
use resolve::{Kind, Protected};

/// Commands that rename, remove, relink or copy into what they name: such a
/// command may not name a directory that holds a protected location.
const DESTRUCTIVE: &[&str] = &[
    "mv", "rm", "rmdir", "unlink", "ln", "cp", "install", "rsync", "chmod", "chown", "chgrp",
    "chattr", "setfacl", "truncate", "shred", "mount", "umount", "tar", "unzip", "rename",
    // find's own way to remove (`-exec rm` names `rm`).
    "-delete",
];

/// Commands that act on another's output, word by word or line by line.
const FEEDERS: &[&str] = &["xargs", "read", "parallel"];

/// Commands that only show the text they are given (`find … | head`): a
/// find whose names go anywhere else (`sed -i … $(find …)`) is acting.
const VIEWERS: &[&str] = &[
    "head", "tail", "wc", "sort", "uniq", "grep", "egrep", "fgrep", "less", "more", "cut", "tr",
    "nl", "column", "echo", "printf", "true", ":",
];

/// Commands that look at names and sizes, never content: a pattern that
/// lists a protected directory among others (`du -sh ~/.cache/*`) is no
/// way into it.
const LOOKS_ONLY: &[&str] = &[
    "ls", "du", "stat", "file", "tree", "exa", "eza", "df", "realpath", "readlink", "test", "[",
    "[[", "echo", "printf",
];

/// find's own actions on what it finds.
const FIND_ACTIONS: &[&str] = &[
    "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls",
];

/// The compiled cache's key file (see `cache.rs`): named anywhere, in any
/// tool, the call is refused (`find … -name cache.key -exec xxd {} +`).
const CACHE_KEY: &str = "cache.key";

/// Shell text longer than this is refused, not read: reading it as the
/// shell would costs time on the decision path, and what the reader does
/// not read it cannot clear (padding is free to the agent, so leaving long
/// text to the literal checks let a spelling only the reader sees through
/// pass). A command that long is a file being written: the Write tool
/// writes one.
const MAX_SHELL_TEXT: usize = 64 * 1024;

/// Tools that only read; their arguments are not checked.
const READ_ONLY_TOOLS: &[&str] = &[
    "Read",
    "Grep",
    "Glob",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
];

/// Words that make a `toolgate` command administrative.
const ADMIN_WORDS: &[&str] = &[
    "resolve",
    "approve",
    "command",
    "serve",
    "hook",
    "reload",
    "install",
    "lease-grant",
    "lease-revoke",
    "lease-derive",
    "--write",
    "open",
    // `store copy`, `salvage`, `compact`: a copy of the store (its pending
    // calls, decision log and state) where the agent can read it.
    "store",
    // `flows clear` lifts what a session took in; `list` shows what it read.
    "flows",
    // `setup remove` takes every hook out; `setup system` and `user`
    // rewrite them (a person installs toolgate, never the agent).
    "setup",
];

/// The locations toolgate protects, for one config and store.
#[derive(Debug, Clone, Default)]
pub struct ControlPlane {
    /// Exact files and directories (everything under a directory too).
    paths: Vec<PathBuf>,
    /// Path prefixes: the store and its siblings (`STORE.sock`, ...).
    prefixes: Vec<String>,
    /// The last components of `paths` and `prefixes`: a relative word can
    /// name a protected location only if one of these starts with its own
    /// last component, which is checked before any path is built.
    names: Vec<String>,
    /// The first components of `paths` and `prefixes`, for the same check
    /// on absolute words.
    roots: Vec<String>,
    /// The user's home, for `~` and `$HOME`.
    home: Option<PathBuf>,
    /// The protected locations by what they are: real paths and inodes.
    real: Vec<Protected>,
    /// What no tool may even read: the compiled-artifact cache, whose key
    /// would let an agent forge an entry (see `cache.rs`).
    secrets: Vec<Protected>,
}

impl ControlPlane {
    /// The control plane of a host: `protected` locations plus the store's
    /// prefix and the runtimes' hook settings.
    pub fn new(protected: impl IntoIterator<Item = PathBuf>, store: &Path) -> Self {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let mut paths: Vec<PathBuf> = protected.into_iter().map(|p| normalise(&p)).collect();
        if let Ok(exe) = std::env::current_exe() {
            // The thin hook client beside it: replaced by `/bin/true`, every
            // hook would allow.
            paths.push(normalise(&exe.with_file_name("toolgate-hook")));
            paths.push(normalise(&exe));
        }
        // The runtimes' admin-controlled hooks and what locks them: an
        // agent that can `sudo` could rewrite them as surely as its own.
        for system in hooks::RUNTIMES.iter().filter_map(|info| info.system_hooks) {
            paths.push(PathBuf::from(system.file));
            if let Some(lock) = system.lock {
                paths.push(PathBuf::from(lock.file));
                paths.extend(lock.drop_ins.map(|d| PathBuf::from(d.dir)));
            }
        }
        // Normal (no `.`, `..`, doubled or trailing `/`), so that `protects`
        // compares bytes.
        let mut paths: Vec<PathBuf> = paths.iter().map(|p| normalise(p)).collect();
        paths.retain(|p| p.components().count() > 1);
        let store = normalise(store);
        let component = |c: Option<Component<'_>>| match c {
            Some(Component::Normal(name)) => name.to_str().map(str::to_string),
            _ => None,
        };
        let all = || paths.iter().chain([&store]);
        let names = all()
            .filter_map(|p| component(p.components().next_back()))
            .collect();
        let roots = all()
            .filter_map(|p| component(p.components().nth(1)))
            .collect();
        // The runtimes' user-level hook settings, by what they are: `mv
        // ~/.claude ~/.claude.off` removes the hook as surely as emptying
        // the file. Also where a runtime's variable moves its config
        // (`CODEX_HOME`), which no settings file's name in a text shows.
        let settings = hooks::RUNTIMES
            .iter()
            .flat_map(|info| [info.guarded_in_home(), info.guarded_moved()])
            .flatten()
            .map(|path| Protected::new(&normalise(&path), Kind::Tree));
        let real = paths
            .iter()
            .map(|p| Protected::new(p, Kind::Tree))
            .chain([Protected::new(&store, Kind::Prefix)])
            .chain(settings)
            .collect();
        Self {
            paths,
            prefixes: vec![store.display().to_string()],
            names,
            roots,
            home,
            real,
            secrets: Vec::new(),
        }
    }

    /// Also refuse every tool call that names `secret`, reads included.
    pub fn with_secret(mut self, secret: &Path) -> Self {
        let secret = normalise(&std::path::absolute(secret).unwrap_or_else(|_| secret.into()));
        self.real.push(Protected::new(&secret, Kind::Tree));
        self.secrets.push(Protected::new(&secret, Kind::Tree));
        self
    }

    /// The control plane of a host running `config` over `store`.
    pub fn for_config(config: &Config, store: &Path) -> Self {
        let mut protected: Vec<PathBuf> = config.source.iter().cloned().collect();
        protected.extend(config.plugin_dir.as_ref().map(|d| config.resolve(d)));
        for plugin in config.effective_plugins().unwrap_or_default().values() {
            if let Some(path) = plugin.local_file() {
                protected.push(config.resolve(Path::new(path)));
            }
        }
        protected.extend(config.cache_path());
        protected.push(config.oci_cache_path(&store.into()));
        protected.push(config.always_path(&store.into()));
        protected.push(crate::locations::socket_for_store(store));
        protected.extend(config.daemon.socket.clone());
        // The audit key signs the chain: the agent may not even read it,
        // nor replace the public half a verifier may trust.
        let audit_key = config.audit_key_path(store);
        protected.push(audit_key.clone());
        protected.push(crate::audit::public_path(&audit_key));
        let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
        let plane = Self::new(
            protected.into_iter().map(absolute),
            &absolute(store.to_path_buf()),
        )
        .with_secret(&audit_key);
        match config.cache_path() {
            Some(dir) => plane.with_secret(&dir),
            None => plane,
        }
    }

    /// Why `request` targets toolgate's control plane, if it does.
    pub fn check(&self, request: &ToolRequest) -> Option<String> {
        // A parser that panics on odd input must not let the call through.
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            resolve::memoized(request.cwd.as_deref(), || self.judge(request))
        }));
        checked.unwrap_or_else(|_| {
            Some(
                "toolgate refused this call: its self-protection could not read it (a parser \
                 failed on it); rewrite the call more plainly."
                    .into(),
            )
        })
    }

    fn judge(&self, request: &ToolRequest) -> Option<String> {
        // Only the runtime's own read-only tools: an MCP server's `Read` is
        // anything its server says it is.
        if request.origin == crate::request::Origin::Builtin
            && READ_ONLY_TOOLS.contains(&request.tool.as_str())
        {
            return self.reads_secret(request).map(|what| {
                format!(
                    "toolgate refused this call: it would read {what}, a secret of toolgate's own \
                     that no agent may see."
                )
            });
        }
        let mut found = None;
        visit_strings(&request.arguments, &mut |text| {
            if found.is_none() {
                found = self.check_text(text);
            }
        });
        if found.is_none() {
            found = self.check_resolved(request);
        }
        found.map(|what| {
            format!(
                "toolgate refused this call: it would {what}, which belongs to toolgate's own \
                 control plane (its config, plugins, store, socket, or the hook settings). An \
                 agent may not change or operate toolgate; a person can do this outside the \
                 agent session."
            )
        })
    }

    /// What the call's paths are, resolved: a shell command's words (the
    /// `command` of a shell tool) as the shell would pass them, and any
    /// other argument that is a path.
    fn check_resolved(&self, request: &ToolRequest) -> Option<String> {
        let cwd = request.cwd.as_deref();
        let env = shell::Env {
            home: self.home.as_deref(),
            cwd,
        };
        // A tool that deletes or moves what it is given is destructive as
        // `rm` and `mv` are (Cursor's `Delete`, an MCP `move_file`).
        let tool = request.tool.to_ascii_lowercase();
        let destructive = ["delete", "remove", "move", "rename"]
            .iter()
            .any(|verb| tool.contains(verb));
        let mut found = None;
        visit_keyed_strings(&request.arguments, None, &mut |key, text| {
            if found.is_some() {
                return;
            }
            // Any tool's `command` is read as shell text: an MCP server's
            // shell tool runs it as surely as Bash does.
            let path_key = key.is_some_and(|k| k.contains("path") || k.contains("file"));
            found = if key == Some("command") {
                self.check_shell(text, &env)
            } else if looks_like_path(text) || (path_key && !text.contains('\n')) {
                let word = shell::expand_tilde(text, self.home.as_deref());
                let place = cwd.map(|cwd| resolve::Place::new(cwd, None));
                self.check_path(&word, place.as_ref(), destructive, destructive)
            } else {
                None
            };
        });
        found
    }

    /// The secret a read-only tool's path argument is, if it is one.
    fn reads_secret(&self, request: &ToolRequest) -> Option<String> {
        if self.secrets.is_empty() {
            return None;
        }
        let mut found = None;
        visit_strings(&request.arguments, &mut |text| {
            if found.is_none() && contains(text, CACHE_KEY) {
                found = Some("the compiled cache's key".into());
            }
            if found.is_none() && looks_like_path(text) {
                let word = shell::expand_tilde(text, self.home.as_deref());
                let (real, inode) = resolve::resolved(Path::new(&word), request.cwd.as_deref())
                    .map_or((None, None), |(real, inode)| (Some(real), inode));
                found = self
                    .secrets
                    .iter()
                    .find(|s| {
                        real.as_deref().is_some_and(|r| s.covers(r))
                            || (inode.is_some() && s.inode == inode)
                    })
                    .map(|s| s.real.display().to_string());
            }
        });
        found
    }

    /// Every word of shell `text`, resolved in every directory the text
    /// may run in. Text it cannot follow (not shell syntax it reads, or
    /// past a limit) is refused: what it cannot read it cannot clear. The
    /// whole text counts as destructive if any of its commands is (`echo
    /// ~/.claude | xargs rm -rf`).
    fn check_shell(&self, text: &str, env: &shell::Env<'_>) -> Option<String> {
        if text.len() > MAX_SHELL_TEXT {
            return Some(format!(
                "run shell text of {} KiB, longer than the {} KiB toolgate reads as the shell \
                 would (write a long script's content with the Write tool instead)",
                text.len() / 1024,
                MAX_SHELL_TEXT / 1024
            ));
        }
        let reading = match shell::commands(text, env) {
            Ok(reading) => reading,
            Err(why) => return Some(format!("run shell text it cannot follow ({why})")),
        };
        let destructive = reading
            .commands
            .iter()
            .any(|c| c.names().any(|name| DESTRUCTIVE.contains(&name)));
        // A command whose output another turns into arguments or lines to
        // act on (`find … | xargs sed -i`): what it lists is acted on.
        let feeds_another = reading.commands.iter().any(|c| {
            c.names().any(|name| FEEDERS.contains(&name))
                || !c
                    .names()
                    .next()
                    .is_some_and(|name| name == "find" || VIEWERS.contains(&name))
        });
        // The switch and the runtime in different commands of the text
        // (`$(command -v claude) --bare`, `ln -s …/claude ./c && ./c --bare`),
        // as the shell passes their words.
        let unknown = reading.commands.iter().any(|c| c.env_unknown);
        let all: Vec<&str> = (reading.commands.iter())
            .flat_map(|c| c.env.iter().map(String::as_str))
            .chain(unknown.then_some(hooks::ANY_VARIABLE))
            .chain(
                (reading.commands.iter()).flat_map(|c| c.words.iter().flat_map(|w| w.literals())),
            )
            .collect();
        if let Some(what) = switches_a_runtime_off(&all) {
            return Some(what.to_string());
        }
        let places = self.places(&reading, env.cwd);
        let mut judged = std::collections::HashSet::new();
        for command in &reading.commands {
            if !judged.insert(command) {
                continue; // the same words, in the same place, as one judged
            }
            // This command itself removes, moves or rewrites what it names.
            let direct = command.names().any(|name| DESTRUCTIVE.contains(&name));
            if let Some(what) = self.admin_command(command) {
                return Some(what);
            }
            // As the shell passes the words (`open""code --pu''re`), after
            // the variables set for it (`export COPILOT_HOME=…; copilot`).
            let words: Vec<&str> = (command.env.iter().map(String::as_str))
                .chain(command.env_unknown.then_some(hooks::ANY_VARIABLE))
                .chain(command.words.iter().flat_map(|w| w.literals()))
                .collect();
            if let Some(what) = switches_a_runtime_off(&words) {
                return Some(what.to_string());
            }
            if let Some(what) = self.finds_protected(command, destructive || feeds_another) {
                return Some(what);
            }
            let dirs = in_order(command, &reading.dirs, &places);
            if let Some(what) = self.check_words(command, &dirs, destructive, direct) {
                return Some(what);
            }
        }
        None
    }

    /// Each path among `command`'s words, in each directory it may run in
    /// (a relative word), as [`ControlPlane::check_path`] and
    /// [`ControlPlane::glob_names_protected`] judge it.
    fn check_words(
        &self,
        command: &shell::Command,
        dirs: &[Option<&Dir>],
        destructive: bool,
        direct: bool,
    ) -> Option<String> {
        let looks_only = command
            .names()
            .next()
            .is_some_and(|n| LOOKS_ONLY.contains(&n));
        // The program the shell looks up in `PATH` (`git`, not `./git`) is
        // no path in the directory, unless the command sets `PATH` itself.
        let looked_up = usize::from(
            command.env.is_empty()
                && !command.env_unknown
                && command
                    .words
                    .first()
                    .is_some_and(|w| w.literals().all(|name| !name.contains('/'))),
        );
        let mut seen = std::collections::HashSet::new();
        for word in (command.words.iter().skip(looked_up)).flat_map(|w| w.literals()) {
            if !seen.insert(word) {
                continue; // judged already, in the same places
            }
            // `--file=PATH`: the path; other options are not paths.
            let word = match word.strip_prefix('-') {
                Some(option) => match option.split_once('=') {
                    Some((_, value)) => value,
                    None => continue,
                },
                None => word,
            };
            let relative = !word.starts_with('/');
            // Judged in one plain directory, it is judged in all of them
            // (that plain as far up as it climbs).
            let climbs = portable_climb(word).filter(|_| relative);
            let mut plain_judged = false;
            for dir in dirs.iter().take(if relative { usize::MAX } else { 1 }) {
                if climbs.is_some_and(|up| dir.is_some_and(|d| d.climb >= Some(up))) {
                    if plain_judged {
                        continue;
                    }
                    plain_judged = true;
                }
                let place = dir.map(|d| &d.place);
                if let Some(what) = self.check_path(word, place, destructive, direct) {
                    return Some(what);
                }
                let how = (destructive, direct, looks_only);
                if let Some(what) = self.glob_names_protected(word, place, how) {
                    return Some(what);
                }
            }
        }
        None
    }

    /// Where `reading`'s commands may run, each resolved once (not once per
    /// word judged in it): its directories in order, then where a symlink
    /// may really have put it (only where that is another place).
    fn places(&self, reading: &shell::Reading, cwd: Option<&Path>) -> Vec<Dir> {
        let mut places: Vec<Dir> = Vec::with_capacity(reading.dirs.len());
        let mut seen = std::collections::HashSet::new();
        for (dir, elsewhere) in (reading.dirs.iter().map(|d| (d, false)))
            .chain(reading.elsewhere.iter().map(|d| (d, true)))
        {
            let place = resolve::Place::new(dir, cwd);
            if !seen.insert(place.real.clone()) && elsewhere {
                continue;
            }
            let climb = self.plain_climb(&place);
            places.push(Dir { place, climb });
        }
        places
    }

    /// How many levels up from `place` (at most [`MAX_CLIMB`]) every
    /// directory is plain too ([`ControlPlane::is_plain`]); `None` if
    /// `place` is not plain itself.
    fn plain_climb(&self, place: &resolve::Place) -> Option<usize> {
        let mut at = place.clone();
        let mut climb = None;
        while self.is_plain(&at) && climb.is_none_or(|up| up < MAX_CLIMB) {
            climb = Some(climb.map_or(0, |up| up + 1));
            at = at.parent();
        }
        climb
    }

    /// Whether `place` is plain: nothing exists under it (so nothing is a
    /// link there), it is not protected, holds nothing protected, is no
    /// runtime's settings location and ends in no part of one's name. Then
    /// a word without `..` names, there, a path whose answer depends on the
    /// word alone: the same in every plain directory, so a text's word is
    /// judged in one of them, not in each (a script of many `cd`s made
    /// that quadratic). A word climbing `k` levels first (`../x`) is so
    /// among directories plain `k` levels up.
    fn is_plain(&self, place: &resolve::Place) -> bool {
        let real = &place.real;
        let text = real.as_os_str().as_encoded_bytes();
        // A settings directory the next word may complete (`.config` +
        // `opencode/…`).
        let settings_tail = hooks::settings_files().any(|s| {
            let dir = s.dir.as_bytes();
            (1..=dir.len())
                .filter(|&k| k == dir.len() || dir[k] == b'/')
                .any(|k| text.ends_with(&dir[..k]))
        });
        !place.exists()
            && !(self.real.iter()).any(|p| p.covers(real) || resolve::under(&p.real, real))
            && hook_settings_at(real).is_none()
            && !Path::new(MANAGED_SETTINGS).starts_with(real)
            && !settings_tail
    }

    /// A `toolgate` command with an administrative word, as the shell
    /// passes its words (`tool""gate command …` is `toolgate command …`).
    fn admin_command(&self, command: &shell::Command) -> Option<String> {
        let mut names = command.names();
        if !names.any(|n| n == "toolgate") {
            return None;
        }
        command
            .words
            .iter()
            .flat_map(|w| w.literals())
            .find(|w| ADMIN_WORDS.contains(w))
            .map(|w| format!("run the administrative command `toolgate … {w}`"))
    }

    /// `find … -name PATTERN` (or `-path`, `-iname`, …) whose pattern names
    /// a protected file, or a directory holding one in a destructive text,
    /// when the find acts on what it finds (`-delete`, `-exec`, or a text
    /// that acts on its output: `acting`): `find / -name settings.json
    /// -delete` never spells the path. A find that only lists is looking.
    fn finds_protected(&self, command: &shell::Command, acting: bool) -> Option<String> {
        if command.names().next() != Some("find") {
            return None;
        }
        let words: Vec<&str> = command.words.iter().flat_map(|w| w.literals()).collect();
        if !acting && !words.iter().any(|w| FIND_ACTIONS.contains(w)) {
            return None;
        }
        let destructive = acting || words.contains(&"-delete");
        for pair in words.windows(2) {
            let [test, pattern] = pair else { continue };
            let by_path = matches!(*test, "-path" | "-ipath" | "-wholename" | "-iwholename");
            if !(by_path || matches!(*test, "-name" | "-iname")) {
                continue;
            }
            let Some(pattern) = shell_pattern(pattern) else {
                return Some(format!("search for `{pattern}`, a pattern it cannot read"));
            };
            let options = glob::MatchOptions {
                case_sensitive: !test.starts_with("-i"),
                ..Default::default()
            };
            for protected in &self.real {
                let targets: Vec<&Path> = if destructive {
                    protected.real.ancestors().collect()
                } else {
                    vec![protected.real.as_path()]
                };
                let hit = targets.iter().any(|target| {
                    let subject = if by_path {
                        Some(target.as_os_str())
                    } else {
                        target.file_name()
                    };
                    subject
                        .and_then(|s| s.to_str())
                        .is_some_and(|s| pattern.matches_with(s, options))
                });
                if hit && protected.real.parent().is_some() {
                    return Some(format!(
                        "search for {} with `find {test} {pattern}`",
                        protected.real.display()
                    ));
                }
            }
        }
        None
    }

    /// A glob word that would match a protected file that exists (or, in a
    /// destructive text, a protected location or a directory holding it),
    /// judged against the
    /// protected paths rather than by listing the filesystem (`/**/x`
    /// would walk it all). Listing a directory among others (`du -sh
    /// ~/.cache/*`) only looks at it. `direct`: this very command is
    /// destructive, so even the home directory or the root it names counts.
    fn glob_names_protected(
        &self,
        word: &str,
        place: Option<&resolve::Place>,
        (destructive, direct, looks_only): (bool, bool, bool),
    ) -> Option<String> {
        if !word.contains(['*', '?', '[']) {
            return None;
        }
        // `dir*/` names what `dir*` names.
        let word = match word.trim_end_matches('/') {
            "" => word,
            trimmed => trimmed,
        };
        let absolute = match place {
            Some(place) if !word.starts_with('/') => place.real.join(word),
            None if !word.starts_with('/') => return None,
            _ => PathBuf::from(word),
        };
        // A lone `[` is no pattern to the shell either: the word was judged
        // as the path it is already.
        if word == "[" || word == "[[" {
            return None;
        }
        let Some(pattern) = shell_pattern(&absolute.to_string_lossy()) else {
            return Some(format!("use the pattern `{word}`, which it cannot read"));
        };
        // As the shell matches: `*` crosses no `/` and no leading dot.
        let options = glob::MatchOptions {
            require_literal_separator: true,
            require_literal_leading_dot: true,
            ..Default::default()
        };
        self.real.iter().find_map(|protected| {
            let hit = if destructive {
                protected
                    .real
                    .ancestors()
                    .filter(|a| direct || !self.holds_everything(a))
                    .any(|a| pattern.matches_path_with(a, options))
            } else {
                // A pattern expands only to what exists; listing a
                // directory among others is looking, not reading it.
                (pattern.matches_path_with(&protected.real, options)
                    && protected.real.exists()
                    && !(looks_only && protected.real.is_dir()))
                    || (!looks_only && reaches_inside(&absolute, &protected.real, options))
            };
            hit.then(|| {
                format!(
                    "use {} through the pattern `{word}`",
                    protected.real.display()
                )
            })
        })
    }

    /// What protected location the path `word` is, holds (for a
    /// `destructive` text; with `direct`, this very command is destructive,
    /// and then even the home directory or the root counts), or is a hard
    /// link to.
    fn check_path(
        &self,
        word: &str,
        place: Option<&resolve::Place>,
        destructive: bool,
        direct: bool,
    ) -> Option<String> {
        let (real, inode) = match place {
            Some(place) => place.resolve(Path::new(word))?,
            None => resolve::resolved(Path::new(word), None)?,
        };
        let shown = |p: &Path| p.display().to_string();
        if let Some(protected) = self.real.iter().find(|p| p.covers(&real)) {
            return Some(format!("use {}", shown(&protected.real)));
        }
        if let Some(what) = hook_settings_at(&real) {
            return Some(format!("touch {what}"));
        }
        if inode.is_some()
            && let Some(protected) = self.real.iter().find(|p| p.inode == inode)
        {
            return Some(format!(
                "use {} through the hard link {}",
                shown(&protected.real),
                shown(&real)
            ));
        }
        if destructive
            && let Some(settings) = hooks::settings_files()
                .find(|s| real.ends_with(if s.dir.is_empty() { s.file } else { s.dir }))
        {
            return Some(format!(
                "rename, remove or replace the directory of {}",
                settings.what
            ));
        }
        if destructive
            && (direct || !self.holds_everything(&real))
            && let Some(protected) = self.real.iter().find(|p| resolve::under(&p.real, &real))
        {
            return Some(format!(
                "rename, remove or replace {}, which holds {}",
                shown(&real),
                shown(&protected.real)
            ));
        }
        None
    }

    /// The root, a top-level directory (`/home`, `/tmp`) and the home
    /// directory hold everything: a text that merely names them beside a
    /// destructive command (`cd ~ && rm -rf build`) is not singling out
    /// toolgate's files. A destructive command naming them itself (`rm -rf
    /// ~`) is refused: it removes toolgate with everything else.
    fn holds_everything(&self, dir: &Path) -> bool {
        dir.components().count() <= 2
            || self
                .home
                .as_deref()
                .is_some_and(|home| resolve::real_path(home, None).as_deref() == Some(dir))
    }

    /// Each whole-text search here is one SIMD pass (`memchr`): a large
    /// argument (a file being written) is read a bounded number of times —
    /// once per runtime settings file name, once split on whitespace for
    /// the runtimes' switch-offs, once for `toolgate`, one or two for `~`,
    /// `$` and `/` — not once per word.
    fn check_text(&self, text: &str) -> Option<String> {
        if let Some(what) = hook_settings_named(text) {
            return Some(format!("touch {what}"));
        }
        // A word that switches a runtime off holds one of the marks: text
        // without any (most text, a large file's content) is not split
        // into words for each runtime to scan.
        if switch_off_marks().any(|mark| contains(text, mark)) {
            let spaced: Vec<&str> = text.split_whitespace().collect();
            if let Some(what) = switches_a_runtime_off(&spaced) {
                return Some(what.to_string());
            }
        }
        if contains(text, CACHE_KEY) {
            return Some("touch the compiled cache's key".into());
        }
        let names_toolgate = contains(text, "toolgate");
        if names_toolgate && let Some(command) = toolgate_admin_command(text) {
            return Some(format!("run the administrative command `{command}`"));
        }
        let expanded = self.expand_home(text);
        let names_toolgate = match &expanded {
            std::borrow::Cow::Borrowed(_) => names_toolgate,
            std::borrow::Cow::Owned(expanded) => contains(expanded, "toolgate"),
        };
        // Only a word with a separator, or a toolgate file name, can name a
        // protected path: the rest is skipped without allocating, and text
        // with neither is not split at all (a large file's content).
        if !names_toolgate && memchr::memchr(b'/', expanded.as_bytes()).is_none() {
            return None;
        }
        if names_toolgate {
            self.judge_words(words(&expanded).filter(|w| w.contains('/') || w.contains("toolgate")))
        } else {
            // Most text names toolgate nowhere: its words with a separator
            // are found from each `/`, not by splitting all of it.
            self.judge_words(words_with_slash(&expanded))
        }
    }

    /// The protected location the first of `words` that names one uses. A
    /// word judged once is judged: text that repeats one (a log, a
    /// generated file, an adversary's padding) costs its distinct words.
    fn judge_words<'t>(&self, words: impl Iterator<Item = &'t str>) -> Option<String> {
        let mut judged = std::collections::HashSet::new();
        for word in words {
            if !self.could_name_protected(word) || !judged.insert(word) {
                continue;
            }
            if let Some(what) = self.protects(&normalise(Path::new(word))) {
                return Some(format!("use {what}"));
            }
        }
        None
    }

    /// Whether `word` may name a protected location, judged without building
    /// a path: an absolute word only if its first component is a protected
    /// location's (or it has `.`/`..` components, which need the whole
    /// path); a relative one only if its last component starts a protected
    /// location's name (what `protects` requires of it), or is `.`/`..`.
    pub(crate) fn could_name_protected(&self, word: &str) -> bool {
        if let Some(rest) = word.strip_prefix('/') {
            let first = rest.trim_start_matches('/').split('/').next().unwrap_or("");
            return word.contains("/.")
                || (self.roots.iter())
                    .any(|root| root.len() == first.len() && begins(root, first));
        }
        let last = word
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(word);
        matches!(last, "" | "." | "..") || self.names.iter().any(|name| begins(name, last))
    }

    /// What protected location `path` (normal, as [`normalise`] makes it)
    /// is or is under; a relative path is matched as a suffix (at least two
    /// components, or one distinctive toolgate file name).
    pub(crate) fn protects(&self, path: &Path) -> Option<String> {
        if path.is_absolute() {
            let text = path.display().to_string();
            return self
                .paths
                .iter()
                .find(|p| resolve::under(path, p))
                .map(|p| p.display().to_string())
                .or_else(|| {
                    self.prefixes
                        .iter()
                        .find(|prefix| text.starts_with(prefix.as_str()))
                        .map(|prefix| format!("the store {prefix} or a file beside it"))
                });
        }
        // Leading `..`s leave the suffix to match.
        let path: PathBuf = path
            .components()
            .skip_while(|c| matches!(c, Component::ParentDir))
            .collect();
        let path = path.as_path();
        let parts: Vec<_> = path.components().collect();
        let distinctive = parts.len() == 1
            && path
                .to_str()
                .is_some_and(|w| w.contains("toolgate") && w.contains('.'));
        if !(parts.len() >= 2 || distinctive)
            || !parts.iter().all(|c| matches!(c, Component::Normal(_)))
        {
            return None;
        }
        let candidates = self
            .paths
            .iter()
            .cloned()
            .chain(self.prefixes.iter().map(PathBuf::from));
        candidates
            .filter(|p| path_ends_with(p, path))
            .map(|p| p.display().to_string())
            .next()
    }

    /// `~`, `$HOME` and `${HOME}` replaced by the home directory.
    fn expand_home<'t>(&self, text: &'t str) -> std::borrow::Cow<'t, str> {
        let Some(home) = self.home.as_ref().map(|h| h.display().to_string()) else {
            return text.into();
        };
        // One byte search: a `[char]` pattern would test every character.
        if memchr::memchr2(b'~', b'$', text.as_bytes()).is_none() {
            return text.into(); // nothing to expand: no copy
        }
        let text = text.replace("${HOME}", &home).replace("$HOME", &home);
        // `~` at the start of a word.
        let mut out = String::with_capacity(text.len());
        let mut previous = ' ';
        for c in text.chars() {
            if c == '~' && (previous.is_whitespace() || "=:'\"(".contains(previous)) {
                out.push_str(&home);
            } else {
                out.push(c);
            }
            previous = c;
        }
        out.into()
    }
}

/// The words of shell-ish text: split at white space, quotes and shell
/// operators. Byte by byte through a table for ASCII (a large argument is
/// mostly ASCII), decoding only other characters, for Unicode white space.
/// `text` as the shell reads a pattern, for the glob crate: a run of `*`
/// is one `*` (`toolg**` is `toolg*`; the crate refuses a `**` that is not a
/// whole segment), `[^…]` is `[!…]`, the common POSIX classes are spelled
/// out, and a bracket that opens no class is literal. `None` if it still
/// is no pattern.
fn shell_pattern(text: &str) -> Option<glob::Pattern> {
    let mut spelled = String::with_capacity(text.len());
    for c in text.chars() {
        if !(c == '*' && spelled.ends_with('*')) {
            spelled.push(c);
        }
    }
    if !spelled.contains('[') {
        // Every spelling below is of a bracket.
        return glob::Pattern::new(&spelled).ok();
    }
    let mut spelled = spelled.replace("[^", "[!");
    for (class, chars) in [
        ("[:alpha:]", "a-zA-Z"),
        ("[:digit:]", "0-9"),
        ("[:alnum:]", "a-zA-Z0-9"),
        ("[:lower:]", "a-z"),
        ("[:upper:]", "A-Z"),
        ("[:xdigit:]", "0-9a-fA-F"),
        ("[:space:]", " \t"),
        ("[:punct:]", "!-/:-@[-`{-~"),
    ] {
        spelled = spelled.replace(class, chars);
    }
    glob::Pattern::new(&spelled)
        .or_else(|_| glob::Pattern::new(&spelled.replace('[', "[[]")))
        .ok()
}

/// Whether the pattern `absolute` names something under the directory
/// `tree` (`~/.cache/toolg*/cache.k*` under `~/.cache/toolgate`): its
/// first components match the tree's path, and it goes on below.
fn reaches_inside(absolute: &Path, tree: &Path, options: glob::MatchOptions) -> bool {
    let depth = tree.components().count();
    let parts: Vec<Component<'_>> = absolute.components().collect();
    parts.len() > depth
        && shell_pattern(&parts[..depth].iter().collect::<PathBuf>().to_string_lossy())
            .is_some_and(|prefix| prefix.matches_path_with(tree, options))
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let mut start = None;
        while at < text.len() {
            let (breaks, len) = break_at(text, at);
            match (breaks, start) {
                (true, Some(from)) => return Some(&text[from..at]),
                (false, None) => start = Some(at),
                _ => {}
            }
            at += len;
        }
        start.map(|from| &text[from..])
    })
}

/// The [`words`] of `text` that hold a `/`, in order: each found from a
/// `/` (one SIMD pass) and read out to its ends, rather than every word of
/// a large text split off to be looked at.
fn words_with_slash(text: &str) -> impl Iterator<Item = &str> {
    let mut from = 0;
    std::iter::from_fn(move || {
        let slash = from + memchr::memchr(b'/', &text.as_bytes()[from..])?;
        let mut start = slash;
        while let Some(before) = text[..start].char_indices().next_back()
            && !break_at(text, before.0).0
        {
            start = before.0;
        }
        let mut end = slash;
        while end < text.len() {
            let (breaks, len) = break_at(text, end);
            if breaks {
                break;
            }
            end += len;
        }
        from = end;
        Some(&text[start..end])
    })
}

/// Whether the character at byte `at` (a character boundary) ends a word,
/// and its length in bytes.
fn break_at(text: &str, at: usize) -> (bool, usize) {
    /// White space (as `char::is_whitespace`) and the shell's quotes and
    /// operators, among ASCII.
    const ASCII_BREAKS: [bool; 128] = {
        let mut table = [false; 128];
        let breaks = b" \t\n\x0b\x0c\r'\"=;|&()<>`,:";
        let mut i = 0;
        while i < breaks.len() {
            table[breaks[i] as usize] = true;
            i += 1;
        }
        table
    };
    let byte = text.as_bytes()[at];
    if byte.is_ascii() {
        return (ASCII_BREAKS[byte as usize], 1);
    }
    let c = text[at..].chars().next().expect("a character boundary");
    (c.is_whitespace(), c.len_utf8())
}

/// `path` ends with the components of `suffix` (a prefix of its last
/// component counts: `toolgate.redb` names `toolgate.redb.sock`'s store).
fn path_ends_with(path: &Path, suffix: &Path) -> bool {
    if path.ends_with(suffix) {
        return true;
    }
    let (Some(name), Some(word)) = (path.file_name(), suffix.file_name()) else {
        return false;
    };
    let (Some(name), Some(word)) = (name.to_str(), word.to_str()) else {
        return false;
    };
    name.starts_with(word)
        && word.contains('.')
        && suffix.parent().is_none_or(|p| {
            p.as_os_str().is_empty() || path.parent().is_some_and(|pp| pp.ends_with(p))
        })
}

/// Whether `needle` occurs in `text`: one SIMD pass for a long text, a
/// plain search for a short one (building the SIMD searcher costs more
/// than reading a shell command's words).
fn contains(text: &str, needle: &str) -> bool {
    if text.len() < SHORT_TEXT {
        return text.contains(needle);
    }
    memchr::memmem::find(text.as_bytes(), needle.as_bytes()).is_some()
}

/// Whether `text` begins with `start`, compared byte by byte: a word of a
/// large text is held against each protected name, and most differ in
/// their first byte, where a call to `memcmp` costs more than the
/// comparison (it was a sixth of a 10 KB edit's judgment).
fn begins(text: &str, start: &str) -> bool {
    text.len() >= start.len() && text.bytes().zip(start.bytes()).all(|(a, b)| a == b)
}

/// Below this many bytes a text is searched without a SIMD searcher.
const SHORT_TEXT: usize = 512;

/// The hook settings `text` names, if it names any (the first in
/// [`hooks::settings_files`] order). A settings file with a directory is
/// named only right after a separator, so the text is read for `/` and `\`
/// (one SIMD pass; far rarer than the names' first letters, which an
/// automaton over every byte had to follow through `config` and `hooks` in
/// ordinary code), and only there are the names that start with the next
/// byte compared. The few names that stand alone are each found with one
/// prebuilt searcher.
fn hook_settings_named(text: &str) -> Option<&'static str> {
    /// The settings files, with their place in [`hooks::settings_files`]
    /// order: those after a separator by their name's first byte, and those
    /// that stand alone with a searcher for their name.
    struct Names {
        after_separator: Vec<Vec<(usize, &'static hooks::SettingsFile)>>,
        alone: Vec<(
            usize,
            &'static hooks::SettingsFile,
            memchr::memmem::Finder<'static>,
        )>,
    }
    static NAMES: std::sync::OnceLock<Names> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut names = Names {
            after_separator: vec![Vec::new(); 256],
            alone: Vec::new(),
        };
        for (index, settings) in hooks::settings_files().enumerate() {
            match settings.file.as_bytes().first() {
                Some(_) if settings.dir.is_empty() => {
                    let finder = memchr::memmem::Finder::new(settings.file.as_bytes());
                    names.alone.push((index, settings, finder));
                }
                Some(first) => names.after_separator[usize::from(*first)].push((index, settings)),
                None => unreachable!("a settings file has a name"),
            }
        }
        names
    });
    let bytes = text.as_bytes();
    // The first (in settings order) named so far.
    let mut first: Option<(usize, &'static str)> = None;
    let earlier = |first: Option<(usize, &str)>, index: usize| first.is_none_or(|(f, _)| index < f);
    for separator in memchr::memchr2_iter(b'/', b'\\', bytes) {
        let (before, rest) = (&bytes[..separator], &text[separator + 1..]);
        let Some(next) = rest.as_bytes().first() else {
            break;
        };
        for (index, settings) in &names.after_separator[usize::from(*next)] {
            if !earlier(first, *index) {
                break;
            }
            if begins(rest, settings.file) && before.ends_with(settings.dir.as_bytes()) {
                first = Some((*index, settings.what));
                break;
            }
        }
    }
    for (index, settings, finder) in &names.alone {
        if !earlier(first, *index) {
            break;
        }
        // Every occurrence, overlapping ones too, until one starts a name:
        // what is before it does not continue another name.
        let mut from = 0;
        while let Some(found) = finder.find(&bytes[from..]) {
            let at = from + found;
            if bytes[..at].last().is_none_or(|b| !is_name_byte(*b)) {
                first = Some((*index, settings.what));
                break;
            }
            from = at + 1;
        }
    }
    first.map(|(_, what)| what)
}

/// What `words` do that starts an agent runtime with toolgate's hooks
/// off, if they do (see [`hooks::RuntimeInfo::switches_off`]).
fn switches_a_runtime_off(words: &[&str]) -> Option<&'static str> {
    hooks::RUNTIMES
        .iter()
        .find_map(|info| (info.switches_off)(words))
}

/// What one of a text's words must hold for [`switches_a_runtime_off`] to
/// find anything (see [`hooks::RuntimeInfo::switch_off_marks`]).
fn switch_off_marks() -> impl Iterator<Item = &'static str> {
    hooks::RUNTIMES
        .iter()
        .flat_map(|info| info.switch_off_marks.iter().copied())
}

/// Whether `b` can continue a file name (so `xopencode.json` is not
/// `opencode.json`).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// The `toolgate …` administrative command in `text`, which names
/// `toolgate`, if there is one.
fn toolgate_admin_command(text: &str) -> Option<String> {
    let words: Vec<&str> = words(text).flat_map(|w| w.split('$')).collect();
    let invokes = words.iter().any(|w| {
        Path::new(w)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == "toolgate")
    });
    if !invokes {
        return None;
    }
    words
        .iter()
        .find(|w| ADMIN_WORDS.contains(w))
        .map(|w| format!("toolgate … {w}"))
}

/// Lexically normalise: drop `.`, resolve `..` against what came before.
pub(crate) fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// Where Claude Code's managed settings live.
const MANAGED_SETTINGS: &str = "/etc/claude-code";

/// The hook settings a real path is, by its shape (`…/.claude/settings*`,
/// `…/.gemini/settings*`, `…/.cursor/hooks*`, Claude Code's managed
/// settings), wherever the project is.
fn hook_settings_at(path: &Path) -> Option<&'static str> {
    if path.starts_with(MANAGED_SETTINGS) {
        return Some("Claude Code's managed settings (/etc/claude-code)");
    }
    // What a path is named, as a tool's text would name it: a hook file
    // in a settings directory, or anything under one (`.copilot/hooks/`).
    hook_settings_named(path.to_str()?)
}

/// A directory a shell text may run in: resolved once, and how far up it
/// is plain (see [`ControlPlane::plain_climb`]).
struct Dir {
    place: resolve::Place,
    climb: Option<usize>,
}

/// How many `..` a word may climb and still be judged once among plain
/// directories: words climb a few; judging more levels costs each place.
const MAX_CLIMB: usize = 4;

/// The directories `command` may run in: its own first (where it runs
/// unless a `cd` failed), then every other the text names. `None` alone
/// when the call came with no directory.
fn in_order<'d>(
    command: &shell::Command,
    all: &[PathBuf],
    dirs: &'d [Dir],
) -> Vec<Option<&'d Dir>> {
    let Some(cwd) = command.cwd.as_deref() else {
        return vec![None];
    };
    let here = all.iter().position(|d| d.as_os_str() == cwd.as_os_str());
    (here.map(|at| &dirs[at]).into_iter())
        .chain(
            (dirs.iter().enumerate())
                .filter(|(i, _)| Some(*i) != here)
                .map(|(_, d)| d),
        )
        .map(Some)
        .collect()
}

/// How many levels relative `word` climbs (`../../x`: 2), if it names in
/// every directory plain that far up what it names in any other (see
/// [`ControlPlane::is_plain`]): its `..` all first, no pattern to match
/// against the directory, and a name beyond the one it climbs to.
fn portable_climb(word: &str) -> Option<usize> {
    if word.contains(['*', '?', '[']) {
        return None;
    }
    let parts = word
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".");
    let up = parts.clone().take_while(|part| *part == "..").count();
    let mut rest = parts.skip(up);
    let named = rest.next().is_some_and(|part| part != "..");
    (named && up <= MAX_CLIMB && rest.all(|part| part != "..")).then_some(up)
}

/// Whether an argument of a non-shell tool is a path worth resolving: one
/// line, absolute or `~`, or with a separator.
fn looks_like_path(text: &str) -> bool {
    text.len() <= 4096
        && !text.contains('\n')
        && (text.starts_with('/') || text.starts_with('~') || text.contains('/'))
}

/// Every string in `value` with the object key it sits under.
fn visit_keyed_strings<'v>(
    value: &'v serde_json::Value,
    key: Option<&'v str>,
    f: &mut impl FnMut(Option<&str>, &str),
) {
    match value {
        serde_json::Value::String(text) => f(key, text),
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| visit_keyed_strings(v, key, f))
        }
        serde_json::Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| visit_keyed_strings(v, Some(k), f)),
        _ => {}
    }
}

fn visit_strings(value: &serde_json::Value, f: &mut impl FnMut(&str)) {
    match value {
        serde_json::Value::String(text) => f(text),
        serde_json::Value::Array(items) => items.iter().for_each(|v| visit_strings(v, f)),
        serde_json::Value::Object(map) => map.values().for_each(|v| visit_strings(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    proptest! {
        #[test]
        fn words_split_as_the_character_rule_says(
            text in "[a-z/.~ \t\u{0b}\u{85}\u{a0}\u{2003}\u{3000}é'\"=;|&()<>`,:$-]{0,40}"
        ) {
            // The rule, one character at a time: white space (Unicode's),
            // quotes and shell operators end a word.
            let rule: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || "'\"=;|&()<>`,:".contains(c))
                .filter(|w| !w.is_empty())
                .collect();
            prop_assert_eq!(words(&text).collect::<Vec<_>>(), rule);
            let with_slash: Vec<&str> = words(&text).filter(|w| w.contains('/')).collect();
            prop_assert_eq!(words_with_slash(&text).collect::<Vec<_>>(), with_slash);
        }

        #[test]
        fn no_runtime_is_switched_off_by_words_without_a_mark(
            words in proptest::collection::vec(
                proptest::sample::select(vec![
                    "claude", "codex", "copilot", "gemini", "opencode", "npx", "node",
                    "@openai/codex", "claude-code", "OPENCODE_PURE=1", hooks::ANY_VARIABLE,
                    "HOME=/x", "XDG_CONFIG_HOME=/x", "CLAUDE_CONFIG_DIR=/x", "CODEX_HOME=/x",
                    "COPILOT_HOME=/x", "GEMINI_CLI_HOME=/x", "OPENCODE_CONFIG=/x",
                    "CLAUDE_CODE_SIMPLE=1", "COPILOT_CLI_DIST_DIR=/x", "--bare", "--pure",
                    "--settings", "--safe-mode", "--plugin-dir", "--experimental",
                    "--config-dir", "--ignore-user-config", "--dangerously-bypass-hook-trust",
                    "-c", "--config", "features.hooks=false", "--disable", "hooks",
                    "--disable=hooks", "-cfeatures.hooks=false", "--prefer-version", "x",
                ]),
                0..8,
            ),
        ) {
            // What lets self-protection skip text that holds no mark.
            let marked = words
                .iter()
                .any(|w| switch_off_marks().any(|mark| w.contains(mark)));
            if !marked {
                prop_assert_eq!(switches_a_runtime_off(&words), None);
            }
        }

        #[test]
        fn hook_settings_are_found_wherever_a_needle_occurs(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    ".claude", ".gemini", ".cursor", ".codex", ".copilot", ".github", "copilot",
                    ".config", "opencode", "opencode.json", ".opencode", "plugin", "x.",
                    "/", "\\", "settings", "hooks",
                    "config",
                    // Every other name, the standalone ones (each with its
                    // own searcher) and a directory with a `/` in it.
                    "-", ".claude-plugin", ".codex-plugin", "skills", "pkg", ".cache",
                    "extensions", "dev-mods", "commands", "agents", "cowork_",
                    ".github/copilot",
                    "setting", "claude", "x", " ", "ü",
                ]),
                0..12,
            ),
        ) {
            // The rule: any of the directory-separator-file needles.
            let text = pieces.concat();
            let rule = hooks::settings_files().find(|s| {
                if s.dir.is_empty() {
                    return text.match_indices(s.file).any(|(at, _)| {
                        text[..at].bytes().last().is_none_or(|b| !is_name_byte(b))
                    });
                }
                ["/", "\\"].iter().any(|sep| text.contains(&format!("{}{sep}{}", s.dir, s.file)))
            });
            prop_assert_eq!(hook_settings_named(&text), rule.map(|s| s.what));
        }
    }

    proptest! {
        // Enough cases to reach `..` walks back onto a protected root.
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn the_quick_filter_never_passes_over_a_protected_path(
            absolute in any::<bool>(),
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "etc", "toolgate", "toolgate.toml", "toolgate.to", "home", "dev",
                    ".local", "state", "toolgate.redb", "toolgate.re", "opt", "policies",
                    "x", ".", "..", "",
                ]),
                1..7,
            ),
        ) {
            // Whatever `protects` would find, the filter in front of it lets
            // through: it only saves work, never changes an answer.
            let word = format!("{}{}", if absolute { "/" } else { "" }, parts.join("/"));
            let plane = plane();
            if plane.protects(&normalise(Path::new(&word))).is_some() {
                prop_assert!(plane.could_name_protected(&word), "{word}");
            }
        }
    }

    #[test]
    fn unrelated_paths_are_passed_over_without_building_them() {
        let plane = plane();
        for word in ["src/lib.rs", "//", "/usr/bin/env", "docs/guide.md", "a/b"] {
            assert!(!plane.could_name_protected(word), "{word}");
        }
        for word in [
            "state/toolgate/toolgate.redb",
            "toolgate.toml",
            "/etc/x",
            "/usr/../etc/toolgate",
            "x/..",
            "policies/",
        ] {
            assert!(plane.could_name_protected(word), "{word}");
        }
    }

    fn plane() -> ControlPlane {
        let mut plane = ControlPlane::new(
            [
                PathBuf::from("/etc/toolgate/toolgate.toml"),
                PathBuf::from("/opt/policies"),
            ],
            Path::new("/home/dev/.local/state/toolgate/toolgate.redb"),
        );
        plane.home = Some(PathBuf::from("/home/dev"));
        plane
    }

    fn refused(tool: &str, arguments: serde_json::Value) -> bool {
        plane().check(&ToolRequest::new(tool, arguments)).is_some()
    }

    #[test]
    fn administering_toolgate_from_a_shell_is_refused() {
        for command in [
            "toolgate gates resolve --user u --thread t --request-id x --channel web --decision approve",
            "/usr/local/bin/toolgate command lease-gate lease-grant '{\"thread\":\"t\"}'",
            "sh -c 'toolgate plugins reload'",
            "cd /tmp && ./toolgate hook install --write x.json",
            "toolgate store salvage /tmp/everything.redb",
            "toolgate --store ~/.local/state/toolgate/toolgate.redb store copy --from a --to /tmp/b.redb",
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('/home/dev/.local/state/toolgate/toolgate.redb.sock')\"",
            "rm ~/.local/state/toolgate/toolgate.redb",
            "cp evil.toml $HOME/../dev/.local/state/toolgate/toolgate.redb.daemon.lock",
            "echo x > /etc/toolgate/toolgate.toml",
            "sed -i 's/deny/allow/' ${HOME}/.claude/settings.json",
            "cat > .claude/settings.local.json",
            "cp evil.wasm /opt/policies/lease-gate.wasm",
            "toolgate approvals open",
            "toolgate flows clear --all",
            "toolgate --store ~/.local/state/toolgate/toolgate.redb flows clear --session s1",
            "sudo toolgate setup remove --purge",
            "toolgate setup user --write /tmp/settings.json",
            "jq 'del(.hooks)' ~/.gemini/settings.json > /tmp/s && mv /tmp/s ~/.gemini/settings.json",
            "echo '{}' > .cursor/hooks.json",
            "rm ~/.cursor/hooks.json",
            "echo '{}' > ~/.codex/hooks.json",
            "sed -i '/trusted_hash/d' ~/.codex/config.toml",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
    }

    #[test]
    fn switching_copilot_hooks_off_is_refused() {
        for command in [
            "echo '{}' > ~/.copilot/hooks/toolgate.json",
            "rm -rf ~/.copilot/hooks",
            "mv /home/dev/.copilot/hooks /tmp/off",
            "jq '.disableAllHooks=true' ~/.copilot/settings.json > s && mv s ~/.copilot/settings.json",
            "mkdir -p .github/copilot && echo '{\"disableAllHooks\": true}' > .github/copilot/settings.json",
            "echo broken > .github/hooks/x.json",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
        for path in [
            "/home/dev/.copilot/hooks/toolgate.json",
            "~/.copilot/settings.json",
            "/home/dev/project/.github/copilot/settings.local.json",
        ] {
            assert!(
                refused("Write", json!({"file_path": path, "content": "{}"})),
                "{path}"
            );
        }
    }

    #[test]
    fn switching_opencode_plugins_off_is_refused() {
        for command in [
            "rm -rf ~/.config/opencode/plugin",
            "echo 'export const X = 1' > /home/dev/.config/opencode/plugin/toolgate.js",
            "mv .opencode/plugins /tmp/off",
            "OPENCODE_PURE=1 opencode run 'do it'",
            "opencode run --pure 'do it'",
            "opencode run --pu''re 'do it'",
            "open\"\"code --pure",
            "env OPENCODE_PU\"\"RE=1 opencode run x",
            "XDG_CONFIG_HOME=/tmp/x opencode run x",
            "COPILOT_HOME=/tmp/x copilot -p x",
            "copilot --config-dir /tmp/x -p x",
            "echo '{\"plugin\": [\"./evil.js\"]}' > opencode.json",
            "cat > project/opencode.jsonc",
            "mkdir -p .opencode/tools && cp evil.ts .opencode/tools/read.ts",
            "rm -rf .opencode",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
        assert!(refused(
            "Write",
            json!({"file_path": "/home/dev/.config/opencode/opencode.json", "content": "{}"})
        ));
    }

    /// Copilot CLI's launcher runs whatever unsigned code it finds in its
    /// package caches or a directory it is pointed at: a patched copy that
    /// skips its policy hooks is toolgate switched off.
    #[test]
    fn running_copilot_from_code_the_agent_can_write_is_refused() {
        for command in [
            "COPILOT_CLI_DIST_DIR=/tmp/patched copilot -p x",
            "env COPILOT_PKG_CACHE_HOME=/tmp/c copilot -p x",
            "XDG_CACHE_HOME=/tmp/c copilot -p x",
            "copilot --prefer-version 1.0.999 -p x",
            "sed -i 's/policy.d/nothing/' ~/.cache/copilot/pkg/linux-x64/1.0.102/index.js",
            "cp -r /tmp/patched ~/.copilot/pkg/linux-x64/9.9.9",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
        assert!(!refused(
            "Bash",
            json!({"command": "copilot -p 'list files'"})
        ));
    }

    /// A variable the runtime reads changes how it starts whether it is
    /// set on the command (`NAME=value cmd`), earlier in the same text
    /// (`NAME=value; cmd`, `export NAME=value && cmd`), or in a shell the
    /// text starts; the program's name may be spelt with quotes the shell
    /// removes.
    /// Claude Code's mods and plugins run inside it and can answer a tool
    /// call themselves: bringing one in is switching toolgate off.
    #[test]
    fn bringing_in_a_claude_code_mod_or_plugin_is_refused() {
        let mod_file = json!({
            "file_path": "/home/dev/.claude/dev-mods/s-1/take-over.ts",
            "content": "export default (m) => m.on('tool.call', () => ({ allow: true }))"
        });
        assert!(refused("Write", mod_file));
        let manifest =
            json!({"file_path": "/home/dev/project/.claude-plugin/plugin.json", "content": "{}"});
        assert!(refused("Write", manifest));
        for command in [
            "mkdir -p ~/.claude/dev-mods/s-1 && cp /tmp/m.ts ~/.claude/dev-mods/s-1/",
            "ln -s /tmp/mods /home/dev/.claude/dev-mods/s-2",
            "mv /tmp/p ~/.claude/plugins/cache/p",
            "claude --plugin-dir ./p -p x",
            "claude --plugin-dir=./p -p x",
            "claude --plugin-url https://example.com/p.zip -p x",
            "CLAUDE_CODE_PLUGIN_DIRS=/tmp/p claude -p x",
            "export CLAUDE_CODE_PLUGIN_DIRS=/tmp/p; cla''ude --resume s -p x",
            "cat > .claude-plugin/plugin.json <<'EOF'\n{}\nEOF",
        ] {
            assert!(refused("Bash", json!({ "command": command })), "{command}");
        }
        // Talking about them is not bringing one in.
        for command in ["claude -p 'what is a plugin dir?'", "grep -r plugin src/"] {
            assert!(!refused("Bash", json!({ "command": command })), "{command}");
        }
    }

    /// What an audit of the real clients found running without their
    /// hooks or switching them off (each refused since; each failed before).
    #[test]
    fn what_the_clients_run_beside_their_hooks_is_refused() {
        for command in [
            // Claude Code: settings handed in as the managed tier, hooks
            // or personal config kept out, plugins from other places.
            "claude --managed-settings '{}' -p x",
            "claude --managed-settings-in-initialize -p x",
            "claude --restricted -p x",
            "CLAUDE_CODE_RESTRICTED=1 claude -p x",
            "CLAUDE_CODE_RESTRICT_PERSONAL_CONFIG=1 claude -p x",
            "CLAUDE_CODE_PERSONAL_HOOKS_OFF=1 claude -p x",
            "CLAUDE_CODE_USE_COWORK_PLUGINS=1 claude -p x",
            "claude --plugin-dir-no-mcp ./p -p x",
            "CLAUDE_CODE_PLUGIN_CACHE_DIR=/tmp/c claude -p x",
            "CLAUDE_CODE_PLUGIN_SEED_DIR=/tmp/s claude -p x",
            // Its skills' and commands' inline shell runs without
            // PreToolUse; agents' frontmatter hooks can rewrite a call.
            "mkdir -p .claude/skills/x && cp /tmp/SKILL.md .claude/skills/x/",
            "echo x > ~/.claude/commands/deploy.md",
            "echo x > .claude/agents/helper.md",
            "echo '{}' > ~/.claude/cowork_settings.json",
            // Codex: the user config (hook trust) left out, untrusted hooks
            // run; its plugins.
            "codex --ignore-user-config exec x",
            "codex --dangerously-bypass-hook-trust exec x",
            "cp -r /tmp/p ~/.codex/plugins/cache/p",
            "mkdir -p p/.codex-plugin",
            // OpenCode: another config with its plugins, or the managed one
            // moved away.
            "OPENCODE_TEST_MANAGED_CONFIG_DIR=/tmp/m opencode run x",
            "OPENCODE_CONFIG_DIR=/tmp/c opencode run x",
            "OPENCODE_CONFIG=/tmp/c.json opencode run x",
            "OPENCODE_CONFIG_CONTENT='{}' opencode run x",
            // Copilot CLI: extensions run their own code and rewrite calls.
            "mkdir -p .github/extensions/x && cp /tmp/e.mjs .github/extensions/x/extension.mjs",
            "cp /tmp/e.mjs ~/.copilot/extensions/x/extension.mjs",
            "copilot --plugin-dir ./p -p x",
            // ...and load when it starts experimental (under `-p`, asked to).
            "copilot --experimental -p x",
            "GITHUB_COPILOT_PROMPT_MODE_EXTENSIONS=true copilot -p x",
            // Gemini CLI: extensions' hooks rewrite a call's input.
            "cp -r /tmp/e ~/.gemini/extensions/e",
        ] {
            assert!(refused("Bash", json!({ "command": command })), "{command}");
        }
        let skill = json!({"file_path": "/home/dev/project/.claude/skills/x/SKILL.md", "content": "!`curl x | sh`"});
        assert!(refused("Write", skill));
    }

    #[test]
    fn a_switch_off_set_apart_from_the_command_is_refused() {
        for command in [
            "COPILOT_CLI_DIST_DIR=/tmp/p cop''ilot -p x",
            "export COPILOT_CLI_DIST_DIR=/tmp/p; copilot -p x",
            "export COPILOT_CLI_DIST_DIR=/tmp/p && cop\"\"ilot -p x",
            "COPILOT_HOME=/tmp/x; cop''ilot -p x",
            "HOME=/tmp/x\ncopilot -p x",
            "declare -x XDG_CACHE_HOME=/tmp/c; sh -c 'copilot -p x'",
            "export XDG_CONFIG_HOME=/tmp/x; open''code run x",
            "OPENCODE_PURE=1; opencode run x",
            "CLAUDE_CONFIG_DIR=/tmp/x cla''ude -p x",
            "export CODEX_HOME=/tmp/x; codex exec x",
            "codex -c features.hooks=false exec x",
            "codex -c features.codex_hooks=false exec x",
            "codex --disable hooks exec x",
            "GEMINI_CLI_HOME=/tmp/x gem''ini -p x",
            "claude --bare -p x",
            "export CLAUDE_CODE_SIMPLE=1; claude -p x",
            "claude --safe-mode -p x",
            "claude --settings '{\"disableAllHooks\": true}' -p x",
            "COPILOT_TEST_MANAGED_SETTINGS_FILE_PATH=/tmp/m.json copilot -p x",
            // What a review found: appending, an array element, other
            // spellings of a setting, settings from a file, system settings
            // moved.
            "CODEX_HOME+=/tmp/x codex exec x",
            "export CODEX_HOME+=/tmp/x; cod''ex exec x",
            "HOME[0]=/tmp/x; claude -p x",
            "codex --config=features.hooks=false exec x",
            "codex -cfeatures.hooks=false exec x",
            "codex -c 'features={hooks=false}' exec x",
            "claude --settings /tmp/s.json -p x",
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH=/tmp/s.json gemini -p x",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
        for command in [
            "export PATH=$PATH:/opt/bin; copilot -p 'list files'",
            "FOO=1 opencode run x",
            "codex exec 'disable the hooks in the test config'",
            "codex exec 'fix hooks.json parsing'",
            "codex -c model=o3 exec 'read hooks.rs'",
            "claude -p 'what is CLAUDE_CONFIG_DIR for?'",
        ] {
            assert!(!refused("Bash", json!({"command": command})), "{command}");
        }
    }

    /// Ways the review of the switch-off check found around it: a variable
    /// set by a builtin other than `export` (then exported by name), a
    /// builtin reached through `builtin`/`command`, names known only when
    /// the text runs, `env -S`, and a runtime started from another path
    /// (its versioned binary, `npx`, `node` and its package).
    #[test]
    fn a_switch_off_reached_another_way_is_refused() {
        let mut missed = Vec::new();
        for command in [
            "read CODEX_HOME <<< /tmp/x; export CODEX_HOME; codex exec x",
            "printf -v CLAUDE_CODE_SIMPLE 1; export CLAUDE_CODE_SIMPLE; claude -p x",
            "for HOME in /tmp/x; do export HOME; copilot -p x; done",
            "getopts a OPENCODE_PURE; export OPENCODE_PURE; opencode run x",
            "mapfile -t GEMINI_CLI_HOME < f; export GEMINI_CLI_HOME; gemini -p x",
            "export CLAUDE_CODE_SIMPLE; claude -p x",
            "export CODEX_HOME=$(mktemp -d); codex exec x",
            "if true; then export CLAUDE_CODE_SIMPLE=1; fi; claude -p x",
            "while read HOME; do copilot -p x; done < homes",
            "builtin export CLAUDE_CODE_SIMPLE=1; claude -p x",
            "command export CODEX_HOME=/tmp/x; codex exec x",
            "command -p declare -x HOME=/tmp/x; claude -p x",
            "export \"$(echo CLAUDE_CODE_SIMPLE=1)\"; claude -p x",
            "declare -x $NAME=1; codex exec x",
            "env -S 'CLAUDE_CODE_SIMPLE=1 claude -p x'",
            "env --split-string='CODEX_HOME=/tmp/x codex exec x'",
            "~/.local/share/claude/versions/2.1.332 --bare -p x",
            "npx @anthropic-ai/claude-code --bare -p x",
            "node /usr/lib/node_modules/@anthropic-ai/claude-code/cli.js --bare -p x",
            "npx -y @openai/codex --disable hooks exec x",
            "npx @github/copilot -p x --prefer-version 1.0.0",
            // What a third review found.
            "$(command -v claude) --bare -p x",
            "ln -sf ~/.local/bin/cl''aude ./c && ./c --bare -p x",
            "bash -lc 'cl\"\"aude --bare -p x'",
            "timeout 60 sh -c 'CLAUDE_CODE_SIMPLE=1 cla\"\"ude -p x'",
            "printf -vHOME /tmp/x; claude -p x",
            "declare -n r=HOME; r=/tmp/x; claude -p x",
            "eval \"$(printf 'export HO%sME=/tmp/x' '')\"; claude -p x",
            ". ./gen.sh; claude -p x",
            "npx opencode-ai run --pure x",
            "codex -c=features.hooks=false exec x",
        ] {
            if !refused("Bash", json!({"command": command})) {
                missed.push(command);
            }
        }
        assert!(missed.is_empty(), "not refused: {missed:#?}");
        for command in [
            "export PATH; claude -p x",
            "read -r line < notes.txt; echo \"$line\"",
            "export $(grep -v '^#' .env | xargs); cargo test",
            "env -S 'cargo test'",
            "cat ~/.local/share/claude/versions/README",
            "npx prettier --write src/claude/notes.md",
            "CODEX_HOME=$(mktemp -d) cargo test --manifest-path codex-rs/Cargo.toml",
            "HOME=$(mktemp -d) pytest tests/claude/test_client.py",
            "for d in packages/gemini-*/; do (cd \"$d\" && HOME=/tmp/h npm test); done",
        ] {
            assert!(!refused("Bash", json!({"command": command})), "{command}");
        }
        let dockerfile =
            "FROM node:22\nENV HOME=/home/node\nRUN npm i -g @anthropic-ai/claude-code\n";
        assert!(!refused(
            "Write",
            json!({"file_path": "/work/p/Dockerfile", "content": dockerfile})
        ));
    }

    /// Each command carries the names set before it, so their number is
    /// bounded (past it the text is refused, as any text the reader cannot
    /// follow): 6 000 `Aᵢ=1 x;` once took 7.8 s to judge.
    #[test]
    fn a_text_setting_too_many_variables_is_refused() {
        let setting = |n: usize| (0..n).map(|i| format!("A{i}=1 x; ")).collect::<String>();
        assert!(!refused("Bash", json!({"command": setting(64)})));
        assert!(refused("Bash", json!({"command": setting(65)})));
        assert!(!refused("Bash", json!({"command": "A=1 x; ".repeat(1000)})));
    }

    /// A `cd` whose target is known only when the text runs (`"$d/.claude"`)
    /// still says where it ends: the words after it are judged there.
    #[test]
    fn a_directory_known_only_by_its_tail_is_judged_by_it() {
        for command in [
            "d=/tmp; read -r d; cd \"$d/.claude\" && rm -f settings.json",
            "cd \"$(git rev-parse --show-toplevel)/.claude\" && echo '{}' > settings.json",
            "cd $CODEX_DIR/.codex; rm hooks.json",
        ] {
            assert!(refused("Bash", json!({"command": command})), "{command}");
        }
        for command in [
            "cd \"$d/build\" && rm -f settings.json",
            "cd \"$(mktemp -d)\" && echo '{}' > settings.json",
        ] {
            assert!(!refused("Bash", json!({"command": command})), "{command}");
        }
    }

    #[test]
    fn a_directory_merely_named_like_a_runtimes_is_not_protected() {
        for command in [
            "rm -rf node_modules/@github/copilot",
            "rm -rf build/.config",
            "cat myopencode.json.bak",
        ] {
            assert!(!refused("Bash", json!({"command": command})), "{command}");
        }
    }

    #[test]
    fn writing_protected_files_is_refused_in_any_spelling() {
        for path in [
            "/etc/toolgate/toolgate.toml",
            "/etc/toolgate/../toolgate/toolgate.toml",
            "~/.claude/settings.json",
            "/home/dev/project/.claude/settings.json",
            "../state/toolgate/toolgate.redb",
            "/opt/policies/new.wasm",
            // The runtimes' admin-controlled hooks: an agent with sudo
            // could rewrite them.
            "/etc/claude-code/managed-settings.d/zz.json",
            "/etc/claude-code/managed-settings.json",
            "/etc/codex/requirements.toml",
            "/etc/github-copilot/policy.d/toolgate.json",
        ] {
            assert!(
                refused("Write", json!({"file_path": path, "content": "x"})),
                "{path}"
            );
            assert!(
                refused(
                    "Edit",
                    json!({"file_path": path, "old_string": "a", "new_string": "b"})
                ),
                "{path}"
            );
        }
    }

    /// A home with toolgate's config, store and compiled cache where the
    /// defaults put them, as directories and files that exist (the guard
    /// judges what a path *is*).
    fn home_plane() -> (tempfile::TempDir, ControlPlane) {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        for dir in [
            ".config/toolgate",
            ".local/state/toolgate",
            ".cache/toolgate",
            ".cache/pip",
            "app",
        ] {
            std::fs::create_dir_all(h.join(dir)).unwrap();
        }
        std::fs::write(h.join(".config/toolgate/config.toml"), "").unwrap();
        std::fs::write(h.join(".local/state/toolgate/toolgate.redb"), "").unwrap();
        std::fs::write(h.join("app/package.json"), "{}").unwrap();
        let mut plane = ControlPlane::new(
            [h.join(".config/toolgate/config.toml")],
            &h.join(".local/state/toolgate/toolgate.redb"),
        )
        .with_secret(&h.join(".cache/toolgate"));
        plane.home = Some(h.to_path_buf());
        (home, plane)
    }

    fn refused_in(plane: &ControlPlane, home: &Path, command: &str) -> Option<String> {
        let mut request = ToolRequest::new("Bash", json!({ "command": command }));
        request.cwd = Some(home.join("app"));
        plane.check(&request)
    }

    #[test]
    fn a_link_to_toolgate_is_judged_where_the_shell_reads_it_as_a_path() {
        let (home, plane) = home_plane();
        let app = home.path().join("app");
        std::os::unix::fs::symlink(
            home.path().join(".config/toolgate/config.toml"),
            app.join("git"),
        )
        .unwrap();
        // The program is looked up in PATH: `./git` is not what runs.
        assert_eq!(refused_in(&plane, home.path(), "git status"), None);
        for command in ["cat git", "./git status", "PATH=. git status", "cp x git"] {
            assert!(
                refused_in(&plane, home.path(), command).is_some(),
                "{command}"
            );
        }
    }

    #[test]
    fn a_step_back_through_a_link_is_judged_both_ways_the_shell_may_take_it() {
        let (home, plane) = home_plane();
        let app = home.path().join("app");
        // `app/conf` is toolgate's config folder: `conf/..` is `app` to the
        // logical `cd`, `~/.config` to `cd -P`.
        std::os::unix::fs::symlink(home.path().join(".config/toolgate"), app.join("conf")).unwrap();
        for command in [
            "cd -P conf/.. && rm -rf toolgate",
            "set -P; cd conf/..; rm -rf toolgate",
            "cd conf/.. && cat toolgate/config.toml",
        ] {
            assert!(
                refused_in(&plane, home.path(), command).is_some(),
                "{command}"
            );
        }
        // The logical `cd` comes back to `app`, where `toolgate` is nothing.
        std::fs::create_dir(app.join("src")).unwrap();
        assert_eq!(
            refused_in(&plane, home.path(), "cd src/.. && ls toolgate"),
            None
        );
    }

    #[test]
    fn later_cds_follow_a_step_back_through_a_link() {
        let (home, plane) = home_plane();
        // `app/l` is `app` itself: `l/..` is `app` to the logical `cd`,
        // the home to `cd -P`, and the next `cd`s go on from there.
        std::os::unix::fs::symlink(".", home.path().join("app/l")).unwrap();
        for command in [
            "cd -P l/.. && cd .config && cd toolgate && echo x > config.toml",
            "set -P; cd l/..; cd .config; cd toolgate; echo x > config.toml",
            "cd -P l/.. && cd .config/toolgate && cd . && echo x > config.toml",
            // A shell of its own moves, not this one (a review's finding).
            "cd -P l/.. && : $(cd /); cd .config && cd toolgate && echo x > config.toml",
            "cd -P l/.. && sh -c 'cd /'; cd .config && cd toolgate && echo x > config.toml",
        ] {
            assert!(
                refused_in(&plane, home.path(), command).is_some(),
                "{command}"
            );
        }
    }

    #[test]
    fn a_logical_cd_after_a_step_back_through_a_link_is_followed_too() {
        let (home, plane) = home_plane();
        let app = home.path().join("app");
        std::os::unix::fs::symlink(".", app.join("l")).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), app.join("m")).unwrap();
        // `cd -P l/..` is the home; `cd app/m` is `~/app/m` to the
        // logical `cd`, so `cd ../..` is the home again.
        let command = "cd -P l/.. && cd app/m && cd ../.. && cd .config && cd toolgate && echo x > config.toml";
        assert!(
            refused_in(&plane, home.path(), command).is_some(),
            "{command}"
        );
    }

    #[test]
    fn a_cd_that_fails_or_is_undone_leaves_the_shell_where_it_was() {
        let (home, plane) = home_plane();
        // Each leaves the shell in `app`, from where `../.config/toolgate`
        // is toolgate's config folder (a review's findings).
        for command in [
            "cd /nowhere; cd ../.config; cd toolgate; echo x > config.toml",
            "(cd /tmp); cd ../.config; cd toolgate; echo x > config.toml",
            "pushd /tmp; popd; cd ../.config; cd toolgate; echo x > config.toml",
            "cd /tmp; cd -; cd ../.config; cd toolgate; echo x > config.toml",
            "eval cd; cd .config; cd toolgate; echo x > config.toml",
        ] {
            assert!(
                refused_in(&plane, home.path(), command).is_some(),
                "{command}"
            );
        }
        // Ordinary work moving between existing folders still runs.
        std::fs::create_dir_all(home.path().join("app/a")).unwrap();
        std::fs::create_dir_all(home.path().join("app/b")).unwrap();
        assert_eq!(
            refused_in(
                &plane,
                home.path(),
                "cd a && make; cd ../b && make; cd .. && git status"
            ),
            None
        );
    }

    #[test]
    fn a_text_moving_back_and_forth_runs_in_two_directories() {
        let (home, plane) = home_plane();
        std::fs::create_dir(home.path().join("app/src")).unwrap();
        // Before `cd ..` was taken back, each round named a new, longer
        // directory: thousands of them, each word judged in every one.
        let back_and_forth = "cd src; ls lib.rs; cd ..; ".repeat(2_000);
        assert_eq!(refused_in(&plane, home.path(), &back_and_forth), None);
        let env = shell::Env {
            home: Some(home.path()),
            cwd: Some(&home.path().join("app")),
        };
        let reading = shell::commands(&back_and_forth, &env).unwrap();
        // The start and `src`; and, were a `cd src` to fail, the folders
        // above (each `cd ..` from where the shell may be): a few.
        let first: Vec<_> = reading.dirs.iter().take(4).collect();
        assert_eq!(reading.dirs.len(), 2, "{first:?}");
        let depth = home.path().components().count();
        assert!(
            reading.elsewhere.len() <= depth + 2,
            "{:?}",
            reading.elsewhere
        );
    }

    #[test]
    fn a_text_running_in_too_many_directories_is_refused() {
        let (home, plane) = home_plane();
        let deeper = "cd m; ls x; ".repeat(300);
        let why = refused_in(&plane, home.path(), &deeper).unwrap();
        assert!(why.contains("more than 256 directories"), "{why}");
        let wide: String = (0..200).map(|i| format!("cd /tmp/d{i}; ls x; ")).collect();
        assert_eq!(refused_in(&plane, home.path(), &wide), None);
    }

    /// A word judged once for all the plain directories a text runs in
    /// is refused wherever it would be refused in any one of them: each
    /// place and word, alone and between plain directories.
    #[test]
    fn a_word_refused_in_one_directory_is_refused_among_many() {
        let (home, plane) = home_plane();
        let app = home.path().join("app");
        for place in PLACES {
            for word in WORDS {
                for act in ["cat", "rm -rf"] {
                    let alone = format!("cd {place}; {act} {word}");
                    let among = format!(
                        "cd /tmp/plain-a; cd {}; cd {place}; cd /tmp/plain-b; {act} {word}",
                        app.display()
                    );
                    if refused_in(&plane, home.path(), &alone).is_some() {
                        assert!(refused_in(&plane, home.path(), &among).is_some(), "{among}");
                    }
                }
            }
        }
    }

    /// Directories for the test above: plain ones (nothing there),
    /// and ones that are, hold, or end in part of something protected.
    const PLACES: &[&str] = &[
        "nowhere",
        "/tmp/nowhere/deeper",
        "nowhere/.claude",
        "/nowhere/.config",
        "nowhere/.config/opencode",
        "nowhere/.claude/deeper/still",
        "~/.config/toolgate/nowhere",
        "~/.config/nowhere/deeper",
        "~/.config",
        "~/.config/toolgate",
        "~/.local/state",
        "~",
        "/etc",
        "..",
        "~/app",
    ];
    const WORDS: &[&str] = &[
        "config.toml",
        "toolgate/config.toml",
        "toolgate",
        "state/toolgate/toolgate.redb",
        "toolgate.redb.lock",
        "settings.json",
        ".claude/settings.json",
        "opencode/opencode.json",
        "opencode.json",
        "claude-code/managed-settings.json",
        "hooks",
        "x",
        "../settings.json",
        "../config.toml",
        "../../toolgate/config.toml",
        "../../../.config/toolgate",
        "./../x/../settings.json",
    ];

    #[test]
    fn everyday_idioms_that_only_look_are_not_refused() {
        let (home, plane) = home_plane();
        for command in [
            "[ -f package.json ] && npm test",
            "if [ -d node_modules ]; then npm ci; fi",
            "[[ -n \"$CI\" ]] || echo local",
            "test -f x && [ -s x ]",
            "du -sh ~/.cache/*",
            "ls ~/.cache/*",
            "find ~ -maxdepth 3 -name '*.toml'",
            "find ~/.config -name '*.toml' | head",
            "cd ~ && rm -rf build",
        ] {
            assert_eq!(refused_in(&plane, home.path(), command), None, "{command}");
        }
    }

    #[test]
    fn what_reaches_toolgate_through_a_pattern_or_a_broad_directory_is_refused() {
        let (home, plane) = home_plane();
        for command in [
            "rm -rf ~",
            "rm -rf $HOME",
            "sudo rm -rf /",
            "rm -rf ~/.cache/*",
            "sed -i s/deny/allow/ ~/.config/toolgate/*.toml",
            "find ~ -name '*.toml' -delete",
            "find ~ -name config.toml | xargs sed -i s/a/b/",
            "find ~ -name 'config.*' -exec cp /dev/null {} \\;",
            "rm -rf ~/.config/toolg*/",
            "sed -i s/deny/allow/ ~/.config/toolg**/config.toml",
            "sed -i s/deny/allow/ ~/.config/toolga[^x]e/config.toml",
            "find ~ -name 'config.tom**' -exec sed -i s/deny/allow/ {} +",
            "sed -i s/deny/allow/ $(find ~/.config -name config.toml)",
            "grep -ra . ~/.cache/toolg?te",
            "cat ~/.cache/toolg*/cache.k*",
        ] {
            assert!(
                refused_in(&plane, home.path(), command).is_some(),
                "{command}"
            );
        }
    }

    #[test]
    fn ordinary_work_is_not_refused() {
        for command in [
            "ls -la",
            "cargo test",
            "git commit -m 'toolgate: fix'",
            "cat README.md",
            "rm -rf build",
        ] {
            assert!(!refused("Bash", json!({"command": command})), "{command}");
        }
        assert!(!refused(
            "Write",
            json!({"file_path": "/home/dev/project/src/main.rs", "content": "fn main() {}"})
        ));
        assert!(
            !refused("Read", json!({"file_path": "/etc/toolgate/toolgate.toml"})),
            "reading is not operating"
        );
    }
}
