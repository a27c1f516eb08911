//! What a path *is*, not how it is spelled: made absolute against the
//! directory the tool runs in, `/proc/…/root` and `/proc/self/cwd` read as
//! what they stand for, symlinks followed through the real filesystem, and
//! compared with the protected locations by their real paths and inodes,
//! so `/proc/self/root/home/dev/.claude/settings.json`, a symlink made in
//! an earlier call and a hard link all name what they point at.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Component, Path, PathBuf};

/// What each path one judgment has resolved is (`None`: it does not
/// exist), keyed by its bytes: a `Path` hashes and compares component by
/// component, which cost more than the lookups saved. (foldhash is seeded
/// per process: the keys are the agent's words.)
type Memo = HashMap<OsString, Option<Existing>, foldhash::fast::RandomState>;

thread_local! {
    /// The [`Memo`] of the judgment [`memoized`] runs.
    static CANONICAL: RefCell<Option<Memo>> = const { RefCell::new(None) };
    /// The working directories this thread's judgments ran in, resolved:
    /// see [`seed_working_directory`].
    static WORKING: RefCell<HashMap<OsString, Seen, foldhash::fast::RandomState>> =
        RefCell::new(HashMap::default());
}

/// How many paths one evaluation's memo keeps: a call names a few dozen;
/// a policy asking the host about thousands (through `flows`) has the rest
/// resolved each time rather than held.
const MEMO_KEPT: usize = 4096;

/// How many working directories a thread remembers (a daemon serves a few
/// projects; past this the memory starts over).
const WORKING_KEPT: usize = 64;

/// A working directory as an earlier judgment resolved it, and what
/// `stat` said of it then.
#[derive(Debug, Clone)]
struct Seen {
    existing: Existing,
    changed: (i64, i64),
}

/// A path that exists: its canonical form and the device and inode it
/// names (following symlinks).
#[derive(Debug, Clone)]
struct Existing {
    real: PathBuf,
    inode: (u64, u64),
}

/// Run `judge` with every path it resolves resolved once. One call's words
/// are resolved in the same few directories (a shell command's every word
/// against its working directory), and within one judgment the file
/// system is taken as it is at that moment, as it always was: remembering
/// what it said changes no answer, only how many system calls it takes.
///
/// `cwd`, the directory the call runs in, is seeded first. Within a
/// `memoized` already (a whole evaluation runs in one: the policies' flow
/// labels find the paths the guard resolved), `judge` shares its memo.
pub fn memoized<T>(cwd: Option<&Path>, judge: impl FnOnce() -> T) -> T {
    if CANONICAL.with(|memo| memo.borrow().is_some()) {
        return judge();
    }
    struct Forget;
    impl Drop for Forget {
        fn drop(&mut self) {
            CANONICAL.with(|memo| memo.borrow_mut().take());
        }
    }
    CANONICAL.with(|memo| *memo.borrow_mut() = Some(Memo::default()));
    let _forget = Forget;
    if let Some(cwd) = cwd.filter(|cwd| cwd.is_absolute()) {
        seed_working_directory(cwd);
    }
    judge()
}

/// Put `cwd`'s resolution in the judgment's memo at the cost of one `stat`
/// when an earlier judgment on this thread resolved it: a session's calls
/// run in one directory, and resolving it anew walks every one of its
/// ancestors (an `lstat` each). What was resolved then still holds when
/// `cwd` names the same directory, unchanged: the same device and inode
/// (a symlink swapped in names another) and the same status-change time
/// (renaming the directory, or reusing its inode number for a new one,
/// changes it). What this cannot see is an ancestor renamed with a symlink
/// left in its place: the same directory at another real path. Its words
/// are then judged where it was, which matters only if it moved into a
/// protected location — a move the judgment of it refuses.
fn seed_working_directory(cwd: &Path) {
    // The spelling `resolved` looks up: components joined again.
    let key: PathBuf = cwd.components().collect();
    let Ok(meta) = std::fs::metadata(&key) else {
        return;
    };
    let (inode, changed) = ((meta.dev(), meta.ino()), (meta.ctime(), meta.ctime_nsec()));
    let remembered = WORKING.with(|seen| {
        (seen.borrow().get(key.as_os_str()))
            .filter(|seen| seen.existing.inode == inode && seen.changed == changed)
            .map(|seen| seen.existing.clone())
    });
    match remembered {
        Some(existing) => CANONICAL.with(|memo| {
            if let Some(memo) = memo.borrow_mut().as_mut() {
                memo.insert(key.into_os_string(), Some(existing));
            }
        }),
        // Resolved (and memoized) the long way, and remembered.
        None => {
            if let Some(existing) = canonical(&key).filter(|found| found.inode == inode) {
                WORKING.with(|seen| {
                    let mut seen = seen.borrow_mut();
                    if seen.len() >= WORKING_KEPT {
                        seen.clear();
                    }
                    seen.insert(key.into_os_string(), Seen { existing, changed });
                });
            }
        }
    }
}

/// `path` (absolute) canonicalized by the kernel's rules, if it exists;
/// remembered while [`memoized`] runs. One `lstat` says whether it exists
/// and whether its last component is a symlink; when it is not, the
/// canonical form is its parent's (remembered: a call's words share their
/// directory) with the name appended, and only a symlink or a `..` costs
/// the kernel's whole walk.
fn canonical(path: &Path) -> Option<Existing> {
    if let Some(known) = CANONICAL
        .with(|memo| (memo.borrow().as_ref()).and_then(|m| m.get(path.as_os_str()).cloned()))
    {
        return known;
    }
    let resolve = || {
        let meta = std::fs::symlink_metadata(path).ok()?;
        let plain = match (path.parent(), path.file_name()) {
            _ if meta.is_symlink() => None,
            (Some(parent), Some(name)) if ends_with_name(path, name) => {
                canonical(parent).map(|parent| parent.real.join(name))
            }
            (None, None) if path == Path::new("/") => Some(path.to_path_buf()),
            _ => None,
        };
        match plain {
            Some(real) => Some(Existing {
                real,
                inode: (meta.dev(), meta.ino()),
            }),
            None => {
                let real = std::fs::canonicalize(path).ok()?;
                let inode = inode_of(&real)?;
                Some(Existing { real, inode })
            }
        }
    };
    let found = resolve();
    CANONICAL.with(|memo| {
        if let Some(memo) = memo.borrow_mut().as_mut()
            && memo.len() < MEMO_KEPT
        {
            memo.insert(path.as_os_str().to_owned(), found.clone());
        }
    });
    found
}

/// Whether `path`'s last component is `name` as written (not `.`, a
/// trailing `/` or a `..` that [`Path::file_name`] reads past), by bytes.
fn ends_with_name(path: &Path, name: &OsStr) -> bool {
    let (path, name) = (path.as_os_str().as_bytes(), name.as_bytes());
    path.ends_with(name) && path[..path.len() - name.len()].ends_with(b"/")
}

/// A protected location, by what it is.
#[derive(Debug, Clone)]
pub struct Protected {
    /// Its real path (the lexical one where it does not exist yet).
    pub real: PathBuf,
    /// Its device and inode, when it exists: a hard link elsewhere is the
    /// same file.
    pub inode: Option<(u64, u64)>,
    /// Whether everything under it is protected too (a directory), or
    /// only it and the names that start with it (`STORE.sock`, …).
    pub kind: Kind,
}

/// How a protected location covers what is near it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The path and everything under it.
    Tree,
    /// The path, everything under it, and every sibling whose name starts
    /// with its name (the store's socket, lock and log files).
    Prefix,
}

impl Protected {
    /// `path` as it is now on disk.
    pub fn new(path: &Path, kind: Kind) -> Self {
        let real = real_path(path, None).unwrap_or_else(|| path.to_path_buf());
        let inode = std::fs::metadata(&real).ok().map(|m| (m.dev(), m.ino()));
        Self { real, inode, kind }
    }

    /// Whether the real path `path` is this location or under it.
    pub fn covers(&self, path: &Path) -> bool {
        if under(path, &self.real) {
            return true;
        }
        self.kind == Kind::Prefix
            && path.parent() == self.real.parent()
            && match (path.file_name(), self.real.file_name()) {
                (Some(name), Some(ours)) => {
                    name.as_encoded_bytes().starts_with(ours.as_encoded_bytes())
                }
                _ => false,
            }
    }
}

/// Whether `path` is `base` or under it, both absolute and normal (as
/// [`real_path`] makes them): [`Path::starts_with`] by bytes, which a
/// judgment asks of every word and every protected location.
pub fn under(path: &Path, base: &Path) -> bool {
    let (path, base) = (path.as_os_str().as_bytes(), base.as_os_str().as_bytes());
    path.starts_with(base)
        && (path.len() == base.len() || base.ends_with(b"/") || path[base.len()] == b'/')
}

/// The device and inode `path` names now (following symlinks), if it exists.
pub fn inode_of(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `path` made absolute against `cwd` and resolved through the real
/// filesystem as far as it exists; the rest is appended lexically. `None`
/// for a relative path without a `cwd`.
pub fn real_path(path: &Path, cwd: Option<&Path>) -> Option<PathBuf> {
    resolved(path, cwd).map(|(real, _)| real)
}

/// [`real_path`], and the device and inode it names when all of it exists
/// (the rest was not appended lexically).
pub fn resolved(path: &Path, cwd: Option<&Path>) -> Option<(PathBuf, Option<(u64, u64)>)> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd?.join(path)
    };
    let absolute = through_proc(&absolute, cwd);
    // The longest prefix that exists, resolved by the kernel's rules, then
    // the rest lexically.
    let parts: Vec<Component<'_>> = absolute.components().collect();
    if let Some((keep, existing)) = longest_existing(&parts) {
        if keep == parts.len() {
            return Some((existing.real, Some(existing.inode)));
        }
        let mut real = existing.real;
        for part in &parts[keep..] {
            match part {
                Component::ParentDir => {
                    real.pop();
                }
                Component::Normal(name) => real.push(name),
                _ => {}
            }
        }
        return Some((real, None));
    }
    Some((absolute, None))
}

/// The longest prefix of `parts` that exists (how many parts, and what it
/// is). Under what does not exist nothing does, so after the whole path
/// and its parent (a word's usual answers) a binary search finds it: a
/// deep path that does not exist (a text of ever deeper `cd`s) costs a few
/// lookups, not one per component.
fn longest_existing(parts: &[Component<'_>]) -> Option<(usize, Existing)> {
    let prefix = |keep: usize| parts[..keep].iter().collect::<PathBuf>();
    let n = parts.len();
    for keep in [n, n.saturating_sub(1)] {
        if keep > 0
            && let Some(existing) = canonical(&prefix(keep))
        {
            return Some((keep, existing));
        }
    }
    // Known: nothing exists from `missing` parts on; `found` exists.
    let (mut found, mut missing) = (None, n.saturating_sub(1));
    let mut low = 0;
    while missing - low > 1 {
        let middle = (low + missing) / 2;
        match canonical(&prefix(middle)) {
            Some(existing) => {
                low = middle;
                found = Some((middle, existing));
            }
            None => missing = middle,
        }
    }
    found
}

/// A directory a call's words are resolved in, resolved once: a shell
/// text's every relative word is judged in every directory it may run in,
/// and resolving the directory anew for each word cost time quadratic in
/// its depth (20 s for a 10 KB script of ever deeper `cd`s).
#[derive(Debug, Clone)]
pub struct Place {
    /// Its real path (lexical past what exists).
    pub real: PathBuf,
    /// Whether all of it exists. Under a directory that does not, nothing
    /// does: a word is appended lexically, with no system call.
    exists: bool,
}

impl Place {
    /// `dir` (absolute, or relative to `cwd`; `/proc/self/cwd` is `cwd`).
    /// A relative `dir` without a `cwd` is known only by its spelling.
    pub fn new(dir: &Path, cwd: Option<&Path>) -> Self {
        match resolved(dir, cwd) {
            Some((real, inode)) => Self {
                real,
                exists: inode.is_some(),
            },
            None => Self {
                real: dir.to_path_buf(),
                exists: false,
            },
        }
    }

    /// Whether all of it exists.
    pub fn exists(&self) -> bool {
        self.exists
    }

    /// The directory holding this one (itself at the root).
    pub fn parent(&self) -> Self {
        let real = self.real.parent().unwrap_or(&self.real).to_path_buf();
        let exists = self.exists || canonical(&real).is_some();
        Self { real, exists }
    }

    /// [`resolved`] of `word` in this directory.
    pub fn resolve(&self, word: &Path) -> Option<(PathBuf, Option<(u64, u64)>)> {
        if self.exists || word.is_absolute() {
            return resolved(word, Some(&self.real));
        }
        let mut real = self.real.clone();
        for part in word.components() {
            match part {
                Component::ParentDir => {
                    real.pop();
                }
                Component::Normal(name) => real.push(name),
                _ => {}
            }
        }
        Some((real, None))
    }
}

/// `/proc/PID/root/…` is `/…` (toolgate assumes no chroot), and
/// `/proc/self/cwd/…` the tool's own directory. (Other processes' `/proc`
/// links the real filesystem answers, where it lets the daemon read them.)
pub(crate) fn through_proc(path: &Path, cwd: Option<&Path>) -> PathBuf {
    let mut parts = path.components();
    let [
        Some(Component::RootDir),
        Some(Component::Normal(proc)),
        Some(Component::Normal(pid)),
        Some(Component::Normal(link)),
    ] = [parts.next(), parts.next(), parts.next(), parts.next()]
    else {
        return path.to_path_buf();
    };
    if proc != "proc" {
        return path.to_path_buf();
    }
    let rest = parts.as_path();
    let own = pid == "self" || pid == "thread-self";
    match (link.to_str(), cwd) {
        (Some("root"), _) => Path::new("/").join(rest),
        (Some("cwd"), Some(cwd)) if own => through_proc(&cwd.join(rest), None),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_repeated_slashes_and_proc_root_are_what_they_stand_for() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("conf")).unwrap();
        let target = real.join("conf/toolgate.toml");
        std::fs::write(&target, "x").unwrap();
        for spelling in [
            format!("{}/conf/./toolgate.toml", real.display()),
            format!("{}//conf///toolgate.toml", real.display()),
            format!("{}/conf/../conf/toolgate.toml", real.display()),
            format!("/proc/self/root{}/conf/toolgate.toml", real.display()),
            format!("/proc/1/root{}/conf/toolgate.toml", real.display()),
        ] {
            assert_eq!(
                real_path(Path::new(&spelling), None).unwrap(),
                target,
                "{spelling}"
            );
        }
        assert_eq!(
            real_path(
                Path::new("/proc/self/cwd/toolgate.toml"),
                Some(&real.join("conf"))
            )
            .unwrap(),
            target
        );
        assert_eq!(
            real_path(Path::new("toolgate.toml"), Some(&real.join("conf"))).unwrap(),
            target
        );
    }

    #[test]
    fn symlinks_and_hard_links_name_what_they_point_at() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("conf")).unwrap();
        std::fs::write(real.join("conf/toolgate.toml"), "x").unwrap();
        std::os::unix::fs::symlink(real.join("conf"), real.join("link")).unwrap();
        std::fs::hard_link(real.join("conf/toolgate.toml"), real.join("hard")).unwrap();
        let protected = Protected::new(&real.join("conf"), Kind::Tree);
        let via_link = real_path(&real.join("link/toolgate.toml"), None).unwrap();
        assert!(protected.covers(&via_link), "{}", via_link.display());
        let file = Protected::new(&real.join("conf/toolgate.toml"), Kind::Tree);
        assert_eq!(inode_of(&real.join("hard")), file.inode);
        // Not yet existing below a symlink: resolved as far as it exists.
        let new = real_path(&real.join("link/new.toml"), None).unwrap();
        assert_eq!(new, real.join("conf/new.toml"));
    }

    /// `real_path("x", cwd)` in a judgment of its own, as the guard asks it.
    fn judged(cwd: &Path) -> PathBuf {
        memoized(Some(cwd), || real_path(Path::new("x"), Some(cwd)).unwrap())
    }

    #[test]
    fn a_remembered_working_directory_is_resolved_anew_once_it_names_another() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        for name in ["one", "two", "three"] {
            std::fs::create_dir(real.join(name)).unwrap();
        }
        // A symlink the agent runs in, pointed elsewhere between calls.
        let link = real.join("link");
        std::os::unix::fs::symlink(real.join("one"), &link).unwrap();
        assert_eq!(judged(&link), real.join("one/x"));
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(real.join("two"), &link).unwrap();
        assert_eq!(judged(&link), real.join("two/x"));
        // A directory renamed away and another put in its place, as the
        // same spelling.
        let place = real.join("place");
        std::fs::create_dir(&place).unwrap();
        assert_eq!(judged(&place), place.join("x"));
        std::fs::rename(&place, real.join("three/moved")).unwrap();
        std::os::unix::fs::symlink(real.join("three/moved"), &place).unwrap();
        assert_eq!(judged(&place), real.join("three/moved/x"));
        // The same directory, unchanged, is what it was.
        assert_eq!(judged(&place), real.join("three/moved/x"));
    }
}
