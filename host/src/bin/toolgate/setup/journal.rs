//! What `toolgate setup system` changed on this host, so that `toolgate
//! setup remove` (and the Debian package's removal) undoes exactly that and
//! nothing else.
//!
//! Each file setup writes is recorded with what it held before (nothing,
//! its text — a runtime's managed settings that held an admin's own
//! settings — or an older binary, not kept) and the sha256 of what setup
//! left there. Undoing puts the earlier text back, or removes the file,
//! only while the file still holds what setup wrote: one changed since is
//! someone else's now, kept, and named. Folders and the daemon's user are removed only where
//! setup made them.
//!
//! The journal is root's alone (`/etc/toolgate/setup-journal.json`, 0600):
//! whoever could edit it could have root remove any file.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The journal's file name, in the config's folder.
const FILE: &str = "setup-journal.json";

/// When a change is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// On removal: what makes the runtimes and the host rely on toolgate
    /// (hooks, locks, the unit, the kernel switch, copied binaries). Left
    /// behind without toolgate, the hooks would block every tool.
    Remove,
    /// On purge: what holds toolgate's data (config, store, the daemon's
    /// user).
    Purge,
}

/// One change setup made.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Change {
    /// A file written: what it held before and the sha256 of what setup
    /// wrote.
    File {
        path: PathBuf,
        before: Before,
        written: String,
        phase: Phase,
    },
    /// A folder setup made (it did not exist). `contents`: what is in it
    /// is toolgate's (the store, the socket), removed with it; otherwise it
    /// goes only when empty.
    Folder {
        path: PathBuf,
        phase: Phase,
        contents: bool,
    },
    /// The daemon's user, made by setup.
    User { name: String },
}

/// What a file setup wrote held before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "was", content = "text", rename_all = "lowercase")]
enum Before {
    /// It did not exist: undoing removes it.
    Absent,
    /// This text (a runtime's settings, a config): undoing puts it back.
    Text(String),
    /// A binary (an older toolgate setup copied over): not kept, so undoing
    /// removes it.
    Binary,
}

impl Before {
    fn of(bytes: Option<Vec<u8>>) -> Self {
        match bytes.map(String::from_utf8) {
            None => Before::Absent,
            Some(Ok(text)) => Before::Text(text),
            Some(Err(_)) => Before::Binary,
        }
    }
}

/// The changes, kept in the config's folder as they happen (a setup that
/// fails half-way is undone as far as it got).
pub struct Journal {
    path: PathBuf,
    changes: Vec<Change>,
}

impl Journal {
    /// The journal in `etc_dir` (empty if there is none yet).
    pub fn open(etc_dir: &Path) -> anyhow::Result<Self> {
        let path = etc_dir.join(FILE);
        let changes = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is damaged; fix or move it (without it, `toolgate setup remove` cannot \
                     know what setup changed)",
                    path.display()
                )
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
        };
        Ok(Self { path, changes })
    }

    /// Whether setup has recorded anything here.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Run `write`, which writes `paths`, recording what each held before
    /// (the first time setup touches it: a second setup keeps the first's
    /// "before") and what it holds after.
    pub fn track<T>(
        &mut self,
        paths: &[&Path],
        phase: Phase,
        write: impl FnOnce() -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let before: Vec<Option<Vec<u8>>> =
            paths.iter().map(|p| read(p)).collect::<Result<_, _>>()?;
        let result = write();
        for (path, before) in paths.iter().zip(before) {
            let Some(now) = read(path)? else { continue };
            let written = digest(&now);
            match self.file_mut(path) {
                Some(Change::File { written: w, .. }) => *w = written,
                _ if before.as_ref() == Some(&now) => {}
                _ => self.changes.push(Change::File {
                    path: path.to_path_buf(),
                    before: Before::of(before),
                    written,
                    phase,
                }),
            }
        }
        self.save()?;
        result
    }

    /// Make folder `path` with `make`, recording it and each folder above
    /// it that did not exist (`contents`: see [`Change::Folder`]; the
    /// folders above go only when empty).
    pub fn folder(
        &mut self,
        path: &Path,
        phase: Phase,
        contents: bool,
        make: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let missing: Vec<&Path> = path.ancestors().take_while(|p| !p.exists()).collect();
        make()?;
        for made in missing.iter().rev() {
            self.changes.push(Change::Folder {
                path: made.to_path_buf(),
                phase,
                contents: contents && *made == path,
            });
        }
        if !missing.is_empty() {
            self.save()?;
        }
        Ok(())
    }

    /// The daemon's user, made by setup.
    pub fn user(&mut self, name: &str) -> anyhow::Result<()> {
        self.changes.push(Change::User { name: name.into() });
        self.save()
    }

    /// What [`Journal::undo`] with `purge` would do, as a POSIX shell
    /// script, for when the binaries are gone (a package's purge runs
    /// after its files are removed): the same checks, the same order.
    pub fn purge_script(&self) -> String {
        let quote = |path: &Path| {
            shlex::try_quote(&path.to_string_lossy())
                .map(|q| q.into_owned())
                .unwrap_or_default()
        };
        let mut script = format!(
            "#!/bin/sh\n\
             # toolgate's purge: what `toolgate setup system` changed and `toolgate setup\n\
             # remove` left, undone (written by `toolgate setup remove --purge-script`).\n\
             rm -f -- \"$0\" {}\n",
            quote(&self.path)
        );
        for change in self.changes.iter().rev() {
            script += &match change {
                Change::File {
                    path,
                    before,
                    written,
                    ..
                } => {
                    let put_back = match before {
                        Before::Text(text) => format!(
                            "printf '%s' {} > {}",
                            shlex::try_quote(text).unwrap_or_default(),
                            quote(path)
                        ),
                        Before::Absent | Before::Binary => format!("rm -f -- {}", quote(path)),
                    };
                    format!(
                        "if [ -f {p} ]; then if [ \"$(sha256sum < {p} | cut -d' ' -f1)\" = {written} ]; \
                         then {put_back}; else echo \"note: {p} changed after setup: kept\"; fi; fi\n",
                        p = quote(path)
                    )
                }
                Change::Folder {
                    path,
                    contents: true,
                    ..
                } => format!("rm -rf -- {}\n", quote(path)),
                Change::Folder { path, .. } => {
                    format!("rmdir -- {} 2>/dev/null || true\n", quote(path))
                }
                Change::User { name } => format!(
                    "if id -u {n} >/dev/null 2>&1; then userdel {n}; fi\n",
                    n = shlex::try_quote(name).unwrap_or_default()
                ),
            };
        }
        script
    }

    fn file_mut(&mut self, path: &Path) -> Option<&mut Change> {
        self.changes
            .iter_mut()
            .find(|c| matches!(c, Change::File { path: p, .. } if p == path))
    }

    fn save(&self) -> anyhow::Result<()> {
        if self.changes.is_empty() {
            let _ = std::fs::remove_file(&self.path);
            return Ok(());
        }
        let dir = self.path.parent().expect("the journal is in a folder");
        std::fs::create_dir_all(dir)?;
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(&self.changes)? + "\n")
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Undo the changes due at removal (with `purge`, every change),
    /// newest first. What was kept as it is, one line each, for the person.
    /// A change that cannot be undone stops it, the journal keeping what is
    /// left.
    pub fn undo(&mut self, purge: bool) -> anyhow::Result<Vec<String>> {
        if purge {
            // Nothing stays: its folder may go when empty.
            let _ = std::fs::remove_file(&self.path);
        }
        let (mut kept, mut left) = (Vec::new(), Vec::new());
        while let Some(change) = self.changes.pop() {
            match undo_one(&change, purge) {
                Ok(Undone::Yes) => {}
                Ok(Undone::Kept(why)) => kept.push(why),
                Ok(Undone::NotDue) => left.push(change),
                Err(err) => {
                    self.changes.push(change);
                    self.changes.extend(left.into_iter().rev());
                    self.save()?;
                    return Err(err);
                }
            }
        }
        self.changes = left.into_iter().rev().collect();
        self.save()?;
        Ok(kept)
    }
}

enum Undone {
    Yes,
    Kept(String),
    NotDue,
}

fn undo_one(change: &Change, purge: bool) -> anyhow::Result<Undone> {
    let due = |phase: &Phase| purge || *phase == Phase::Remove;
    match change {
        Change::File {
            path,
            before,
            written,
            phase,
        } if due(phase) => Ok(match undo_file(path, before, written)? {
            Some(why) => Undone::Kept(why),
            None => Undone::Yes,
        }),
        Change::Folder {
            path,
            phase,
            contents,
        } if due(phase) => remove_folder(path, *contents).map(|()| Undone::Yes),
        Change::User { name } if purge => remove_user(name).map(|()| Undone::Yes),
        _ => Ok(Undone::NotDue),
    }
}

/// Put `path` back as it was before setup, if it still holds what setup
/// wrote; else why it was kept.
fn undo_file(path: &Path, before: &Before, written: &str) -> anyhow::Result<Option<String>> {
    let Some(now) = read(path)? else {
        return Ok(None);
    };
    if digest(&now) != written {
        return Ok(Some(format!(
            "{} changed after setup: kept as it is (remove toolgate from it by hand)",
            path.display()
        )));
    }
    match before {
        Before::Text(text) => std::fs::write(path, text),
        Before::Absent | Before::Binary => std::fs::remove_file(path),
    }
    .with_context(|| format!("cannot put {} back", path.display()))?;
    match before {
        Before::Text(_) => println!("restored {}", path.display()),
        Before::Absent => println!("removed {}", path.display()),
        Before::Binary => println!(
            "removed {} (setup replaced an earlier binary there, which was not kept)",
            path.display()
        ),
    }
    Ok(None)
}

/// A folder setup made: with what is in it when that is toolgate's (the
/// store, the cache, the socket); otherwise only when empty.
fn remove_folder(path: &Path, contents: bool) -> anyhow::Result<()> {
    let removed = match contents {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_dir(path),
    };
    match removed {
        Ok(()) => println!("removed {}", path.display()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) if !contents => println!("kept {} (not empty)", path.display()),
        Err(err) => return Err(err).with_context(|| format!("cannot remove {}", path.display())),
    }
    Ok(())
}

fn remove_user(name: &str) -> anyhow::Result<()> {
    if toolgate_wire::peer::uid_of(name).is_none() {
        return Ok(());
    }
    let status = Command::new("userdel")
        .arg(name)
        .status()
        .context("cannot run userdel")?;
    anyhow::ensure!(status.success(), "userdel {name} failed");
    println!("removed the system user {name}");
    Ok(())
}

/// A file's bytes, `None` if there is none.
fn read(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) -> anyhow::Result<()> {
        Ok(std::fs::write(path, text)?)
    }

    #[test]
    fn undo_puts_back_what_was_there_and_removes_only_what_setup_made() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        let admins = tmp.path().join("managed.json");
        let made = tmp.path().join("new/deeper/hooks.json");
        let config = etc.join("toolgate.toml");
        std::fs::write(&admins, "{\"admin\": true}\n").unwrap();

        let mut journal = Journal::open(&etc).unwrap();
        journal
            .folder(&etc, Phase::Purge, false, || Ok(std::fs::create_dir(&etc)?))
            .unwrap();
        let deeper = made.parent().unwrap();
        journal
            .folder(deeper, Phase::Remove, false, || {
                Ok(std::fs::create_dir_all(deeper)?)
            })
            .unwrap();
        journal
            .track(&[&admins, &made], Phase::Remove, || {
                write(&admins, "{\"admin\": true, \"hooks\": 1}\n")?;
                write(&made, "{\"hooks\": 1}\n")
            })
            .unwrap();
        journal
            .track(&[&config], Phase::Purge, || write(&config, "store = 1\n"))
            .unwrap();
        // A second setup: the first "before" stays what is put back.
        let mut journal = Journal::open(&etc).unwrap();
        journal
            .track(&[&admins], Phase::Remove, || {
                write(&admins, "{\"admin\": true, \"hooks\": 2}\n")
            })
            .unwrap();

        // Removal: the hooks out, the admin's file as it was; the config
        // and its folder kept for the purge.
        let kept = Journal::open(&etc).unwrap().undo(false).unwrap();
        assert!(kept.is_empty(), "{kept:?}");
        assert_eq!(
            std::fs::read_to_string(&admins).unwrap(),
            "{\"admin\": true}\n"
        );
        assert!(!tmp.path().join("new").exists());
        assert!(config.exists());

        // Purge: the rest, a config the person edited kept and named.
        std::fs::write(&config, "store = 2\n").unwrap();
        let script = Journal::open(&etc).unwrap().purge_script();
        assert!(
            script.contains("rm -f -- \"$0\"") && script.contains("toolgate.toml"),
            "{script}"
        );
        let kept = Journal::open(&etc).unwrap().undo(true).unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(kept[0].contains("toolgate.toml changed after setup"));
        assert!(config.exists() && !etc.join(FILE).exists());
    }

    #[test]
    fn binaries_setup_copied_over_an_older_binary_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        let new = tmp.path().join("toolgate");
        let older = tmp.path().join("toolgate-hook");
        std::fs::write(&older, b"\x7fELF older \xff\xfe").unwrap();
        let mut journal = Journal::open(&etc).unwrap();
        journal
            .track(&[&new, &older], Phase::Remove, || {
                std::fs::write(&new, b"\x7fELF \xff new")?;
                Ok(std::fs::write(&older, b"\x7fELF \xff newer")?)
            })
            .unwrap();
        let kept = Journal::open(&etc).unwrap().undo(false).unwrap();
        assert!(kept.is_empty(), "{kept:?}");
        assert!(!new.exists() && !older.exists());
    }

    #[test]
    fn the_purge_script_does_what_purging_does() {
        let tmp = tempfile::tempdir().unwrap();
        let etc = tmp.path().join("etc");
        let state = tmp.path().join("state");
        let config = etc.join("toolgate.toml");
        let mut journal = Journal::open(&etc).unwrap();
        journal
            .folder(&etc, Phase::Purge, false, || Ok(std::fs::create_dir(&etc)?))
            .unwrap();
        journal
            .folder(&state, Phase::Purge, true, || {
                Ok(std::fs::create_dir(&state)?)
            })
            .unwrap();
        journal
            .track(&[&config], Phase::Purge, || {
                write(&config, "it's 'quoted'\n")
            })
            .unwrap();
        std::fs::write(state.join("toolgate.redb"), "the store").unwrap();

        let script = tmp.path().join("purge.sh");
        std::fs::write(&script, journal.purge_script()).unwrap();
        let ran = Command::new("sh").arg(&script).output().unwrap();
        assert!(ran.status.success(), "{ran:?}");
        assert!(!state.exists() && !etc.exists() && !script.exists());
    }
}
