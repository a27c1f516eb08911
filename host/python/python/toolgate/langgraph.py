"""toolgate in a LangGraph agent: every tool call a ``ToolNode`` runs is
asked first, through the node's own interceptor (``wrap_tool_call``)::

    from langgraph.prebuilt import ToolNode
    from toolgate import Toolgate
    from toolgate.langgraph import guard

    tools = ToolNode([search, shell], wrap_tool_call=guard(Toolgate()))

- **allow**: the tool runs (with the arguments a policy rewrote them to,
  when one did); its output goes through the policies' output checks and
  their notes are added; the outcome is reported.
- **deny**: the tool does not run; the model reads toolgate's reason as the
  tool's error.
- **pause**: the graph stops with ``interrupt()``; the value shown to your
  application says which policy asks, why, and how a person answers. A
  person answers through toolgate (their terminal, the approvals inbox, a
  channel adapter), then you resume the graph (``Command(resume=...)``): the
  node asks toolgate again and the call runs only if the person approved.
  The resume value is not an approval — an agent's process could forge it —
  but it may *refuse*: resuming with ``"deny"`` (or ``False``, or
  ``{"approved": False}``) ends the call as refused by the person.

The session is the graph's ``thread_id`` (``config["configurable"]``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from langchain_core.messages import ToolMessage
from langgraph.types import interrupt

from . import Decision, Toolgate

__all__ = ["guard", "pause_payload"]


def pause_payload(decision: Decision) -> Dict[str, Any]:
    """What ``interrupt()`` shows your application for a paused call."""
    pause = decision.pause
    assert pause is not None, "only a paused decision has a pause"
    return {
        "toolgate": "pause",
        "policy": pause.policy,
        "reason": decision.reason,
        "kind": pause.kind,
        "request_id": pause.request_id,
        "how_to_answer": pause.how_to_answer,
    }


def _refused_by_resume(value: Any) -> bool:
    if value is False or (isinstance(value, str) and value.strip().lower() in ("deny", "no")):
        return True
    return isinstance(value, dict) and value.get("approved") is False


def _refusal(call: Dict[str, Any], text: str) -> ToolMessage:
    return ToolMessage(content=text, name=call["name"], tool_call_id=call["id"], status="error")


def guard(gate: Toolgate, *, user: Optional[str] = None, mode: str = "interactive",
          mcp_server: Optional[str] = None) -> Callable[..., Any]:
    """A ``wrap_tool_call`` interceptor for ``ToolNode`` that asks ``gate``
    before every call (see the module's doc)."""

    def decide(request: Any) -> Decision:
        call = request.tool_call
        configurable = (getattr(request.runtime, "config", None) or {}).get("configurable", {})
        return gate.decide(
            call["name"],
            call.get("args") or {},
            session=str(configurable.get("thread_id", "default")),
            user=user,
            mode=mode,
            mcp_server=mcp_server,
        )

    def intercept(request: Any, execute: Callable[[Any], Any]) -> Any:
        call = request.tool_call
        decision = decide(request)
        while decision.paused:
            answer = interrupt(pause_payload(decision))
            if _refused_by_resume(answer):
                gate.observe(decision, "denied")
                return _refusal(call, f"A person refused this call ({decision.reason}).")
            # Only toolgate knows whether a person approved: ask again.
            decision = decide(request)
        if not decision.allowed:
            return _refusal(call, decision.message())
        if decision.arguments is not None:
            request = request.override(tool_call={**call, "args": decision.arguments})
        try:
            result = execute(request)
        except Exception:
            gate.observe(decision, "failed")
            raise
        if not isinstance(result, ToolMessage):
            gate.observe(decision, "succeeded")
            if decision.output_checked:
                # A Command carries no output toolgate can check: withhold it.
                return _refusal(call, "toolgate checks this tool's output, and a tool that "
                                      "returns a Command has none it can check")
            return result
        failed = result.status == "error"
        result = _checked(gate, decision, result)
        gate.observe(decision, "failed" if failed else "succeeded",
                     summary=str(getattr(result, "content", ""))[:200])
        return result

    return intercept


def _checked(gate: Toolgate, decision: Decision, message: ToolMessage) -> ToolMessage:
    """``message`` as the policies let the model read it, with their notes."""
    content = message.content if isinstance(message.content, str) else str(message.content)
    if decision.output_checked:
        content = gate.check_output(decision, content).text(content)
    notes = [note.text for note in decision.notes]
    if notes:
        content = "\n".join([content, *notes])
    return message.model_copy(update={"content": content})
