//! What self-protection (the guard every call passes before any policy)
//! costs on large and hostile arguments: the bundled default config's
//! control plane checking one call made in a project directory, alone,
//! repeated. Performance round 4's
//! targets: at most 50 µs on a 10 KB argument, at most 1 ms on any input
//! it lets through (and on what it refuses, for the record).
//!
//! `cargo bench --bench guard` (release; `TOOLGATE_BENCH_QUICK=1` for fewer
//! rounds, `TOOLGATE_BENCH_ROUNDS=N` for N; `TOOLGATE_BENCH_CASE=TEXT` runs the cases whose name holds it,
//! e.g. under `perf record`). Prints each case's p50, p99 and slowest call in µs, and what
//! the guard answered. The book's performance chapter reports it.

use std::time::{Duration, Instant};

/// The allocator the `toolgate` binary (the daemon) runs with: the guard
/// allocates a little per word, so the allocator is part of its cost.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use serde_json::{Value, json};
use toolgate::guard::ControlPlane;
use toolgate::{Config, ToolRequest};

const KB10: usize = 10 * 1024;
/// The most of shell text the guard reads as a command (64 KiB).
const SHELL_MAX: usize = 64 * 1024 - 64;

/// `unit` repeated to `len` bytes (cut on a char boundary: units are ASCII).
fn fill(unit: &str, len: usize) -> String {
    unit.repeat(len / unit.len() + 1)[..len].to_string()
}

/// Every case: its name, tool and arguments.
fn cases() -> Vec<(&'static str, &'static str, Value)> {
    let prose = fill(
        "The build failed because the cache was stale; run it again. ",
        KB10,
    );
    let code = fill(
        "let path = \"src/lib.rs\"; // see docs/guide.md (x <= y)\n",
        KB10,
    );
    // Commands that differ, as a script's do: ~10 KB, whole commands.
    let mut shell = String::new();
    for i in 0.. {
        let command =
            format!("cd src/m{i} && grep -rn 'fn f{i}' lib{i}.rs ../t{i} | head -n {i}; ");
        if shell.len() + command.len() > KB10 {
            break;
        }
        shell.push_str(&command);
    }
    let bash = |command: String| json!({"command": command, "description": "run it"});
    let described = |text: &str| json!({"command": "cargo test", "description": text});
    vec![
        ("10 KB of prose in a description", "Bash", described(&prose)),
        ("10 KB of code in a description", "Bash", described(&code)),
        ("10 KB of shell commands", "Bash", bash(shell)),
        (
            "10 KB of code written to a file",
            "Write",
            json!({"file_path": "src/generated.rs", "content": code}),
        ),
        (
            "10 KB edit",
            "Edit",
            json!({"file_path": "src/lib.rs", "old_string": code, "new_string": prose}),
        ),
        // Hostile shapes, each as long as the guard reads shell text.
        (
            "nested command substitutions",
            "Bash",
            bash(format!(
                "echo {}x{}",
                "$(echo ".repeat(2000),
                ")".repeat(2000)
            )),
        ),
        (
            "alternating quotes",
            "Bash",
            bash(fill("'a'\"b\"", SHELL_MAX)),
        ),
        ("brace expansions", "Bash", bash(fill("{a,b}", SHELL_MAX))),
        (
            "one long path",
            "Bash",
            bash(format!("cat {}", fill("a/", SHELL_MAX - 4))),
        ),
        (
            "parent steps",
            "Bash",
            bash(format!("ls {}", fill("../", SHELL_MAX - 3))),
        ),
        ("many short words", "Bash", bash(fill("a b ", SHELL_MAX))),
        (
            "directory changes",
            "Bash",
            bash(fill("cd src; ls lib.rs; cd ..; ", SHELL_MAX)),
        ),
        (
            "ever deeper directories",
            "Bash",
            bash(fill("cd m0; ls x; ", SHELL_MAX)),
        ),
        ("many pipes", "Bash", bash(fill("a | ", SHELL_MAX))),
        (
            "variables and tildes",
            "Bash",
            bash(fill("$HOME/x ~/y ${A:-b} ", SHELL_MAX)),
        ),
        (
            "here-documents",
            "Bash",
            bash(fill("cat <<E\nx\nE\n", SHELL_MAX)),
        ),
        (
            "words that almost name toolgate",
            "Bash",
            bash(fill("toolgat toolgate.tom ~/.config/toolgat ", SHELL_MAX)),
        ),
        (
            "1 MB of prose in a description",
            "Bash",
            described(&fill("words and more words ", 1 << 20)),
        ),
        (
            "deeply nested arguments",
            "mcp__x__y",
            (0..500).fold(json!("leaf"), |inner, _| json!({"a": inner})),
        ),
    ]
}

fn main() {
    let rounds = match std::env::var("TOOLGATE_BENCH_ROUNDS") {
        Ok(n) => n.parse().expect("TOOLGATE_BENCH_ROUNDS is a number"),
        Err(_) if std::env::var_os("TOOLGATE_BENCH_QUICK").is_some() => 200,
        Err(_) => 2_000,
    };
    let dir = tempfile::tempdir().unwrap();
    let config = Config::bundled_default().unwrap();
    let plane = ControlPlane::for_config(&config, &dir.path().join("toolgate.redb"));
    // Calls run in a project, as an agent's do: relative words resolve
    // there (and in every directory the text may `cd` into).
    let project = dir.path().join("project");
    for sub in ["src/m0", "tests", "docs"] {
        std::fs::create_dir_all(project.join(sub)).unwrap();
    }
    std::fs::write(project.join("src/lib.rs"), "").unwrap();
    println!(
        "{:<36} {:>9} {:>9} {:>9}  answer",
        "case", "p50 µs", "p99 µs", "max µs"
    );
    let only = std::env::var("TOOLGATE_BENCH_CASE").unwrap_or_default();
    for (name, tool, arguments) in cases().into_iter().filter(|c| c.0.contains(&only)) {
        let mut request = ToolRequest::new(tool, arguments);
        request.cwd = Some(project.clone());
        let answer = plane.check(&request);
        let n = if name.starts_with("1 MB") {
            (rounds / 20).max(1)
        } else {
            rounds
        };
        let mut times: Vec<Duration> = (0..n)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(plane.check(std::hint::black_box(&request)));
                start.elapsed()
            })
            .collect();
        times.sort();
        let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        let said = answer.map_or("allowed".to_string(), |why| {
            format!("refused: {}", why.chars().take(60).collect::<String>())
        });
        println!(
            "{name:<36} {:>9.1} {:>9.1} {:>9.1}  {said}",
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
}
