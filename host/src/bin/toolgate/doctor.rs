//! `toolgate doctor`: for the install as it is, which runtimes' hooks are
//! there and whether they fail closed, which mode it is in and what that
//! mode does and does not protect, whether the running daemon serves the
//! config the hooks name — and the fix for each problem.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;
use toolgate::daemon::{Client, ConfigIdentity, DaemonRequest};
use toolgate::hooks::{self, DropIns, HookRuntime, SystemLock};
use toolgate::locations::StoreLocation;

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Also check this settings file (Claude Code, Gemini CLI or Cursor
    /// format); the usual places are always checked.
    #[arg(long, value_name = "SETTINGS.json")]
    settings: Vec<PathBuf>,
}

/// One thing checked: what was found, and the fix if it is a problem.
struct Finding {
    ok: bool,
    what: String,
    fix: Option<String>,
}

impl Finding {
    fn good(what: impl Into<String>) -> Self {
        Self {
            ok: true,
            what: what.into(),
            fix: None,
        }
    }

    fn bad(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            ok: false,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }
}

/// A toolgate hook handler found in a settings file.
struct Handler {
    event: String,
    /// Which tools it runs for (`None`: every one).
    matcher: Option<String>,
    /// The shell line, or the URL of an HTTP hook.
    target: Target,
    on_failure_block: bool,
}

enum Target {
    Command(String),
    Http(String),
}

pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut survey = Survey::default();
    for (runtime, path) in settings_files(&args.settings) {
        survey.settings(runtime, &path);
    }
    let Survey {
        mut findings,
        mut named_configs,
        mut owned_by_me,
        any,
        user_settings,
        locked,
    } = survey;
    findings.extend(
        (user_settings.iter())
            .filter(|(runtime, _)| !locked.contains(runtime))
            .filter_map(|(runtime, path)| check_extensions(*runtime, path)),
    );
    if !locked.is_empty() {
        findings.push(check_user_namespaces());
    }
    for runtime in &locked {
        findings.extend(check_switched_off(*runtime, true));
    }
    let mut unlocked: Vec<HookRuntime> = (user_settings.iter())
        .map(|(runtime, _)| *runtime)
        .filter(|runtime| !locked.contains(runtime))
        .collect();
    unlocked.dedup();
    for runtime in unlocked {
        findings.extend(check_switched_off(runtime, false));
    }
    if !any {
        findings.push(Finding::bad(
            "no toolgate hooks in any runtime's settings: nothing asks toolgate",
            "toolgate hook install --write ~/.claude/settings.json (or --for RUNTIME --write \
             ITS-SETTINGS: `toolgate hook install --help` lists them)",
        ));
    }
    named_configs.sort();
    named_configs.dedup();
    for (config, store) in &named_configs {
        findings.push(check_daemon(config.as_deref(), store.as_deref()));
        owned_by_me.extend(config.clone());
    }

    owned_by_me.sort();
    owned_by_me.dedup();
    let mine: Vec<&PathBuf> = owned_by_me.iter().filter(|p| is_mine(p)).collect();
    let closed = findings.iter().all(|f| f.ok);
    report(&findings, any.then_some(mine.as_slice()));
    Ok(if closed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What the settings files say, gathered.
#[derive(Default)]
struct Survey {
    findings: Vec<Finding>,
    /// The config and store each hook names.
    named_configs: Vec<(Option<PathBuf>, Option<PathBuf>)>,
    /// What toolgate relies on, which the user must not be able to change.
    owned_by_me: Vec<PathBuf>,
    /// Whether any settings file holds toolgate's hooks.
    any: bool,
    /// The user settings files that hold toolgate's hooks, and the
    /// runtimes whose system settings lock them (and their extensions).
    user_settings: Vec<(HookRuntime, PathBuf)>,
    locked: Vec<HookRuntime>,
}

impl Survey {
    /// One runtime's settings file, if it exists.
    fn settings(&mut self, runtime: HookRuntime, path: &Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let shown = path.display();
        let Some(handlers) = toolgate_handlers(&text, runtime.name()) else {
            self.findings.push(Finding::bad(
                format!(
                    "{shown} is not valid JSON, so {} ignores its hooks",
                    runtime.name()
                ),
                format!("fix the file, then `toolgate hook install --write {shown}`"),
            ));
            return;
        };
        if handlers.is_empty() {
            return;
        }
        self.any = true;
        self.owned_by_me.push(path.to_path_buf());
        self.findings
            .extend(check_handlers(runtime, path, &handlers));
        let lock = lock_of(runtime, path);
        match lock {
            Some(_) => self.locked.push(runtime),
            None => self.user_settings.push((runtime, path.to_path_buf())),
        }
        if let Some(lock) = lock {
            self.findings.push(check_lock(runtime.name(), &lock));
            self.owned_by_me.push(PathBuf::from(lock.file));
            if let Some(drop_ins) = lock.drop_ins {
                self.findings
                    .extend(check_drop_ins(runtime.name(), &drop_ins));
                self.owned_by_me.push(PathBuf::from(drop_ins.dir));
                self.owned_by_me.extend(drop_ins.files());
            }
        }
        for handler in &handlers {
            self.named_configs.push(named(&handler.target));
            if let Target::Command(line) = &handler.target
                && let Some(program) = program_of(line)
            {
                self.owned_by_me.push(program);
            }
        }
    }
}

/// The findings, then the mode: `mine` holds the files of toolgate's the
/// user could change (`None`: no hooks were found at all).
fn report(findings: &[Finding], mine: Option<&[&PathBuf]>) {
    let user_mode = mine.is_none_or(|mine| !mine.is_empty());
    let mode = if user_mode {
        "user mode"
    } else {
        "system mode: this user owns nothing toolgate relies on"
    };
    for finding in findings {
        let mark = if finding.ok { "ok " } else { "!! " };
        println!("{mark} {}", finding.what);
        if let Some(fix) = &finding.fix {
            println!("    fix: {fix}");
        }
    }
    let closed = findings.iter().all(|f| f.ok);
    println!();
    println!(
        "{mode}, {}",
        if closed {
            "fail-closed"
        } else {
            "NOT fail-closed"
        }
    );
    if let Some(mine) = mine.filter(|mine| !mine.is_empty()) {
        println!(
            "  You own toolgate's files ({}), and so does any agent you run as you. \
             Self-protection refuses the calls it can recognise (any spelling of these paths, \
             their directories, the hook settings), and a broken or missing toolgate blocks \
             the tool; but a command assembled at run time can still change them. System \
             mode puts them out of the agent's reach (the book: docs/src/safety/modes.md).",
            mine.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// What runs inside `runtime` from beside its user settings `path` and
/// can answer a tool call without the hook (Claude Code's mods and
/// plugins): in user mode nothing keeps it out (system mode's managed
/// settings allow only managed extensions).
fn check_extensions(runtime: HookRuntime, path: &Path) -> Option<Finding> {
    let found = (hooks::info(runtime).install.extensions_beside)(path);
    if found.is_empty() {
        return None;
    }
    Some(Finding::bad(
        format!(
            "{} loads extensions from beside {} ({}): one can answer a tool call itself, so \
             toolgate's hook never sees it, and in user mode nothing keeps one out",
            runtime.name(),
            path.display(),
            found.join(", ")
        ),
        "remove each you did not put there on purpose; to keep every user's out, use system \
         mode (`toolgate setup system`: managed settings that allow only managed mods; the \
         book: docs/src/safety/modes.md)",
    ))
}

/// What of the user's switches `runtime`'s toolgate hooks off (under its
/// system lock when `locked`; see `Adapter::switched_off_by_user`), each a
/// finding.
fn check_switched_off(runtime: HookRuntime, locked: bool) -> Vec<Finding> {
    let name = runtime.name();
    (hooks::info(runtime).install.switched_off_by_user)(locked)
        .into_iter()
        .map(|(place, what)| {
            Finding::bad(
                format!("{name}: {place} {what}, so {name} runs no toolgate hook"),
                format!(
                    "undo it; the agent's user can do it again, so for {name} system mode holds \
                     only as far as self-protection refuses the call that does it"
                ),
            )
        })
        .collect()
}

/// Whether this user could hide the managed settings in a user namespace
/// of its own (see [`crate::userns`]): tried, as the agent would, unless
/// this is root, for whom the kernel's switch is read instead.
fn check_user_namespaces() -> Finding {
    let fix = "sudo toolgate setup system --restrict-userns (the kernel's switch, now and at \
               boot; the book: docs/src/safety/modes.md)";
    if toolgate_wire::peer::own_uid() == 0 {
        return match crate::userns::restriction() {
            Some(switch) => Finding::good(format!(
                "user namespaces: kept from unprivileged users ({switch})"
            )),
            None => Finding::bad(
                "user namespaces: any user may make one and mount over the managed settings in \
                 it, where the runtimes run no managed hook",
                fix,
            ),
        };
    }
    match crate::userns::can_mount_in_a_namespace() {
        Ok(false) => Finding::good(
            "user namespaces: this user cannot make one to mount over the managed settings in",
        ),
        Ok(true) => Finding::bad(
            "user namespaces: this user can make one (`unshare -r -m`) and mount over the managed \
             settings in it, where the runtimes run no managed hook: system mode does not hold",
            fix,
        ),
        Err(err) => Finding::bad(
            format!("user namespaces: cannot tell whether this user may make one: {err}"),
            fix,
        ),
    }
}

/// The settings files to look in, with their runtime: each runtime's
/// user and system places, and `extra` (its runtime told by the
/// directories its path names, else Claude Code).
fn settings_files(extra: &[PathBuf]) -> Vec<(HookRuntime, PathBuf)> {
    let mut files = Vec::new();
    for info in hooks::RUNTIMES {
        files.extend(info.user_hooks().map(|path| (info.runtime, path)));
        files.extend(
            info.system_hooks
                .map(|system| (info.runtime, PathBuf::from(system.file))),
        );
    }
    for path in extra {
        let text = path.to_string_lossy();
        let runtime = hooks::RUNTIMES
            .into_iter()
            .find(|info| {
                info.settings_files
                    .iter()
                    .any(|file| !file.dir.is_empty() && text.contains(&format!("{}/", file.dir)))
            })
            .map(|info| info.runtime)
            .unwrap_or_default();
        files.push((runtime, path.clone()));
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    files.dedup_by(|a, b| a.1 == b.1);
    files
}

/// toolgate's handlers in a runtime's settings (`None`: they do not parse):
/// commands running `toolgate … hook RUNTIME` (`bash` for Copilot CLI),
/// HTTP hooks to `/v1/hooks/RUNTIME`, and toolgate's plugin (OpenCode),
/// whose command runs on each tool event.
fn toolgate_handlers(text: &str, runtime: &str) -> Option<Vec<Handler>> {
    let marker = format!("hook {runtime}");
    let url_marker = format!("/v1/hooks/{runtime}");
    let Ok(settings) = serde_json::from_str::<Value>(text) else {
        let command = text
            .lines()
            .find_map(|line| line.strip_prefix("const COMMAND = "))
            .and_then(|rest| serde_json::from_str::<String>(rest.trim_end_matches(';')).ok())?;
        let events = ["tool.execute.before", "tool.execute.after"];
        return Some(if command.contains(&marker) {
            events
                .map(|event| Handler {
                    event: event.into(),
                    matcher: None,
                    target: Target::Command(command.clone()),
                    on_failure_block: true,
                })
                .into()
        } else {
            Vec::new()
        });
    };
    let mut found = Vec::new();
    let Some(events) = settings["hooks"].as_object() else {
        return Some(found);
    };
    for (event, groups) in events {
        for group in groups.as_array().into_iter().flatten() {
            // Claude Code, Gemini CLI and Codex nest handlers in matcher
            // groups; Cursor and Copilot CLI list them directly.
            let handlers: Vec<&Value> = match group["hooks"].as_array() {
                Some(inner) => inner.iter().collect(),
                None => vec![group],
            };
            for handler in handlers {
                let command = handler["command"].as_str().or(handler["bash"].as_str());
                let target = match (command, handler["url"].as_str()) {
                    (Some(line), _) if line.contains(&marker) => Target::Command(line.into()),
                    (_, Some(url)) if url.contains(&url_marker) => Target::Http(url.into()),
                    _ => continue,
                };
                found.push(Handler {
                    event: event.clone(),
                    matcher: group["matcher"].as_str().map(str::to_string),
                    target,
                    on_failure_block: handler["onFailure"] == "block"
                        || handler["failClosed"] == true,
                });
            }
        }
    }
    Some(found)
}

fn check_handlers(runtime: HookRuntime, path: &Path, handlers: &[Handler]) -> Vec<Finding> {
    let shown = path.display();
    let deciding = hooks::info(runtime).deciding_event;
    let runtime = runtime.name();
    // The fix keeps the config the hooks name: without it the reinstalled
    // hooks would name the bundled default, which the running daemon does
    // not serve, and every call would be refused.
    let config = handlers
        .iter()
        .find_map(|h| named(&h.target).0)
        .map(|c| {
            format!(
                "--config {} ",
                shlex::try_quote(&c.display().to_string()).unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let reinstall = format!("toolgate {config}hook install --for {runtime} --write {shown}");
    let mut findings = Vec::new();
    let deciding_handlers: Vec<&Handler> =
        handlers.iter().filter(|h| h.event == deciding).collect();
    let covered = deciding_handlers
        .iter()
        .any(|h| matches!(h.matcher.as_deref(), None | Some("" | "*" | ".*")));
    match deciding {
        event if deciding_handlers.is_empty() => findings.push(Finding::bad(
            format!("{runtime} ({shown}): no {event} hook, so no call is decided"),
            reinstall.clone(),
        )),
        event if !covered => findings.push(Finding::bad(
            format!(
                "{runtime} ({shown}): the {event} hook runs only for tools matching {}, so every \
                 other tool runs unjudged",
                deciding_handlers
                    .iter()
                    .filter_map(|h| h.matcher.as_deref())
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            reinstall.clone(),
        )),
        _ => findings.push(Finding::good(format!(
            "{runtime} ({shown}): toolgate hooks on {}",
            handlers
                .iter()
                .map(|h| h.event.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
    for handler in handlers {
        findings.extend(check_handler(runtime, handler, &reinstall));
    }
    findings
}

/// What is wrong with one of `runtime`'s toolgate handlers, each with
/// `reinstall` (or another fix).
fn check_handler(runtime: &str, handler: &Handler, reinstall: &str) -> Vec<Finding> {
    let mut findings = Vec::new();
    let event = &handler.event;
    match &handler.target {
        Target::Command(line) => {
            if !(line.contains("[ -n \"$out\" ]") && line.contains("exit 2")) {
                findings.push(Finding::bad(
                    format!(
                        "{runtime} {event}: the command fails open if its program is missing, \
                         replaced or crashes (an install from before fail-closed hooks)"
                    ),
                    reinstall.to_string(),
                ));
            }
            match program_of(line) {
                Some(program) if is_executable(&program) => {}
                Some(program) => findings.push(Finding::bad(
                    format!(
                        "{runtime} {event}: {} is missing or not executable, so every call \
                         is blocked",
                        program.display()
                    ),
                    format!("reinstall toolgate (cargo install --path host), then {reinstall}"),
                )),
                None => {}
            }
        }
        Target::Http(url) => {
            if !http_answers(url) {
                findings.push(Finding::bad(
                    format!(
                        "{runtime} {event}: nothing answers at {url}, so every call is blocked"
                    ),
                    "start the daemon: a new session's SessionStart hook does, or \
                     `toolgate --config CONFIG serve`",
                ));
            }
        }
    }
    if runtime == "claude-code" && !handler.on_failure_block {
        findings.push(Finding::bad(
            format!(
                "claude-code {event}: no \"onFailure\": \"block\", so a hook that fails in a \
                 way the command line does not catch lets the tool run"
            ),
            format!("upgrade Claude Code to 2.1.295 or later, then {reinstall}"),
        ));
    }
    findings
}

/// For hooks in a runtime's system place, what else must hold there.
fn lock_of(runtime: HookRuntime, path: &Path) -> Option<SystemLock> {
    let system = hooks::info(runtime).system_hooks?;
    system.lock.filter(|_| path == Path::new(system.file))
}

/// Whether `lock` (see `SystemLock`) holds: its edit changes nothing.
fn check_lock(runtime: &str, lock: &SystemLock) -> Finding {
    let text = std::fs::read_to_string(lock.file).ok();
    let holds = (lock.edit)(text.as_deref()).is_ok_and(|edited| {
        let text = text.as_deref().unwrap_or_default();
        match (
            serde_json::from_str::<Value>(text),
            serde_json::from_str::<Value>(&edited),
        ) {
            (Ok(now), Ok(edited)) => now == edited,
            _ => text.parse::<toml::Table>().ok() == edited.parse().ok(),
        }
    });
    if holds {
        Finding::good(format!("{runtime}: {} ({})", lock.does, lock.file))
    } else {
        Finding::bad(
            format!(
                "{runtime}: {} is missing ({}), so the user can switch toolgate's hooks off",
                lock.does, lock.file
            ),
            "sudo toolgate setup system",
        )
    }
}

/// The drop-ins that undo a lock, each a finding.
fn check_drop_ins(runtime: &str, drop_ins: &DropIns) -> Vec<Finding> {
    drop_ins
        .undoing()
        .into_iter()
        .map(|(file, what)| {
            Finding::bad(
                format!(
                    "{runtime}: {} undoes the lock with {what}, so the user can switch \
                     toolgate's hooks off",
                    file.display()
                ),
                format!(
                    "remove that setting (or the file) as root: {}",
                    file.display()
                ),
            )
        })
        .collect()
}

/// The config (`--config`) and store (`--store`) a hook names.
fn named(target: &Target) -> (Option<PathBuf>, Option<PathBuf>) {
    match target {
        Target::Command(line) => {
            let words = inner_command(line)
                .and_then(shlex::split)
                .unwrap_or_default();
            let after = |flag: &str| {
                words
                    .iter()
                    .position(|w| w == flag)
                    .and_then(|i| words.get(i + 1))
                    .map(PathBuf::from)
            };
            (after("--config"), after("--store"))
        }
        Target::Http(url) => {
            let config = url
                .split_once("?config=")
                .map(|(_, rest)| rest.split('&').next().unwrap_or(rest))
                .map(|path| PathBuf::from(percent_decode(path)));
            (config, None)
        }
    }
}

/// The config hooks name (`config`, or the bundled default), the socket
/// of its store (`store` overrides), and the health of the daemon there
/// (`None`: none runs); a finding when the config cannot be read.
struct Served {
    named: ConfigIdentity,
    socket: PathBuf,
    health: Option<Value>,
}

fn served(config: Option<&Path>, store: Option<&Path>) -> Result<Served, Finding> {
    let named = match config {
        Some(path) => ConfigIdentity::read(path).map_err(|err| {
            Finding::bad(
                format!(
                    "the hooks' config {} cannot be read ({err}): every call is denied",
                    path.display()
                ),
                "restore the config, or install the hooks for the config you use",
            )
        })?,
        None => ConfigIdentity::Bundled,
    };
    let loaded = match config {
        Some(path) => toolgate::Config::load(path),
        None => toolgate::Config::bundled_default(),
    }
    .map_err(|err| {
        Finding::bad(
            format!("the hooks' config does not load ({err}): every call is denied"),
            "fix the config; `toolgate --config CONFIG plugins list` shows what is wrong",
        )
    })?;
    let store = store.map_or_else(|| loaded.store_location(), StoreLocation::from);
    let socket = loaded
        .daemon
        .socket
        .clone()
        .unwrap_or_else(|| store.socket());
    let mut client = Client::new(&socket);
    if let Some(uid) = loaded
        .daemon
        .user
        .as_deref()
        .and_then(toolgate_wire::peer::uid_of)
    {
        client = client.with_daemon_uid(uid);
    }
    let health = client.call(&DaemonRequest::Health).ok();
    Ok(Served {
        named,
        socket,
        health,
    })
}

/// The running daemon of the hooks' store when it serves another config
/// than the hooks name (every call is then refused as a mismatch): its pid
/// and what it serves.
pub(crate) fn serving_another(
    config: Option<&Path>,
    store: Option<&Path>,
) -> Option<(u32, String)> {
    let served = served(config, store).ok()?;
    let health = served.health?;
    let serving: ConfigIdentity = serde_json::from_value(health["config_identity"].clone()).ok()?;
    let pid = u32::try_from(health["pid"].as_u64()?).ok()?;
    (serving != served.named).then(|| (pid, serving.describe()))
}

/// The daemon for a config and store: running, and serving that config?
fn check_daemon(config: Option<&Path>, store: Option<&Path>) -> Finding {
    let Served {
        named,
        socket,
        health,
    } = match served(config, store) {
        Ok(served) => served,
        Err(finding) => return finding,
    };
    let config_text = named.describe();
    let Some(health) = health else {
        return Finding::good(format!(
            "no daemon runs for {config_text} (the next hook starts it)"
        ));
    };
    let serving: Option<ConfigIdentity> =
        serde_json::from_value(health["config_identity"].clone()).unwrap_or(None);
    match serving {
        Some(serving) if serving == named => Finding::good(format!(
            "the daemon (pid {}) serves the config the hooks name: {config_text}",
            health["pid"]
        )),
        Some(serving) => Finding::bad(
            format!(
                "the daemon (pid {}) at {} serves {}, but the hooks name {config_text}: they are \
                 refused until it serves theirs",
                health["pid"],
                socket.display(),
                serving.describe()
            ),
            format!(
                "stop it (`kill {}`); the next hook starts one with the hooks' config",
                health["pid"]
            ),
        ),
        None => Finding::bad(
            format!(
                "the daemon at {} does not say which config it serves",
                socket.display()
            ),
            "it is an older toolgate: stop it, and the next hook starts this one",
        ),
    }
}

/// What is inside `out=$( … )` of an installed command line (or the whole
/// line, for an install from before fail-closed hooks).
fn inner_command(line: &str) -> Option<&str> {
    match line.strip_prefix("out=$(") {
        Some(rest) => rest.split_once(") && [").map(|(inner, _)| inner),
        None => Some(line),
    }
}

/// The program a command line runs first.
fn program_of(line: &str) -> Option<PathBuf> {
    let words = shlex::split(inner_command(line)?)?;
    words.first().map(PathBuf::from)
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// Whether the user running this could change `path`: they own it or may
/// write it (by its mode, a group of theirs or an ACL: the kernel's own
/// answer), or could move it, or a directory above it, away (a directory
/// they own or may write, unless its sticky bit keeps what others own).
fn is_mine(path: &Path) -> bool {
    // Through a symbolic link, the directories above its target count too.
    if let Ok(real) = std::fs::canonicalize(path)
        && real != path
        && is_mine_as_spelled(&real)
    {
        return true;
    }
    is_mine_as_spelled(path)
}

/// [`is_mine`] for `path` and the directories its spelling names.
fn is_mine_as_spelled(path: &Path) -> bool {
    let me = toolgate_wire::peer::own_uid();
    let owned = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == me);
    if owned(path) || may_write(path) {
        return true;
    }
    let mut child = path;
    while let Some(dir) = child.parent().filter(|d| !d.as_os_str().is_empty()) {
        let sticky = std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o1000 != 0);
        if owned(dir) || (may_write(dir) && (!sticky || owned(child))) {
            return true;
        }
        child = dir;
    }
    false
}

/// Whether this process may write `path` (a directory: add and remove
/// entries), as the kernel decides it, ACLs included.
fn may_write(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path that outlives the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// Whether a daemon answers the URL's `/health`.
fn http_answers(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(std::time::Duration::from_secs(2)))
        .build()
        .into();
    agent
        .get(format!("http://{authority}/health"))
        .call()
        .is_ok()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
