//! Paths as the rules see them, and the globs that match them.
//!
//! The policy does not know the home directory or the working directory of
//! the call, so a path is judged by its shape: `~/x`, `$HOME/x`,
//! `/home/NAME/x`, `/Users/NAME/x` and `/root/x` are all "x in a home
//! directory"; a relative path is in the project; `..` climbs out of it.

/// A path glob: `*` matches within one segment, `**` any number of
/// segments. `~/…` is any home directory; a glob with no leading `/` or
/// `~` matches at any depth (`.env` matches `app/.env`).
#[derive(Debug, Clone)]
pub struct PathGlob {
    segments: Vec<String>,
    /// What the last segment asks of a path's own name.
    name: NameTest,
    /// Anchored at a home directory (`~/…`) or the root (`/…`).
    anchor: Anchor,
    /// Whether a segment is `**`; without one, the glob matches exactly
    /// as many segments as it has.
    deep: bool,
}

/// Where a glob starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    Home,
    Root,
    Anywhere,
}

/// What a glob's last segment asks of a path's own name, compiled: a path
/// meets dozens of globs, and most cost it a comparison or two.
#[derive(Debug, Clone)]
enum NameTest {
    /// `**`, or no segment at all: the rest of the glob decides.
    Any,
    /// A plain name.
    Exact(String),
    /// Literal text around one `*`: `*.pem`, `id_*`, `privkey*.pem`.
    Affixes { prefix: String, suffix: String },
    /// Anything else (`?`, several `*`).
    Pattern(String),
}

impl NameTest {
    fn new(last: Option<&str>) -> Self {
        let Some(last) = last.filter(|last| *last != "**") else {
            return Self::Any;
        };
        if last.contains('?') || last.matches('*').count() > 1 {
            return Self::Pattern(last.to_string());
        }
        match last.split_once('*') {
            Some((prefix, suffix)) => Self::Affixes {
                prefix: prefix.to_string(),
                suffix: suffix.to_string(),
            },
            None => Self::Exact(last.to_string()),
        }
    }

    /// Whether `name` passes, as [`glob_one`] would say.
    fn matches(&self, name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Exact(exact) => exact == name,
            // A leading dot is matched only by a literal one.
            Self::Affixes { prefix, suffix } => {
                let (name, prefix, suffix) =
                    (name.as_bytes(), prefix.as_bytes(), suffix.as_bytes());
                name.len() >= prefix.len() + suffix.len()
                    && same(&name[..prefix.len()], prefix)
                    && same(&name[name.len() - suffix.len()..], suffix)
                    && (prefix.first() == Some(&b'.') || name.first() != Some(&b'.'))
            }
            Self::Pattern(pattern) => glob_one(pattern.as_bytes(), name.as_bytes()),
        }
    }
}

impl PathGlob {
    /// Compile `pattern`.
    pub fn new(pattern: &str) -> Self {
        let (anchor, rest) = if let Some(rest) = pattern.strip_prefix("~/") {
            (Anchor::Home, rest)
        } else if pattern == "~" {
            (Anchor::Home, "")
        } else if let Some(rest) = pattern.strip_prefix('/') {
            (Anchor::Root, rest)
        } else {
            (Anchor::Anywhere, pattern)
        };
        let segments: Vec<String> = split(rest).map(str::to_string).collect();
        Self {
            deep: segments.iter().any(|s| s == "**"),
            name: NameTest::new(segments.last().map(String::as_str)),
            segments,
            anchor,
        }
    }

    /// The plain name the glob's last segment is (no wildcard), if so: it
    /// then matches only paths of that name.
    pub fn last_name(&self) -> Option<&str> {
        match &self.name {
            NameTest::Exact(name) => Some(name),
            _ => None,
        }
    }

    /// Where it starts: a path elsewhere never matches it.
    pub(crate) fn anchor(&self) -> Anchor {
        self.anchor
    }

    /// Whether `path` (as a call spells it) matches.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_read(&PathRead::new(path))
    }

    /// Whether the path read once by [`PathRead::new`] matches: a call's
    /// path meets dozens of globs, and is split only once for them all.
    pub fn matches_read(&self, path: &PathRead) -> bool {
        // A glob consumes the whole path: its last segment (unless `**`)
        // is the path's last, which rules most globs out at once.
        if let Some(name) = path.name()
            && !self.name.matches(name)
        {
            return false;
        }
        // A glob anchored where the path is not cannot match (and most
        // `~/…/**` globs meet project paths): no segments copied out.
        if !path.is_at(self.anchor) {
            return false;
        }
        let segments: Vec<&str> = path.segments().collect();
        let segments = segments.as_slice();
        match self.anchor {
            Anchor::Home => (path.home_depth)
                .is_some_and(|depth| glob_segments(&self.segments, &segments[depth..])),
            Anchor::Root => path.normal.starts_with('/') && glob_segments(&self.segments, segments),
            // `**/x` already matches at any depth.
            Anchor::Anywhere if self.segments.first().is_some_and(|s| s == "**") => {
                glob_segments(&self.segments, segments)
            }
            // Without `**` a glob matches exactly as many segments as it
            // has: only the path's last ones can match it.
            Anchor::Anywhere if !self.deep => segments
                .len()
                .checked_sub(self.segments.len())
                .is_some_and(|start| glob_segments(&self.segments, &segments[start..])),
            Anchor::Anywhere => {
                (0..=segments.len()).any(|start| glob_segments(&self.segments, &segments[start..]))
            }
        }
    }
}

/// A path as a call spells it, read once for many globs.
#[derive(Debug, Clone)]
pub struct PathRead {
    normal: String,
    /// Where each segment lies in `normal` (most globs are ruled out by the
    /// last segment alone, so the others are not copied out).
    segments: Vec<std::ops::Range<usize>>,
    /// How many leading segments are the home directory, if in one.
    home_depth: Option<usize>,
}

impl PathRead {
    /// Read `path`.
    pub fn new(path: &str) -> Self {
        let normal = normal(path);
        let base = normal.as_ptr() as usize;
        let segments: Vec<std::ops::Range<usize>> = split(&normal)
            .map(|segment| {
                let start = segment.as_ptr() as usize - base;
                start..start + segment.len()
            })
            .collect();
        let mut read = Self {
            normal,
            segments,
            home_depth: None,
        };
        // Whether in a home depends on the first two segments at most.
        let mut first = [""; 2];
        let mut count = 0;
        for (slot, segment) in first.iter_mut().zip(read.segments()) {
            *slot = segment;
            count += 1;
        }
        let first = &first[..count];
        read.home_depth = home_relative(&read.normal, first).map(|rest| count - rest.len());
        read
    }

    fn segments(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().map(|at| &self.normal[at.clone()])
    }

    /// Whether a glob anchored at `anchor` could match it.
    pub(crate) fn is_at(&self, anchor: Anchor) -> bool {
        match anchor {
            Anchor::Home => self.home_depth.is_some(),
            Anchor::Root => self.normal.starts_with('/'),
            Anchor::Anywhere => true,
        }
    }

    /// The last segment: the file's own name.
    pub fn name(&self) -> Option<&str> {
        self.segments.last().map(|at| &self.normal[at.clone()])
    }
}

/// `$HOME/x` and `${HOME}/x` as `~/x`; `./x` as `x`; repeated slashes as
/// one; `a/../b` as `b` (a `..` with nothing left to climb is kept:
/// `../x` leaves the project).
pub fn normal(path: &str) -> String {
    let flat = flat(path);
    if !has_pair(&flat, b'.') {
        return flat;
    }
    let (root, rest) = match flat.strip_prefix('/') {
        Some(rest) => ("/", rest),
        None => match flat.strip_prefix("~/") {
            Some(rest) => ("~/", rest),
            None => ("", flat.as_str()),
        },
    };
    let mut kept: Vec<&str> = Vec::new();
    for segment in rest.split('/') {
        match segment {
            ".." if kept.last().is_some_and(|last| *last != "..") => {
                kept.pop();
            }
            // Above the root is the root; above the home, its parent.
            ".." if root == "/" => {}
            ".." if root == "~/" => return format!("~/{rest}"),
            segment => kept.push(segment),
        }
    }
    format!("{root}{}", kept.join("/"))
}

fn flat(path: &str) -> String {
    // Most paths are already flat: copied as they are.
    let plain = !path.starts_with(['$', '.'])
        && !has_pair(path, b'/')
        && (path.len() <= 1 || !path.ends_with('/'));
    match plain {
        true => path.to_string(),
        false => flatten(path),
    }
}

/// [`flat`] the long way, for any path.
fn flatten(path: &str) -> String {
    let (home, path) = match path
        .strip_prefix("$HOME")
        .or_else(|| path.strip_prefix("${HOME}"))
    {
        Some(rest) => ("~", rest),
        None => ("", path),
    };
    let mut out = String::with_capacity(home.len() + path.len());
    out.push_str(home);
    let mut last_slash = false;
    for c in path.chars() {
        if c == '/' && last_slash {
            continue;
        }
        last_slash = c == '/';
        out.push(c);
    }
    let dots = out.len() - strip_dot_slashes(&out).len();
    out.drain(..dots);
    if out.len() > 1 {
        out.truncate(out.trim_end_matches('/').len());
    }
    out
}

/// `text` without its leading `./`s.
fn strip_dot_slashes(mut text: &str) -> &str {
    while let Some(rest) = text.strip_prefix("./") {
        text = rest;
    }
    text
}

fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty() && *s != ".")
}

/// The segments after the home directory, if `path` is in one.
fn home_relative<'p>(path: &str, segments: &'p [&'p str]) -> Option<&'p [&'p str]> {
    if path == "~" || path.starts_with("~/") {
        return Some(&segments[1..]);
    }
    if !path.starts_with('/') {
        return None;
    }
    match segments {
        ["root", rest @ ..] => Some(rest),
        ["home" | "Users", _user, rest @ ..] => Some(rest),
        _ => None,
    }
}

/// Whether the path is the home directory, the root, or a top-level
/// directory: somewhere that holds far more than a project.
pub fn is_broad(path: &str) -> bool {
    let path = normal(path);
    let segments: Vec<&str> = split(&path).collect();
    if path.starts_with('/') {
        return segments.len() <= 1 || home_relative(&path, &segments).is_some_and(<[_]>::is_empty);
    }
    path == "~"
}

/// Whether `path` leaves the project: absolute, in a home directory, or
/// climbing out with `..`.
pub fn outside_project(path: &str) -> bool {
    let path = normal(path);
    path.starts_with('/') || path.starts_with('~') || path == ".." || path.starts_with("../")
}

fn glob_segments(pattern: &[String], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=path.len()).any(|skip| glob_segments(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((segment, path_rest)) => {
                glob_one(first.as_bytes(), segment.as_bytes()) && glob_segments(rest, path_rest)
            }
            None => false,
        },
    }
}

/// Whether `text` has `byte` twice in a row (`..`, `//`): a path is
/// looked at this way for each of its readings, and a substring search
/// costs far more.
fn has_pair(text: &str, byte: u8) -> bool {
    text.as_bytes()
        .windows(2)
        .any(|w| w[0] == byte && w[1] == byte)
}

/// Whether two short texts are the same, byte by byte: most affixes are a
/// few bytes, shorter than a call to `memcmp` is worth.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// `*` and `?` within one segment; a leading `.` is matched only by a
/// literal dot, as the shell does.
fn glob_one(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        // A `*` is a wildcard even against a `*` in the name.
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path of up to five characters over those that flattening
    /// looks at: the copy of a plain path is what flattening makes of it.
    #[test]
    fn plain_paths_are_flat_already() {
        let alphabet = ["a", "/", ".", "$", "~", "$HOME", "${HOME}"];
        let mut paths = vec![String::new()];
        let mut last = paths.clone();
        for _ in 0..5 {
            last = (last.iter())
                .flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}")))
                .collect();
            paths.extend(last.iter().cloned());
        }
        for path in &paths {
            assert_eq!(flat(path), flatten(path), "{path:?}");
        }
    }

    /// The packs' last segments (and some harder ones) against names made
    /// from them: the compiled test says what the general matcher says.
    #[test]
    fn name_tests_agree_with_the_general_matcher() {
        let packs: std::collections::BTreeMap<String, serde_json::Value> =
            serde_json::from_str(crate::PACKS).expect("JSON");
        let text = serde_json::to_string(&packs).expect("JSON");
        let mut patterns: Vec<String> = text
            .split('"')
            .filter(|s| s.contains('/') || s.contains('*') || s.starts_with('.'))
            .filter_map(|glob| glob.rsplit('/').next().map(String::from))
            .collect();
        patterns.extend(["*", "?x", "a*b*c", ".*", "*.", "x*", "*x*"].map(String::from));
        let mut names: Vec<String> = [
            "",
            ".",
            "..",
            "x",
            ".x",
            "lib.rs",
            ".env",
            ".env.local",
            "a.pem",
            ".pem",
            "id_rsa",
        ]
        .map(String::from)
        .to_vec();
        // Names holding the wildcards themselves.
        names.extend(["*", "*.", "*x.pem", "a*b", "?", ".*x"].map(String::from));
        for pattern in &patterns {
            for fill in ["", "x", ".x", "ab"] {
                names.push(pattern.replace(['*', '?'], fill));
                names.push(format!(".{}", pattern.replace(['*', '?'], fill)));
            }
        }
        for pattern in patterns.iter().filter(|p| *p != "**") {
            let test = NameTest::new(Some(pattern));
            for name in &names {
                let general = glob_one(pattern.as_bytes(), name.as_bytes());
                assert_eq!(test.matches(name), general, "{pattern:?} against {name:?}");
            }
        }
    }

    #[test]
    fn home_globs_match_every_spelling_of_a_home() {
        let keys = PathGlob::new("~/.ssh/id_*");
        for path in [
            "~/.ssh/id_rsa",
            "$HOME/.ssh/id_ed25519",
            "/home/alice/.ssh/id_rsa",
            "/Users/bob/.ssh/id_rsa",
            "/root/.ssh//id_rsa",
        ] {
            assert!(keys.matches(path), "{path}");
        }
        for path in ["/etc/.ssh/id_rsa", ".ssh/id_rsa", "~/.ssh/known_hosts"] {
            assert!(!keys.matches(path), "{path}");
        }
    }

    #[test]
    fn unanchored_globs_match_at_any_depth() {
        let env = PathGlob::new(".env");
        assert!(env.matches(".env"));
        assert!(env.matches("./app/.env"));
        assert!(env.matches("/home/a/p/.env"));
        assert!(!env.matches(".envrc"));
        // A name holding a literal `*` is still a name the glob's `*` covers.
        let keys = PathGlob::new("*.pem");
        assert!(keys.matches("*x.pem") && keys.matches("a*b.pem") && keys.matches("*.pem"));
        assert!(PathGlob::new("id_*").matches("id_*rsa"));
        let any = PathGlob::new("**/node_modules");
        assert!(any.matches("node_modules"));
        assert!(any.matches("web/node_modules"));
        assert!(!PathGlob::new("*").matches(".git"));
        // Several segments, anywhere: the path's last ones.
        let keys = PathGlob::new("certs/private/*.pem");
        assert!(keys.matches("/srv/app/certs/private/server.pem"));
        assert!(keys.matches("certs/private/a.pem"));
        assert!(!keys.matches("certs/private/a.pem/b"));
        assert!(!keys.matches("private/a.pem"));
        let deep = PathGlob::new("**/private/**");
        assert!(deep.matches("a/private/b/c.pem") && deep.matches("private"));
        assert!(PathGlob::new("~/.gnupg/**").matches("/home/a/.gnupg/x/y"));
    }

    #[test]
    fn rooted_globs_and_the_temporary_directory() {
        let tmp = PathGlob::new("/tmp/**");
        assert!(tmp.matches("/tmp/build"));
        assert!(tmp.matches("/tmp/*"));
        assert!(tmp.matches("/tmp"));
        assert!(!tmp.matches("tmp/x"));
        assert!(is_broad("/"));
        assert!(is_broad("~"));
        assert!(is_broad("/home/alice/"));
        assert!(is_broad("/etc"));
        assert!(!is_broad("/etc/nginx"));
        assert!(outside_project("../x"));
        assert!(outside_project("node_modules/../.."));
        assert_eq!(normal("/tmp/x/../../home/u/work"), "/home/u/work");
        assert!(!tmp.matches("/tmp/x/../../home/u/work"));
        assert!(!outside_project("./src/x"));
    }
}
