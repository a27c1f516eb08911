"""toolgate in the OpenAI Agents SDK: every call of a function tool is asked
first, through the SDK's own seams for it — ``needs_approval`` (a pause
becomes the run's interruption) and the tool's input and output
guardrails::

    from agents import Agent, Runner, function_tool
    from toolgate import Toolgate
    from toolgate.openai_agents import guard

    gate = Toolgate()
    agent = Agent(name="coder", tools=guard(gate, [shell, write_file], session="s1"))

- **allow**: the tool runs; its output goes through the policies' output
  checks (a changed output replaces what the model reads). A rewrite cannot
  be run through these seams, so a rewritten call is refused, naming the
  arguments to use.
- **deny**: the tool does not run; the model reads toolgate's reason.
- **pause**: the run stops with an interruption (``result.interruptions``);
  :func:`pause_for` says which policy asks, why, and how a person answers.
  A person answers through toolgate, then you approve the interruption
  (``state.approve(item)``) and run again: the guardrail asks toolgate again
  and the call runs only if the person approved there — ``approve`` alone is
  not a person's answer. ``state.reject(item)`` refuses.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence

from agents import FunctionTool, ToolGuardrailFunctionOutput
from agents.tool_guardrails import tool_input_guardrail, tool_output_guardrail

from . import Decision, Pause, Toolgate

__all__ = ["guard", "pause_for"]

class _Decided(OrderedDict):
    """Decisions by call id, from ``needs_approval`` to the guardrails; the
    oldest forgotten past a bound (a rejected interruption never runs)."""

    BOUND = 4096

    def __setitem__(self, call_id: str, decision: Decision) -> None:
        super().__setitem__(call_id, decision)
        while len(self) > self.BOUND:
            self.popitem(last=False)


_DECIDED: Dict[str, Decision] = _Decided()


def pause_for(call_id: str) -> Optional[Pause]:
    """The pause behind an interruption (``item.raw_item.call_id``), while it waits."""
    decision = _DECIDED.get(call_id)
    return None if decision is None else decision.pause


def guard(gate: Toolgate, tools: Sequence[FunctionTool], *, session: str = "default",
          user: Optional[str] = None, mode: str = "interactive") -> List[FunctionTool]:
    """Copies of ``tools``, each call asked of ``gate`` first (see the
    module's doc); the tools themselves are left as they were."""

    def decide(name: str, arguments: Any, known: Optional[Decision] = None) -> Decision:
        """``known`` if it decided this very call (and did not pause), else
        toolgate's answer now."""
        if isinstance(arguments, str):
            arguments = json.loads(arguments or "{}")
        arguments = arguments or {}
        asked = None if known is None else known.request
        if asked and not known.paused and (asked["tool"], asked["arguments"], asked["session_id"]) \
                == (name, arguments, session):
            return known
        return gate.decide(name, arguments, session=session, user=user, mode=mode)

    return [_guard_one(tool, decide, gate) for tool in tools]


def _guard_one(tool: FunctionTool, decide, gate: Toolgate) -> FunctionTool:
    own_approval = tool.needs_approval

    async def needs_approval(context: Any, parameters: Dict[str, Any], call_id: str) -> bool:
        decision = decide(tool.name, parameters)
        _DECIDED[call_id] = decision
        if decision.paused:
            return True
        if not decision.allowed:
            return False  # the input guardrail refuses it, with the reason
        # A tool that asks on its own still asks (after toolgate allowed).
        if callable(own_approval):
            return bool(await own_approval(context, parameters, call_id))
        return bool(own_approval)

    @tool_input_guardrail(name=f"toolgate:{tool.name}")
    def ask_toolgate(data: Any) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        # After an approval, without a remembered decision, or for another
        # call under the same id: ask again (only toolgate knows whether a
        # person approved, and what).
        decision = decide(tool.name, data.context.tool_arguments, _DECIDED.get(call_id))
        _DECIDED[call_id] = decision
        if not decision.allowed:
            _DECIDED.pop(call_id, None)
            return ToolGuardrailFunctionOutput.reject_content(decision.message(), decision.raw)
        if decision.arguments is not None:
            _DECIDED.pop(call_id, None)
            gate.observe(decision, "denied")
            return ToolGuardrailFunctionOutput.reject_content(
                "toolgate would run this call only with other arguments, which this runtime "
                f"cannot do: call the tool again with {json.dumps(decision.arguments)}"
            )
        return ToolGuardrailFunctionOutput.allow(decision.raw)

    @tool_output_guardrail(name=f"toolgate-output:{tool.name}")
    def check_output(data: Any) -> ToolGuardrailFunctionOutput:
        decision = _DECIDED.pop(data.context.tool_call_id, None)
        if decision is None:
            # The input guardrail always leaves one: without it, nothing
            # says what the model may read.
            return ToolGuardrailFunctionOutput.reject_content(
                "toolgate has no decision for this call, so its output is withheld"
            )
        output = data.output if isinstance(data.output, str) else json.dumps(data.output, default=str)
        gate.observe(decision, "succeeded", summary=output[:200])
        shown = gate.check_output(decision, output).text(output) if decision.output_checked else output
        notes = [note.text for note in decision.notes]
        if shown == output and not notes:
            return ToolGuardrailFunctionOutput.allow()
        return ToolGuardrailFunctionOutput.reject_content("\n".join([shown, *notes]))

    return dataclasses.replace(
        tool,
        needs_approval=needs_approval,
        tool_input_guardrails=[ask_toolgate, *(tool.tool_input_guardrails or [])],
        tool_output_guardrails=[check_output, *(tool.tool_output_guardrails or [])],
    )
