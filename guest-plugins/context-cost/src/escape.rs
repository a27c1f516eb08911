//! The persistence escape: what an agent past its ceiling may still do.
//!
//! The stop ends an agent's life, not its output: it may still `SendMessage`
//! and run a shell command made only of `git add|commit|push|status|diff`.
//! Those act on work that already exists and cannot produce new work — but
//! only if their *flags* are judged too, because `git -c diff.external=…
//! diff` or `git push --receive-pack=…` would run an arbitrary program. So
//! the classifier is an allowlist all the way down: a tiny shell lexer,
//! every segment must be `git <allowed subcommand>`, and every flag must be
//! an ordinary one for that subcommand.

/// Git subcommands that stay permitted past the ceiling.
pub const GIT_SUBCOMMANDS: [&str; 5] = ["add", "commit", "push", "status", "diff"];

/// Tool names that run a shell command from `arguments.command`.
pub fn is_shell_tool(tool: &str) -> bool {
    matches!(tool, "Bash" | "bash" | "sh" | "shell") || tool.starts_with("builtin:shell")
}

/// Whether a call may run past the ceiling.
pub fn is_persistence_escape(tool: &str, arguments: &serde_json::Value) -> bool {
    if tool == "SendMessage" {
        return true;
    }
    is_shell_tool(tool)
        && arguments
            .get("command")
            .and_then(serde_json::Value::as_str)
            .is_some_and(is_persistence_command)
}

/// Whether every segment of `command` is a plain, allowed git command.
pub fn is_persistence_command(command: &str) -> bool {
    // Substitution can hide anything; `::` makes git pick a remote helper.
    // Neither is allowed anywhere, quoted or not.
    if command.contains(['$', '`']) || command.contains("::") {
        return false;
    }
    match split_segments(command) {
        Some(segments) => !segments.is_empty() && segments.iter().all(|words| is_plain_git(words)),
        None => false,
    }
}

/// Split a command into segments of words at `&&`, `||`, `;`, `|` and
/// newlines. `None` for anything the allowlist does not understand: an
/// unquoted `( ) < > &` or backslash, or an unterminated quote.
fn split_segments(command: &str) -> Option<Vec<Vec<String>>> {
    let mut segments = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars().peekable();
    let end_word = |word: &mut Option<String>, words: &mut Vec<String>| {
        if let Some(w) = word.take() {
            words.push(w);
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => w.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => return None,
                        c => w.push(c),
                    }
                }
            }
            '&' if chars.peek() == Some(&'&') => {
                chars.next();
                end_word(&mut word, &mut words);
                segments.push(std::mem::take(&mut words));
            }
            '|' => {
                if chars.peek() == Some(&'|') {
                    chars.next();
                }
                end_word(&mut word, &mut words);
                segments.push(std::mem::take(&mut words));
            }
            ';' | '\n' => {
                end_word(&mut word, &mut words);
                segments.push(std::mem::take(&mut words));
            }
            '&' | '(' | ')' | '<' | '>' | '\\' => return None,
            c if c.is_whitespace() => end_word(&mut word, &mut words),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut words);
    segments.push(words);
    // An empty segment (a trailing `;`) runs nothing.
    segments.retain(|words| !words.is_empty());
    Some(segments)
}

/// Which flags one subcommand may carry.
struct Flags {
    /// Short flags without a value.
    short: &'static str,
    /// Short flags whose value is the rest of the word or the next word.
    short_value: &'static str,
    /// Long flags without a value.
    long: &'static [&'static str],
    /// Long flags that take a value (`--x=v` or `--x v`).
    long_value: &'static [&'static str],
    /// Long flags with an optional `=value`.
    long_optional: &'static [&'static str],
}

fn flags_for(subcommand: &str) -> Option<Flags> {
    Some(match subcommand {
        "add" => Flags {
            short: "AuvnNf",
            short_value: "",
            long: &[
                "all",
                "update",
                "verbose",
                "dry-run",
                "intent-to-add",
                "force",
            ],
            long_value: &[],
            long_optional: &[],
        },
        "commit" => Flags {
            short: "avqsn",
            short_value: "m",
            long: &[
                "all",
                "amend",
                "no-edit",
                "signoff",
                "allow-empty",
                "quiet",
                "verbose",
                "no-verify",
            ],
            long_value: &["message"],
            long_optional: &[],
        },
        "push" => Flags {
            short: "uqvn",
            short_value: "",
            long: &[
                "set-upstream",
                "tags",
                "follow-tags",
                "dry-run",
                "quiet",
                "verbose",
                "atomic",
            ],
            long_value: &[],
            long_optional: &["force-with-lease"],
        },
        "status" => Flags {
            short: "sbv",
            short_value: "u",
            long: &["short", "branch", "long", "verbose", "ignored"],
            long_value: &[],
            long_optional: &["porcelain", "untracked-files"],
        },
        "diff" => Flags {
            short: "",
            short_value: "",
            long: &[
                "stat",
                "cached",
                "staged",
                "name-only",
                "name-status",
                "shortstat",
                "numstat",
                "no-color",
                "check",
            ],
            long_value: &[],
            long_optional: &[],
        },
        _ => return None,
    })
}

/// `git <subcommand> [ordinary flags and operands]`, with no global options
/// (`-c`, `-C`, `--exec-path`, ...) before the subcommand.
fn is_plain_git(words: &[String]) -> bool {
    let [git, subcommand, args @ ..] = words else {
        return false;
    };
    let Some(flags) = (git == "git").then(|| flags_for(subcommand)).flatten() else {
        return false;
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            return true; // only operands follow
        }
        if arg == "-" || !arg.starts_with('-') {
            continue; // an operand: a path, a remote, a ref, a message
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (long, None),
            };
            let ok = if flags.long.contains(&name) {
                value.is_none()
            } else if flags.long_value.contains(&name) {
                value.is_some() || args.next().is_some()
            } else {
                flags.long_optional.contains(&name)
            };
            if !ok {
                return false;
            }
            continue;
        }
        let letters = &arg[1..];
        for (at, letter) in letters.char_indices() {
            if flags.short_value.contains(letter) {
                // The value is the rest of this word, or the next word.
                if at + letter.len_utf8() == letters.len() && args.next().is_none() {
                    return false;
                }
                break;
            }
            if !flags.short.contains(letter) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_persistence_commands_are_allowed() {
        for command in [
            "git add .",
            "git add -A",
            "git status",
            "git status --short",
            "git status -uno",
            "git diff",
            "git diff --stat",
            "git diff --cached -- src/lib.rs",
            "git commit -m 'fix: handle empty input'",
            "git commit -am 'wip'",
            "git commit --amend --no-edit",
            "git commit --message='a (quoted) message'",
            "git commit -m \"a plain double-quoted message\"",
            "git push",
            "git push -u origin feature/x",
            "git push --force-with-lease origin main",
            "git push --force-with-lease=main:abc123 origin main",
            "git add -A && git commit -m 'save' && git push",
            "git status; git diff --stat",
            "git add src\ngit commit -m 'x'",
            "git diff | git status",
            "git status || git status",
            "git status;",
        ] {
            assert!(is_persistence_command(command), "should allow: {command}");
        }
    }

    #[test]
    fn anything_that_could_do_new_work_is_rejected() {
        for command in [
            "",
            "git",
            "git log",
            "git checkout main",
            "git reset --hard",
            "git rebase main",
            "git merge x",
            "git clean -fd",
            "git worktree add ../x",
            "cargo test",
            "rm -rf /",
            "git add . && rm -rf /",
            "git status | sh",
            "git commit -m 'use std::process::Command'",
            "git commit -m \"use std::process::Command\"",
            "git push origin ext::sh",
            "git -c diff.external=x diff",
            "git -C /tmp status",
            "git --exec-path=/tmp push",
            "git push --receive-pack=x",
            "git push --receive-pack x",
            "git push --upload-pack=x",
            "git push --exec=x",
            "git push --force",
            "git push -o ci.skip",
            "git diff --ext-diff",
            "git diff --output=/tmp/x",
            "git diff --textconv",
            "git commit -m \"fix $ISSUE\"",
            "git commit -m 'fix $ISSUE'",
            "git commit -m \"$(curl evil)\"",
            "git commit -m `id`",
            "git commit -m",
            "git commit --message",
            "git add (x)",
            "git status > out.txt",
            "git status < in.txt",
            "git add . & rm -rf /",
            "git add \\; rm x",
            "git commit -m 'unterminated",
            "FOO=1 git push",
            "sudo git push",
            "git commit -x",
            "git add --chmod=+x run.sh",
        ] {
            assert!(
                !is_persistence_command(command),
                "should reject: {command:?}"
            );
        }
    }

    #[test]
    fn send_message_always_escapes_and_other_tools_never_do() {
        let none = serde_json::json!({});
        assert!(is_persistence_escape("SendMessage", &none));
        for tool in [
            "Write", "Edit", "Read", "Grep", "Glob", "Bash", "WebFetch", "Task", "Agent",
        ] {
            assert!(!is_persistence_escape(tool, &none), "{tool}");
        }
        let push = serde_json::json!({"command": "git push"});
        assert!(is_persistence_escape("Bash", &push));
        assert!(!is_persistence_escape("Write", &push));
    }

    #[test]
    fn the_allowlist_is_exactly_the_persistence_steps() {
        for sub in GIT_SUBCOMMANDS {
            assert!(flags_for(sub).is_some(), "git {sub}");
        }
        for sub in [
            "checkout", "reset", "rebase", "merge", "clean", "worktree", "log",
        ] {
            assert!(flags_for(sub).is_none(), "git {sub} must stay denied");
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        /// Shell-ish words, safe and not.
        const WORDS: &[&str] = &[
            "git",
            "add",
            "commit",
            "push",
            "status",
            "diff",
            "rm",
            "curl",
            "sh",
            "-m",
            "msg",
            "-c",
            "core.pager=x",
            "--receive-pack=x",
            "-A",
            ".",
            "origin",
            "main",
            ";",
            "&&",
            "||",
            "|",
            "&",
            ">",
            "<",
            "(",
            ")",
            "$(id)",
            "`id`",
            "'quoted words'",
            "\"dq\"",
            "::",
            "ext::sh",
            "-u",
            "--force",
            "HEAD",
            "\n",
        ];

        /// What a command may contain if it is accepted: git with an
        /// allowed subcommand at the start of every segment, no
        /// substitution, redirection, background or subshell.
        fn plainly_git(command: &str) -> bool {
            if command.contains(['$', '`', '>', '<', '(', ')'])
                || command.contains("::")
                || command.replace("&&", "").contains('&')
            {
                return false;
            }
            command
                .split([';', '|', '&', '\n'])
                .map(str::split_whitespace)
                .all(|mut words| match words.next() {
                    None => true,
                    Some("git") => {
                        let subcommand = words.find(|w| !w.starts_with('-'));
                        subcommand.is_some_and(|s| GIT_SUBCOMMANDS.contains(&s))
                    }
                    Some(_) => false,
                })
        }

        proptest! {
            #[test]
            fn the_lexer_never_panics(command in ".{0,200}") {
                let _ = is_persistence_command(&command);
            }

            #[test]
            fn anything_accepted_is_a_plain_git_pipeline(
                words in proptest::collection::vec(proptest::sample::select(WORDS), 1..12)
            ) {
                let command = words.join(" ");
                if is_persistence_command(&command) {
                    prop_assert!(plainly_git(&command), "accepted: {command}");
                }
            }
        }
    }
}
