"""toolgate in a real OpenAI Agents SDK run (openai-agents from PyPI), its
model the SDK's own ScriptedModel (agents.testing): a refused call, a pause
that interrupts the run until a person answers through toolgate, and an
approval of the interruption that is not a person's answer."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from toolgate.openai_agents import guard, pause_for

# Offline: no traces sent anywhere.
set_tracing_disabled(True)

RAN = []


@function_tool(name_override="Bash")
def shell(command: str) -> str:
    """Run a shell command."""
    RAN.append(command)
    return f"ran: {command}"


@function_tool(name_override="Write")
def write_file(file_path: str, content: str) -> str:
    """Write a file."""
    RAN.append(f"write {file_path}")
    return "written"


@pytest.fixture(autouse=True)
def nothing_ran_yet():
    RAN.clear()


def agent(gate, session, name, arguments, replies=1):
    """An agent whose model asks for `name(arguments)`, then says "done"."""
    model = ScriptedModel(
        [[function_call(name, arguments, call_id="call-1")]]
        + [[assistant_message("done")]] * replies
    )
    return Agent(name="coder", model=model, tools=guard(gate, [shell, write_file], session=session))


def outputs(result):
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


def test_a_refused_call_never_runs_and_the_model_reads_why(setup):
    coder = agent(setup.toolgate(), "oa-1", "Write", {"file_path": "Cargo.lock", "content": "x"})
    result = asyncio.run(Runner.run(coder, "bump the lock"))
    [output] = outputs(result)
    assert "Lock files are generated" in output
    assert RAN == []
    assert result.final_output == "done"


def test_a_pause_interrupts_the_run_until_a_person_approves_through_toolgate(served):
    coder = agent(served.toolgate(), "oa-2", "Bash", {"command": "git push origin main"})
    result = asyncio.run(Runner.run(coder, "publish"))
    [item] = result.interruptions
    pause = pause_for(item.raw_item.call_id)
    assert pause.policy == "rules" and "git push publishes commits" in pause.how_to_answer
    assert RAN == []

    served.person_answers(pause.request_id)
    state = result.to_state()
    state.approve(item)
    result = asyncio.run(Runner.run(coder, state))
    assert RAN == ["git push origin main"], "it ran, once"
    assert outputs(result) == ["ran: git push origin main"]
    assert result.final_output == "done"


def test_approving_the_interruption_is_not_a_persons_answer(served):
    coder = agent(served.toolgate(), "oa-3", "Bash", {"command": "git push origin main"})
    result = asyncio.run(Runner.run(coder, "publish"))
    [item] = result.interruptions
    state = result.to_state()
    state.approve(item)
    result = asyncio.run(Runner.run(coder, state))
    assert RAN == [], "nobody answered through toolgate"
    [output] = outputs(result)
    assert "rules asks: git push publishes commits" in output


def test_rejecting_the_interruption_refuses(served):
    coder = agent(served.toolgate(), "oa-4", "Bash", {"command": "git push origin main"})
    result = asyncio.run(Runner.run(coder, "publish"))
    state = result.to_state()
    state.reject(result.interruptions[0])
    result = asyncio.run(Runner.run(coder, state))
    assert RAN == []
    assert result.final_output == "done"
