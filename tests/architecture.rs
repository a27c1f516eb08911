//! The rules the code's shape keeps: the engine crate (`host/engine`) links
//! no server; the modules of each crate depend on each other one way (no
//! cycle among the top-level modules; a module's own submodules may refer
//! to each other — a new `use crate::…` that closes a cycle fails here, and
//! the message names the cycle; the engine, the servers and the wire types
//! alike, with groups and the root's re-exports read); only the runtimes crate names a runtime,
//! and it links the wire crate and no engine; a policy's
//! capabilities hold only their store roles; the servers read the store
//! through the facade; no long functions in any of our crates (a
//! template's text counted).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The engine's sources: what an embedder links.
fn engine_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("engine/src")
}

/// The servers' and the CLI's sources, on top of the engine.
fn server_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// A crate's library source files under `src` (not the binaries):
/// top-level module, path under `src/`, and the code before any unit tests
/// (which may reach anywhere).
fn library_sources(src: &Path) -> Vec<(String, String, String)> {
    let src = src.to_path_buf();
    let mut sources = Vec::new();
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "bin") {
                continue; // the binaries sit above the library
            }
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || path == src.join("lib.rs") {
            continue;
        }
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        let code = code_outside_tests(&std::fs::read_to_string(&path).unwrap());
        sources.push((module, relative.display().to_string(), code));
    }
    sources
}

/// The code of a source file before its unit tests (which may reach
/// anywhere), with the contents of its string literals blanked (kept as
/// spaces and line breaks): a template's `#[cfg(test)]`, `crate::` or
/// closing brace is text, not code.
fn code_outside_tests(text: &str) -> String {
    let code = blank_strings(text);
    code.split("#[cfg(test)]").next().unwrap().to_string()
}

/// `code` with what is inside its string literals (`"…"`, `r#"…"#`,
/// `b"…"`) and character literals replaced by spaces, line breaks kept.
fn blank_strings(code: &str) -> String {
    let bytes = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let blank = |text: &str| -> String {
        text.chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect()
    };
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let after_ident =
            at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let (keep, hidden, close) = if rest.starts_with("//") {
            (rest.find('\n').unwrap_or(rest.len()), 0, 0)
        } else if let Some((open, hashes)) = raw_string_start(rest).filter(|_| !after_ident) {
            let end = rest[open..]
                .find(&format!("\"{hashes}"))
                .map_or(rest.len(), |e| open + e);
            (open, end - open, (1 + hashes.len()).min(rest.len() - end))
        } else if rest.starts_with('"') {
            let end = string_end(rest);
            (1, end - 1, usize::from(end < rest.len()))
        } else if let Some(len) = char_literal(rest) {
            (1, len - 2, 1)
        } else {
            (rest.chars().next().map_or(1, char::len_utf8), 0, 0)
        };
        out.push_str(&rest[..keep]);
        out.push_str(&blank(&rest[keep..keep + hidden]));
        out.push_str(&rest[keep + hidden..keep + hidden + close]);
        at += keep + hidden + close;
    }
    out
}

/// At a raw string (`r"`, `r#"`, `br##"`): where its text starts, and its
/// hashes.
fn raw_string_start(text: &str) -> Option<(usize, &str)> {
    let rest = text.strip_prefix("br").or_else(|| text.strip_prefix('r'))?;
    let hashes = &rest[..rest.len() - rest.trim_start_matches('#').len()];
    rest[hashes.len()..]
        .starts_with('"')
        .then(|| (text.len() - rest.len() + hashes.len() + 1, hashes))
}

/// Where the string literal `text` starts with closes (its closing quote's
/// position, or the end).
fn string_end(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut at = 1;
    while at < bytes.len() && bytes[at] != b'"' {
        at += if bytes[at] == b'\\' { 2 } else { 1 };
    }
    at.min(bytes.len())
}

/// The length of the character literal `text` starts with (`'a'`,
/// `'\''`, `'"'`), if it does (`'a` of a lifetime does not).
fn char_literal(text: &str) -> Option<usize> {
    let mut chars = text.strip_prefix('\'')?.char_indices();
    let (_, first) = chars.next()?;
    if first == '\\' {
        // `'\''`, `'\n'`, `'\u{7f}'`: the quote after the escaped one.
        let close = text.get(3..)?.find('\'')?;
        return (close <= 8).then_some(close + 4);
    }
    let (at, second) = chars.next()?;
    (first != '\'' && second == '\'').then_some(at + 2)
}

/// The names a crate's root re-exports (`pub use module::{A, B};`), by the
/// module they come from: `crate::A` in another file names that module.
fn reexports(src: &Path) -> BTreeMap<String, String> {
    let root = blank_strings(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut names = BTreeMap::new();
    for statement in root.split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = used.split_once("::") else {
            continue;
        };
        for item in items.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !item.is_empty() {
                names.insert(item.to_string(), module.to_string());
            }
        }
    }
    names
}

/// The first name of every path `code` starts at `crate::`, a group's
/// (`crate::{a, b::C}`) each.
fn crate_paths(code: &str) -> Vec<String> {
    let ident = |text: &str| -> String {
        text.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + 7..];
        let Some(group) = rest.strip_prefix('{') else {
            names.push(ident(rest));
            continue;
        };
        let (mut depth, mut start) = (0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    names.push(ident(&group[start..i]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    names.push(ident(&group[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
    }
    names
}

/// Top-level module → the top-level modules its code names, in the crate
/// at `src`: by path (`crate::store::…`, `crate::{store, gates}`) or by a
/// name the crate's root re-exports from it (`crate::Toolgate` is `host`).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let reexported = reexports(src);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, _, code) in library_sources(src) {
        let uses = graph.entry(module.clone()).or_default();
        let code: String = (code.lines())
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for name in crate_paths(&code) {
            let name = reexported.get(&name).cloned().unwrap_or(name);
            if name != module {
                uses.insert(name);
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for uses in graph.values_mut() {
        uses.retain(|m| modules.contains(m));
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|m| m == start) {
        let mut cycle = path[at..].to_vec();
        cycle.push(start.to_string());
        return Some(cycle);
    }
    if done.contains(start) {
        return None;
    }
    path.push(start.to_string());
    for next in &graph[start] {
        if let Some(cycle) = cycle_from(graph, next, path, done) {
            return Some(cycle);
        }
    }
    path.pop();
    done.insert(start.to_string());
    None
}

#[test]
fn the_host_modules_depend_on_each_other_one_way() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = vec![
        (engine_src(), 20),
        (server_src(), 4),
        (host.join("wire/src"), 8),
        (host.join("runtimes/src"), 8),
        (host.join("../xtask/src"), 3),
    ];
    // The policies and their helper crate (the language bindings are one
    // module each).
    for plugin in std::fs::read_dir(host.join("../guest-plugins")).unwrap() {
        let src = plugin.unwrap().path().join("src");
        if src.join("lib.rs").exists() {
            crates.push((src, 2));
        }
    }
    assert!(crates.len() >= 9, "{crates:?}");
    for (src, at_least) in crates {
        let graph = graph(&src);
        assert!(
            graph.len() >= at_least,
            "the scan found the modules of {}: {graph:?}",
            src.display()
        );
        let mut done = BTreeSet::new();
        for module in graph.keys() {
            if let Some(cycle) = cycle_from(&graph, module, &mut Vec::new(), &mut done) {
                panic!("module cycle in {}: {}", src.display(), cycle.join(" → "));
            }
        }
    }
}

/// The crates `package` links (`features` on), as cargo resolves it:
/// every crate it pulls in, not only the ones it names.
fn linked_crates(package: &str, features: Option<&str>) -> BTreeSet<String> {
    let mut tree = std::process::Command::new(env!("CARGO"));
    tree.args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if let Some(features) = features {
        tree.args(["--features", features]);
    }
    let out = tree.output().expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = String::from_utf8(out.stdout).unwrap();
    let crates: BTreeSet<String> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        crates.contains(package) && crates.contains("toolgate-wire"),
        "the listing is not {package}'s tree: {crates:?}"
    );
    crates
}

/// The MCP gateway's, the CLI's, the metrics', the log's, the servers'.
const SERVERS: [&str; 5] = [
    "rmcp",
    "clap",
    "prometheus-client",
    "tracing-subscriber",
    "toolgate",
];
/// An HTTP stack.
const HTTP: [&str; 5] = [
    "hyper",
    "hyper-util",
    "http-body-util",
    "reqwest",
    "oci-client",
];

/// A database client.
const DATABASE: [&str; 2] = ["tokio-postgres", "tokio-postgres-rustls"];

/// What an embedder links: the engine crate. With its `oci` feature off it
/// has no HTTP stack at all; on (for `oci://` plugins) a registry client,
/// still no server. With its `postgres` feature off, no database client.
#[test]
fn the_engine_links_no_server_and_no_cli() {
    for (features, forbidden) in [
        (None, [&SERVERS[..], &HTTP[..], &DATABASE[..]].concat()),
        (Some("oci"), [&SERVERS[..], &DATABASE[..]].concat()),
        (Some("postgres"), [&SERVERS[..], &HTTP[..]].concat()),
    ] {
        let crates = linked_crates("toolgate-engine", features);
        assert!(crates.contains("wasmtime"), "{crates:?}");
        let linked: Vec<_> = forbidden.iter().filter(|c| crates.contains(**c)).collect();
        assert!(
            linked.is_empty(),
            "toolgate-engine (features {features:?}) links {linked:?}: that belongs in the \
             `toolgate` crate (servers, CLI), not in what an embedder links"
        );
    }
}

/// The Python and Node packages get the daemon's rules from the engine's
/// `Service`, so they link the engine and the wire crate, not the servers.
#[test]
fn the_language_bindings_link_the_engine_not_the_servers() {
    for package in ["toolgate-python", "toolgate-node"] {
        let crates = linked_crates(package, None);
        let forbidden = [&SERVERS[..], &HTTP[..]].concat();
        let linked: Vec<_> = forbidden.iter().filter(|c| crates.contains(**c)).collect();
        assert!(
            linked.is_empty(),
            "{package} links {linked:?}: a binding links `toolgate-engine` (its `Service` and \
             `route`), not the servers"
        );
    }
}

/// The runtimes' translation (`host/runtimes`) is plain code over the wire
/// types: the engine links it, never the other way, and a runtime's tests
/// build without wasmtime.
#[test]
fn the_runtimes_link_the_wire_crate_and_no_engine() {
    let crates = linked_crates("toolgate-runtimes", None);
    let forbidden = [
        "toolgate-engine",
        "toolgate",
        "wasmtime",
        "redb",
        "tokio",
        "tokio-postgres",
    ];
    let linked: Vec<_> = forbidden.iter().filter(|c| crates.contains(**c)).collect();
    assert!(
        linked.is_empty(),
        "toolgate-runtimes links {linked:?}: it translates events to the wire types; what \
         decides belongs in the engine"
    );
}

#[test]
fn the_wire_types_need_no_wasm_and_no_store() {
    // Requests, decisions, gates, the decision log and the daemon protocol
    // live in `toolgate-wire`, which the thin hook client links alone.
    let manifest: toml::Table =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("wire/Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let dependencies = manifest["dependencies"].as_table().unwrap();
    for name in dependencies.keys() {
        assert!(
            !name.starts_with("wasmtime") && name != "redb" && name != "toolgate",
            "toolgate-wire must stay plain data, but depends on {name}"
        );
    }
    let graph = graph(&engine_src());
    for plain in ["error", "compose"] {
        for forbidden in [
            "bindings", "runtime", "sandbox", "store", "host", "pipeline",
        ] {
            assert!(
                !graph[plain].contains(forbidden),
                "`{plain}` is plain but uses `{forbidden}`: {:?}",
                graph[plain]
            );
        }
    }
}

#[test]
fn the_store_engine_stays_inside_its_backend() {
    // Everything else, the store's own interface included, goes through the
    // backend traits (`store/mod.rs`), so another backend (PostgreSQL for
    // fleets) is one more module beside `store/embedded/`, not a change to the
    // host.
    let mut backend_files = 0;
    let sources = [engine_src(), server_src()].map(|src| library_sources(&src));
    for (_, path, code) in sources.into_iter().flatten() {
        if path.starts_with("store/embedded/") {
            backend_files += 1;
            continue;
        }
        let names_redb = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .any(|l| l.contains("redb::") || l.contains("use redb"));
        assert!(
            !names_redb,
            "{path} uses redb directly; go through the store traits"
        );
    }
    assert!(
        backend_files > 0,
        "the redb backend moved: update this test"
    );
}

#[test]
fn only_hooks_knows_the_runtimes() {
    // Adding a runtime is one file in `host/runtimes/` (and its `mod` line)
    // and one line in the wire's `for_each_runtime!` list (which spells its
    // variant bare): no module of the engine, the server or the wire, nor
    // the runtimes crate's `lib.rs` (its `match` and its list are made from
    // that line), names a runtime's variant (the CLI's subcommands, the
    // failure answers and the installer are made from `hooks::RUNTIMES`).
    let variants: Vec<String> = toolgate::hooks::HookRuntime::ALL
        .iter()
        .map(|runtime| format!("HookRuntime::{runtime:?}"))
        .collect();
    // The names as code spells them (a `Debug` written by hand would make
    // this test look for nothing).
    assert!(variants.iter().any(|v| v == "HookRuntime::ClaudeCode"));
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut pending = vec![engine_src(), server_src(), host.join("wire/src")];
    let mut files = vec![host.join("runtimes/src/lib.rs")];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => pending.push(path),
                false => files.push(path),
            }
        }
    }
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for (n, line) in text.lines().enumerate() {
            if variants
                .iter()
                .any(|variant| line.contains(variant.as_str()))
            {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    // Every runtime's file is in the list: as many files that hold a
    // runtime's `INFO` as variants (a file left out compiles, unused).
    let runtimes = host.join("runtimes/src");
    let mut modules = 0;
    for entry in std::fs::read_dir(&runtimes).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
        modules += usize::from(text.contains("pub const INFO: RuntimeInfo"));
    }
    assert_eq!(
        modules,
        variants.len(),
        "one file per runtime in {runtimes:?}"
    );
    assert!(
        found.is_empty(),
        "a runtime named outside its own file and the wire's list:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_policys_capabilities_hold_only_their_store_roles() {
    // The host calls a guest can make reach the store through one role
    // each (`Role<dyn StateStore>`, `Role<dyn EventStore>`): nothing a
    // policy can call holds a handle that takes gates, reads the decision
    // log or the agents' terminals, or imports and exports the store.
    let other_roles = [
        "GateStore",
        "DecisionLog",
        "TurnStore",
        "TerminalStore",
        "Maintenance",
        "Transfer",
        "Backend",
        "Store",
        // Handles that lead to the whole store.
        "Toolgate",
        "Registry",
        "Env",
    ];
    let mut capability_files = 0;
    let mut found = Vec::new();
    for (_, path, code) in library_sources(&engine_src()) {
        let code = if path.starts_with("capabilities/") {
            capability_files += 1;
            code
        } else if path == "sandbox.rs" {
            // What every capability reads: the fields of the store data and
            // of the call's context.
            [
                "pub(crate) struct SandboxState",
                "pub(crate) struct CallContext",
            ]
            .iter()
            .map(|item| {
                let start = code
                    .find(item)
                    .unwrap_or_else(|| panic!("sandbox.rs has no `{item}`: update this test"));
                let end = start + code[start..].find("\n}").unwrap();
                &code[start..end]
            })
            .collect::<Vec<_>>()
            .join("\n")
        } else {
            continue;
        };
        for (n, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if let Some(role) = other_roles.iter().find(|r| names_word(line, r)) {
                found.push(format!("{path}:{}: {role}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        capability_files > 0,
        "the capabilities moved: update this test"
    );
    assert!(
        found.is_empty(),
        "a capability reaches more of the store than its role:\n{}",
        found.join("\n")
    );
}

/// Whether `line` names `word` as a whole identifier (`Store`, not
/// `StoredEvent`).
fn names_word(line: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The most lines a function outside tests may take, its signature and
/// closing brace included: past it, a function does several things that
/// want names of their own.
const MAX_FUNCTION_LINES: usize = 80;

/// The functions of `code` (rustfmt's layout) longer than
/// [`MAX_FUNCTION_LINES`]: name, first line, length. A signature that ends
/// in `;` (a trait's declaration) has no body.
fn long_functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut long = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(at) = trimmed.find("fn ") else {
            continue;
        };
        let head = &trimmed[..at];
        let qualifiers = head
            .split_whitespace()
            .all(|q| q.starts_with("pub") || matches!(q, "async" | "const" | "unsafe"));
        if !qualifiers || trimmed.starts_with("//") {
            continue;
        }
        let name: String = trimmed[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(signature_end) = (start..lines.len()).find(|&i| {
            let l = lines[i].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        if lines[signature_end].trim_end().ends_with(';')
            || lines[signature_end].trim_end().ends_with('}')
        {
            continue; // a declaration, or a one-line body
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = (signature_end + 1..lines.len()).find(|&i| {
            lines[i].starts_with(&close) && lines[i].len() - lines[i].trim_start().len() == indent
        }) {
            let length = end - start + 1;
            if length > MAX_FUNCTION_LINES {
                long.push((name, start + 1, length));
            }
        }
    }
    long
}

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = host.parent().unwrap();
    // Every crate of ours: the engine, the servers, the wire types, the
    // language bindings, the release packaging and the policies (a
    // `tests.rs` is their tests).
    let mut files = vec![
        host.join("src"),
        host.join("engine/src"),
        host.join("wire/src"),
        host.join("runtimes/src"),
        host.join("python/src"),
        host.join("node/src"),
        root.join("xtask/src"),
    ];
    for plugin in std::fs::read_dir(root.join("guest-plugins")).unwrap() {
        files.push(plugin.unwrap().path().join("src"));
    }
    let mut long = Vec::new();
    let mut read = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("tests.rs") {
            continue;
        }
        read += 1;
        let code = code_outside_tests(&std::fs::read_to_string(&path).unwrap());
        for (name, line, length) in long_functions(&code) {
            long.push(format!(
                "{}:{line} `{name}`: {length} lines",
                path.strip_prefix(root).unwrap().display()
            ));
        }
    }
    assert!(read > 100, "the scan read only {read} files");
    long.sort();
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// The scan sees what a template or a string would hide: a function whose
/// closing brace comes after a string holding `#[cfg(test)]` or a `}` at
/// its indentation, and the modules named in a `crate::{…}` group or
/// through a name the crate's root re-exports.
#[test]
fn the_scans_read_past_strings_groups_and_reexports() {
    let body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
    let template = format!(
        "fn template() -> String {{\n    let t = r#\"\n}}\n#[cfg(test)]\n\"#;\n{body}    t.into()\n}}\n"
    );
    let long = long_functions(&code_outside_tests(&template));
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!(
        crate_paths("use crate::{a, b::{C, D}, e};\nlet x = crate::f::g();"),
        ["a", "b", "e", "f"]
    );
    assert_eq!(
        blank_strings(r#"let c = '"'; let s = "}"; x"#),
        r#"let c = ' '; let s = " "; x"#
    );
    let engine = reexports(&engine_src());
    assert_eq!(engine.get("Toolgate").map(String::as_str), Some("host"));
}

/// Every front door calls the service: `Toolgate` (the engine without the
/// service's rules) is only opened outside the engine, and handed to a
/// service. A public method on it would be a way to decide, resolve or
/// reload without durability before the answer, the listener or tenants.
#[test]
fn toolgate_is_only_opened_outside_the_engine() {
    let mut found = Vec::new();
    for (_, path, code) in library_sources(&engine_src()) {
        let mut in_impl = false;
        for (n, line) in code.lines().enumerate() {
            if line.starts_with("impl Toolgate") {
                in_impl = true;
            } else if line.starts_with('}') {
                in_impl = false;
            } else if in_impl
                && line.trim_start().starts_with("pub fn ")
                && !line.trim_start().starts_with("pub fn open(")
            {
                found.push(format!("engine/src/{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Toolgate's methods are the engine's own (pub(crate)): give the service a method that \
         applies its rules instead:\n{}",
        found.join("\n")
    );
}

/// The servers on top of the engine (the daemon, the MCP gateway, the
/// hooks' driver, the CLI) read the store through the service, one method
/// per thing they need, never the whole store (the service's own `store()`,
/// for seeding a store in tests and benchmarks, is the one exception).
#[test]
fn the_servers_reach_the_store_through_the_facade() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = [
        "src/daemon",
        "src/mcp",
        "runtimes/src",
        "engine/src/service",
        "src/bin",
    ];
    let mut files: Vec<_> = dirs.iter().map(|dir| host.join(dir)).collect();
    let facade = host.join("engine/src/service/embed.rs");
    let mut found = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let code = code_outside_tests(&std::fs::read_to_string(&path).unwrap());
        for (n, line) in code.lines().enumerate() {
            if line.contains(".store()") && !(path == facade && line.contains("self.host.store()"))
            {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "use the service's methods (persist, decision_log, store_stats, …) instead:\n{}",
        found.join("\n")
    );
}

/// One client speaks the daemon's protocol: `toolgate_wire::client`, which
/// needs no wasmtime. The thin hook client links only `toolgate-wire`; the
/// MCP gateway and the CLI use the same client; nothing else opens the
/// daemon's socket (but the daemon itself, asking at bind time whether
/// another already listens there).
#[test]
fn the_daemon_is_asked_through_the_one_wasmtime_free_client() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let hook = std::fs::read_to_string(host.join("src/bin/toolgate-hook.rs")).unwrap();
    let linked: Vec<_> = hook
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| {
            ["toolgate", "toolgate_engine"].iter().any(|name| {
                [":", ";", " as "]
                    .iter()
                    .any(|after| l.contains(&format!("{name}{after}")))
            })
        })
        .collect();
    assert!(
        linked.is_empty(),
        "toolgate-hook must link only toolgate-wire: {linked:?}"
    );
    assert!(
        hook.contains("toolgate_wire::client::"),
        "toolgate-hook uses the client"
    );
    let mut found = Vec::new();
    let mut files = vec![
        host.join("src"),
        host.join("engine/src"),
        host.join("wire/src"),
    ];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let allowed = [
            host.join("wire/src/client.rs"),
            host.join("src/daemon/socket.rs"),
        ];
        if path.extension().is_none_or(|e| e != "rs") || allowed.contains(&path) {
            continue;
        }
        let code = code_outside_tests(&std::fs::read_to_string(&path).unwrap());
        let connects = code
            .lines()
            .any(|l| !l.trim_start().starts_with("//") && l.contains("UnixStream::connect"));
        if connects {
            found.push(path.display().to_string());
        }
    }
    assert!(
        found.is_empty(),
        "these open a daemon's socket themselves; use toolgate_wire::client::Client: {found:?}"
    );
}
