//! Reload on change: the config file, every plugin file and `plugin_dir`,
//! watched through the OS (inotify on Linux, via `notify`) with a debouncer,
//! so a burst of writes becomes one reload and nothing is polled.
//!
//! The parent directories are watched, not the files, so a file replaced
//! by rename (how deploys and editors write) is seen; only events for the
//! watched files, or for `.wasm` files in `plugin_dir`, reload. After each
//! reload the watched set is renewed: a config that names new plugin files
//! is followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};

use crate::Service;
use crate::registry::Watched;

impl Watched {
    fn directories(&self) -> BTreeSet<PathBuf> {
        let mut dirs: BTreeSet<PathBuf> = self
            .files
            .iter()
            .filter_map(|f| f.parent().map(absolute))
            .collect();
        dirs.extend(self.plugin_dir.as_deref().map(absolute));
        dirs
    }

    /// What the watched files are now (each one's inode, length and
    /// change time, and the `.wasm` files in `plugin_dir`): a reload that
    /// only opened them (inotify reports the open) changes none of it, so
    /// it does not set off another reload.
    fn state(&self) -> BTreeSet<(PathBuf, Option<[i64; 4]>)> {
        let stat = |path: &Path| {
            use std::os::unix::fs::MetadataExt as _;
            let meta = std::fs::metadata(path).ok()?;
            Some([
                meta.ino() as i64,
                meta.len() as i64,
                meta.ctime(),
                meta.ctime_nsec(),
            ])
        };
        let mut files: BTreeSet<PathBuf> = self.files.iter().map(|f| absolute(f)).collect();
        if let Some(dir) = &self.plugin_dir
            && let Ok(entries) = std::fs::read_dir(dir)
        {
            files.extend(
                entries
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "wasm")),
            );
        }
        files.into_iter().map(|f| (f.clone(), stat(&f))).collect()
    }

    fn concerns(&self, path: &Path) -> bool {
        let path = absolute(path);
        self.files.iter().any(|f| absolute(f) == path)
            || self.plugin_dir.as_deref().is_some_and(|dir| {
                path.parent() == Some(absolute(dir).as_path())
                    && path.extension().is_some_and(|e| e == "wasm")
            })
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

type Shared = Arc<Mutex<Option<Debouncer<RecommendedWatcher>>>>;

/// Watches until dropped (or until the service is gone).
pub struct Watcher {
    debouncer: Shared,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Dropping the debouncer closes the event channel; the thread ends.
        let debouncer = self
            .debouncer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(debouncer);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Service {
    /// Reload when the config file, a plugin file or `plugin_dir` changes,
    /// `debounce` after the last change of a burst. Stops when the returned
    /// [`Watcher`] is dropped or the service is. Watching is set up before this
    /// returns, so a change made right after is never missed.
    pub fn watch(self: &Arc<Self>, debounce: Duration) -> crate::Result<Watcher> {
        let (events, changes) = mpsc::channel::<DebounceEventResult>();
        let mut debouncer = new_debouncer(debounce, events).map_err(watch_error)?;
        let mut watched = self.host().registry.watched_paths();
        let mut seen = watched.state();
        let mut directories = BTreeSet::new();
        renew(&mut debouncer, &mut directories, &watched);
        let shared: Shared = Arc::new(Mutex::new(Some(debouncer)));
        let renewing = Arc::clone(&shared);
        let host = Arc::downgrade(self);
        let thread = std::thread::Builder::new()
            .name("toolgate-watch".into())
            .spawn(move || {
                for batch in changes {
                    let Ok(batch) = batch else { continue };
                    if !batch.iter().any(|event| watched.concerns(&event.path))
                        || watched.state() == seen
                    {
                        continue;
                    }
                    let Some(host) = host.upgrade() else { return };
                    // Before the reload: a change made while it runs is
                    // seen by the next event.
                    seen = watched.state();
                    if let Err(err) = host.reload() {
                        tracing::error!(error = %err.report(), "reload on a file change failed");
                    }
                    // Follow a config that now names other files.
                    watched = host.host().registry.watched_paths();
                    let mut guard = renewing.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(debouncer) = guard.as_mut() {
                        renew(debouncer, &mut directories, &watched);
                    }
                }
            })
            .map_err(|err| crate::Error::Config {
                path: "<watcher>".into(),
                message: format!("cannot start the watcher thread: {err}"),
            })?;
        Ok(Watcher {
            debouncer: shared,
            thread: Some(thread),
        })
    }
}

/// Watch each directory of `watched` not watched yet.
fn renew(
    debouncer: &mut Debouncer<RecommendedWatcher>,
    directories: &mut BTreeSet<PathBuf>,
    watched: &Watched,
) {
    for dir in watched.directories() {
        if directories.contains(&dir) {
            continue;
        }
        match debouncer.watcher().watch(&dir, RecursiveMode::NonRecursive) {
            Ok(()) => {
                directories.insert(dir);
            }
            Err(err) => {
                tracing::warn!(dir = %dir.display(), error = %err, "cannot watch for changes")
            }
        }
    }
}

fn watch_error(err: notify_debouncer_mini::notify::Error) -> crate::Error {
    crate::Error::Config {
        path: "<watcher>".into(),
        message: format!("cannot watch for changes: {err}"),
    }
}
