//! The TypeScript project: `policy.ts` over a copy of the `toolgate-guest`
//! helper module, bundled and built by jco with its QuickJS backend (pinned
//! in `package.json`).

use super::{FIXTURES, Phase, Project, readme_usage, single_world_wit};

/// The helper module, the toolchain pins and the bundler's settings, as
/// this binary was built with them (the files the repository's tests build
/// with).
const HELPER: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-typescript/toolgate-guest.ts");
const PACKAGE: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-typescript/package.json");
const LOCKFILE: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-typescript/package-lock.json");
const BUNDLE_CONFIG: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-typescript/rolldown.config.mjs");
/// The name `package.json` and its lockfile carry in the repository,
/// replaced by the policy's (its build writes `toolgate-policy.wasm`).
const TEMPLATE_NAME: &str = "toolgate-policy";

/// The project's files and what to run next.
pub(super) fn project(name: &str, phases: &[Phase]) -> Project {
    let wasm = format!("{name}.wasm");
    let mut files = vec![
        ("policy.ts".to_string(), policy(name, phases)),
        ("toolgate-guest.ts".into(), HELPER.to_string()),
        ("package.json".into(), PACKAGE.replace(TEMPLATE_NAME, name)),
        (
            "package-lock.json".into(),
            LOCKFILE.replace(TEMPLATE_NAME, name),
        ),
        ("rolldown.config.mjs".into(), BUNDLE_CONFIG.to_string()),
        ("fixtures.toml".into(), FIXTURES.to_string()),
        ("README.md".into(), readme(name, &wasm)),
        (".gitignore".into(), "/node_modules/\n*.wasm\n".to_string()),
    ];
    files.extend(single_world_wit(
        phases,
        "and export its object from policy.ts",
    ));
    Project {
        files,
        next: format!("  npm ci\n  npm run build\n  toolgate test {wasm} fixtures.toml"),
    }
}

fn policy(name: &str, phases: &[Phase]) -> String {
    let mut source = format!(
        r#"// {name}: a toolgate policy in TypeScript.
//
// This sample refuses shell commands containing any of the configured
// `blocked` fragments and abstains on everything else. Replace `decide` with
// your own logic.

import * as tg from "./toolgate-guest.js";

const policy = tg.definePolicy({{
  name: "{name}",
  version: "0.1.0",
  description: "refuses blocked shell commands",
  failMode: "open",

  // Every key with its default; an unknown key or a wrong type is refused
  // at load time, naming the key.
  open: (config) => tg.settings(config, {{ blocked: ["rm -rf /"] }}),

  decide(settings, call) {{
    if (call.tool !== "Bash") return tg.skip();
    const command = String(call.arguments.command ?? "");
    const fragment = settings.blocked.find((b) => command.includes(b));
    return fragment === undefined ? tg.skip() : tg.deny(`\`${{fragment}}\` is not allowed here; do it another way`);
  }},
"#
    );
    source.push_str(&Phase::each_of(
        phases,
        [
            CLASSIFY,
            ACCOUNT,
            PARSE,
            OBSERVE,
            CHECK_OUTPUT,
            FILTER_TOOLS,
        ],
    ));
    source.push_str(
        "});\n\n\
         // One object per export of wit/world.wit: the gate, and each optional phase\n\
         // the world includes (classifier → risk, accountant → budget,\n\
         // verdict-parser → verdict, observer → observe, output-checker → output,\n\
         // tool-filter → visibility).\n\
         export const gate = policy.gate;\n",
    );
    source.push_str(&Phase::each_of(
        phases,
        [
            "export const risk = policy.phase(\"risk\");\n",
            "export const budget = policy.phase(\"budget\");\n",
            "export const verdict = policy.phase(\"verdict\");\n",
            "export const observe = policy.phase(\"observe\");\n",
            "export const output = policy.phase(\"output\");\n",
            "export const visibility = policy.phase(\"visibility\");\n",
        ],
    ));
    source
}

const CLASSIFY: &str = r#"
  // The `risk` phase: how dangerous is the call? Pure: no state writes.
  classify(_settings, call) {
    return call.tool === "Bash" ? tg.risk("high", "shell", [`tool:${call.tool}`]) : tg.risk("none", "low");
  },
"#;

const ACCOUNT: &str = r#"
  // The `budget` phase, right before `decide`: meter the call.
  account(_settings, _call, _risk) {
    return tg.budgetOk();
  },
"#;

const PARSE: &str = r#"
  // The `verdict` phase: read the model's reply to a question `decide` asked
  // (`tg.askModel`). Throwing is a failure of the policy.
  parse(_settings, _call, reply) {
    if (reply.text === undefined) throw new Error(`no answer from the model: ${reply.error}`);
    return reply.text.trim() === "ALLOW" ? tg.allow() : tg.deny(reply.text.trim());
  },
"#;

const OBSERVE: &str = r#"
  // The `observe` phase: hear what happened to calls (perhaps more than once).
  observe(_settings, event) {
    tg.log("debug", `${event.call.tool} ${event.outcome}`);
  },
"#;

const CHECK_OUTPUT: &str = r#"
  // The `output` phase: what the model may read of a tool's output, which is
  // untrusted input.
  checkOutput(_settings, output) {
    return output.text.includes("PRIVATE KEY-----") ? tg.withhold("it holds a private key") : tg.outputPass();
  },
"#;

const FILTER_TOOLS: &str = r#"
  // The `visibility` phase: which tools may be offered at all (pure; hiding
  // is not refusing, so `decide` must still refuse).
  visible(_settings, _caller, tools) {
    return tools.map((tool) => !tool.name.startsWith("debug_"));
  },
"#;

fn readme(name: &str, wasm: &str) -> String {
    format!(
        r#"# {name}

A toolgate policy in TypeScript, bundled and built into a WebAssembly
component by [jco](https://github.com/bytecodealliance/jco) with its
QuickJS backend (a JavaScript engine with `policy.ts` already loaded: its
heap is snapshotted at build time).

```sh
npm ci                             # once: the toolchain, as package-lock.json pins it
npm run build                      # policy.ts → {wasm}
toolgate test {wasm} fixtures.toml
toolgate plugins inspect {wasm}
```

Numbers the contract holds as 64-bit integers (turns, counters, token
counts) are JavaScript numbers, exact up to 2^53; an absent value is
`null`. There are no files, no network and no environment in the sandbox;
what must last between calls goes through `tg.state` and `tg.events`, never
module variables (an instance may be replaced at any time). If the policy
needs more than the default 64 MiB of memory, raise it in the config
(`[plugins.{name}.limits] memory_mib = 128`).

`package.json` and `package-lock.json` pin the toolchain exactly (`npm ci`
installs what the lockfile says). The `overrides` keep jco 1.35.0
on preview2-shim 0.25.0: with 0.26, which jco pulls in by itself, jco
cannot read the `wit/` directory ("failed to get path metadata"). The build
uses jco's QuickJS backend (`--backend qjs`) rather than its default
(SpiderMonkey, through componentize-js): for a policy's small, frequent
calls it decides several times faster, starts faster and is an eighth of
the size (toolgate's book has the measurements).

{usage}
`toolgate-guest.ts` is the helper layer and `wit/` the WIT contract of the
toolgate that created this project; `wit/world.wit` says which optional
phases the component exports.
"#,
        usage = readme_usage(name, wasm)
    )
}
