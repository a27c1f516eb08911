"""A small agent loop that asks toolgate before each tool call.

    pip install toolgate          # or: maturin develop -m host/python/Cargo.toml
    python examples/python/agent_loop.py [CONFIG]

With no CONFIG it runs the bundled default policies. The "model" here is a
fixed list of proposed calls, so the example runs offline; in your agent the
calls come from the model, and `run_tool` is your tool executor.
"""

from __future__ import annotations

import subprocess
import sys

import toolgate

PROPOSED = [
    ("Read", {"file_path": "README.md"}),
    ("Write", {"file_path": "Cargo.lock", "content": "edited by hand"}),
    ("Bash", {"command": "git push origin main"}),
]


def run_tool(tool: str, arguments: dict) -> str:
    """Stands in for your tool executor (it runs nothing)."""
    return f"(ran {tool} with {arguments})"


def main() -> int:
    gate = toolgate.Toolgate(sys.argv[1] if len(sys.argv) > 1 else None)
    for tool, arguments in PROPOSED:
        decision = gate.decide(tool, arguments, session="example")
        if decision.allowed:
            output = run_tool(tool, decision.arguments_for(arguments))
            if decision.output_checked:
                output = gate.check_output(decision, output).text(output)
            gate.observe(decision, "succeeded", summary=output[:200])
            print(f"{tool}: allowed -> {output}")
        elif decision.paused:
            # Show the person the prompt; this process cannot answer it.
            print(f"{tool}: paused -> {decision.pause.how_to_answer}")
        else:
            print(f"{tool}: denied -> {decision.reason}")
        for note in decision.notes:
            print(f"  note from {note.policy}: {note.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
