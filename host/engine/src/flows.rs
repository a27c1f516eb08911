//! Flow labels: what each session took in (a secret it read, untrusted text
//! it fetched) and which files hold it, kept by the host for every policy
//! that follows information from where it came in to where it would go
//! out (`toolgate:policy/flows` in `wit/host.wit`).
//!
//! Labels live in the store beside the policies' state, in a namespace of
//! the host's own ([`NAMESPACE`]: no plugin may be named with a `:`), so
//! they are as durable as the state and move with it. A policy adds and
//! reads them only for the call in hand ([`FlowScope`]); people list and
//! clear them ([`list`], [`clear`]); nothing removes one on an agent's
//! behalf.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
pub use toolgate_wire::protocol::FlowsClear;

use crate::store::{StateSnapshot, StateStore, StateWriteError};
use crate::{Error, Result};

/// The host's namespace for labels in the state store.
pub const NAMESPACE: &str = "toolgate:flows";
/// The most kinds one session or file carries.
pub const MAX_KINDS: usize = 8;
/// The most sources kept per kind; past that, the kind stands for them.
pub const MAX_SOURCES: usize = 16;
/// The longest kind, bytes.
pub const MAX_KIND: usize = 32;
/// The longest source kept, bytes (longer is cut).
pub const MAX_SOURCE: usize = 256;
/// The room labels may take in the store, bytes: about a hundred thousand.
const QUOTA: u64 = 64 * 1024 * 1024;
/// The most labels one listing returns.
const MAX_LISTED: usize = 100_000;
/// The most sessions and files whose labels a [`LabelCache`] keeps, and
/// the most labels it keeps of one (a few MiB at most; a session holding
/// more is read from the store each time).
const MAX_CACHED: usize = 1024;
const MAX_CACHED_LABELS: usize = 16;

/// One thing a session or file took in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    /// What kind of thing: `secret`, `untrusted`, or a policy's own.
    pub kind: String,
    /// Where it came from, for people.
    pub source: String,
    /// The session that took it in.
    pub session: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The file it is on, for a file's label (absolute, resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Whose file labels these are: `local`, or a tenant's `uid:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Why a label was not added or read.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// Not short kebab-case, or a kind past the bound.
    #[error("a label's kind is short kebab-case (at most {MAX_KINDS} kinds, {MAX_KIND} bytes)")]
    InvalidKind,
    /// A path that cannot be placed.
    #[error("the path cannot be placed (empty, NUL, or relative with no working directory)")]
    UnknownPath,
    /// The labels fill their namespace's quota.
    #[error(
        "the flow labels fill their {} MiB; a person lists and clears them with \
         `toolgate flows list` and `toolgate flows clear`",
        QUOTA >> 20
    )]
    Full,
    /// A label over the store's bound on one entry.
    #[error("a label is too large")]
    TooLarge,
    /// The store failed: its error, with the engine's or the OS's cause.
    #[error(transparent)]
    Storage(#[from] Error),
}

/// Whose labels the call in hand reaches, and how its paths resolve. Made
/// for every policy's evaluation, so making it costs nothing: the home
/// directory, the project and each path are resolved when first asked, once
/// per evaluation.
pub(crate) struct FlowScope {
    /// The call's session (a tenant's is `uid:N/…` already).
    session: String,
    /// The tenant whose files these are; none for the host's own user.
    tenant: Option<u32>,
    /// The call's working directory, when the runtime said.
    cwd: Option<PathBuf>,
    /// The home directory `~` stands for.
    home: OnceCell<Option<PathBuf>>,
    /// The working directory, resolved.
    project: OnceCell<Option<PathBuf>>,
    /// Paths resolved in this evaluation, as the call named them.
    located: RefCell<HashMap<String, PathBuf>>,
    /// Labels read before, shared by the evaluations of one plugin.
    cache: Arc<LabelCache>,
}

impl std::fmt::Debug for FlowScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowScope")
            .field("session", &self.session)
            .field("tenant", &self.tenant)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl FlowScope {
    /// The scope of `request`: its session, its tenant's files, its
    /// working directory and its user's home; labels read through `cache`.
    pub(crate) fn of(request: &crate::ToolRequest, cache: &Arc<LabelCache>) -> Self {
        Self {
            session: request.session_id.clone(),
            tenant: crate::tenant::owner_of_user(&request.user_id),
            cwd: request.cwd.clone(),
            home: OnceCell::new(),
            project: OnceCell::new(),
            located: RefCell::default(),
            cache: Arc::clone(cache),
        }
    }

    /// Whose files: `local`, or the tenant's `uid:N`.
    fn owner(&self) -> String {
        self.tenant
            .map_or_else(|| "local".into(), |uid| format!("uid:{uid}"))
    }

    /// `path` as the call names it, absolute and resolved as far as it
    /// exists.
    pub(crate) fn locate(&self, path: &str) -> Result<PathBuf, FlowError> {
        if path.is_empty() || path.contains('\0') {
            return Err(FlowError::UnknownPath);
        }
        if let Some(known) = self.located.borrow().get(path) {
            return Ok(known.clone());
        }
        let home = self.home.get_or_init(|| match self.tenant {
            Some(uid) => home_of_uid(uid),
            None => std::env::var_os("HOME").map(PathBuf::from),
        });
        let expanded = crate::guard::shell::expand_tilde(path, home.as_deref());
        let real = real_path(Path::new(&expanded), self.cwd.as_deref())?;
        let mut located = self.located.borrow_mut();
        // Bounded by what one evaluation asks; a policy naming thousands of
        // paths resolves the rest each time.
        if located.len() < 256 {
            located.insert(path.to_string(), real.clone());
        }
        Ok(real)
    }

    /// Whether `path` (resolved) is inside the call's working directory.
    pub(crate) fn in_project(&self, path: &Path) -> bool {
        let project = self.project.get_or_init(|| {
            let cwd = self.cwd.as_deref()?;
            // A resolved path holds no link, nor does any of its parents: a
            // working directory (without `..`) it lies under as written is
            // its own resolution, and no system call needs to say so.
            let plain = !cwd
                .components()
                .any(|c| c == std::path::Component::ParentDir);
            if plain && path.starts_with(cwd) {
                return Some(cwd.components().collect());
            }
            real_path(cwd, None).ok()
        });
        project
            .as_ref()
            .is_some_and(|project| path.starts_with(project))
    }

    fn session_prefix(&self) -> String {
        format!("s/{}/", digest(&self.session))
    }

    fn file_prefix(&self, file: &Path) -> String {
        file_prefix(&self.owner(), &file.to_string_lossy())
    }

    /// Label the session.
    pub(crate) fn label_session(
        &self,
        store: &dyn StateStore,
        kind: &str,
        source: &str,
    ) -> Result<(), FlowError> {
        let label = self.label(kind, source, None)?;
        add(store, &self.session_prefix(), label)
    }

    /// Label the file at `path`.
    pub(crate) fn label_file(
        &self,
        store: &dyn StateStore,
        path: &str,
        kind: &str,
        source: &str,
    ) -> Result<(), FlowError> {
        let file = self.locate(path)?;
        let label = self.label(kind, source, Some(&file))?;
        add(store, &self.file_prefix(&file), label)
    }

    /// The session's labels, oldest first.
    pub(crate) fn session_labels(&self, store: &dyn StateStore) -> Result<Vec<Label>, FlowError> {
        self.read(store, &self.session_prefix())
    }

    /// The labels of the file at `path`, oldest first.
    pub(crate) fn file_labels(
        &self,
        store: &dyn StateStore,
        path: &str,
    ) -> Result<Vec<Label>, FlowError> {
        let file = self.locate(path)?;
        self.read(store, &self.file_prefix(&file))
    }

    /// The labels under `prefix`: as read before, while the namespace is
    /// at the version they were read at; else from the store.
    fn read(&self, store: &dyn StateStore, prefix: &str) -> Result<Vec<Label>, FlowError> {
        // The version first, then the data: a write between the two
        // leaves what is kept older than its version, never newer.
        let version = store.state_version(NAMESPACE);
        if let Some(labels) = version.and_then(|v| self.cache.get(prefix, v)) {
            return Ok(labels);
        }
        let snapshot = store.state_snapshot(NAMESPACE)?;
        let labels = read(&*snapshot, prefix, MAX_KINDS * MAX_SOURCES)?;
        if let Some(version) = version {
            self.cache.keep(prefix, version, &labels);
        }
        Ok(labels)
    }

    fn label(&self, kind: &str, source: &str, file: Option<&Path>) -> Result<Label, FlowError> {
        if !valid_kind(kind) {
            return Err(FlowError::InvalidKind);
        }
        Ok(Label {
            kind: kind.to_string(),
            source: cut(source.replace('\0', "")),
            session: self.session.clone(),
            at_ms: crate::now_ms(),
            file: file.map(|f| f.to_string_lossy().into_owned()),
            owner: file.map(|_| self.owner()),
        })
    }
}

/// Labels read from the store, each with the version of the namespace it
/// was read at (see [`StateStore::state_version`]), kept for reads at the
/// same version. Most calls come from sessions that hold nothing and read
/// files that hold nothing; without it each of those reads is a read
/// transaction, about half of what following flows costs a call.
#[derive(Debug, Default)]
pub(crate) struct LabelCache(Mutex<HashMap<String, (u64, Vec<Label>)>>);

impl LabelCache {
    fn get(&self, prefix: &str, version: u64) -> Option<Vec<Label>> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.get(prefix)
            .filter(|(at, _)| *at == version)
            .map(|(_, labels)| labels.clone())
    }

    fn keep(&self, prefix: &str, version: u64, labels: &[Label]) {
        if labels.len() > MAX_CACHED_LABELS {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= MAX_CACHED {
            kept.retain(|_, (at, _)| *at == version);
            if kept.len() >= MAX_CACHED {
                kept.clear();
            }
        }
        kept.insert(prefix.to_string(), (version, labels.to_vec()));
    }
}

/// `path` made absolute against `cwd` and resolved through the real
/// filesystem as far as it exists, the rest appended as written: as the
/// self-protection resolves it, and within one evaluation from the same
/// memo (the guard has most often resolved the call's paths already).
fn real_path(path: &Path, cwd: Option<&Path>) -> Result<PathBuf, FlowError> {
    crate::guard::resolve::real_path(path, cwd).ok_or(FlowError::UnknownPath)
}

/// `source` cut to [`MAX_SOURCE`] bytes, on a character boundary.
fn cut(mut source: String) -> String {
    source.truncate(source.floor_char_boundary(MAX_SOURCE));
    source
}

/// Lowercase letters, digits and single `-` between them.
fn valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind.len() <= MAX_KIND
        && kind.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

fn digest(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

fn file_prefix(owner: &str, file: &str) -> String {
    format!("f/{}/{}/", digest(owner), digest(file))
}

/// Add `label` under `prefix` (a session's or a file's), within the bounds:
/// a source already there keeps its first time; past [`MAX_SOURCES`] of a
/// kind the source is dropped; a kind past [`MAX_KINDS`] is refused.
fn add(store: &dyn StateStore, prefix: &str, label: Label) -> Result<(), FlowError> {
    let kind_prefix = format!("{prefix}{}/", label.kind);
    let key = format!("{kind_prefix}{}", digest(&label.source));
    if store.state_get(NAMESPACE, &key)?.is_some() {
        return Ok(());
    }
    let held = store.state_keys(NAMESPACE, prefix, MAX_KINDS * MAX_SOURCES + 1)?;
    let of_kind = held.iter().filter(|k| k.starts_with(&kind_prefix)).count();
    if of_kind >= MAX_SOURCES {
        return Ok(());
    }
    if of_kind == 0 && kinds(&held, prefix) >= MAX_KINDS {
        return Err(FlowError::InvalidKind);
    }
    let value = serde_json::to_vec(&label).expect("a label serializes");
    store
        .state_put(NAMESPACE, &key, Some(&value), QUOTA)
        .map_err(|err| match err {
            StateWriteError::QuotaExceeded(_) => FlowError::Full,
            StateWriteError::TooLarge => FlowError::TooLarge,
            StateWriteError::Storage(err) => FlowError::Storage(err),
        })
}

/// How many kinds the keys under `prefix` hold.
fn kinds(keys: &[String], prefix: &str) -> usize {
    let mut kinds: Vec<&str> = keys
        .iter()
        .filter_map(|k| k.strip_prefix(prefix)?.split('/').next())
        .collect();
    kinds.dedup();
    kinds.len()
}

/// The labels under `prefix`, oldest first.
fn read(snapshot: &dyn StateSnapshot, prefix: &str, limit: usize) -> Result<Vec<Label>, FlowError> {
    let keys = snapshot.keys(prefix, limit)?;
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let values = snapshot.get_many(&keys)?;
    let mut labels: Vec<Label> = values
        .into_iter()
        .flatten()
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    labels.sort_by_key(|l: &Label| l.at_ms);
    Ok(labels)
}

/// Every label in the store: sessions' and files', oldest first.
pub fn list(store: &crate::store::Store) -> Result<Vec<Label>> {
    let snapshot = store.state().state_snapshot(NAMESPACE)?;
    read(&*snapshot, "", MAX_LISTED).map_err(|err| Error::store(store.path(), err.to_string()))
}

/// Remove the labels `what` names; how many went.
pub fn clear(store: &crate::store::Store, what: &FlowsClear) -> Result<usize> {
    let prefix = match what {
        FlowsClear::Session(session) => format!("s/{}/", digest(session)),
        FlowsClear::File { owner, path } => file_prefix(owner, path),
        FlowsClear::All => String::new(),
    };
    let mut removed = 0;
    loop {
        let keys = store.state().state_keys(NAMESPACE, &prefix, MAX_LISTED)?;
        if keys.is_empty() {
            return Ok(removed);
        }
        for key in &keys {
            store
                .state()
                .state_put(NAMESPACE, key, None, QUOTA)
                .map_err(|err| Error::store(store.path(), err.to_string()))?;
        }
        removed += keys.len();
    }
}

/// A user's home directory by uid, from the user database.
fn home_of_uid(uid: u32) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 5 && fields[2].parse() == Ok(uid)).then(|| PathBuf::from(fields[5]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_short_kebab_case() {
        for good in ["secret", "untrusted", "pii-2"] {
            assert!(valid_kind(good), "{good}");
        }
        for bad in ["", "Secret", "a--b", "-a", "a b", &"x".repeat(33)] {
            assert!(!valid_kind(bad), "{bad}");
        }
    }

    #[test]
    fn paths_resolve_through_links_and_past_what_does_not_exist() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("project")).unwrap();
        std::fs::write(root.join("project/notes.txt"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("project/notes.txt"), root.join("link")).unwrap();
        let cwd = root.join("project");
        let real = |p: &str| real_path(Path::new(p), Some(&cwd)).unwrap();
        assert_eq!(real("notes.txt"), root.join("project/notes.txt"));
        assert_eq!(real("./notes.txt"), root.join("project/notes.txt"));
        assert_eq!(real("../link"), root.join("project/notes.txt"));
        assert_eq!(real("new/dir/../file"), root.join("project/new/file"));
        assert_eq!(
            real("/proc/self/cwd/notes.txt"),
            root.join("project/notes.txt")
        );
        assert!(real_path(Path::new("relative"), None).is_err());
        // `..` after a link climbs from where the link leads, not from
        // where it is written.
        std::fs::create_dir_all(root.join("other/sub")).unwrap();
        std::os::unix::fs::symlink(root.join("other/sub"), cwd.join("jump")).unwrap();
        assert_eq!(real("jump/../x"), root.join("other/x"));
        assert_eq!(real("jump/./y"), root.join("other/sub/y"));
    }

    #[test]
    fn labels_kept_between_evaluations_are_never_older_than_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(&dir.path().join("store.redb")).unwrap();
        let state = store.state();
        let cache = Arc::default();
        let mut request = crate::ToolRequest::new("Read", serde_json::json!({}));
        request.session_id = "s-1".into();
        request.cwd = Some(dir.path().to_path_buf());
        let first = FlowScope::of(&request, &cache);
        assert!(first.session_labels(state).unwrap().is_empty());
        assert!(first.file_labels(state, "notes.txt").unwrap().is_empty());
        first.label_session(state, "secret", ".env").unwrap();
        assert_eq!(first.session_labels(state).unwrap().len(), 1);
        // The next evaluation, through the same cache.
        let next = FlowScope::of(&request, &cache);
        next.label_file(state, "notes.txt", "secret", ".env")
            .unwrap();
        assert_eq!(next.file_labels(state, "notes.txt").unwrap().len(), 1);
        assert_eq!(next.session_labels(state).unwrap().len(), 1);
        // A person clears them.
        clear(&store, &FlowsClear::All).unwrap();
        let after = FlowScope::of(&request, &cache);
        assert!(after.session_labels(state).unwrap().is_empty());
        assert!(after.file_labels(state, "notes.txt").unwrap().is_empty());
    }

    #[test]
    fn the_project_is_the_working_directory_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("project")).unwrap();
        std::os::unix::fs::symlink(root.join("project"), root.join("via")).unwrap();
        let scope = |cwd: PathBuf| {
            let mut request = crate::ToolRequest::new("Read", serde_json::json!({}));
            request.cwd = Some(cwd);
            FlowScope::of(&request, &Arc::default())
        };
        for cwd in [root.join("project"), root.join("via"), root.join("via/.")] {
            let scope = scope(cwd.clone());
            let inside = scope.locate("notes.txt").unwrap();
            assert!(scope.in_project(&inside), "{cwd:?}");
            let outside = scope.locate("../elsewhere.txt").unwrap();
            assert!(!scope.in_project(&outside), "{cwd:?}");
        }
        // Asked first about a path outside, the project is still found.
        let scope = scope(root.join("via"));
        assert!(!scope.in_project(&scope.locate("/etc/hostname").unwrap()));
        assert!(scope.in_project(&scope.locate("src/lib.rs").unwrap()));
    }

    #[test]
    fn kinds_counts_each_kind_once() {
        let keys: Vec<String> = ["p/a/1", "p/a/2", "p/b/1"]
            .iter()
            .map(|k| k.to_string())
            .collect();
        assert_eq!(kinds(&keys, "p/"), 2);
    }
}
