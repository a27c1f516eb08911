//! The docs cannot rot: the book under `docs/` builds with mdBook, every
//! link in it and in the README leads to a file and heading that exist,
//! every `toolgate` command they show names subcommands and flags the
//! binary has, the configuration reference names exactly the keys the
//! config takes, and the Grafana dashboard asks only for metrics the daemon
//! serves.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn book_src() -> PathBuf {
    root().join("docs/src")
}

/// The book's chapters and the README: the Markdown a reader reads.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    files.extend(files_under(&book_src(), "md"));
    files
}

/// The files under `dir` (at any depth) whose extension is `extension`.
fn files_under(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Where a relative link from `page` leads: the file, and the fragment if
/// it has one; `None` for a link off this machine (a URL, mail).
fn link_target<'a>(page: &Path, target: &'a str) -> Option<(PathBuf, Option<&'a str>)> {
    if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
        return None;
    }
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    let dest = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap().join(file)
    };
    Some((dest, fragment))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block: its info string, its text and the line it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

/// Split Markdown into its fenced code blocks and the prose around them
/// (the prose with each block's lines blanked, so line numbers still hold).
fn split(markdown: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match open.as_mut() {
            None if fence => {
                open = Some(Block {
                    info: line.trim_start().trim_start_matches('`').trim().to_string(),
                    text: String::new(),
                    line: n + 1,
                });
                prose.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
            Some(_) if fence => {
                blocks.push(open.take().unwrap());
                prose.push('\n');
            }
            Some(block) => {
                block.text.push_str(line);
                block.text.push('\n');
                prose.push('\n');
            }
        }
    }
    (blocks, prose)
}

/// Inline code spans of prose, a span wrapped over lines joined into one,
/// with the line each starts on.
fn inline_code(prose: &str) -> Vec<(usize, String)> {
    let span = Regex::new(r"`([^`]+)`").unwrap();
    span.captures_iter(prose)
        .map(|c| {
            let line = prose[..c.get(0).unwrap().start()].lines().count().max(1);
            (line, c[1].split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// The anchor mdBook (and GitHub) give a heading: lower case, spaces to
/// hyphens, everything but letters, digits, `-` and `_` dropped.
fn anchor(heading: &str) -> String {
    let text = heading.replace('`', "");
    text.trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    let (_, prose) = split(markdown);
    prose
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| anchor(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn the_book_builds_with_mdbook() {
    const INSTALL: &str = "cargo install --locked --root target/tools mdbook@0.5.4 \
                           --no-default-features --features search";
    let mdbook = root().join("target/tools/bin/mdbook");
    let version = Command::new(&mdbook).arg("--version").output();
    match version {
        Ok(v) if String::from_utf8_lossy(&v.stdout).trim() == "mdbook v0.5.4" => {}
        other => {
            return common::missing::missing(
                "mdbook",
                &format!("mdBook 0.5.4 is not in target/tools ({other:?})"),
                INSTALL,
            );
        }
    }
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(&mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        // Its warnings are what this test reads: none may be filtered out.
        .env_remove("MDBOOK_LOG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "mdbook build failed:\n{log}");
    // mdBook reports a missing include or a broken SUMMARY entry as an
    // error or a warning and may still write the book: neither is allowed.
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("WARN"))
        .collect();
    assert!(complaints.is_empty(), "mdbook build complained:\n{log}");
    // Every chapter was rendered, the WIT files included whole.
    let wit = read(&out.path().join("reference/wit.html"));
    assert!(
        wit.contains("interface gate") && !wit.contains("{{#include"),
        "the WIT reference did not include the contract"
    );
    every_link_in_the_rendered_book_leads_somewhere(out.path());
}

/// In the book as mdBook rendered it — headings' ids as mdBook made them,
/// included files, reference links, images, raw HTML — every relative
/// `href` and `src` leads to a file of the book, and a `#fragment` to an
/// id in it.
fn every_link_in_the_rendered_book_leads_somewhere(book: &Path) {
    let attribute = Regex::new(r#"(?:href|src)="([^"]*)""#).unwrap();
    let id = Regex::new(r#"\bid="([^"]*)""#).unwrap();
    let pages = files_under(book, "html");
    let ids = |page: &Path| -> BTreeSet<String> {
        id.captures_iter(&read(page))
            .map(|c| c[1].to_string())
            .collect()
    };
    let mut checked = 0;
    let mut broken = Vec::new();
    // print.html repeats every chapter with its links rewritten; 404.html
    // links the site's root, which only a web server has.
    for page in pages
        .iter()
        .filter(|p| !p.ends_with("print.html") && !p.ends_with("404.html"))
    {
        let html = read(page);
        for target in attribute.captures_iter(&html).map(|c| c[1].to_string()) {
            let Some((dest, fragment)) = link_target(page, &target) else {
                continue;
            };
            checked += 1;
            let at = format!("{}: `{target}`", page.strip_prefix(book).unwrap().display());
            if !dest.is_file() {
                broken.push(format!("{at} leads to no file of the book"));
            } else if let Some(fragment) = fragment
                && dest.extension().is_some_and(|e| e == "html")
                && !ids(&dest).contains(fragment)
            {
                broken.push(format!("{at} names no id in {}", dest.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links in the rendered book:\n{}",
        broken.join("\n")
    );
    assert!(
        checked > 500,
        "only {checked} links were found in the rendered book"
    );
}

#[test]
fn every_chapter_is_in_the_summary() {
    let summary = read(&book_src().join("SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = Regex::new(r"\]\(([^)]+\.md)\)")
        .unwrap()
        .captures_iter(&summary)
        .map(|c| book_src().join(&c[1]))
        .collect();
    for chapter in documents() {
        if chapter.starts_with(book_src()) && !chapter.ends_with("SUMMARY.md") {
            assert!(
                listed.contains(&chapter),
                "{} is not listed in docs/src/SUMMARY.md, so the book never shows it",
                shown(&chapter)
            );
        }
    }
}

/// Every relative link leads to a file that exists, and a `#fragment` to a
/// heading of that file. A chapter links only within the book (the
/// rendered book holds nothing else; show a repository file with an
/// `{{#include}}`); the README may link anywhere in the repository.
#[test]
fn every_link_leads_to_a_file_and_heading_that_exist() {
    // Link text may wrap over lines; the target may not.
    let link = Regex::new(r"!?\[[^\]]*\]\(([^)\s]+)\)").unwrap();
    let code_span = Regex::new(r"`[^`\n]*`").unwrap();
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let (_, prose) = split(&text);
        let prose = code_span.replace_all(&prose, "");
        for found in link.captures_iter(&prose) {
            let target = found[1].to_string();
            let n = prose[..found.get(0).unwrap().start()]
                .lines()
                .count()
                .max(1)
                - 1;
            let Some((dest, fragment)) = link_target(&doc, &target) else {
                continue;
            };
            checked += 1;
            let at = format!("{}:{}: `{target}`", shown(&doc), n + 1);
            let Ok(dest) = dest.canonicalize() else {
                broken.push(format!("{at} leads to no file"));
                continue;
            };
            if doc.starts_with(book_src()) && !dest.starts_with(book_src()) {
                broken.push(format!("{at} leaves the book (include the file instead)"));
                continue;
            }
            if let Some(fragment) = fragment
                && dest.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&dest)).contains(fragment)
            {
                broken.push(format!("{at} names no heading of {}", shown(&dest)));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 30,
        "only {checked} links were found: is the reader broken?"
    );
}

/// The binary's command tree, read from its own `--help`: each command's
/// subcommands and the options its help names.
struct Cli {
    subcommands: BTreeMap<String, Cli>,
    /// Another name of a subcommand (`approvals` for `gates`).
    aliases: BTreeMap<String, String>,
    /// Each option (long and short) and the values clap says it takes
    /// (empty: any value, or none).
    options: BTreeMap<String, BTreeSet<String>>,
}

fn help(path: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(path)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "toolgate {path:?} --help failed");
    String::from_utf8(out.stdout).unwrap()
}

fn cli(path: &[&str]) -> Cli {
    let text = help(path);
    let option = Regex::new(r"(?m)^\s+(?:(-[A-Za-z0-9]), )?(--[a-z0-9-]+)").unwrap();
    let possible = Regex::new(r"\[possible values: ([^\]]+)\]").unwrap();
    let explained = Regex::new(r"(?m)^\s+- ([a-z0-9-]+)").unwrap();
    let mut options: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let starts: Vec<_> = option.captures_iter(&text).collect();
    for (n, c) in starts.iter().enumerate() {
        // What clap says of this option runs to the next one.
        let end = starts
            .get(n + 1)
            .map_or(text.len(), |next| next.get(0).unwrap().start());
        let said = &text[c.get(0).unwrap().end()..end];
        // `[possible values: a, b]`, or, for values with their own help,
        // "Possible values:" and a `- a: …` line each.
        let mut values: BTreeSet<String> = possible
            .captures(said)
            .map(|v| v[1].split(',').map(|s| s.trim().to_string()).collect())
            .unwrap_or_default();
        if let Some((_, list)) = said.split_once("Possible values:") {
            values.extend(explained.captures_iter(list).map(|v| v[1].to_string()));
        }
        if let Some(short) = c.get(1) {
            options.insert(short.as_str().to_string(), values.clone());
        }
        options.insert(c[2].to_string(), values);
    }
    let mut subcommands = BTreeMap::new();
    let mut aliases = BTreeMap::new();
    if let Some(commands) = text.split("Commands:\n").nth(1) {
        for line in commands.lines().take_while(|l| l.starts_with("  ")) {
            let name = line.split_whitespace().next().unwrap();
            // clap lists its own `help` as a command too.
            if name == "help" || line.starts_with("   ") {
                continue;
            }
            let mut sub = path.to_vec();
            sub.push(name);
            // `[alias: approvals]`, `[aliases: a, b]`: the same command.
            let other_names = line
                .split_once("[alias")
                .and_then(|(_, rest)| rest.split_once(':'))
                .map(|(_, names)| names.trim_end_matches(']').split(',').map(str::trim));
            for alias in other_names.into_iter().flatten() {
                aliases.insert(alias.to_string(), name.to_string());
            }
            subcommands.insert(name.to_string(), cli(&sub));
        }
    }
    Cli {
        subcommands,
        aliases,
        options,
    }
}

/// The commands of a shell line, without a trailing comment, split at
/// shell operators (`&&`, `|`, `;`, …), each as its words; none if the line
/// is not shell words.
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut quote = None;
    let mut cut = line.len();
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if i == 0 || line[..i].ends_with(' ') => {
                cut = i;
                break;
            }
            _ => {}
        }
    }
    let Some(words) = shlex::split(&line[..cut]) else {
        return Vec::new();
    };
    words
        .split(|w| ["|", "||", "&&", ";", "&"].contains(&w.as_str()))
        .map(|command| {
            // A redirection ends what the program sees.
            let end = command
                .iter()
                .position(|w| w.starts_with('>') || w.starts_with('<') || w.starts_with("2>"))
                .unwrap_or(command.len());
            command[..end].to_vec()
        })
        .collect()
}

/// The arguments a command gives `toolgate`, if it runs it: `toolgate …`,
/// any path to it (`/usr/local/bin/toolgate`, `'/…/toolgate'`), the
/// walk-through's `$TG`, behind `sudo`, `env`, `runuser -u USER --` or
/// variable assignments, and `cargo run -- …`.
fn toolgate_words(words: &[String]) -> Option<&[String]> {
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        if word.rsplit('/').next() == Some("toolgate") || word == "$TG" {
            return Some(&words[i + 1..]);
        }
        match word {
            "sudo" | "env" | "runuser" | "--" => i += 1,
            "-u" => i += 2,
            _ if word.contains('=') => i += 1,
            _ => break,
        }
    }
    if words.first().is_some_and(|w| w == "cargo") && words.get(1).is_some_and(|w| w == "run") {
        let dashes = words.iter().position(|w| w == "--")?;
        return Some(&words[dashes + 1..]);
    }
    None
}

/// What is wrong with a documented `toolgate` command, if anything.
fn check_command(cli: &Cli, words: &[String]) -> Option<String> {
    const GLOBAL: &[&str] = &["--config", "--store"];
    let mut node = cli;
    let mut path = Vec::new();
    let mut rest = words.iter().peekable();
    // Global options first, with their values.
    while rest.next_if(|w| GLOBAL.contains(&w.as_str())).is_some() {
        rest.next();
    }
    let mut options = Vec::new();
    // What each option was given, where it is a plain word.
    let mut values: Vec<(String, String)> = Vec::new();
    // A usage line's optional parts, `[--always]`, are words too.
    let mut rest = rest
        .map(|w| w.trim_start_matches('[').trim_end_matches(']'))
        .peekable();
    while let Some(word) = rest.next() {
        if word == "--" {
            break;
        }
        if word.starts_with('-') && word.len() > 1 {
            let (option, value) = match word.split_once('=') {
                Some((option, value)) => (option, Some(value.to_string())),
                None => (word, rest.peek().map(|v| v.to_string())),
            };
            options.push(option.to_string());
            if let Some(value) = value {
                values.push((option.to_string(), value));
            }
            continue;
        }
        if options.is_empty() {
            let name = node.aliases.get(word).map_or(word, String::as_str);
            if let Some(sub) = node.subcommands.get(name) {
                node = sub;
                path.push(word.to_string());
                continue;
            }
            let plain = word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit());
            if !node.subcommands.is_empty() && plain && !word.is_empty() {
                return Some(format!(
                    "`toolgate {}` has no subcommand `{word}`",
                    path.join(" ")
                ));
            }
        }
    }
    for option in options {
        if !node.options.contains_key(&option) && !GLOBAL.contains(&option.as_str()) {
            return Some(format!(
                "`toolgate {}` has no option `{option}`",
                path.join(" ")
            ));
        }
    }
    // `--for codex`, `--decision approve|deny`: each plain alternative is a
    // value the option takes.
    for (option, value) in values {
        let Some(possible) = node.options.get(&option).filter(|p| !p.is_empty()) else {
            continue;
        };
        for alternative in value.split('|') {
            let plain = !alternative.is_empty()
                && alternative
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c.is_ascii_digit());
            if plain && !possible.contains(alternative) {
                return Some(format!(
                    "`toolgate {} {option}` takes no value `{alternative}` ({possible:?})",
                    path.join(" ")
                ));
            }
        }
    }
    None
}

/// Every `toolgate` command the docs show — in code blocks and inline — is
/// one the binary takes: a renamed subcommand or flag fails here, naming
/// the page and line.
#[test]
fn every_documented_command_names_subcommands_and_options_the_binary_has() {
    let cli = cli(&[]);
    let mut checked = 0;
    let mut wrong = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let (blocks, prose) = split(&text);
        let mut lines: Vec<(usize, String)> = Vec::new();
        for block in &blocks {
            let shell = ["sh", "console", "bash", "shell"].contains(&block.info.as_str());
            // A `text` block shows a session: its `$ ` lines are commands.
            let session = block.info == "text";
            if !shell && !session {
                continue;
            }
            let mut joined = String::new();
            for (n, line) in block.text.lines().enumerate() {
                let line = match line.strip_prefix("$ ") {
                    Some(command) => command,
                    None if session && joined.is_empty() => continue,
                    None => line,
                };
                if let Some(start) = line.strip_suffix('\\') {
                    joined.push_str(start);
                    continue;
                }
                joined.push_str(line);
                lines.push((block.line + n + 1, std::mem::take(&mut joined)));
            }
        }
        lines.extend(
            inline_code(&prose)
                .into_iter()
                .filter(|(_, code)| code.contains("toolgate ")),
        );
        for (n, line) in lines {
            for words in commands(&line) {
                let Some(args) = toolgate_words(&words) else {
                    continue;
                };
                checked += 1;
                if let Some(problem) = check_command(&cli, args) {
                    wrong.push(format!("{}:{n}: {problem}\n    {line}", shown(&doc)));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "documented commands the binary does not take:\n{}",
        wrong.join("\n")
    );
    assert!(
        checked > 100,
        "only {checked} commands were found: is the reader broken?"
    );
}

/// The configuration reference's table rows, as `[section] key` (or `key`
/// at the top level).
fn documented_keys() -> BTreeSet<String> {
    let reference = read(&book_src().join("reference/configuration.md"));
    let row = Regex::new(r"(?m)^\| `([^`]+)` \|").unwrap();
    row.captures_iter(&reference)
        .map(|c| c[1].to_string())
        .collect()
}

/// The keys one config struct takes, as serde's derive declares them: a
/// deserializer that only asks.
mod fields {
    use serde::de::{self, Deserialize, Visitor};

    pub struct Fields(pub Vec<&'static str>);

    struct Ask<'a>(&'a mut Option<&'static [&'static str]>);

    impl<'de> de::Deserializer<'de> for Ask<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = Some(fields);
            Err(de::Error::custom("asked"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    pub fn of<T: for<'de> Deserialize<'de>>() -> Fields {
        let mut fields = None;
        let _ = T::deserialize(Ask(&mut fields));
        Fields(fields.expect("a config type that is not a struct").to_vec())
    }
}

/// A documented key as the table path it is in and the key: `store` is
/// (``, `store`), `[plugins.NAME.limits] memory_mib` is
/// (`plugins.NAME.limits`, `memory_mib`), `[plugins.NAME.config]` is
/// (`plugins.NAME.config`, ``).
fn table_and_key(documented: &str) -> (String, String) {
    match documented.strip_prefix('[') {
        None => (String::new(), documented.to_string()),
        Some(rest) => {
            let (table, key) = rest.split_once(']').unwrap();
            (table.to_string(), key.trim().to_string())
        }
    }
}

/// The configuration reference names every key the config takes, and no
/// key it does not: a key added, renamed or removed in `config.rs` fails
/// here until the reference says so.
#[test]
fn the_configuration_reference_names_exactly_the_keys_the_config_takes() {
    use toolgate::config::*;
    let tables: BTreeMap<&str, Vec<&str>> = BTreeMap::from([
        ("", fields::of::<Config>().0),
        ("retention", fields::of::<RetentionConfig>().0),
        ("approvals", fields::of::<ApprovalsConfig>().0),
        ("notify", fields::of::<NotifyConfig>().0),
        ("daemon", fields::of::<DaemonConfig>().0),
        ("probe", fields::of::<ProbeConfig>().0),
        ("log", fields::of::<LogConfig>().0),
        ("audit", fields::of::<AuditConfig>().0),
        ("plugins.NAME", fields::of::<PluginConfig>().0),
        ("plugins.NAME.limits", fields::of::<Limits>().0),
    ]);
    let documented: Vec<(String, String)> = documented_keys()
        .iter()
        .map(|key| table_and_key(key))
        .collect();
    assert!(
        documented.len() > 40,
        "only {} keys documented",
        documented.len()
    );
    let mut problems = Vec::new();
    for (table, keys) in &tables {
        for key in keys {
            let nested = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            let is_documented = documented.iter().any(|(t, k)| {
                (t == table && k == key) || t == &nested || t.starts_with(&format!("{nested}."))
            });
            if !is_documented {
                problems.push(format!("`{key}` in [{table}] is taken but not documented"));
            }
        }
    }
    for (table, key) in &documented {
        let known = match tables.get(table.as_str()) {
            Some(keys) => keys.contains(&key.as_str()),
            // `[plugins.NAME.config]`, `[approvals.tokens] NAME`: a table
            // its parent takes as one key, holding names of the operator's.
            None => {
                let (parent, last) = table.rsplit_once('.').unwrap_or(("", table));
                let placeholder = key.is_empty() || key.chars().all(|c| c.is_ascii_uppercase());
                placeholder && tables.get(parent).is_some_and(|keys| keys.contains(&last))
            }
        };
        if !known {
            problems.push(format!(
                "`{key}` in [{table}] is documented but the config takes no such key"
            ));
        }
    }
    // The rollout's keys are documented in its row.
    let reference = read(&book_src().join("reference/configuration.md"));
    let rollout = reference
        .lines()
        .find(|l| l.starts_with("| `[plugins.NAME] rollout`"))
        .unwrap_or_default();
    for key in fields::of::<Rollout>().0 {
        if !rollout.contains(&format!("{key} =")) {
            problems.push(format!("the rollout key `{key}` is not documented"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A code block's text with mdBook's whole-file `{{#include PATH}}` lines
/// replaced by the file, as the rendered book shows it.
fn included(doc: &Path, text: &str) -> String {
    text.lines()
        .map(|line| match line.trim().strip_prefix("{{#include ") {
            Some(rest) => read(&doc.parent().unwrap().join(rest.trim_end_matches("}}"))),
            None => format!("{line}\n"),
        })
        .collect()
}

/// Every config the book shows loads, and every fixture file parses.
#[test]
fn every_toml_snippet_loads() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for doc in documents() {
        let (blocks, _) = split(&read(&doc));
        for block in blocks.iter().filter(|b| b.info == "toml") {
            checked += 1;
            let at = format!("{}:{}", shown(&doc), block.line);
            let text = included(&doc, &block.text);
            if text.contains("[[case]]") {
                let path = dir.path().join("fixtures.toml");
                std::fs::write(&path, &text).unwrap();
                toolgate::fixtures::parse(&path)
                    .unwrap_or_else(|e| panic!("{at}: the fixtures do not parse: {e}"));
            } else if text.contains("[[always]]") {
                let path = dir.path().join("always.toml");
                std::fs::write(&path, &text).unwrap();
                toolgate::standing::StandingApprovals::open(Some(path))
                    .unwrap_or_else(|e| panic!("{at}: the standing approvals do not parse: {e}"));
            } else {
                let mut config = toolgate::Config::parse(&text, &at, dir.path().to_path_buf())
                    .unwrap_or_else(|e| panic!("{at}: the config does not load: {e}"));
                // Its plugins load too, so a policy's own table is read by
                // the policy (each refuses keys it does not take). A
                // registry's plugin needs the registry: its reference was
                // checked above.
                let from_registry = |p: &toolgate::config::PluginConfig| {
                    p.path
                        .as_deref()
                        .is_some_and(|path| path.starts_with("oci://"))
                };
                if !config.plugins.values().any(from_registry) {
                    config.cache_dir = Some(dir.path().join("cache"));
                    let store = dir.path().join(format!("{checked}.redb"));
                    toolgate::Service::open(config, Some(store.into()))
                        .unwrap_or_else(|e| panic!("{at}: its plugins do not load: {e}"));
                }
            }
        }
    }
    assert!(checked >= 3, "only {checked} TOML snippets were found");
}

/// The WIT reference includes every file of the contract.
#[test]
fn the_wit_reference_includes_every_wit_file() {
    let reference = read(&book_src().join("reference/wit.md"));
    for entry in std::fs::read_dir(root().join("wit")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".wit") {
            assert!(
                reference.contains(&format!("{{{{#include ../../../wit/{name}}}}}")),
                "docs/src/reference/wit.md does not include wit/{name}"
            );
        }
    }
}

/// The Grafana dashboard asks only for metrics the daemon serves, and shows
/// every one of them.
#[test]
fn the_grafana_dashboard_shows_exactly_the_metrics_the_daemon_serves() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&book_src().join("operating/grafana-dashboard.json")))
            .expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    // One decision (a policy that failed, a shadow) and one reload
    // recorded: a labelled family shows only once it has a sample.
    let metrics = toolgate::metrics::Metrics::default();
    let decision: toolgate::Decision = serde_json::from_value(serde_json::json!({
        "verdict": "deny", "notes": [], "risk": {"category": "low"}, "call_id": "c",
        "duration_us": 10, "policies": [{"name": "lease-gate", "priority": 1, "sha256": "x",
        "verdict": "deny", "notes": [], "duration_us": 1, "failure": "deadline"}],
        "shadows": [{"name": "lease-gate-next", "priority": 1, "sha256": "y",
        "verdict": "allow", "notes": [], "duration_us": 1}]
    }))
    .unwrap();
    metrics.record(&decision);
    metrics.record_reload(true);
    metrics.audit_export().sent("otlp", 1);
    metrics.audit_export().failed("otlp");
    let text = metrics.render(0, 0);
    let served: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert!(served.len() >= 8, "the daemon serves {served:?}");
    let name = Regex::new(r"toolgate_[a-z_]+").unwrap();
    let mut shown = BTreeSet::new();
    for expr in &exprs {
        for m in name.find_iter(expr) {
            let metric = ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .fold(m.as_str(), |n, suffix| n.strip_suffix(suffix).unwrap_or(n));
            assert!(
                served.contains(metric),
                "the dashboard asks for `{}`, which the daemon does not serve ({served:?})",
                m.as_str()
            );
            shown.insert(metric.to_string());
        }
    }
    // The labels it groups by are ones the metrics carry.
    let by = Regex::new(r"by \(([^)]*)\)").unwrap();
    for expr in &exprs {
        for labels in by.captures_iter(expr) {
            for label in labels[1].split(',').map(str::trim).filter(|l| *l != "le") {
                assert!(
                    text.contains(&format!("{label}=\"")),
                    "the dashboard groups by `{label}`, which no metric carries: {expr}"
                );
            }
        }
    }
    let unshown: Vec<_> = served.difference(&shown).collect();
    assert!(
        unshown.is_empty(),
        "the dashboard does not show {unshown:?}"
    );
}

/// The README stays short, its two commands are the ones that work, and CI
/// runs exactly its test command.
#[test]
fn the_readme_is_short_and_ci_runs_its_test_command() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "the README has {lines} lines: move detail into the book"
    );
    let (blocks, _) = split(&readme);
    let first = blocks.first().expect("the README's first code block");
    let commands: Vec<&str> = first
        .text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(
        commands,
        [
            "rustup target add wasm32-wasip2 && cargo run -- check examples/requests/*.json",
            "./.ci/setup && cargo test --workspace",
        ],
        "the README's first block is the two commands"
    );
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim() == commands[1]),
        ".ci/run does not run the README's test command `{}`",
        commands[1]
    );
}

/// The CLI reference has a row for every command the binary has.
#[test]
fn the_cli_reference_lists_every_command() {
    fn leaves(cli: &Cli, path: &mut Vec<String>, out: &mut Vec<String>) {
        if cli.subcommands.is_empty() {
            out.push(path.join(" "));
        }
        for (name, sub) in &cli.subcommands {
            path.push(name.clone());
            leaves(sub, path, out);
            path.pop();
        }
    }
    let mut all = Vec::new();
    leaves(&cli(&[]), &mut Vec::new(), &mut all);
    let reference = read(&book_src().join("reference/cli.md"));
    let listed: Vec<String> = inline_code(&reference)
        .into_iter()
        .map(|(_, code)| code)
        .collect();
    let missing: Vec<&String> = all
        .iter()
        .filter(|command| {
            let words: Vec<&str> = command.split(' ').collect();
            !listed.iter().any(|code| {
                commands(code).iter().any(|c| {
                    toolgate_words(c).is_some_and(|args| {
                        let args: Vec<String> = args
                            .iter()
                            .flat_map(|a| a.split('|').map(str::to_string).collect::<Vec<_>>())
                            .collect();
                        words.iter().all(|w| args.iter().any(|a| a == w))
                    })
                })
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/src/reference/cli.md has no row for: {missing:?}"
    );
}

/// The bundled policies' key tables name exactly the keys each policy's
/// config takes (its own `deny_unknown_fields` struct).
#[test]
fn the_bundled_policies_tables_name_exactly_the_keys_each_takes() {
    let chapter = read(&book_src().join("policies/bundled.md"));
    let policies = [
        (
            "context-cost",
            fields::of::<context_cost::budget::CostConfig>().0,
        ),
        (
            "shadow-sentinel",
            fields::of::<shadow_sentinel::config::SentinelConfig>().0,
        ),
        ("lease-gate", fields::of::<lease_gate::LeaseGateConfig>().0),
        // The rules' table is one rule's keys (its config is the `rule` list).
        ("rules", fields::of::<rules::rule::RuleSpec>().0),
        ("safeguards", fields::of::<safeguards::SafeguardsConfig>().0),
        ("flow", fields::of::<flow::config::FlowConfig>().0),
    ];
    let row = Regex::new(r"(?m)^\| `([a-z_]+)` \|").unwrap();
    let mut problems = Vec::new();
    for (policy, keys) in policies {
        let section = chapter
            .split(&format!("\n## {policy}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no section for {policy}"));
        let section = section.split("\n## ").next().unwrap();
        let table = section
            .split("| key | default | meaning |")
            .nth(1)
            .unwrap_or_else(|| panic!("no key table for {policy}"));
        let table: String = table
            .lines()
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect::<Vec<_>>()
            .join("\n");
        let documented: BTreeSet<String> = row
            .captures_iter(&table)
            .map(|c| c[1].to_string())
            .collect();
        let taken: BTreeSet<String> = keys.iter().map(|k| k.to_string()).collect();
        for key in taken.difference(&documented) {
            problems.push(format!(
                "{policy} takes `{key}`, which its table does not document"
            ));
        }
        for key in documented.difference(&taken) {
            problems.push(format!(
                "{policy}'s table documents `{key}`, which it does not take"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The performance plots can be drawn again: docs/perf/plot.py reads the
/// data the benchmark writes (`TOOLGATE_BENCH_JSON`, here a run's data
/// cut to two rows and its curves) and draws both plots, naming every row.
#[test]
fn the_performance_plots_are_drawn_from_benchmark_data() {
    let dir = tempfile::tempdir().unwrap();
    let percentiles: Vec<f64> = (0..=100).map(|p| 10.0 + p as f64).collect();
    let data = serde_json::json!({
        "machine": "test machine", "date_ms": 1_796_182_235_512_u64, "quick": true,
        "distributions": [
            {"case": "warm composed", "percentiles_us": percentiles},
            {"case": "fresh composed", "percentiles_us": percentiles.iter().map(|v| v * 2.0).collect::<Vec<_>>()},
        ],
        "curves": {
            "policies: warm instances": [[1.0, 3.0], [5.0, 11.0], [20.0, 45.0]],
            "stored events: low-risk `Read`": [[1000.0, 40.0], [100000.0, 43.0]],
        },
    });
    let input = dir.path().join("bench.json");
    std::fs::write(&input, data.to_string()).unwrap();
    let run = match Command::new("python3")
        .arg(root().join("docs/perf/plot.py"))
        .arg(&input)
        .arg(dir.path())
        .output()
    {
        Ok(run) => run,
        Err(e) => {
            return common::missing::missing(
                "python",
                &format!("python3 does not run ({e})"),
                "apt-get install python3",
            );
        }
    };
    assert!(run.status.success(), "plot.py failed: {run:?}");
    let latency = read(&dir.path().join("perf-latency.svg"));
    assert!(latency.contains("warm composed") && latency.contains("fresh composed"));
    assert!(
        latency.contains("test machine"),
        "the caption names the run"
    );
    let scaling = read(&dir.path().join("perf-scaling.svg"));
    assert!(scaling.contains("warm instances") && scaling.contains("low-risk `Read`"));
    // Both plots the book shows are in the book.
    for plot in ["perf-latency.svg", "perf-scaling.svg"] {
        assert!(
            book_src().join("images").join(plot).is_file(),
            "{plot} is missing"
        );
    }
}
