"""toolgate in a real LangGraph agent (langgraph from PyPI), its model
scripted with langchain-core's own fake chat model: a refused call, a
pause that stops the graph until a person answers through toolgate, and a
resume that is not an approval."""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from toolgate.langgraph import guard

RAN = []


# Named as the operator's rules (examples/rules.toml) name the tools.
@tool("Bash")
def shell(command: str) -> str:
    """Run a shell command."""
    RAN.append(command)
    return f"ran: {command}"


@tool("Write")
def write_file(file_path: str, content: str) -> str:
    """Write a file."""
    RAN.append(f"write {file_path}")
    return "written"


def agent(gate, *calls):
    """A graph whose model asks for `calls` (name, args) in turn, then ends."""
    replies = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])
        for i, (name, args) in enumerate(calls)
    ] + [AIMessage(content="done")]
    model = FakeMessagesListChatModel(responses=replies)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([shell, write_file], wrap_tool_call=guard(gate)))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def tool_messages(state):
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture(autouse=True)
def nothing_ran_yet():
    RAN.clear()


def test_a_refused_call_never_runs_and_the_model_reads_why(setup):
    graph = agent(setup.toolgate(), ("Write", {"file_path": "Cargo.lock", "content": "x"}))
    state = graph.invoke({"messages": [("user", "bump the lock")]},
                         {"configurable": {"thread_id": "lg-1"}})
    [message] = tool_messages(state)
    assert message.status == "error"
    assert "Lock files are generated" in message.content
    assert RAN == []
    assert state["messages"][-1].content == "done"


def test_a_pause_interrupts_the_graph_until_a_person_approves_through_toolgate(served):
    graph = agent(served.toolgate(), ("Bash", {"command": "git push origin main"}))
    config = {"configurable": {"thread_id": "lg-2"}}
    state = graph.invoke({"messages": [("user", "publish")]}, config)
    [interrupted] = state["__interrupt__"]
    asked = interrupted.value
    assert asked["policy"] == "rules" and "git push publishes commits" in asked["reason"]
    assert "toolgate gates resolve" in asked["how_to_answer"]
    assert RAN == []

    # Resuming is not approving: nobody answered, so the graph stops again.
    state = graph.invoke(Command(resume="approved"), config)
    assert state["__interrupt__"][0].value["policy"] == "rules"
    assert RAN == []

    # The person answers the prompt they were shown first.
    served.person_answers(asked["request_id"])
    state = graph.invoke(Command(resume="approved"), config)
    assert "__interrupt__" not in state
    assert RAN == ["git push origin main"], "it ran, once"
    [message] = tool_messages(state)
    assert message.content.startswith("ran: git push origin main")
    assert state["messages"][-1].content == "done"


def test_resuming_with_a_refusal_ends_the_call(served):
    graph = agent(served.toolgate(), ("Bash", {"command": "git push origin main"}))
    config = {"configurable": {"thread_id": "lg-3"}}
    graph.invoke({"messages": [("user", "publish")]}, config)
    state = graph.invoke(Command(resume="deny"), config)
    [message] = tool_messages(state)
    assert message.status == "error" and "A person refused this call" in message.content
    assert RAN == []
    assert served.toolgate().gates() == [], "the refusal withdrew the pause"
