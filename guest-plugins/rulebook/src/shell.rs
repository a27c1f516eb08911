//! Shell text read as the shell would split it, without running any of it:
//! simple commands at control operators (`;`, `&&`, `||`, `|`, `&`,
//! newlines, subshells), words with their quotes removed, redirections with
//! their targets, heredocs and here-strings as the text a command reads.
//! What a command runs in turn is read too: command substitutions, `sh -c`,
//! `eval`, a shell fed a heredoc, `find -exec`, and wrappers (`sudo`, `env`,
//! `xargs`, `timeout`, …) that run the command after them. Interpreters'
//! one-liners (`python -c`, `node -e`) are kept as code for the code rules.
//!
//! The reader is lenient: text the shell would refuse (an unclosed quote)
//! is read as far as it goes, since what matters is what would run if it
//! were accepted. Its cost is linear in the text and bounded by
//! [`MAX_DEPTH`] and [`MAX_COMMANDS`].

/// How deep nested texts (`bash -c "$(…)"`) are followed.
const MAX_DEPTH: usize = 6;
/// The most commands one text yields; past it the rest is not read (and
/// the reading says so).
const MAX_COMMANDS: usize = 512;

/// Shells whose `-c` text, or heredoc, is itself shell text.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "ash"];
/// Interpreters with a one-liner flag, and the flag.
const INTERPRETERS: &[(&str, &[&str])] = &[
    ("python", &["-c"]),
    ("python2", &["-c"]),
    ("python3", &["-c"]),
    ("node", &["-e", "--eval", "-p", "--print"]),
    ("nodejs", &["-e", "--eval", "-p", "--print"]),
    ("bun", &["-e", "--eval"]),
    ("deno", &["eval"]),
    ("ruby", &["-e"]),
    ("perl", &["-e", "-E"]),
    ("php", &["-r"]),
    ("lua", &["-e"]),
];
/// Calls in interpreter code that run their string argument as a shell
/// command.
const SHELL_OUT: &[&str] = &[
    "system(",
    "os.system(",
    "popen(",
    "exec(",
    "execSync(",
    "execFile",
    "spawn(",
    "spawnSync(",
    "subprocess.",
    "check_output(",
    "check_call(",
    "shell_exec(",
    "passthru(",
    "%x(",
];
/// Reserved words a command may start with; the command proper follows.
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}",
];

/// One simple command.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Command {
    /// The program's file name (`/usr/bin/git` is `git`) and its arguments,
    /// after wrappers and leading assignments.
    pub words: Vec<String>,
    /// Files it reads or writes through redirections.
    pub redirects: Vec<Redirect>,
    /// Whether it runs through `sudo`, `doas` or `su -c`.
    pub privileged: bool,
    /// What it reads on standard input from a heredoc or here-string
    /// (`psql <<EOF … EOF`).
    pub input: Option<String>,
}

impl Command {
    /// The program's name.
    pub fn program(&self) -> &str {
        self.words.first().map_or("", String::as_str)
    }

    /// Its arguments.
    pub fn args(&self) -> &[String] {
        self.words.get(1..).unwrap_or(&[])
    }
}

/// A redirection's target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// Written (`>`, `>>`, `&>`) rather than read (`<`).
    pub write: bool,
    /// The file.
    pub target: String,
}

/// An interpreter's one-liner or script fed on standard input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    /// The interpreter (`python3`).
    pub interpreter: String,
    /// The code.
    pub text: String,
}

/// Everything a text would run, as far as it can be known.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Every simple command, nested ones included.
    pub commands: Vec<Command>,
    /// Every interpreter one-liner.
    pub code: Vec<Code>,
    /// Part of the text was not read (past a bound).
    pub incomplete: bool,
}

/// Read `text`.
pub fn read(text: &str) -> Reading {
    let mut reading = Reading::default();
    read_into(text, 0, &mut reading);
    reading
}

fn read_into(text: &str, depth: usize, reading: &mut Reading) {
    if depth > MAX_DEPTH {
        reading.incomplete = true;
        return;
    }
    let tokens = plain_words(text).unwrap_or_else(|| Lexer::new(text).lex());
    let mut pending: Vec<Token> = Vec::new();
    // What `echo TEXT |` hands the next command on its standard input.
    let mut piped: Option<String> = None;
    for token in tokens
        .into_iter()
        .chain(std::iter::once(Token::Op(";".into())))
    {
        match token {
            Token::Op(op) if is_separator(&op) => {
                let simple = std::mem::take(&mut pending);
                let before = reading.commands.len();
                if !simple.is_empty() {
                    command_from(simple, piped.take(), depth, reading);
                }
                piped = None;
                if op == "|" && reading.commands.len() > before {
                    piped = reading.commands.last().and_then(|last| {
                        matches!(last.program(), "echo" | "printf").then(|| last.args().join(" "))
                    });
                }
            }
            other => pending.push(other),
        }
        if reading.commands.len() >= MAX_COMMANDS {
            reading.incomplete = true;
            return;
        }
    }
}

fn is_separator(op: &str) -> bool {
    matches!(
        op,
        ";" | "&" | "&&" | "||" | "|" | "|&" | "\n" | "(" | ")" | ";;" | ";&" | ";;&"
    )
}

/// A word as lexed: its text and the command substitutions inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Word {
    text: String,
    substitutions: Vec<String>,
    /// The heredoc body, when this word is a heredoc's delimiter.
    body: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(Word),
    Op(String),
}

/// Turn one simple command's tokens into a [`Command`] and read what it
/// runs in turn.
fn command_from(tokens: Vec<Token>, piped: Option<String>, depth: usize, reading: &mut Reading) {
    let mut words: Vec<String> = Vec::new();
    let mut redirects = Vec::new();
    let mut stdin_text: Option<String> = None;
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            Token::Word(word) => {
                for sub in &word.substitutions {
                    read_into(sub, depth + 1, reading);
                }
                words.push(word.text);
            }
            Token::Op(op) => {
                let Some(Token::Word(target)) = tokens.next() else {
                    continue;
                };
                for sub in &target.substitutions {
                    read_into(sub, depth + 1, reading);
                }
                let op = op.trim_start_matches(|c: char| c.is_ascii_digit());
                match op {
                    "<<" | "<<-" => stdin_text = target.body,
                    "<<<" => stdin_text = Some(target.text),
                    "<" | "<>" => redirects.push(Redirect {
                        write: op == "<>",
                        target: target.text,
                    }),
                    // `2>&1`, `>&2`: descriptors, not files.
                    ">&" | "<&" if target.text.chars().all(|c| c.is_ascii_digit() || c == '-') => {}
                    _ => redirects.push(Redirect {
                        write: true,
                        target: target.text,
                    }),
                }
            }
        }
    }
    let stdin_text = stdin_text.or(piped);
    let mut words = strip_prefixes(expand_words(words)).unwrap_or_default();
    let privileged = unwrap(&mut words);
    if let Some(first) = words.first_mut() {
        *first = file_name(first).to_string();
        normalise(&mut words);
        follow(&words, stdin_text.as_deref(), depth, reading);
    }
    // A redirection with no command (`done < FILE`, `exec 3<FILE`) still
    // opens its file.
    if !words.is_empty() || !redirects.is_empty() {
        reading.commands.push(Command {
            words,
            redirects,
            privileged,
            input: stdin_text,
        });
    }
}

/// The shell's word expansions that change what runs: a command word with
/// `$IFS` in it is several words, and `{a,b}` is one word per member.
fn expand_words(words: Vec<String>) -> Vec<String> {
    let mut expanded = Vec::with_capacity(words.len());
    for (index, word) in words.into_iter().enumerate() {
        let split = |member: String, expanded: &mut Vec<String>| {
            if index == 0 && member.contains([' ', '\t', '\n']) {
                expanded.extend(member.split_whitespace().map(str::to_string));
            } else {
                expanded.push(member);
            }
        };
        match brace_members(&word) {
            Some(members) => members.into_iter().for_each(|m| split(m, &mut expanded)),
            // Most words: kept as they are, not copied.
            None => split(word, &mut expanded),
        }
    }
    expanded
}

/// `pre{a,b}post` as `preapost prebpost` (the first group, not nested);
/// none when the word has no such group.
fn brace_members(word: &str) -> Option<Vec<String>> {
    let open = word.find('{')?;
    let close = open + word[open..].find('}')?;
    let inner = &word[open + 1..close];
    if !inner.contains(',') || inner.contains('{') {
        return None;
    }
    let (pre, post) = (&word[..open], &word[close + 1..]);
    Some(
        inner
            .split(',')
            .take(64)
            .map(|member| format!("{pre}{member}{post}"))
            .collect(),
    )
}

/// Drop leading assignments and reserved words; `None` for commands that
/// are only syntax (`for x in a b c`, `case … in`).
fn strip_prefixes(mut words: Vec<String>) -> Option<Vec<String>> {
    let mut skip = 0;
    while let Some(word) = words.get(skip) {
        match word.as_str() {
            "for" | "case" | "select" | "esac" | "in" => return None,
            // `function name { body; }`: the body's first command follows.
            "function" => skip += 2,
            w if RESERVED.contains(&w) || is_assignment(w) => skip += 1,
            // `name()`: a definition, its body read separately.
            w if w.ends_with("()") => return None,
            _ => break,
        }
    }
    words.drain(..skip.min(words.len()));
    Some(words)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name
                    .trim_end_matches('+')
                    .chars()
                    .all(|c| c == '_' || c.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// `/usr/bin/git` → `git`.
fn file_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Remove the wrappers that run the command after them; whether one of
/// them raised privileges.
fn unwrap(words: &mut Vec<String>) -> bool {
    let mut privileged = false;
    for _ in 0..16 {
        let skip = match wrapper(words) {
            Wrapper::Runs(skip) => skip,
            Wrapper::Privileged(skip) => {
                privileged = true;
                skip
            }
            Wrapper::SplitsString(at) => {
                split_env_string(words, at);
                continue;
            }
            Wrapper::No => break,
        };
        if skip == 0 || skip > words.len() {
            words.clear();
            break;
        }
        words.drain(..skip);
    }
    privileged
}

/// What the first word does with the words after it.
enum Wrapper {
    /// Runs the command after this many words.
    Runs(usize),
    /// The same, with raised privileges (`sudo`, `doas`).
    Privileged(usize),
    /// `env -S 'CMD ARGS'` (the option at this position): splits its
    /// string into the command.
    SplitsString(usize),
    /// Is the command itself (or asks about one: `command -v git`).
    No,
}

fn wrapper(words: &[String]) -> Wrapper {
    let Some(first) = words.first() else {
        return Wrapper::No;
    };
    let after = |n: usize, valued: &[&str]| Wrapper::Runs(n + options(&words[n..], valued));
    let second_is = |names: &[&str]| words.get(1).is_some_and(|w| names.contains(&w.as_str()));
    match file_name(first) {
        "sudo" | "doas" => Wrapper::Privileged(1 + sudo_options(&words[1..])),
        "env" => match (words.iter()).position(|w| w == "-S" || w.starts_with("--split-string")) {
            Some(at) => Wrapper::SplitsString(at),
            None => {
                let mut n = 1 + options(&words[1..], &["-u", "-C", "--unset", "--chdir"]);
                while words.get(n).is_some_and(|w| is_assignment(w)) {
                    n += 1;
                }
                Wrapper::Runs(n)
            }
        },
        // `command -v git` asks where git is; it runs nothing.
        "command" | "builtin" if second_is(&["-v", "-V"]) => Wrapper::No,
        "command" | "builtin" | "setsid" => after(1, &[]),
        "exec" => after(1, &["-a"]),
        "nohup" | "chronic" | "unbuffer" | "catchsegv" => Wrapper::Runs(1),
        "time" => after(1, &["-f", "-o"]),
        "nice" => after(1, &["-n", "--adjustment"]),
        "ionice" => after(1, &["-c", "-n", "-p", "-P", "-u"]),
        "stdbuf" => after(1, &["-i", "-o", "-e"]),
        "timeout" => match after(1, &["-s", "-k", "--signal", "--kill-after"]) {
            Wrapper::Runs(n) => Wrapper::Runs(n + 1), // the duration
            other => other,
        },
        "xargs" => after(
            1,
            &[
                "-I", "-i", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a",
            ],
        ),
        "busybox" | "npx" | "bunx" | "pnpx" | "uvx" => {
            after(1, &["-p", "--package", "--from", "--with"])
        }
        // Two-word runners: `uv run pytest`, `pnpm exec prisma …`.
        "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" if second_is(&["run"]) => {
            after(2, &["--with", "--python", "-p", "--env", "-e"])
        }
        "pnpm" | "yarn" | "bundle" | "mise" | "asdf" if second_is(&["exec", "dlx"]) => {
            after(2, &[])
        }
        _ => Wrapper::No,
    }
}

/// `env -S 'CMD ARGS' REST` (the option at `at`, or `--split-string=…`)
/// as `CMD ARGS REST`.
fn split_env_string(words: &mut Vec<String>, at: usize) {
    let (split, end) = match words[at].split_once('=') {
        Some((_, value)) => (value.to_string(), at + 1),
        None => (words.get(at + 1).cloned().unwrap_or_default(), at + 2),
    };
    let rest = words.get(end..).unwrap_or(&[]).to_vec();
    *words = (split.split_whitespace().map(str::to_string))
        .chain(rest)
        .collect();
}

/// How many leading words are `sudo`'s options: `-u USER`, `--user
/// USER`, and clusters ending in a letter that takes a value (`-iu root`).
fn sudo_options(words: &[String]) -> usize {
    const VALUED: &str = "ughpCDrtUT";
    const LONG: &[&str] = &[
        "--user",
        "--group",
        "--host",
        "--prompt",
        "--chdir",
        "--close-from",
        "--role",
        "--type",
        "--other-user",
        "--command-timeout",
    ];
    let mut n = 0;
    while let Some(word) = words.get(n) {
        if word == "--" {
            return n + 1;
        }
        if !word.starts_with('-') || word == "-" {
            break;
        }
        n += 1;
        let takes_value = if word.starts_with("--") {
            LONG.contains(&word.as_str())
        } else {
            word.chars().last().is_some_and(|c| VALUED.contains(c))
        };
        if takes_value {
            n += 1;
        }
    }
    n.min(words.len())
}

/// How many leading words are options (with `with_value` taking the next
/// word as their value), up to and including a `--`.
fn options(words: &[String], with_value: &[&str]) -> usize {
    let mut n = 0;
    while let Some(word) = words.get(n) {
        if word == "--" {
            return n + 1;
        }
        if !word.starts_with('-') || word == "-" {
            break;
        }
        n += 1;
        if with_value.contains(&word.as_str()) {
            n += 1;
        }
    }
    n.min(words.len())
}

/// Words whose meaning does not depend on where an option sits: `git -C
/// dir --no-pager reset` is `git reset`.
fn normalise(words: &mut Vec<String>) {
    if words[0] == "git" {
        let mut end = 1;
        while let Some(word) = words.get(end) {
            match word.as_str() {
                "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" => end += 2,
                w if w.starts_with('-') => end += 1,
                _ => break,
            }
        }
        words.drain(1..end.min(words.len()));
    }
}

/// Read what the command runs in turn: `sh -c TEXT`, a shell fed a
/// heredoc, `eval`, `find -exec`, an interpreter's code.
fn follow(words: &[String], stdin_text: Option<&str>, depth: usize, reading: &mut Reading) {
    let program = words[0].as_str();
    let args = &words[1..];
    match program {
        _ if SHELLS.contains(&program) => follow_shell(args, stdin_text, depth, reading),
        "su" => follow_su(args, depth, reading),
        "eval" => read_into(&args.join(" "), depth + 1, reading),
        "watch" => {
            // Runs its words with `sh -c`, again and again.
            let skip = options(args, &["-n", "-d", "--interval", "-x"]);
            read_into(&args[skip..].join(" "), depth + 1, reading);
        }
        "find" => follow_find_exec(args, depth, reading),
        _ => follow_code(program, args, stdin_text, depth, reading),
    }
}

/// A shell's `-c TEXT` (after `--`, if any), or the script it reads on
/// standard input when it is given only options.
fn follow_shell(args: &[String], stdin_text: Option<&str>, depth: usize, reading: &mut Reading) {
    match args.iter().position(|w| is_flag_with(w, 'c')) {
        Some(at) => {
            // `bash -c -- TEXT`: the text after the end of options.
            let text = args[at + 1..].iter().find(|w| *w != "--");
            if let Some(text) = text {
                read_into(text, depth + 1, reading);
            }
        }
        None if args.iter().all(|w| w.starts_with('-')) => {
            if let Some(text) = stdin_text {
                read_into(text, depth + 1, reading);
            }
        }
        None => {}
    }
}

/// `su -c TEXT`: its commands run as another user.
fn follow_su(args: &[String], depth: usize, reading: &mut Reading) {
    if let Some(at) = args.iter().position(|w| w == "-c" || w == "--command")
        && let Some(text) = args.get(at + 1)
    {
        let mut inner = Reading::default();
        read_into(text, depth + 1, &mut inner);
        for command in &mut inner.commands {
            command.privileged = true;
        }
        reading.commands.append(&mut inner.commands);
        reading.code.append(&mut inner.code);
    }
}

/// Each `find … -exec CMD ;` (and `-execdir`, `-ok`, `-okdir`, `+`).
fn follow_find_exec(args: &[String], depth: usize, reading: &mut Reading) {
    let mut rest = args;
    while let Some(at) = rest
        .iter()
        .position(|w| matches!(w.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
    {
        let after = &rest[at + 1..];
        let end = after
            .iter()
            .position(|w| w == ";" || w == "+")
            .unwrap_or(after.len());
        if end > 0 {
            let text = after[..end]
                .iter()
                .map(|w| quote(w))
                .collect::<Vec<_>>()
                .join(" ");
            read_into(&text, depth + 1, reading);
        }
        rest = &after[end.min(after.len())..];
    }
}

/// An interpreter's one-liner or an awk program: kept as code, and the
/// shell commands it spells read too.
fn follow_code(
    program: &str,
    args: &[String],
    stdin_text: Option<&str>,
    depth: usize,
    reading: &mut Reading,
) {
    let base = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let interpreter = INTERPRETERS
        .iter()
        .find(|(name, _)| *name == program || *name == base);
    let code = if let Some((_, flags)) = interpreter {
        one_liner(args, flags, stdin_text)
    } else if matches!(program, "awk" | "gawk" | "mawk" | "nawk") {
        // Its program is the first word that is no option or option value.
        let skip = options(args, &["-F", "-v", "-f"]);
        args.get(skip).cloned()
    } else {
        None
    };
    if let Some(text) = code {
        for command in shell_strings(&text) {
            read_into(&command, depth + 1, reading);
        }
        reading.code.push(Code {
            interpreter: program.to_string(),
            text,
        });
    }
}

/// An interpreter's code: the word after one of its `flags` (also inside
/// a cluster, `-Bc`, `-pe`, or as `--eval=CODE`), or the script it reads on
/// standard input (`python3 -`, `python3 /dev/stdin`, no script at all).
fn one_liner(args: &[String], flags: &[&str], stdin_text: Option<&str>) -> Option<String> {
    for (at, word) in args.iter().enumerate() {
        for flag in flags {
            if let Some(code) = word
                .strip_prefix(flag)
                .and_then(|rest| rest.strip_prefix('='))
                .filter(|_| flag.starts_with("--"))
            {
                return Some(code.to_string());
            }
            let letter = flag.strip_prefix('-').filter(|l| l.len() == 1);
            let clustered = letter.is_some_and(|l| is_flag_with(word, l.chars().next().unwrap()));
            if word == flag || clustered {
                return args.get(at + 1).cloned();
            }
        }
    }
    let script = args.iter().find(|w| !w.starts_with('-'));
    match script.map(String::as_str) {
        None | Some("-" | "/dev/stdin") => stdin_text.map(str::to_string),
        Some(_) => None,
    }
}

/// `-c`, or a cluster of single-letter flags holding `c` (`-lc`, `-ec`).
fn is_flag_with(word: &str, flag: char) -> bool {
    word.strip_prefix('-').is_some_and(|letters| {
        !letters.starts_with('-')
            && letters.contains(flag)
            && letters.chars().all(|c| c.is_ascii_alphabetic())
    })
}

/// A word quoted so the lexer reads it back as itself.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The string literals of interpreter code that hands them to a shell
/// (`os.system('rm -rf x')`, `` `rm -rf x` `` in Ruby or Perl).
fn shell_strings(code: &str) -> Vec<String> {
    let shells_out = SHELL_OUT.iter().any(|call| code.contains(call));
    // (literal, where it started, where it ended)
    let mut literals: Vec<(String, usize, usize)> = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        let quote = match c {
            '\'' | '"' if shells_out => c,
            '`' => c,
            _ => continue,
        };
        let mut literal = String::new();
        let mut end = code.len();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, escaped)) = chars.next() {
                        literal.push(escaped);
                    }
                }
                c if c == quote => {
                    end = at + 1;
                    break;
                }
                c => literal.push(c),
            }
        }
        literals.push((literal, start, end));
    }
    // Literals only a list's punctuation apart are one command's words:
    // `subprocess.run(['rm', '-rf', x])`, `execFileSync('rm', ['-rf', x])`.
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut last_end: Option<usize> = None;
    for (literal, start, end) in literals {
        let joined = last_end.is_some_and(|previous| {
            code[previous..start]
                .chars()
                .all(|c| matches!(c, ',' | '[' | ']' | '(' | ' ' | '\t'))
        });
        match groups.last_mut() {
            Some(group) if joined => group.push(literal),
            _ => groups.push(vec![literal]),
        }
        last_end = Some(end);
    }
    // A lone literal is shell text itself (`os.system('rm -rf x')`); a list
    // is a command's words.
    groups
        .into_iter()
        .map(|mut group| match group.len() {
            1 => group.remove(0),
            _ => group.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "),
        })
        .collect()
}

/// Longest first, so `&&` is not read as two `&`.
const OPERATORS: &[&str] = &[
    ";;&", "<<<", "<<-", "&>>", "&&", "||", ";;", ";&", "|&", "<<", ">>", "&>", ">&", "<&", ">|",
    "<>", ";", "&", "|", "(", ")", "<", ">", "\n",
];

/// Characters that mean nothing to the shell but themselves between
/// blanks: no quote, expansion, operator, glob, brace, comment or escape.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            ' ' | '-' | '_' | '.' | '/' | ':' | ',' | '=' | '+' | '@' | '%'
        )
}

/// The words of text made only of [`is_plain`] characters (most commands
/// agents run: `git status --short`, `cargo test -p app`), split at its
/// spaces as the lexer would; none for any other text.
fn plain_words(text: &str) -> Option<Vec<Token>> {
    if !text.chars().all(is_plain) {
        return None;
    }
    let words = text.split(' ').filter(|word| !word.is_empty());
    Some(
        words
            .map(|word| {
                Token::Word(Word {
                    text: word.to_string(),
                    substitutions: Vec::new(),
                    body: None,
                })
            })
            .collect(),
    )
}

struct Lexer<'t> {
    chars: Vec<char>,
    at: usize,
    tokens: Vec<Token>,
    /// Heredocs whose bodies start at the next newline: (token index,
    /// delimiter, strip leading tabs).
    heredocs: Vec<(usize, String, bool)>,
    _text: std::marker::PhantomData<&'t str>,
}

impl<'t> Lexer<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            chars: text.chars().collect(),
            at: 0,
            tokens: Vec::new(),
            heredocs: Vec::new(),
            _text: std::marker::PhantomData,
        }
    }

    fn peek(&self, offset: usize) -> Option<char> {
        self.chars.get(self.at + offset).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(i, c)| self.peek(i) == Some(c))
    }

    fn lex(mut self) -> Vec<Token> {
        let mut heredoc_next = false;
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\r' => self.at += 1,
                '\\' if self.peek(1) == Some('\n') => self.at += 2,
                '#' => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.at += 1;
                    }
                }
                '\n' => {
                    self.at += 1;
                    self.tokens.push(Token::Op("\n".into()));
                    self.read_heredoc_bodies();
                }
                _ => {
                    if let Some(op) = self.operator() {
                        heredoc_next = op.ends_with("<<") || op.ends_with("<<-");
                        self.tokens.push(Token::Op(op));
                        continue;
                    }
                    let word = self.word();
                    if heredoc_next {
                        let strip =
                            matches!(self.tokens.last(), Some(Token::Op(op)) if op.ends_with('-'));
                        self.heredocs
                            .push((self.tokens.len(), word.text.clone(), strip));
                        heredoc_next = false;
                    }
                    self.tokens.push(Token::Word(word));
                }
            }
        }
        self.tokens
    }

    /// An operator here, with a leading descriptor number (`2>`).
    fn operator(&mut self) -> Option<String> {
        let digits = self.chars[self.at..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits > 0 && !matches!(self.peek(digits), Some('<' | '>')) {
            return None;
        }
        let start = self.at;
        self.at += digits;
        for op in OPERATORS {
            if self.starts_with(op) {
                self.at += op.chars().count();
                let prefix: String = self.chars[start..start + digits].iter().collect();
                return Some(format!("{prefix}{op}"));
            }
        }
        self.at = start;
        None
    }

    fn read_heredoc_bodies(&mut self) {
        for (index, delimiter, strip) in std::mem::take(&mut self.heredocs) {
            let body = self.heredoc_body(&delimiter, strip);
            if let Some(Token::Word(word)) = self.tokens.get_mut(index) {
                word.body = Some(body);
            }
        }
    }

    /// The lines from the cursor up to the line that is `delimiter` (with
    /// leading tabs stripped for `<<-`), which is consumed with them.
    fn heredoc_body(&mut self, delimiter: &str, strip: bool) -> String {
        let mut body = String::new();
        while self.peek(0).is_some() {
            let mut line = String::new();
            while let Some(c) = self.peek(0) {
                self.at += 1;
                if c == '\n' {
                    break;
                }
                line.push(c);
            }
            let line = if strip {
                line.trim_start_matches('\t')
            } else {
                &line
            };
            if line == delimiter {
                break;
            }
            body.push_str(line);
            body.push('\n');
        }
        body
    }

    fn word(&mut self) -> Word {
        let mut word = Word {
            text: String::new(),
            substitutions: Vec::new(),
            body: None,
        };
        while let Some(c) = self.peek(0) {
            match c {
                ' ' | '\t' | '\r' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => {
                    // `=(`… and `<(`… are process substitutions inside a word.
                    if matches!(c, '<' | '>') && self.peek(1) == Some('(') {
                        self.at += 1;
                        let inner = self.balanced('(', ')');
                        word.substitutions.push(inner);
                        word.text.push_str("/dev/fd/63");
                        continue;
                    }
                    break;
                }
                '\\' => {
                    self.at += 1;
                    match self.peek(0) {
                        Some('\n') => self.at += 1,
                        Some(c) => {
                            word.text.push(c);
                            self.at += 1;
                        }
                        None => {}
                    }
                }
                '\'' => {
                    self.at += 1;
                    while let Some(c) = self.peek(0) {
                        self.at += 1;
                        if c == '\'' {
                            break;
                        }
                        word.text.push(c);
                    }
                }
                '"' => {
                    self.at += 1;
                    self.double_quoted(&mut word);
                }
                '`' => {
                    self.at += 1;
                    let mut inner = String::new();
                    while let Some(c) = self.peek(0) {
                        self.at += 1;
                        match c {
                            '`' => break,
                            '\\' => {
                                if let Some(n) = self.peek(0) {
                                    inner.push(n);
                                    self.at += 1;
                                }
                            }
                            c => inner.push(c),
                        }
                    }
                    word.substitutions.push(inner);
                    word.text.push_str("$(…)");
                }
                '$' => self.dollar(&mut word, false),
                c => {
                    word.text.push(c);
                    self.at += 1;
                }
            }
        }
        word
    }

    fn double_quoted(&mut self, word: &mut Word) {
        while let Some(c) = self.peek(0) {
            match c {
                '"' => {
                    self.at += 1;
                    return;
                }
                '\\' => {
                    self.at += 1;
                    match self.peek(0) {
                        Some(n @ ('"' | '\\' | '$' | '`')) => {
                            word.text.push(n);
                            self.at += 1;
                        }
                        Some('\n') => self.at += 1,
                        _ => word.text.push('\\'),
                    }
                }
                '`' => {
                    self.at += 1;
                    let mut inner = String::new();
                    while let Some(c) = self.peek(0) {
                        self.at += 1;
                        if c == '`' {
                            break;
                        }
                        inner.push(c);
                    }
                    word.substitutions.push(inner);
                    word.text.push_str("$(…)");
                }
                '$' => self.dollar(word, true),
                c => {
                    word.text.push(c);
                    self.at += 1;
                }
            }
        }
    }

    /// `$…` at the cursor: a substitution, an expansion, or a literal `$`.
    fn dollar(&mut self, word: &mut Word, quoted: bool) {
        self.at += 1;
        match self.peek(0) {
            Some('(') if self.peek(1) == Some('(') => {
                self.at += 1;
                let inner = self.balanced('(', ')');
                // Arithmetic: its commands, if any, are substitutions.
                word.text.push_str(&format!("$(({inner})"));
            }
            Some('(') => {
                let inner = self.balanced('(', ')');
                word.substitutions.push(inner);
                word.text.push_str("$(…)");
            }
            Some('{') => {
                let inner = self.balanced('{', '}');
                word.text.push_str(&expand_braced(&inner));
            }
            Some('\'') if !quoted => {
                self.at += 1;
                self.ansi_c(word);
            }
            Some(c) if c == '_' || c.is_ascii_alphabetic() => {
                let start = self.at;
                while self
                    .peek(0)
                    .is_some_and(|c| c == '_' || c.is_ascii_alphanumeric())
                {
                    self.at += 1;
                }
                let name: String = self.chars[start..self.at].iter().collect();
                word.text.push_str(&expand(&name));
            }
            _ => word.text.push('$'),
        }
    }

    /// The text up to the `close` matching the `open` at the cursor, which
    /// is consumed with it; quotes inside are skipped over whole.
    fn balanced(&mut self, open: char, close: char) -> String {
        self.at += 1;
        let start = self.at;
        let mut level = 1;
        // Heredocs opened inside, whose bodies start at the next newline:
        // (delimiter, leading tabs stripped). Their text holds no bracket.
        let mut heredocs: Vec<(String, bool)> = Vec::new();
        while let Some(c) = self.peek(0) {
            self.at += 1;
            match c {
                '\\' => self.at += 1,
                '<' if self.peek(0) == Some('<') && self.peek(1) != Some('<') => {
                    self.at += 1;
                    let strip = self.peek(0) == Some('-');
                    if strip {
                        self.at += 1;
                    }
                    while self.peek(0).is_some_and(|c| c == ' ' || c == '\t') {
                        self.at += 1;
                    }
                    let mut delimiter = String::new();
                    while let Some(c) = self.peek(0) {
                        match c {
                            '\'' | '"' | '\\' => {}
                            c if c.is_whitespace() || "();&|<>".contains(c) => break,
                            c => delimiter.push(c),
                        }
                        self.at += 1;
                    }
                    heredocs.push((delimiter, strip));
                }
                '\n' if !heredocs.is_empty() => {
                    for (delimiter, strip) in std::mem::take(&mut heredocs) {
                        self.heredoc_body(&delimiter, strip);
                    }
                }
                '\'' => {
                    while self.peek(0).is_some_and(|c| c != '\'') {
                        self.at += 1;
                    }
                    self.at += 1;
                }
                // A double-quoted string or a backquoted command inside
                // holds no bracket of this level (`$(echo ")")`).
                '"' | '`' => {
                    while let Some(inner) = self.peek(0) {
                        self.at += 1;
                        match inner {
                            '\\' => self.at += 1,
                            _ if inner == c => break,
                            _ => {}
                        }
                    }
                }
                c if c == open => level += 1,
                c if c == close => {
                    level -= 1;
                    if level == 0 {
                        let end = (self.at - 1).min(self.chars.len());
                        return self.chars[start..end].iter().collect();
                    }
                }
                _ => {}
            }
        }
        self.at = self.at.min(self.chars.len());
        self.chars[start.min(self.chars.len())..].iter().collect()
    }

    /// `$'…'` with its escapes decoded.
    fn ansi_c(&mut self, word: &mut Word) {
        while let Some(c) = self.peek(0) {
            self.at += 1;
            match c {
                '\'' => return,
                '\\' => {
                    let Some(e) = self.peek(0) else { return };
                    self.at += 1;
                    match e {
                        'n' => word.text.push('\n'),
                        't' => word.text.push('\t'),
                        'x' => {
                            let hex: String = self.chars[self.at..]
                                .iter()
                                .take(2)
                                .take_while(|c| c.is_ascii_hexdigit())
                                .collect();
                            self.at += hex.len();
                            if let Some(c) = u8::from_str_radix(&hex, 16).ok().map(char::from) {
                                word.text.push(c);
                            }
                        }
                        other => word.text.push(other),
                    }
                }
                c => word.text.push(c),
            }
        }
    }
}

/// What a variable stands for where it decides a path: the home directory
/// is `~`, the temporary directory `/tmp`, the working directory `.`;
/// anything else stays `$NAME` (unknown).
fn expand(name: &str) -> String {
    match name {
        "HOME" => "~".into(),
        "TMPDIR" | "TMP" | "TEMP" => "/tmp".into(),
        "PWD" => ".".into(),
        // Splits the word where it stands (`rm${IFS}-rf`).
        "IFS" => " ".into(),
        other => format!("${other}"),
    }
}

/// `${NAME}`, `${NAME:-default}`: the variable, or for an unknown one with
/// a default, the default.
fn expand_braced(inner: &str) -> String {
    let name_end = inner
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(inner.len());
    let name = &inner[..name_end];
    let expanded = expand(name);
    if !expanded.starts_with('$') {
        return expanded;
    }
    match inner[name_end..]
        .strip_prefix(":-")
        .or_else(|| inner[name_end..].strip_prefix('-'))
    {
        Some(default) => default.to_string(),
        None => format!("${{{inner}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs(text: &str) -> Vec<String> {
        read(text)
            .commands
            .iter()
            .map(|c| c.words.join(" "))
            .collect()
    }

    /// Every text of up to four characters over the plain characters
    /// (and a run of longer ones), lexed both ways: the short cut for plain
    /// text must give the lexer's own words.
    #[test]
    fn plain_text_is_split_as_the_lexer_splits_it() {
        let alphabet: Vec<char> = "a1 -_./:,=+@%".chars().collect();
        let mut texts: Vec<String> = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = texts
                .iter()
                .filter(|t| t.chars().count() == texts.last().map_or(0, |l| l.chars().count()))
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            texts.extend(longer);
        }
        texts.extend(
            [
                "git status --short",
                "cargo test -p app -- --nocapture",
                "npm run build:prod --if-present",
                "2 -1 0x10 a=b c+=d user@host:path 100%",
                "  spaced   out  ",
            ]
            .map(String::from),
        );
        for text in &texts {
            let fast = plain_words(text).expect("plain text");
            assert_eq!(fast, Lexer::new(text).lex(), "{text:?}");
        }
        for text in [
            "a;b", "a\tb", "a'b'", "$HOME", "a*", "~/x", "a#b", "{a,b}", "a\nb", "a>b",
        ] {
            assert!(plain_words(text).is_none(), "{text:?} is not plain");
        }
    }

    #[test]
    fn commands_split_at_operators_and_quotes_come_off() {
        assert_eq!(
            programs("git status && \"git\" reset --hard; echo 'a b' | cat"),
            ["git status", "git reset --hard", "echo a b", "cat"]
        );
        assert_eq!(programs("(cd /tmp && ls)"), ["cd /tmp", "ls"]);
        assert_eq!(
            programs("{ git reset --hard; echo done; }"),
            ["git reset --hard", "echo done"]
        );
        assert_eq!(programs("\\git   reset   --hard"), ["git reset --hard"]);
    }

    #[test]
    fn wrappers_and_assignments_are_looked_through() {
        assert_eq!(
            programs("sudo env -i GIT_DIR=.git /usr/bin/git -C repo reset --hard"),
            ["git reset --hard"]
        );
        assert!(read("sudo rm -rf /").commands[0].privileged);
        assert_eq!(programs("nice -n 19 timeout 5 rm -rf x"), ["rm -rf x"]);
        assert_eq!(programs("command -v git"), ["command -v git"]);
        assert_eq!(programs("VAR=1 FOO=2 make"), ["make"]);
        assert_eq!(
            programs("echo x | xargs -I {} rm -rf {}"),
            ["echo x", "rm -rf {}"]
        );
    }

    #[test]
    fn nested_text_is_read() {
        assert_eq!(
            programs("bash -c 'rm -rf /home/user'"),
            ["rm -rf /home/user", "bash -c rm -rf /home/user"]
        );
        assert_eq!(
            programs("echo $(git reset --hard)"),
            ["git reset --hard", "echo $(…)"]
        );
        assert_eq!(programs("echo `rm -rf /x`")[0], "rm -rf /x");
        assert_eq!(
            programs("bash <<EOF\ngit reset --hard\nEOF")[0],
            "git reset --hard"
        );
        assert_eq!(programs("sh <<<'rm -rf /'")[0], "rm -rf /");
        assert_eq!(programs("eval 'rm -rf /'")[0], "rm -rf /");
        assert_eq!(programs("find . -exec rm -rf {} \\;")[0], "rm -rf {}");
        assert!(
            programs("node -e \"require('child_process').execSync('rm -rf /')\"")
                .contains(&"rm -rf /".to_string())
        );
        let code = read("python3 -c 'import shutil; shutil.rmtree(\"/x\")'").code;
        assert_eq!(code[0].text, "import shutil; shutil.rmtree(\"/x\")");
    }

    #[test]
    fn data_is_not_run() {
        assert_eq!(
            programs("cat <<EOF\nrm -rf /\ngit reset --hard\nEOF"),
            ["cat"]
        );
        assert_eq!(programs("echo 'rm -rf /'"), ["echo rm -rf /"]);
        assert_eq!(programs("git commit -m \"fix rm -rf detection\"").len(), 1);
        assert_eq!(
            programs("python -c \"print('rm -rf /')\""),
            ["python -c print('rm -rf /')"]
        );
        assert_eq!(programs("for f in a b; do echo $f; done"), ["echo $f"]);
    }

    #[test]
    fn redirections_name_their_files() {
        let reading = read("echo x >> ~/.bashrc 2>&1 < input.txt");
        let command = &reading.commands[0];
        assert_eq!(command.words, ["echo", "x"]);
        assert_eq!(
            command.redirects,
            [
                Redirect {
                    write: true,
                    target: "~/.bashrc".into()
                },
                Redirect {
                    write: false,
                    target: "input.txt".into()
                }
            ]
        );
    }

    #[test]
    fn variables_that_decide_a_path_are_expanded() {
        assert_eq!(programs("rm -rf $HOME"), ["rm -rf ~"]);
        assert_eq!(
            programs("rm -rf \"${TMPDIR:-/tmp}/build\""),
            ["rm -rf /tmp/build"]
        );
        assert_eq!(programs("rm -rf ${BUILD:-out}"), ["rm -rf out"]);
        assert_eq!(programs("rm -rf $DIR/x"), ["rm -rf $DIR/x"]);
    }

    #[test]
    fn hostile_text_ends() {
        let deep = "$(".repeat(5000);
        let _ = read(&deep);
        let many = "x;".repeat(10_000);
        assert!(read(&many).incomplete);
        let _ = read("'unclosed");
        let _ = read("\"unclosed $(");
        let _ = read("cat <<EOF");
    }
}
