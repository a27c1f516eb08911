"""The package against the real bundled policies (tests/embed/policies.toml)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import toolgate
from toolgate import Verdict

PUSH = {"command": "git push origin main"}


def test_a_harmless_call_is_allowed_in_this_process(setup):
    gate = setup.toolgate()
    assert not gate.through_daemon
    decision = gate.decide("Read", {"file_path": "README.md"}, session="s1")
    assert decision.verdict is Verdict.ALLOW, decision
    assert decision.allowed and decision.arguments is None
    assert decision.arguments_for({"file_path": "README.md"}) == {"file_path": "README.md"}
    gate.observe(decision, "succeeded", summary="read 12 lines")


def test_a_refused_call_carries_the_policys_reason(setup):
    decision = setup.toolgate().decide("Write", {"file_path": "Cargo.lock", "content": "x"})
    assert decision.denied
    assert decision.decided_by == "rules"
    assert "Lock files are generated" in decision.reason
    assert "Lock files are generated" in decision.message()


def test_notes_reach_the_agent(setup):
    decision = setup.toolgate().decide("WebFetch", {"url": "https://example.com"})
    assert decision.allowed
    assert [(n.policy, n.text) for n in decision.notes] == [
        ("rules", "Cite the pages you fetch.")
    ], decision.notes


def test_a_pause_says_who_asks_and_how_a_person_answers(setup):
    decision = setup.toolgate().decide("Bash", PUSH, session="s1")
    assert decision.paused, decision
    pause = decision.pause
    assert pause.kind == "approval" and pause.policy == "rules"
    assert "git push publishes commits" in decision.reason
    assert pause.how_to_answer.startswith("rules asks: git push publishes commits")
    # In this process, with no daemon, nobody can answer: it says so.
    assert not pause.through_daemon
    assert "No toolgate daemon serves this store" in pause.how_to_answer


def test_an_approved_pause_lets_the_call_run_once(served):
    gate = served.toolgate()
    assert gate.through_daemon
    paused = gate.decide("Bash", PUSH, session="s1")
    assert paused.paused
    assert gate.pending(paused.pause)
    how = paused.pause.how_to_answer
    assert f"toolgate gates resolve --request-id {paused.pause.request_id}" in how, how
    # Nobody answered yet: asking again pauses again, it never runs.
    assert gate.wait(paused.pause, timeout=0.3) is False
    served.person_answers(paused.pause.request_id)
    assert gate.wait(paused.pause, timeout=10)
    ran = gate.decide("Bash", PUSH, session="s1")
    assert ran.allowed, ran
    assert ran.approved_by and "ci" in ran.approved_by
    again = gate.decide("Bash", PUSH, session="s1")
    assert again.paused, "an approval lets the call run once"


def test_a_persons_refusal_is_a_deny_with_their_answer(served):
    gate = served.toolgate()
    paused = gate.decide("Bash", PUSH, session="s2")
    served.person_answers(paused.pause.request_id, "deny")
    refused = gate.decide("Bash", PUSH, session="s2")
    assert refused.denied
    assert "refused" in refused.reason


def test_state_is_shared_across_processes_through_the_daemon(served):
    paused = served.toolgate().decide("Bash", PUSH, session="shared")
    served.person_answers(paused.pause.request_id)
    # Another process, the same daemon: it sees the person's approval.
    other = subprocess.run(
        [sys.executable, "-c",
         "import json, sys, toolgate\n"
         "gate = toolgate.Toolgate(sys.argv[1], store=sys.argv[2])\n"
         "d = gate.decide('Bash', {'command': 'git push origin main'}, session='shared')\n"
         "print(json.dumps([gate.through_daemon, d.verdict.value]))\n",
         str(served.config), str(served.store)],
        capture_output=True, text=True, timeout=120,
    )
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout) == [True, "allow"]
    # ... and used it: here it pauses again.
    assert served.toolgate().decide("Bash", PUSH, session="shared").paused


def test_an_embedding_process_cannot_resolve_a_pause(served):
    gate = served.toolgate()
    paused = gate.decide("Bash", PUSH, session="s3")
    forged = {
        "op": "resolve", "user": paused.pause.user, "thread": paused.pause.thread,
        "request_id": paused.pause.request_id, "channel": "ci",
        "resolution": {"decision": "approve", "always": False},
    }
    with pytest.raises(toolgate.NotAllowed, match="a person answers a pause"):
        gate._host.request(json.dumps(forged))
    assert gate.pending(paused.pause)
    assert gate.decide("Bash", PUSH, session="s3").paused


def test_a_broken_config_is_a_typed_exception(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[plugins.rules]\npath = \"bundled:rules\"\npriority = \"first\"\n")
    with pytest.raises(toolgate.ConfigError) as raised:
        toolgate.Toolgate(str(broken), store=str(tmp_path / "s.redb"))
    assert isinstance(raised.value, toolgate.ToolgateError)
    assert "priority" in str(raised.value)
    missing = tmp_path / "missing.toml"
    with pytest.raises(toolgate.ConfigError, match="missing.toml"):
        toolgate.Toolgate(str(missing))


def test_a_malformed_call_is_a_typed_exception(setup):
    with pytest.raises(toolgate.RequestError):
        setup.toolgate().decide("Read", {}, turn="third")


def test_a_named_socket_must_answer(setup, tmp_path):
    with pytest.raises(toolgate.DaemonUnreachable, match="toolgate serve"):
        setup.toolgate(socket=str(tmp_path / "nobody.sock"))


def test_a_secret_in_an_output_is_redacted(setup):
    gate = setup.toolgate()
    decision = gate.decide("Read", {"file_path": ".env"})
    assert decision.output_checked
    secret = "AKIA" + "IOSFODNN7EXAMPLE"
    output = f"AWS_ACCESS_KEY_ID={secret}\n"
    checked = gate.check_output(decision, output)
    assert secret not in checked.text(output)
    assert checked.changes[0]["policy"] == "shadow-sentinel"


def test_the_example_agent_loop_runs(setup):
    example = Path(__file__).resolve().parents[3] / "examples" / "python" / "agent_loop.py"
    ran = subprocess.run([sys.executable, str(example), str(setup.config)],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XDG_STATE_HOME": str(setup.dir)})
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0].startswith("Read: allowed -> (ran Read"), ran.stdout
    assert lines[1].startswith("Write: denied -> Lock files are generated"), ran.stdout
    assert lines[2].startswith("Bash: paused -> rules asks: git push publishes commits"), ran.stdout


def test_an_agent_at_a_persons_terminal_cannot_approve_its_own_pause(served):
    # The agent runtime runs in a person's terminal (`script` gives it one)
    # and asks toolgate; then, from that same terminal session, it runs the
    # command its pause names, as a person would.
    agent = (
        "import subprocess, sys, toolgate\n"
        "gate = toolgate.Toolgate(sys.argv[1], store=sys.argv[2])\n"
        "pause = gate.decide('Bash', {'command': 'git push origin main'}, session='tty').pause\n"
        "done = subprocess.run([sys.argv[3], '--config', sys.argv[1], '--store', sys.argv[2],\n"
        "    'gates', 'resolve', '--request-id', pause.request_id, '--decision', 'approve',\n"
        "    '--yes'], capture_output=True, text=True)\n"
        "print('resolve exit', done.returncode, done.stderr)\n"
    )
    script = Path(served.dir) / "agent.py"
    script.write_text(agent)
    command = " ".join(
        shlex.quote(str(part))
        for part in [sys.executable, script, served.config, served.store, served.binary]
    )
    ran = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True,
                         text=True, timeout=120)
    assert "resolve exit 1" in ran.stdout, ran.stdout + ran.stderr
    assert "this terminal session is an agent's" in ran.stdout, ran.stdout
    gate = served.toolgate()
    assert gate.decide("Bash", PUSH, session="tty").paused, "still waiting for a person"


def test_reporting_a_paused_call_as_not_run_withdraws_its_pause(served):
    gate = served.toolgate()
    paused = gate.decide("Bash", PUSH, session="withdrawn")
    assert gate.pending(paused.pause)
    # The person refused it in the runtime's own prompt: the runtime says so.
    gate.observe(paused, "denied")
    assert not gate.pending(paused.pause)
    late = served.command("gates", "resolve", "--request-id", paused.pause.request_id,
                          "--decision", "approve", "--channel", "ci", "--token-file",
                          str(served.token))
    assert late.returncode != 0, "a withdrawn pause cannot be approved"
    assert gate.decide("Bash", PUSH, session="withdrawn").paused, "asked anew"
