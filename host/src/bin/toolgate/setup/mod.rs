//! `toolgate setup`: install toolgate so that the agent cannot switch it
//! off (`system`, as root), or for one user as before (`user`).
//!
//! System mode rests on the OS, not on the guard: the daemon runs as a
//! user of its own; binaries, config and the clients' managed settings
//! belong to root; store, compiled cache and socket to the daemon's user.
//! The agent's user can ask for decisions on the socket and nothing else:
//! it cannot edit, move or replace anything toolgate relies on, kill the
//! daemon, serve its own socket in its place, or read the cache key.

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

mod journal;

use crate::userns;
use anyhow::Context as _;
use journal::{Journal, Phase};
use toolgate::hooks::{self, HookRuntime, SystemLock};

#[derive(clap::Subcommand)]
pub enum SetupCommand {
    /// As root: the daemon under a user of its own, root-owned binaries,
    /// config and runtimes' admin-controlled hooks (Claude Code's managed
    /// settings with `allowManagedHooksOnly`, Codex's `/etc/codex` with
    /// `allow_managed_hooks_only`, Gemini CLI's system settings, Cursor's
    /// enterprise hooks, OpenCode's managed plugin list), store and socket
    /// owned by the daemon's user. Existing files are kept (the config) or
    /// merged (the runtimes' settings).
    System(Box<SystemArgs>),
    /// For this user only, as `toolgate hook install --write` does: every
    /// file toolgate relies on belongs to you, and so to any agent you run
    /// as you. Self-protection refuses the calls it recognises; system
    /// mode is what puts the files out of the agent's reach.
    User {
        /// The Claude Code settings to merge the hooks into.
        #[arg(long, value_name = "SETTINGS.json")]
        write: Option<PathBuf>,
    },
    /// As root: undo what `setup system` changed, as its journal
    /// (ETC/setup-journal.json) recorded it: stop the daemon, take the
    /// hooks out of the runtimes' managed settings (putting back what they
    /// held before), remove the unit and the binaries it copied. With
    /// --purge also the config, the store and the daemon's user. A file
    /// changed since setup wrote it is kept, and named.
    Remove {
        /// Also remove toolgate's data: config, store, socket folder, the
        /// daemon's user.
        #[arg(long)]
        purge: bool,
        /// The config's directory, where the journal is.
        #[arg(long, default_value = "/etc/toolgate")]
        etc_dir: PathBuf,
        /// Undo nothing now; write the --purge steps as a shell script to
        /// FILE (the Debian package's removal runs it once the binaries
        /// are gone).
        #[arg(long, value_name = "FILE", conflicts_with = "purge")]
        purge_script: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
pub struct SystemArgs {
    /// The daemon's OS user (created as a system user if missing).
    #[arg(long, default_value = "toolgate")]
    daemon_user: String,
    /// A person who approves pauses from a terminal of their own (a user
    /// name or uid; repeat for more). Default: the user who ran sudo.
    /// Never the agent's user.
    #[arg(long = "person", value_name = "USER")]
    persons: Vec<String>,
    /// Where the binaries go (root-owned).
    #[arg(long, default_value = "/usr/local/bin")]
    bin_dir: PathBuf,
    /// The config's directory (root-owned).
    #[arg(long, default_value = "/etc/toolgate")]
    etc_dir: PathBuf,
    /// The store and compiled cache (the daemon's user only).
    #[arg(long, default_value = "/var/lib/toolgate")]
    state_dir: PathBuf,
    /// The socket's directory (the daemon's; the socket itself 0666).
    #[arg(long, default_value = "/run/toolgate")]
    run_dir: PathBuf,
    /// Also serve Claude Code's HTTP hooks on this loopback address.
    #[arg(long, value_name = "ADDR")]
    http: Option<std::net::SocketAddr>,
    /// Start the daemon now: `systemctl enable --now toolgate` where
    /// systemd runs, else in the background under `runuser`.
    #[arg(long)]
    start: bool,
    /// Keep unprivileged users from making user namespaces in which they
    /// could mount over the managed settings (the kernel's narrowest
    /// switch, now and at boot, in /etc/sysctl.d). Without it, system mode
    /// holds only where the kernel already keeps them out (`doctor` says).
    #[arg(long)]
    restrict_userns: bool,
}

pub fn run(command: SetupCommand) -> anyhow::Result<ExitCode> {
    match command {
        SetupCommand::System(args) => system(&args),
        SetupCommand::Remove {
            purge,
            etc_dir,
            purge_script,
        } => remove(&etc_dir, purge, purge_script.as_deref()),
        SetupCommand::User { write } => {
            let settings = match write {
                Some(path) => path,
                None => std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".claude/settings.json"))
                    .context("HOME is not set; pass --write SETTINGS.json")?,
            };
            let exe = std::env::current_exe()?;
            let status = Command::new(exe)
                .args(["hook", "install", "--write"])
                .arg(&settings)
                .status()?;
            anyhow::ensure!(status.success(), "toolgate hook install failed");
            println!(
                "user mode: toolgate's files belong to you, and so to any agent you run as you. \
                 Self-protection refuses the calls it recognises and a broken toolgate blocks \
                 the tool, but a command assembled at run time can still change those files. \
                 As root, `toolgate setup system` puts them out of the agent's reach."
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn system(args: &SystemArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        toolgate_wire::peer::own_uid() == 0,
        "system mode is set up as root: sudo toolgate setup system"
    );
    // What this run changes, so that `setup remove` undoes exactly that;
    // kept in the config's folder, root's.
    let mut journal = Journal::open(&args.etc_dir)?;
    journal.folder(&args.etc_dir, Phase::Purge, false, || {
        create_dir(&args.etc_dir, 0o755, Some(0))
    })?;
    // First, so that a kernel that refuses leaves everything as it was.
    let restricted = match args.restrict_userns {
        true => Some(restrict_userns(&mut journal)?),
        false => None,
    };
    let user = &args.daemon_user;
    let uid = ensure_user(user, &args.state_dir, &mut journal)?;
    let persons = persons(&args.persons)?;
    install_binaries(&args.bin_dir, &mut journal)?;

    // State and socket: the daemon's user's.
    for (dir, mode) in [
        (&args.state_dir, 0o750),
        (&args.state_dir.join("cache"), 0o700),
        (&args.run_dir, 0o755),
    ] {
        journal.folder(dir, Phase::Purge, true, || create_dir(dir, mode, Some(uid)))?;
    }

    let config = write_system_config(args, &persons, &mut journal)?;
    let unit = Path::new("/etc/systemd/system/toolgate.service");
    if Path::new("/etc/systemd/system").is_dir() {
        journal.track(&[unit], Phase::Remove, || {
            write_root_file(unit, &systemd_unit(args))
        })?;
        println!("wrote {}", unit.display());
    }

    let installed = args.bin_dir.join("toolgate");
    install_runtimes_hooks(&installed, &config, &mut journal)?;

    if let Some(restricted) = restricted {
        println!("user namespaces: {restricted}");
    } else if let Some(switch) = userns::restriction() {
        println!("user namespaces: kept from unprivileged users ({switch})");
    } else {
        println!(
            "warning: any user may make a user namespace and mount over the managed settings \
             in it (`unshare -r -m`), where the runtimes run no managed hook: system mode does \
             not hold until the kernel keeps them out (rerun with --restrict-userns)"
        );
    }

    let serve = format!(
        "runuser -u {user} -- {} --config {} serve",
        installed.display(),
        config.display()
    );
    if args.start {
        start(&installed, &config, user, args)?;
    } else {
        println!("start it: systemctl enable --now toolgate (without systemd: {serve} &)");
    }
    println!(
        "check it: toolgate doctor, as the agent's user (it should say \"system mode, \
         fail-closed\"). A person approves with `toolgate gates resolve` from a terminal of \
         their own (uids {persons:?}), never the agent's user."
    );
    Ok(ExitCode::SUCCESS)
}

/// The kernel's switch for user namespaces closed, now and at boot.
fn restrict_userns(journal: &mut Journal) -> anyhow::Result<String> {
    let sysctl = Path::new("/etc/sysctl.d");
    let [switch, file] = userns::restrict_writes(sysctl)?;
    journal.track(&[&switch, &file], Phase::Remove, || {
        userns::restrict(sysctl)
    })
}

/// The runtimes' admin-controlled settings, written by the `installed`
/// binary so the hooks name it, and locked where the runtime can be.
fn install_runtimes_hooks(
    installed: &Path,
    config: &Path,
    journal: &mut Journal,
) -> anyhow::Result<()> {
    for runtime in HookRuntime::ALL {
        let name = runtime.name();
        let Some(system) = hooks::info(runtime).system_hooks else {
            println!(
                "{name}: no hooks location its user cannot override; its hooks stay the \
                 user's (`toolgate hook install --for {name}` as that user)"
            );
            continue;
        };
        install_managed_hooks(installed, config, name, Path::new(system.file), journal)?;
        if let Some(lock) = system.lock {
            lock_hooks(name, &lock, journal)?;
        }
    }
    Ok(())
}

/// `setup remove`: the daemon stopped, then the journal undone (or, with
/// `purge_script`, its purge written out for later).
fn remove(etc_dir: &Path, purge: bool, purge_script: Option<&Path>) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        toolgate_wire::peer::own_uid() == 0,
        "what `setup system` installed is removed as root: sudo toolgate setup remove"
    );
    let mut journal = Journal::open(etc_dir)?;
    if let Some(file) = purge_script {
        if !journal.is_empty() {
            std::fs::write(file, journal.purge_script())
                .with_context(|| format!("cannot write {}", file.display()))?;
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o700))?;
            println!("the purge's steps: {}", file.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    if journal.is_empty() {
        println!(
            "nothing to undo: no changes of `toolgate setup system` are recorded in {}",
            etc_dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    stop_daemon(&etc_dir.join("toolgate.toml"));
    for kept in journal.undo(purge)? {
        println!("note: {kept}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The daemon serving `config` stopped: its systemd unit disabled, and any
/// process still serving it (started without systemd) asked to exit.
fn stop_daemon(config: &Path) {
    if Path::new("/run/systemd/system").is_dir() {
        let _ = Command::new("systemctl")
            .args(["disable", "--now", "toolgate"])
            .status();
    }
    let serving: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let serves = words.contains(&b"serve".as_slice())
                && words.windows(2).any(|pair| {
                    pair[0] == b"--config"
                        && Path::new(std::ffi::OsStr::from_bytes(pair[1])) == config
                });
            serves.then_some(pid)
        })
        .collect();
    for pid in &serving {
        // SAFETY: kill(2) with a pid read from /proc and a valid signal.
        unsafe { libc::kill(*pid, libc::SIGTERM) };
    }
    // Its store is removed next on a purge: wait until it has let go.
    for _ in 0..100 {
        if serving
            .iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// This toolgate's binaries into `bin_dir`, root-owned, so no user can
/// replace the hook; nothing to do when they run from there (a package
/// installed them).
fn install_binaries(bin_dir: &Path, journal: &mut Journal) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("cannot find the toolgate binary")?;
    if exe.parent().and_then(|d| d.canonicalize().ok()) == bin_dir.canonicalize().ok() {
        println!("kept {} (the binaries run from there)", bin_dir.display());
        return Ok(());
    }
    journal.folder(bin_dir, Phase::Remove, false, || {
        create_dir(bin_dir, 0o755, None)
    })?;
    for name in ["toolgate", "toolgate-hook"] {
        let from = exe.with_file_name(name);
        let to = bin_dir.join(name);
        // Copy beside, then rename: a running hook never sees half a file.
        let tmp = to.with_extension("new");
        journal.track(&[&to], Phase::Remove, || {
            std::fs::copy(&from, &tmp)
                .with_context(|| format!("cannot copy {} to {}", from.display(), tmp.display()))?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
            Ok(std::fs::rename(&tmp, &to)?)
        })?;
        println!("installed {}", to.display());
    }
    Ok(())
}

/// The config, root-owned and readable by all (it holds no secrets; the
/// approvals tokens are digests); one already there is kept as it is.
fn write_system_config(
    args: &SystemArgs,
    persons: &[u32],
    journal: &mut Journal,
) -> anyhow::Result<PathBuf> {
    let config = args.etc_dir.join("toolgate.toml");
    if config.exists() {
        println!("kept {} (as it is)", config.display());
    } else {
        let text = system_config(args, persons);
        toolgate::Config::parse(&text, "the system config", args.etc_dir.clone())
            .context("the system config does not parse (a bug: please report it)")?;
        journal.track(&[&config], Phase::Purge, || write_root_file(&config, &text))?;
        println!("wrote {}", config.display());
    }
    Ok(config)
}

/// `runtime`'s hooks written to its admin-controlled `path` by the
/// `installed` binary, root-owned and readable by all.
fn install_managed_hooks(
    installed: &Path,
    config: &Path,
    runtime: &str,
    path: &Path,
    journal: &mut Journal,
) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        journal.folder(dir, Phase::Remove, false, || {
            create_dir(dir, 0o755, Some(0))
        })?;
    }
    journal.track(&[path], Phase::Remove, || {
        let out = Command::new(installed)
            .arg("--config")
            .arg(config)
            .args(["hook", "install", "--for", runtime, "--write"])
            .arg(path)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "writing {runtime}'s hooks to {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(std::fs::set_permissions(
            path,
            std::fs::Permissions::from_mode(0o644),
        )?)
    })?;
    let mut backup = path.as_os_str().to_owned();
    backup.push(".bak");
    let _ = std::fs::remove_file(backup);
    println!("{runtime}: hooks in {}", path.display());
    Ok(())
}

/// `lock`'s file edited as root, whatever else it holds kept.
fn lock_hooks(runtime: &str, lock: &SystemLock, journal: &mut Journal) -> anyhow::Result<()> {
    let path = Path::new(lock.file);
    if let Some(dir) = path.parent() {
        journal.folder(dir, Phase::Remove, false, || {
            create_dir(dir, 0o755, Some(0))
        })?;
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    let edited = (lock.edit)(text.as_deref())
        .map_err(|problem| anyhow::anyhow!("{} {problem}; fix or move it first", path.display()))?;
    let undoing: Vec<String> = (lock.drop_ins.map(|d| d.undoing()).unwrap_or_default())
        .into_iter()
        .map(|(file, what)| format!("{} sets {what}", file.display()))
        .collect();
    anyhow::ensure!(
        undoing.is_empty(),
        "{runtime} merges these over {}: {}; remove those settings (or the files), then run \
         `toolgate setup system` again",
        path.display(),
        undoing.join("; ")
    );
    journal.track(&[path], Phase::Remove, || write_root_file(path, &edited))?;
    println!("{runtime}: {} ({})", lock.does, path.display());
    Ok(())
}

/// The daemon's user's uid, creating it as a system user if missing.
fn ensure_user(user: &str, home: &Path, journal: &mut Journal) -> anyhow::Result<u32> {
    if let Some(uid) = toolgate_wire::peer::uid_of(user) {
        return Ok(uid);
    }
    let status = Command::new("useradd")
        .args(["--system", "--user-group", "--shell", "/usr/sbin/nologin"])
        .arg("--home-dir")
        .arg(home)
        .arg("--no-create-home")
        .arg(user)
        .status()
        .context("cannot run useradd")?;
    anyhow::ensure!(status.success(), "useradd {user} failed");
    let uid = toolgate_wire::peer::uid_of(user).context("useradd made no user")?;
    journal.user(user)?;
    println!("created the system user {user} (uid {uid})");
    Ok(uid)
}

/// The persons' uids: names or numbers; default the user who ran sudo.
fn persons(given: &[String]) -> anyhow::Result<Vec<u32>> {
    let names: Vec<String> = if given.is_empty() {
        std::env::var("SUDO_UID").into_iter().collect()
    } else {
        given.to_vec()
    };
    let uids = names
        .iter()
        .map(|name| {
            name.parse()
                .ok()
                .or_else(|| toolgate_wire::peer::uid_of(name))
                .with_context(|| format!("no user {name:?}"))
        })
        .collect::<anyhow::Result<Vec<u32>>>()?;
    if uids.is_empty() {
        eprintln!(
            "note: no person may approve from a terminal (run with sudo, or pass --person USER)"
        );
    }
    Ok(uids)
}

/// The bundled default config, pointed at the system's places.
fn system_config(args: &SystemArgs, persons: &[u32]) -> String {
    let state = args.state_dir.display();
    let uids: Vec<String> = persons.iter().map(u32::to_string).collect();
    let body = toolgate::config::DEFAULT_CONFIG.replacen(
        "[approvals]\n",
        &format!("[approvals]\nterminal_uids = [{}]\n", uids.join(", ")),
        1,
    );
    let http = args
        .http
        .map(|a| format!("http = \"{a}\"\n"))
        .unwrap_or_default();
    format!(
        "# toolgate in system mode, written by `toolgate setup system`. root owns this\n\
         # file; the daemon runs as {user} and owns {state}; agents reach the socket\n\
         # for decisions only.\n\
         store = \"{state}/toolgate.redb\"\n\
         cache_dir = \"{state}/cache\"\n\n\
         {body}\n\
         [daemon]\n\
         user = \"{user}\"\n\
         socket = \"{run}/toolgate.sock\"\n\
         socket_mode = 0o666\n\
         {http}",
        user = args.daemon_user,
        run = args.run_dir.display(),
    )
}

/// A hardened systemd unit for the daemon.
fn systemd_unit(args: &SystemArgs) -> String {
    format!(
        "[Unit]\n\
         Description=toolgate policy daemon (system mode)\n\
         After=local-fs.target\n\n\
         [Service]\n\
         User={user}\n\
         Group={user}\n\
         ExecStart={bin}/toolgate --config {etc}/toolgate.toml serve\n\
         ExecReload=/bin/kill -HUP $MAINPID\n\
         Restart=on-failure\n\
         RuntimeDirectory={run_name}\n\
         RuntimeDirectoryMode=0755\n\
         RuntimeDirectoryPreserve=yes\n\
         NoNewPrivileges=yes\n\
         ProtectSystem=strict\n\
         ProtectHome=read-only\n\
         ReadWritePaths={state} {run}\n\
         PrivateTmp=yes\n\
         PrivateDevices=yes\n\
         ProtectKernelTunables=yes\n\
         ProtectKernelModules=yes\n\
         ProtectControlGroups=yes\n\
         RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n\
         RestrictNamespaces=yes\n\
         LockPersonality=yes\n\
         CapabilityBoundingSet=\n\
         SystemCallArchitectures=native\n\
         # wasmtime compiles policies to native code: W^X mappings are needed.\n\
         MemoryDenyWriteExecute=no\n\n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        user = args.daemon_user,
        bin = args.bin_dir.display(),
        etc = args.etc_dir.display(),
        state = args.state_dir.display(),
        run = args.run_dir.display(),
        run_name = args
            .run_dir
            .file_name()
            .map_or("toolgate".into(), |n| n.to_string_lossy()),
    )
}

/// Start the daemon: systemd where it runs, else detached under runuser.
fn start(installed: &Path, config: &Path, user: &str, args: &SystemArgs) -> anyhow::Result<()> {
    if Path::new("/run/systemd/system").is_dir() {
        let status = Command::new("systemctl")
            .args(["enable", "--now", "toolgate"])
            .status()?;
        anyhow::ensure!(status.success(), "systemctl enable --now toolgate failed");
        println!("started: systemctl status toolgate");
        return Ok(());
    }
    let log = args.state_dir.join("toolgate.log");
    let log_file = std::fs::File::create(&log)?;
    std::os::unix::fs::chown(
        &log,
        Some(toolgate_wire::peer::uid_of(user).unwrap_or(0)),
        None,
    )?;
    Command::new("setsid")
        .args(["runuser", "-u", user, "--"])
        .arg(installed)
        .arg("--config")
        .arg(config)
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .context("cannot start the daemon under runuser")?;
    println!(
        "started the daemon as {user} (no systemd here; logging to {})",
        log.display()
    );
    Ok(())
}

/// `dir` with `mode`, owned by `owner` (and its group) where given.
fn create_dir(dir: &Path, mode: u32, owner: Option<u32>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    if let Some(uid) = owner {
        let gid = gid_of_uid(uid);
        std::os::unix::fs::chown(dir, Some(uid), gid)
            .with_context(|| format!("cannot chown {}", dir.display()))?;
    }
    Ok(())
}

/// The primary group of `uid`, from `/etc/passwd`.
fn gid_of_uid(uid: u32) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields.get(3)?.parse().ok())?
    })
}

/// Write a root-owned, world-readable file (atomically).
fn write_root_file(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))?;
    std::os::unix::fs::chown(&tmp, Some(0), Some(0))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
