//! The Python project: `app.py` over a copy of the `toolgate_guest` helper
//! module, built by componentize-py (pinned in `requirements.txt`).

use super::{FIXTURES, Phase, Project, readme_usage, single_world_wit};

/// The helper module and the toolchain pin, as this binary was built with
/// them (the same files the repository's tests build with).
const HELPER: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-python/toolgate_guest.py");
const REQUIREMENTS: &str =
    include_str!("../../../../../guest-plugins/toolgate-guest-python/requirements.txt");

/// The project's files and what to run next.
pub(super) fn project(name: &str, phases: &[Phase]) -> Project {
    let wasm = format!("{name}.wasm");
    let mut files = vec![
        ("app.py".to_string(), app(name, phases)),
        ("toolgate_guest.py".into(), HELPER.to_string()),
        ("requirements.txt".into(), REQUIREMENTS.to_string()),
        ("fixtures.toml".into(), FIXTURES.to_string()),
        ("README.md".into(), readme(name, &wasm)),
        (
            ".gitignore".into(),
            "/.venv/\n/wit_world/\n/componentize_py_*\n/poll_loop.py\n__pycache__/\n*.wasm\n"
                .to_string(),
        ),
    ];
    files.extend(single_world_wit(phases, "and name its class in app.py"));
    Project {
        files,
        next: format!(
            "  python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\n  {}\n  toolgate test {wasm} fixtures.toml",
            build_command(&wasm)
        ),
    }
}

/// The command that builds the component.
fn build_command(wasm: &str) -> String {
    format!(".venv/bin/componentize-py -d wit -w policy componentize app -o {wasm}")
}

fn app(name: &str, phases: &[Phase]) -> String {
    let mut source = format!(
        r#""""{name}: a toolgate policy in Python.

This sample refuses shell commands containing any of the configured
`blocked` fragments and abstains on everything else. Replace `decide` with
your own logic.
"""

import toolgate_guest as tg


class Sample(tg.Policy):
    name = "{name}"
    version = "0.1.0"
    description = "refuses blocked shell commands"
    fail_mode = "open"

    def __init__(self, config):
        # Every key with its default; an unknown key or a wrong type is
        # refused at load time, naming the key.
        self.settings = tg.settings(config, blocked=["rm -rf /"])

    def decide(self, call, risk, budget):
        if call.tool != "Bash":
            return tg.skip()
        command = call.arguments.get("command")
        if not isinstance(command, str):
            return tg.skip()
        for fragment in self.settings.blocked:
            if fragment in command:
                return tg.deny(f"`{{fragment}}` is not allowed here; do it another way")
        return tg.skip()
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
        "\n\n# One class per export of wit/world.wit: the gate, and each optional phase\n\
         # the world includes (classifier → Risk, accountant → Budget,\n\
         # verdict-parser → Verdict, observer → Observe, output-checker → Output,\n\
         # tool-filter → Visibility).\n\
         Gate = tg.gate(Sample)\n",
    );
    source.push_str(&Phase::each_of(
        phases,
        [
            "Risk = tg.classifier(Sample)\n",
            "Budget = tg.accountant(Sample)\n",
            "Verdict = tg.verdict_parser(Sample)\n",
            "Observe = tg.observer(Sample)\n",
            "Output = tg.output_checker(Sample)\n",
            "Visibility = tg.tool_filter(Sample)\n",
        ],
    ));
    source
}

const CLASSIFY: &str = r#"
    def classify(self, call):
        """The `risk` phase: how dangerous is the call? Pure: no state writes."""
        if call.tool == "Bash":
            return tg.risk("high", "shell", [f"tool:{call.tool}"])
        return tg.risk("none", "low")
"#;

const ACCOUNT: &str = r#"
    def account(self, call, risk):
        """The `budget` phase, right before `decide`: meter the call."""
        return tg.budget_ok()
"#;

const PARSE: &str = r#"
    def parse(self, call, reply):
        """The `verdict` phase: read the model's reply to a question `decide`
        asked (`tg.ask_model`). Raising is a failure of the policy."""
        if reply.text is None:
            raise RuntimeError(f"no answer from the model: {reply.error}")
        return tg.allow() if reply.text.strip() == "ALLOW" else tg.deny(reply.text.strip())
"#;

const OBSERVE: &str = r#"
    def observe(self, event):
        """The `observe` phase: hear what happened to calls (perhaps more than once)."""
        tg.log("debug", f"{event.call.tool} {event.outcome}")
"#;

const CHECK_OUTPUT: &str = r#"
    def check_output(self, output):
        """The `output` phase: what the model may read of a tool's output,
        which is untrusted input."""
        if "PRIVATE KEY-----" in output.text:
            return tg.withhold("it holds a private key")
        return tg.output_pass()
"#;

const FILTER_TOOLS: &str = r#"
    def visible(self, caller, tools):
        """The `visibility` phase: which tools may be offered at all (pure;
        hiding is not refusing, so `decide` must still refuse)."""
        return [not tool.name.startswith("debug_") for tool in tools]
"#;

fn readme(name: &str, wasm: &str) -> String {
    format!(
        r#"# {name}

A toolgate policy in Python, built into a WebAssembly component by
[componentize-py](https://github.com/bytecodealliance/componentize-py).

```sh
python3 -m venv .venv && .venv/bin/pip install -r requirements.txt   # once
{build}
toolgate test {wasm} fixtures.toml
toolgate plugins inspect {wasm}
```

The component carries a Python interpreter with `app.py` already imported
(its heap is snapshotted at build time), so it is ~18 MB and starts in
milliseconds. Give it room in the config if it needs more than the default
64 MiB of memory (`[plugins.{name}.limits] memory_mib = 128`).

The standard library is there; the sandbox is not: no files, no network,
no environment. What must last between calls goes through `tg.state` and
`tg.events`, never module variables (an instance may be replaced at any
time).

{usage}
`toolgate_guest.py` is the helper layer and `wit/` the WIT contract of the
toolgate that created this project; `wit/world.wit` says which optional
phases the component exports.
"#,
        build = build_command(wasm),
        usage = readme_usage(name, wasm)
    )
}
