//! Shell text read as the shell would read it, without running any of it:
//! commands split at control operators, each word with its quotes removed
//! and the expansions that need no execution done (`~`, `~user`, `$HOME`,
//! `$PWD`, variables assigned earlier in the same text, brace expansion),
//! `cd` followed so relative words resolve where the shell would, and the
//! text of `sh -c`, `eval` and command substitutions read the same way.
//!
//! Tokens and word pieces come from `brush-parser`, a POSIX/bash parser:
//! `tool''gate.toml`, `"settings".json`, `$'\x74oolgate'` and
//! `~/.claude/./settings.json` are then the words they are to the shell.
//! What only running could tell (`$(…)`'s output, other variables,
//! arithmetic) is an [`Word::Unknown`], left to the text checks.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use brush_parser::word::{self, BraceExpressionMember, BraceExpressionOrText, WordPiece};
use brush_parser::{ParserOptions, Token};

use super::resolve;
use crate::hooks::path_text;

/// How deep `sh -c`, `eval` and `$(…)` are followed.
const MAX_DEPTH: usize = 4;
/// The most words a brace expansion yields before the rest is unknown.
const MAX_ALTERNATIVES: usize = 256;
/// The most `{` a word may hold open at once (outside quotes, not `${`):
/// brush-parser's brace parser takes time exponential in them.
const MAX_OPEN_BRACES: usize = 6;
/// The most digits in a row inside a brace: brush-parser panics on a
/// number that does not fit an `i64` there.
const MAX_BRACE_DIGITS: usize = 18;
/// The most distinct variables a text may set: each command carries their
/// names, so without a bound a text of many `Aᵢ=1 x;` costs quadratic time.
const MAX_ASSIGNED: usize = 64;
/// The most distinct directories a text may run in (where it starts and
/// every `cd`/`pushd` target): each relative word is judged in each, so a
/// text of ever deeper `cd`s would cost time quadratic in its length.
const MAX_DIRS: usize = 256;
/// The most places a `cd` may really have put the shell at once besides
/// its logical directory (each `cd -P` through a symlink may add one).
const MAX_ELSEWHERE: usize = 16;
/// The most existing directories a text may `cd` into (or leave the shell
/// in when a `cd` fails): each later `cd` lands from each of them.
const MAX_BEEN: usize = 128;
/// Reserved words a simple command may follow (`then export …`, `do
/// cmd`): the command proper starts after them.
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time",
];
/// Builtins that set the variables they name (`read NAME`, `printf -v
/// NAME`, `export NAME`), each may then be exported.
const SETTERS: &[&str] = &[
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
    "read",
    "mapfile",
    "readarray",
];
/// Shells whose `-c` text is itself read.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"];

/// One simple command, as far as it is known without running anything.
/// Two that are equal are judged alike (a text repeating one is judged
/// once for it).
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct Command {
    /// Its words after the assignments, and the targets of its
    /// redirections: each a literal (with every brace alternative) or
    /// unknown.
    pub words: Vec<Word>,
    /// The directory it runs in, if known.
    pub cwd: Option<Arc<Path>>,
    /// `NAME=` for each variable the text sets before or on it (its own
    /// `NAME=value` prefix, an earlier `NAME=value;`, `export`,
    /// `declare`): what it may find changed in its environment, whatever
    /// the value. Shared by the commands that follow the same assignments.
    pub env: Arc<[String]>,
    /// Whether the text set, before it, a variable whose name is known only
    /// when it runs (`export "$(…)"`, `declare -x $NAME=1`): any variable
    /// may then be changed.
    pub env_unknown: bool,
}

impl Command {
    /// The literal words' file names (`/bin/rm` is `rm`).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        (self.words.iter().flat_map(Word::literals)).map(|w| path_text::file_name(w).unwrap_or(w))
    }
}

/// One word of a command.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Word {
    /// What the shell would pass: one string, or several after brace
    /// expansion. Globs are not expanded here (the caller matches them
    /// against the filesystem).
    Literal(Vec<String>),
    /// Needs execution to know.
    Unknown,
}

impl Word {
    /// Its literal values (none if unknown).
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        match self {
            Word::Literal(all) => all.as_slice(),
            Word::Unknown => &[],
        }
        .iter()
        .map(String::as_str)
    }
}

/// What a word's expansion may use: the home directory and the user
/// database for `~user`.
pub struct Env<'a> {
    /// `$HOME` and `~`.
    pub home: Option<&'a Path>,
    /// The directory the text runs in.
    pub cwd: Option<&'a Path>,
}

/// What shell text does, as far as it can be known without running it.
#[derive(Debug, Default)]
pub struct Reading {
    /// Its simple commands.
    pub commands: Vec<Command>,
    /// Every directory any of its commands may run in, each once: the one
    /// it starts in and every `cd`/`pushd` target. A relative word is
    /// judged against each (a `cd` that fails, `cd -`, `popd`, a subshell,
    /// a loop or a function leaves the shell in one of them).
    pub dirs: Vec<PathBuf>,
    /// Where a `cd` may really have put the shell besides the logical
    /// directory its commands carry: through a symlink, as `cd -P` (or
    /// `set -P`) follows it (`cd -P link/..`), and every `cd` from there
    /// on, logical or not.
    pub elsewhere: Vec<PathBuf>,
}

/// The reading of `text`, or why it cannot be read: not shell syntax the
/// parser reads (an unterminated quote or here-document), or past a limit
/// (nesting, brace alternatives). The caller refuses such text: what it
/// cannot follow it cannot clear.
pub fn commands(text: &str, env: &Env<'_>) -> Result<Reading, String> {
    let mut reading = Reading::default();
    reading.dirs.extend(env.cwd.map(Path::to_path_buf));
    let mut reader = Reader {
        env,
        vars: HashMap::new(),
        assigned: Vec::new(),
        env_now: Arc::from([]),
        names_unknown: false,
        out: &mut reading,
        unreadable: None,
        elsewhere: Vec::new(),
        been: env.cwd.map(Path::to_path_buf).into_iter().collect(),
    };
    reader.read(text, env.cwd.map(Arc::from), 0);
    match reader.unreadable {
        Some(why) => Err(why),
        None => Ok(reading),
    }
}

struct Reader<'e, 'o> {
    env: &'e Env<'e>,
    /// `NAME=literal` assignments seen so far.
    vars: HashMap<String, String>,
    /// `NAME=` for every variable assigned so far, literal or not.
    assigned: Vec<String>,
    /// `assigned` as the commands read from here on carry it.
    env_now: Arc<[String]>,
    /// Whether a variable whose name is known only at run time was set.
    names_unknown: bool,
    out: &'o mut Reading,
    /// Why the text cannot be followed, once that is known.
    unreadable: Option<String>,
    /// Where the last `cd` may really have put the shell besides its
    /// logical directory (a symlink followed or not, in either order).
    elsewhere: Vec<PathBuf>,
    /// Every existing directory the shell may have been in so far: where
    /// a `cd` that fails (`cd /nowhere`), a subshell's that is undone,
    /// `popd` or `cd -` leave it, so where any later `cd` may start.
    been: Vec<PathBuf>,
}

impl Reader<'_, '_> {
    /// Read `text` that a command of this text (at `depth`) runs in a
    /// shell of its own (`sh -c`, `$(…)`, `eval`, `env -S`): its `cd`s
    /// move that shell, not this one.
    fn read_nested(&mut self, text: &str, cwd: Option<Arc<Path>>, depth: usize) {
        let elsewhere = self.elsewhere.clone();
        self.read(text, cwd, depth + 1);
        self.elsewhere = elsewhere;
    }

    fn read(&mut self, text: &str, cwd: Option<Arc<Path>>, depth: usize) {
        if depth > MAX_DEPTH {
            self.unreadable = Some(format!(
                "nested deeper than {MAX_DEPTH} shells or substitutions"
            ));
            return;
        }
        let tokens = match tokens(text) {
            Ok(tokens) => tokens,
            Err(err) => {
                self.unreadable = Some(format!("not shell syntax it can read: {err}"));
                return;
            }
        };
        let mut cwd = cwd;
        let mut current = Command {
            cwd: cwd.clone(),
            ..Command::default()
        };
        let mut raw: Vec<String> = Vec::new(); // the current command's raw words
        let mut redirect_next = false;
        for token in tokens {
            if self.unreadable.is_some() {
                return; // refused whatever follows
            }
            match token {
                Tok::Operator(op) if is_redirect(&op) => redirect_next = true,
                Tok::Operator(_) => {
                    cwd = self.finish(std::mem::take(&mut current), &raw, cwd, depth);
                    raw.clear();
                    current.cwd = cwd.clone();
                    redirect_next = false;
                }
                Tok::Word(text) => {
                    // Leading assignments: remembered, not words.
                    if !redirect_next
                        && raw.iter().all(|w| RESERVED.contains(&w.as_str()))
                        && let Some((name, value)) = assignment(&text)
                    {
                        self.assign(name);
                        let Some(value) = value else {
                            self.vars.remove(name);
                            continue;
                        };
                        if let Word::Literal(values) = self.word(value, cwd.as_deref(), depth) {
                            if let [one] = values.as_slice() {
                                self.vars.insert(name.to_string(), one.clone());
                            }
                        } else {
                            self.vars.remove(name);
                        }
                        continue;
                    }
                    redirect_next = false;
                    let word = self.word(&text, cwd.as_deref(), depth);
                    current.words.push(word);
                    raw.push(text);
                }
            }
        }
        self.finish(current, &raw, cwd, depth);
    }

    /// Record `command`, read the text it hands to a shell, and return the
    /// directory the next command runs in.
    fn finish(
        &mut self,
        command: Command,
        raw: &[String],
        cwd: Option<Arc<Path>>,
        depth: usize,
    ) -> Option<Arc<Path>> {
        let simple = Simple::of(&command.words, raw);
        let mut next_cwd = cwd.clone();
        match simple.name() {
            Some("cd" | "pushd") => {
                if let Some(target) = self.cd(&simple) {
                    next_cwd = (self.move_to(&target, cwd.as_deref()).map(Arc::from)).or(next_cwd);
                }
            }
            Some(setter) if SETTERS.contains(&setter) => self.set(&simple, cwd.as_deref(), depth),
            Some(builtin @ ("printf" | "getopts" | "for" | "select")) => {
                // `printf -v NAME` (or `-vNAME`), `getopts OPTIONS NAME`,
                // `for NAME in`.
                let attached = simple
                    .args()
                    .filter_map(|i| simple.literal(i))
                    .find_map(|w| {
                        w.strip_prefix("-v")
                            .filter(|name| builtin == "printf" && !name.is_empty())
                            .map(str::to_string)
                    });
                if let Some(name) = attached.as_deref().and_then(variable) {
                    self.assign(name);
                }
                let before = match builtin {
                    "printf" => simple.args().find(|&i| simple.literal(i) == Some("-v")),
                    "getopts" => Some(simple.first + 1),
                    _ => Some(simple.first),
                };
                if let Some(at) = before.map(|i| i + 1).filter(|&i| i < command.words.len()) {
                    match simple.literal(at) {
                        Some(word) => variable(word).into_iter().for_each(|n| self.assign(n)),
                        None => self.names_unknown = true,
                    }
                }
            }
            Some("env") => {
                // `env -S 'NAME=value cmd'` splits its text into a command.
                for text in simple.args().filter_map(|i| simple.split_string(i)) {
                    self.read_nested(&text, cwd.clone(), depth);
                }
            }
            Some("eval") => {
                let text: Vec<&str> = simple.args().filter_map(|i| simple.literal(i)).collect();
                if text.len() < simple.args().len() {
                    self.names_unknown = true; // `eval "$(…)"`
                }
                self.read_nested(&text.join(" "), cwd.clone(), depth);
            }
            // Code read from a file may set anything.
            Some("source" | ".") => self.names_unknown = true,
            _ => {}
        }
        if let Some(text) = simple.shell_text() {
            self.read_nested(&text, cwd.clone(), depth);
        }
        if !command.words.is_empty() {
            self.out.commands.push(Command {
                env: Arc::clone(&self.env_now),
                env_unknown: self.names_unknown,
                ..command
            });
        }
        next_cwd
    }

    /// The shell moving to `target` (absolute, or relative to where it
    /// is): from its logical directory `cwd` and from everywhere a symlink
    /// may have put it. Each landing is a directory the text may run in:
    /// the logical one (returned: the next commands carry it) and, from
    /// each place, the logical one and the real one `cd -P` lands in
    /// (kept as the other places where they are not the logical landing:
    /// without symlinks, they are).
    fn move_to(&mut self, target: &Path, cwd: Option<&Path>) -> Option<PathBuf> {
        let from = |base: Option<&Path>| match base {
            _ if target.is_absolute() => Some(target.to_path_buf()),
            base => base.map(|base| base.join(target)),
        };
        let landing = from(cwd).map(|joined| logical(&joined));
        let starts: Vec<Option<PathBuf>> = std::iter::once(cwd.map(Path::to_path_buf))
            .chain(self.elsewhere.drain(..).map(Some))
            .collect();
        let mut elsewhere: Vec<PathBuf> = Vec::new();
        for joined in starts.iter().filter_map(|start| from(start.as_deref())) {
            let real = resolve::real_path(&joined, None).unwrap_or_else(|| joined.clone());
            for place in [logical(&joined), real] {
                if Some(&place) != landing.as_ref() && !elsewhere.contains(&place) {
                    elsewhere.push(place);
                }
            }
        }
        if elsewhere.len() > MAX_ELSEWHERE {
            self.unreadable = Some(format!(
                "`cd`s through symlinks that may leave it in more than {MAX_ELSEWHERE} places"
            ));
        }
        // From where an earlier `cd` put or left the shell: a landing that
        // exists is a place it may be (where one does not, the `cd` fails).
        let exists = |place: &Path| resolve::Place::new(place, None).exists();
        let mut been: Vec<PathBuf> = (elsewhere.iter().chain(&landing))
            .filter(|place| exists(place))
            .cloned()
            .collect();
        for joined in self.been.iter().filter_map(|start| from(Some(start))) {
            let real = resolve::real_path(&joined, None).unwrap_or_else(|| joined.clone());
            been.extend([logical(&joined), real].into_iter().filter(|p| exists(p)));
        }
        for place in been {
            if self.been.contains(&place) {
                continue;
            }
            if self.been.len() == MAX_BEEN {
                self.unreadable = Some(format!("may `cd` into more than {MAX_BEEN} places"));
                break;
            }
            self.visit(&place, true);
            self.been.push(place);
        }
        for place in &elsewhere {
            self.visit(place, true);
        }
        if let Some(dir) = &landing {
            self.visit(dir, false);
        }
        self.elsewhere = elsewhere;
        landing
    }

    /// Count `dir` among the directories the text may run in (once), or
    /// give up reading past [`MAX_DIRS`] of them (or of the places a
    /// symlink may have put it, `elsewhere`).
    fn visit(&mut self, dir: &Path, elsewhere: bool) {
        let dirs = match elsewhere {
            true => &mut self.out.elsewhere,
            false => &mut self.out.dirs,
        };
        if dirs.iter().any(|d| d.as_os_str() == dir.as_os_str()) {
            return;
        }
        if dirs.len() == MAX_DIRS {
            self.unreadable = Some(format!("runs in more than {MAX_DIRS} directories"));
            return;
        }
        dirs.push(dir.to_path_buf());
    }

    /// Where `cd`/`pushd` moves (see [`Reader::move_to`]): the first word
    /// that is not an option (`cd -P DIR`), else the home. A target known
    /// only when the text runs leads where its literal tail says, under a
    /// directory no path names (`"$d/.claude"` is a `.claude`); without a
    /// tail, the words after it are judged against the home, as before.
    ///
    /// The shell's `cd` is logical (each `..` takes back the component
    /// written before it): that is where the next commands run, and how a
    /// text of `cd sub; …; cd ..` stays in two directories. `cd -P` or `set
    /// -P` follows symlinks first, so [`Reader::move_to`] lands both ways.
    fn cd(&self, simple: &Simple<'_>) -> Option<PathBuf> {
        let at = simple
            .args()
            .find(|&i| simple.literal(i).is_none_or(|w| !w.starts_with('-')));
        match at.map(|i| (i, simple.literal(i))) {
            Some((_, Some(literal))) => Some(literal.to_string()),
            Some((i, None)) => {
                if let Some(tail) = literal_tail(&simple.raw[i]) {
                    return Some(Path::new(UNKNOWN_DIR).join(tail));
                }
                // As before: a later literal word, else the home.
                (i + 1..simple.words.len())
                    .filter_map(|i| simple.literal(i))
                    .find(|w| !w.starts_with('-'))
                    .map(str::to_string)
            }
            None => None,
        }
        .or_else(|| self.env.home.map(|h| h.display().to_string()))
        .map(PathBuf::from)
    }

    /// A builtin that sets the variables it names (`export NAME=…`, `read
    /// NAME`): each is set from here on, a literal value remembered.
    fn set(&mut self, simple: &Simple<'_>, cwd: Option<&Path>, depth: usize) {
        // `declare -n r=HOME`: `r` names HOME, so setting `r` sets HOME.
        let nameref = simple.args().filter_map(|i| simple.literal(i)).any(|w| {
            w.strip_prefix('-')
                .is_some_and(|options| !options.starts_with('-') && options.contains('n'))
        });
        for i in simple.args() {
            let raw = &simple.raw[i];
            match simple.literal(i) {
                // Named as the shell passes it (`export CO''PILOT_HOME=…`).
                Some(word) if !word.starts_with('-') => {
                    if let Some(name) = assignment(word)
                        .map(|(name, _)| name)
                        .or_else(|| variable(word))
                    {
                        self.assign(name);
                    }
                }
                Some(_) => {}
                None => match assignment(raw) {
                    Some((name, _)) => self.assign(name),
                    None => self.names_unknown = true,
                },
            }
            let Some((name, value)) = assignment(raw) else {
                continue;
            };
            let Some(value) = value else {
                self.vars.remove(name);
                continue;
            };
            if nameref {
                match variable(value) {
                    Some(named) => self.assign(named),
                    None => self.names_unknown = true,
                }
            }
            if let Word::Literal(values) = self.word(value, cwd, depth)
                && let [one] = values.as_slice()
            {
                self.vars.insert(name.to_string(), one.clone());
            }
        }
    }

    /// Remember that `name` is set from here on.
    fn assign(&mut self, name: &str) {
        // Its old literal value no longer holds (`read d` after `d=/tmp`).
        self.vars.remove(name);
        let entry = format!("{name}=");
        if self.assigned.contains(&entry) {
            return;
        }
        if self.assigned.len() == MAX_ASSIGNED {
            self.unreadable = Some(format!("more than {MAX_ASSIGNED} variables set"));
            return;
        }
        self.assigned.push(entry);
        self.env_now = Arc::from(self.assigned.as_slice());
    }

    /// One word, expanded as far as is possible without running anything;
    /// the commands it substitutes are read too.
    fn word(&mut self, text: &str, cwd: Option<&Path>, depth: usize) -> Word {
        if text.bytes().all(is_plain) {
            return Word::Literal(vec![text.to_string()]);
        }
        let braces = Braces::of(text);
        if braces.most_open > MAX_OPEN_BRACES {
            self.unreadable = Some(format!(
                "a word with more than {MAX_OPEN_BRACES} braces open at once"
            ));
            return Word::Unknown;
        }
        if braces.longest_number > MAX_BRACE_DIGITS {
            self.unreadable = Some(format!(
                "a brace holding a number of more than {MAX_BRACE_DIGITS} digits"
            ));
            return Word::Unknown;
        }
        let options = ParserOptions::default();
        // Most words have no brace to expand: skip the parser for them.
        let expansions = match text.contains('{') {
            true => word::parse_brace_expansions(text, &options),
            false => Ok(None),
        };
        let alternatives = match expansions {
            Ok(Some(parts)) => {
                let mut all = vec![String::new()];
                if !expand_braces(&parts, &mut all) {
                    self.unreadable = Some(format!(
                        "a brace expansion of more than {MAX_ALTERNATIVES} words"
                    ));
                    return Word::Unknown;
                }
                all
            }
            _ => vec![text.to_string()],
        };
        let mut literals = Vec::with_capacity(alternatives.len());
        let mut known = true;
        for alternative in alternatives {
            match word::parse(&alternative, &options) {
                Ok(pieces) => {
                    let mut out = String::new();
                    for piece in pieces {
                        known &= self.piece(&piece.piece, cwd, depth, &mut out);
                    }
                    literals.push(out);
                }
                Err(_) => known = false,
            }
        }
        if known {
            Word::Literal(literals)
        } else {
            Word::Unknown
        }
    }

    /// Append `piece`'s value to `out`; false if only running could tell.
    fn piece(
        &mut self,
        piece: &WordPiece,
        cwd: Option<&Path>,
        depth: usize,
        out: &mut String,
    ) -> bool {
        match piece {
            WordPiece::Text(text) | WordPiece::SingleQuotedText(text) => out.push_str(text),
            WordPiece::AnsiCQuotedText(text) => out.push_str(&ansi_c(text)),
            WordPiece::EscapeSequence(text) => {
                out.push_str(text.strip_prefix('\\').unwrap_or(text))
            }
            WordPiece::DoubleQuotedSequence(pieces)
            | WordPiece::GettextDoubleQuotedSequence(pieces) => {
                let mut known = true;
                for inner in pieces {
                    known &= self.piece(&inner.piece, cwd, depth, out);
                }
                return known;
            }
            WordPiece::TildeExpansion(tilde) => match tilde_dir(tilde, self.env.home, cwd) {
                Some(dir) => out.push_str(&dir.display().to_string()),
                None => return false,
            },
            WordPiece::ParameterExpansion(expr) => match self.parameter(expr, cwd) {
                Some(value) => out.push_str(&value),
                None => return false,
            },
            WordPiece::CommandSubstitution(text)
            | WordPiece::BackquotedCommandSubstitution(text) => {
                self.read_nested(text, cwd.map(Arc::from), depth);
                return false;
            }
            WordPiece::ArithmeticExpression(_) => return false,
        }
        true
    }

    /// `$NAME` / `${NAME}` when its value is known here.
    fn parameter(&self, expr: &word::ParameterExpr, cwd: Option<&Path>) -> Option<String> {
        let word::ParameterExpr::Parameter {
            parameter: word::Parameter::Named(name),
            indirect: false,
        } = expr
        else {
            return None;
        };
        if let Some(value) = self.vars.get(name) {
            return Some(value.clone());
        }
        match name.as_str() {
            "HOME" => self.env.home.map(|h| h.display().to_string()),
            "PWD" => cwd.map(|c| c.display().to_string()),
            _ => None,
        }
    }
}

/// A simple command's words, where the command proper starts in them.
struct Simple<'c> {
    words: &'c [Word],
    raw: &'c [String],
    /// After reserved words and `builtin`/`command` (and `command`'s
    /// options), which run the builtin they name.
    first: usize,
}

impl<'c> Simple<'c> {
    fn of(words: &'c [Word], raw: &'c [String]) -> Self {
        let mut simple = Self {
            words,
            raw,
            first: 0,
        };
        while let Some(word) = simple.literal(simple.first) {
            let after_command =
                simple.first > 0 && simple.literal(simple.first - 1) == Some("command");
            if !(RESERVED.contains(&word)
                || matches!(word, "builtin" | "command")
                || (after_command && word.starts_with('-')))
            {
                break;
            }
            simple.first += 1;
        }
        simple
    }

    /// Word `i`, if it is one literal.
    fn literal(&self, i: usize) -> Option<&'c str> {
        match self.words.get(i) {
            Some(Word::Literal(one)) if one.len() == 1 => Some(one[0].as_str()),
            _ => None,
        }
    }

    /// The command's file name (`/bin/rm` is `rm`).
    fn name(&self) -> Option<&'c str> {
        (self.literal(self.first)).map(|n| path_text::file_name(n).unwrap_or(n))
    }

    /// The indices of its arguments.
    fn args(&self) -> std::ops::Range<usize> {
        self.first + 1..self.words.len()
    }

    /// The text a shell among its words runs (`sh -c TEXT`, `bash -lc
    /// TEXT`, `timeout 60 sh -c TEXT`, `sudo -u u bash -c TEXT`).
    fn shell_text(&self) -> Option<String> {
        let is_shell = |w: &str| SHELLS.contains(&path_text::file_name(w).unwrap_or(""));
        let shell =
            (self.first..self.words.len()).find(|&i| self.literal(i).is_some_and(is_shell))?;
        let option = (shell + 1..self.words.len()).find(|&i| {
            self.literal(i).is_some_and(|w| {
                w.strip_prefix('-').is_some_and(|options| {
                    !options.starts_with('-')
                        && options.contains('c')
                        && options.chars().all(|c| c.is_ascii_alphabetic())
                })
            })
        })?;
        self.literal(option + 1).map(str::to_string)
    }

    /// The text `env -S TEXT` (`--split-string=TEXT`, `-STEXT`) at word `i`.
    fn split_string(&self, i: usize) -> Option<String> {
        let word = self.literal(i)?;
        if word == "-S" || word == "--split-string" {
            return self.literal(i + 1).map(str::to_string);
        }
        word.strip_prefix("--split-string=")
            .or_else(|| word.strip_prefix("-S").filter(|t| !t.is_empty()))
            .map(str::to_string)
    }
}

/// Redirection operators: the next word is a file the command opens.
/// A token of shell text.
#[derive(Debug, PartialEq, Eq)]
enum Tok {
    /// A control or redirection operator (`;`, `&&`, `|`, `>`, a newline).
    Operator(String),
    /// A word, quotes and expansions still in it.
    Word(String),
}

/// `text`'s tokens. Text of plain words between blanks (`cargo test
/// --release`, `git status`), most of what agents run, is split here as
/// the shell splits it; anything else goes through brush-parser's
/// tokenizer, which reads quotes, operators and here-documents.
fn tokens(text: &str) -> Result<Vec<Tok>, brush_parser::TokenizerError> {
    if text.bytes().all(|b| is_plain(b) || b == b' ' || b == b'\t') {
        return Ok(text
            .split([' ', '\t'])
            .filter(|w| !w.is_empty())
            .map(|w| Tok::Word(w.to_string()))
            .collect());
    }
    Ok(brush_parser::tokenize_str(text)?
        .into_iter()
        .map(|token| match token {
            Token::Operator(op, _) => Tok::Operator(op),
            Token::Word(word, _) => Tok::Word(word),
        })
        .collect())
}

/// A byte that means itself wherever it stands in a word: no quote,
/// expansion (`$`, `~`, `{`, a backquote), escape, glob, comment, operator
/// or blank. A word of these alone is its own value.
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_./:,@%+=".contains(&b)
}

fn is_redirect(op: &str) -> bool {
    matches!(
        op,
        ">" | ">>" | "<" | ">|" | "<>" | "&>" | "&>>" | ">&" | "<&" | "<<<"
    )
}

/// `NAME=VALUE` at the start of a command: the variable's name, and the
/// value it gets when that is all of it (`None` for `NAME+=…`, which
/// appends, and `NAME[…]=…`, which sets an element: `$NAME`'s first).
fn assignment(word: &str) -> Option<(&str, Option<&str>)> {
    let (target, value) = word.split_once('=')?;
    let (name, plain) = match target.strip_suffix('+') {
        Some(name) => (name, false),
        None => (target, true),
    };
    let (name, plain) = match name.split_once('[') {
        Some((name, index)) if index.ends_with(']') => (name, false),
        Some(_) => return None,
        None => (name, plain),
    };
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, plain.then_some(value)))
}

/// Where a `cd` to a directory known only at run time leads: no path
/// starts here, so what is under it is judged by its names alone.
const UNKNOWN_DIR: &str = "/(known only when the text runs)";

/// `path` with `.` dropped and each `..` taking back the component before
/// it (never above the root): where the shell's logical `cd` lands.
fn logical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir) => {}
                _ => out.push(".."),
            },
            other => out.push(other),
        }
    }
    out
}

/// The plain components at the end of a word whose start is known only
/// when it runs (`"$d/.claude"` ends in `.claude`), if it has any.
fn literal_tail(raw: &str) -> Option<PathBuf> {
    let raw = raw.trim_matches(['"', '\'']);
    let parts: Vec<&str> = raw.split('/').collect();
    let special =
        |part: &str| part.contains(['$', '`', '(', ')', '{', '}', '*', '?', '[', '"', '\'', '\\']);
    let last_special = parts.iter().rposition(|p| special(p))?;
    let tail: PathBuf = parts[last_special + 1..]
        .iter()
        .filter(|p| !p.is_empty() && **p != ".")
        .collect();
    (!tail.as_os_str().is_empty() && !tail.iter().any(|p| p == "..")).then_some(tail)
}

/// `NAME` (or `NAME[…]`, an element) as a builtin that sets it takes it.
fn variable(word: &str) -> Option<&str> {
    assignment(&format!("{word}=")).map(|(name, _)| &word[..name.len()])
}

/// The directory a tilde prefix names.
fn tilde_dir(tilde: &word::TildeExpr, home: Option<&Path>, cwd: Option<&Path>) -> Option<PathBuf> {
    match tilde {
        word::TildeExpr::Home => home.map(Path::to_path_buf),
        word::TildeExpr::UserHome(user) => home_of(user),
        word::TildeExpr::WorkingDir => cwd.map(Path::to_path_buf),
        _ => None,
    }
}

/// A path argument's leading `~` or `~user` expanded, as the shell would
/// have done before the tool got it.
pub fn expand_tilde(text: &str, home: Option<&Path>) -> String {
    let Some(rest) = text.strip_prefix('~') else {
        return text.to_string();
    };
    let (user, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let dir = if user.is_empty() {
        home.map(Path::to_path_buf)
    } else {
        home_of(user)
    };
    dir.map_or_else(|| text.to_string(), |d| format!("{}{tail}", d.display()))
}

/// A user's home directory from the user database (`/etc/passwd`).
pub fn home_of(user: &str) -> Option<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&user) && fields.len() > 5).then(|| PathBuf::from(fields[5]))
    })
}

/// Every word a brace expression yields, appended to each of `all`; false
/// past [`MAX_ALTERNATIVES`].
fn expand_braces(parts: &[BraceExpressionOrText], all: &mut Vec<String>) -> bool {
    for part in parts {
        let choices: Vec<String> = match part {
            BraceExpressionOrText::Text(text) => vec![text.clone()],
            BraceExpressionOrText::Expr(members) => {
                let mut choices = Vec::new();
                for member in members {
                    if !member_words(member, &mut choices) {
                        return false;
                    }
                }
                choices
            }
        };
        if all.len().saturating_mul(choices.len()) > MAX_ALTERNATIVES {
            return false;
        }
        *all = all
            .iter()
            .flat_map(|prefix| choices.iter().map(move |c| format!("{prefix}{c}")))
            .collect();
    }
    true
}

fn member_words(member: &BraceExpressionMember, out: &mut Vec<String>) -> bool {
    match member {
        BraceExpressionMember::Child(parts) => {
            let mut words = vec![String::new()];
            if !expand_braces(parts, &mut words) {
                return false;
            }
            out.extend(words);
        }
        BraceExpressionMember::NumberSequence {
            start,
            end,
            increment,
        } => {
            let step = increment.unsigned_abs().max(1) as usize;
            let (low, high) = (*start.min(end), *start.max(end));
            if (high - low) as usize / step > MAX_ALTERNATIVES {
                return false;
            }
            out.extend((low..=high).step_by(step).map(|n| n.to_string()));
        }
        BraceExpressionMember::CharSequence {
            start,
            end,
            increment,
        } => {
            let step = increment.unsigned_abs().max(1) as usize;
            let (low, high) = ((*start).min(*end), (*start).max(*end));
            out.extend((low..=high).step_by(step).map(String::from));
        }
    }
    out.len() <= MAX_ALTERNATIVES
}

/// The text of `$'…'` with its escapes decoded (bash's rules).
fn ansi_c(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(escape) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut digits = |radix: u32, max: usize, first: Option<char>| {
            let mut value = first.and_then(|d| d.to_digit(radix)).unwrap_or(0);
            let mut taken = usize::from(first.is_some());
            while taken < max
                && let Some(d) = chars.peek().and_then(|d| d.to_digit(radix))
            {
                value = value * radix + d;
                chars.next();
                taken += 1;
            }
            char::from_u32(value)
        };
        let decoded = match escape {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(escape),
            'x' => digits(16, 2, None),
            'u' => digits(16, 4, None),
            'U' => digits(16, 8, None),
            '0'..='7' => digits(8, 3, Some(escape)),
            other => {
                out.push('\\');
                Some(other)
            }
        };
        out.extend(decoded);
    }
    out
}

/// What a word's brace-expansion braces are like, outside quotes and
/// escapes (a `${` is a parameter's, closed by its own `}`): what
/// brush-parser's brace parser cannot take.
#[derive(Default)]
struct Braces {
    /// The most open at once.
    most_open: usize,
    /// The longest run of digits inside one.
    longest_number: usize,
}

impl Braces {
    fn of(word: &str) -> Self {
        let mut found = Self::default();
        // Open braces, each true if it is a parameter's `${`, and how many
        // of them are not.
        let (mut open, mut braces): (Vec<bool>, usize) = (Vec::new(), 0);
        let (mut single, mut double, mut escaped) = (false, false, false);
        let (mut previous, mut digits) = ('\0', 0);
        for c in word.chars() {
            digits = if c.is_ascii_digit() { digits + 1 } else { 0 };
            if braces > 0 {
                found.longest_number = found.longest_number.max(digits);
            }
            match c {
                _ if escaped => escaped = false,
                '\\' if !single => escaped = true,
                '\'' if !double => single = !single,
                '"' if !single => double = !double,
                _ if single || double => {}
                '{' => {
                    let parameter = previous == '$';
                    open.push(parameter);
                    braces += usize::from(!parameter);
                    found.most_open = found.most_open.max(braces);
                }
                '}' => braces -= usize::from(open.pop() == Some(false)),
                _ => {}
            }
            previous = c;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The shortcut for plain text reads it as brush-parser does: the
        /// same tokens, and each word its own value.
        #[test]
        fn plain_text_is_read_as_the_shell_parser_reads_it(
            text in "[a-zA-Z0-9_./:,@%+= \t-]{0,40}"
        ) {
            let parsed: Vec<Tok> = brush_parser::tokenize_str(&text)
                .unwrap()
                .into_iter()
                .map(|token| match token {
                    Token::Operator(op, _) => Tok::Operator(op),
                    Token::Word(word, _) => Tok::Word(word),
                })
                .collect();
            let shortcut = tokens(&text).unwrap();
            prop_assert_eq!(&shortcut, &parsed);
            for token in shortcut {
                let Tok::Word(plain) = token else { continue };
                let pieces = word::parse(&plain, &ParserOptions::default()).unwrap();
                let mut value = String::new();
                for piece in pieces {
                    match piece.piece {
                        WordPiece::Text(text) => value.push_str(&text),
                        other => prop_assert!(false, "{plain}: {other:?}"),
                    }
                }
                prop_assert_eq!(value, plain);
            }
        }
    }

    fn literal_words(text: &str) -> Vec<Vec<String>> {
        let env = Env {
            home: Some(Path::new("/home/dev")),
            cwd: Some(Path::new("/home/dev/project")),
        };
        commands(text, &env)
            .unwrap()
            .commands
            .into_iter()
            .map(|c| {
                c.words
                    .iter()
                    .map(|w| match w {
                        Word::Literal(all) => all.join("|"),
                        Word::Unknown => "?".into(),
                    })
                    .collect()
            })
            .collect()
    }

    /// Found by `fuzz/` (guard, a timeout): brush-parser's brace parser
    /// takes time exponential in the `{` left open in a word (12 took
    /// 15 s), so an agent could pin the daemon with one short command.
    /// Such a word is refused as unreadable before it is parsed; quoted
    /// braces, `${…}` and braces that close are read as before.
    #[test]
    fn deeply_open_braces_are_refused_before_the_parser_sees_them() {
        let env = Env {
            home: None,
            cwd: None,
        };
        let why = commands("echo a{{{{{{{{", &env).unwrap_err();
        assert!(why.contains("braces"), "{why}");
        // Also found by it: a number too big for an i64 in a brace made
        // the parser panic (which `check` turns into a refusal).
        let why = commands("echo {2222222222222222222222222..1}", &env).unwrap_err();
        assert!(why.contains("digits"), "{why}");
        for fine in [
            r#"echo '{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":1}}}}}}}}'"#,
            "echo ${a}${b}${c}${d}${e}${f}${g}${h}${i}",
            "echo {a,b}{c,d}{e,f}",
            "echo {1..3} 12345678901234567890123",
        ] {
            assert!(commands(fine, &env).is_ok(), "{fine}");
        }
    }

    #[test]
    fn quotes_and_escapes_are_removed_as_the_shell_removes_them() {
        assert_eq!(
            literal_words(r#"cat tool''gate.toml "settings".json set\tings $'\x74ool\147ate'"#),
            [[
                "cat",
                "toolgate.toml",
                "settings.json",
                "settings",
                "toolgate"
            ]]
        );
    }

    #[test]
    fn tilde_home_and_assigned_variables_expand() {
        assert_eq!(
            literal_words("d=~/.claude; mv \"$d\" ${HOME}/x ~root/y"),
            [["mv", "/home/dev/.claude", "/home/dev/x", "/root/y"]]
        );
    }

    /// A variable set again without a literal value (`read`, `for`,
    /// `printf -v`) no longer expands to its old one.
    #[test]
    fn a_variable_read_again_forgets_its_old_value() {
        for text in [
            "d=/tmp; read -r d; rm $d/x",
            "d=/tmp; for d in a b; do rm $d/x; done",
            "d=/tmp; printf -v d x; rm $d/x",
            "d=/tmp; printf -vd x; rm $d/x",
        ] {
            let rm = literal_words(text)
                .into_iter()
                .find(|c| c.contains(&"rm".to_string()));
            assert_eq!(rm.unwrap().last().map(String::as_str), Some("?"), "{text}");
        }
    }

    #[test]
    fn braces_expand_and_substitutions_are_unknown_but_read() {
        assert_eq!(
            literal_words("rm ~/.claude/{settings,other}.json $(echo hi) `id`"),
            [
                vec!["echo", "hi"],
                vec!["id"],
                vec![
                    "rm",
                    "/home/dev/.claude/settings.json|/home/dev/.claude/other.json",
                    "?",
                    "?"
                ],
            ]
        );
    }

    fn reading_dirs_hold(reading: &Reading, dir: &str) -> bool {
        reading.dirs.iter().any(|d| d == Path::new(dir))
    }

    #[test]
    fn text_it_cannot_follow_is_said_so() {
        let env = Env {
            home: Some(Path::new("/home/dev")),
            cwd: None,
        };
        for text in [
            "echo 'unterminated",
            "rm -rf ~/.{a{1..300},b}",
            "echo $(echo $(echo $(echo $(echo $(rm x)))))",
        ] {
            assert!(commands(text, &env).is_err(), "{text}");
        }
    }

    #[test]
    fn cd_moves_where_relative_words_resolve_and_sh_c_is_read() {
        let env = Env {
            home: Some(Path::new("/home/dev")),
            cwd: Some(Path::new("/home/dev/project")),
        };
        let commands = commands(
            "cd ~/.claude && echo '{}' > settings.json; bash -c 'rm x'",
            &env,
        )
        .unwrap();
        assert!(reading_dirs_hold(&commands, "/home/dev/.claude"));
        let commands = commands.commands;
        let echo = commands
            .iter()
            .find(|c| c.names().any(|n| n == "echo"))
            .unwrap();
        assert_eq!(echo.cwd.as_deref(), Some(Path::new("/home/dev/.claude")));
        assert_eq!(
            echo.words.last(),
            Some(&Word::Literal(vec!["settings.json".into()]))
        );
        assert!(
            commands
                .iter()
                .any(|c| c.names().collect::<Vec<_>>() == ["rm", "x"])
        );
    }
}
