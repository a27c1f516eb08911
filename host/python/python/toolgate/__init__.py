"""toolgate for Python agent runtimes.

Before your agent runs a tool, ask toolgate: it runs every loaded policy (a
sandboxed WebAssembly component) over the proposed call and answers allow,
deny with a reason, or pause for a person, plus notes for the agent::

    import toolgate

    gate = toolgate.Toolgate()                      # the bundled default policies
    decision = gate.decide("Bash", {"command": "git push --force"}, session="s1")
    if decision.allowed:
        output = run_the_tool(decision.arguments_for({"command": "git push --force"}))
        gate.observe(decision, "succeeded", summary=output[:200])
    elif decision.paused:
        print(decision.pause.how_to_answer)         # a person answers; then ask again
    else:
        print("refused:", decision.reason)

Requests go to the store's daemon when one serves it (``toolgate serve``),
else to a host in this process: the same rule as the ``toolgate`` command.
This process is the agent's: it can ask and read, never answer a pause. A
person answers on their own terminal (``toolgate gates resolve``), in the
approvals inbox, or through a channel adapter with its token; asking again
afterwards lets the approved call run once.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._native import (
    CONTRACT_VERSION,
    BusyError,
    ConfigError,
    DaemonUnreachable,
    Host as _Host,
    NotAllowed,
    PluginError,
    RequestError,
    StoreError,
    ToolgateError,
)

__all__ = [
    "CONTRACT_VERSION",
    "BusyError",
    "ConfigError",
    "DaemonUnreachable",
    "Decision",
    "Note",
    "NotAllowed",
    "OutputCheck",
    "Pause",
    "PluginError",
    "RequestError",
    "StoreError",
    "Toolgate",
    "ToolgateError",
    "Verdict",
]


class Verdict(str, Enum):
    """toolgate's answer on a call."""

    ALLOW = "allow"
    DENY = "deny"
    PAUSE = "pause"


@dataclass(frozen=True)
class Note:
    """A note for the agent from one policy."""

    policy: str
    text: str


@dataclass(frozen=True)
class Pause:
    """A call paused for a person: the handle to wait on and ask again with.

    ``kind`` is ``"approval"`` (``description`` says what) or
    ``"authentication"`` (``credential``, ``instructions``, ``url``).
    ``how_to_answer`` is the sentence to show the person; this process
    cannot answer for them.
    """

    request_id: str
    policy: Optional[str]
    user: str
    thread: str
    channel: str
    expires_at_ms: int
    kind: str
    description: Optional[str] = None
    allow_always: bool = False
    credential: Optional[str] = None
    instructions: Optional[str] = None
    url: Optional[str] = None
    #: Whether the store's daemon holds the pause (else this process does,
    #: and nobody can answer it until a daemon serves the store).
    through_daemon: bool = True

    @property
    def how_to_answer(self) -> str:
        asks = f"{self.policy} asks" if self.policy else "toolgate asks"
        what = self.description or self.instructions or "a person's answer"
        if not self.through_daemon:
            return (
                f"{asks}: {what}. No toolgate daemon serves this store and this process "
                f"holds it, so nobody can answer: serve the store (`toolgate serve`, or "
                f"toolgate in system mode), open toolgate again, and ask again."
            )
        return (
            f"{asks}: {what}. A person answers on their own terminal with "
            f"`toolgate gates resolve --request-id {self.request_id} --decision approve` "
            f"(or deny), or in the approvals inbox (`toolgate approvals open`); "
            f"then ask toolgate again."
        )


@dataclass(frozen=True)
class Decision:
    """What toolgate answered on one call."""

    verdict: Verdict
    reason: Optional[str]
    decided_by: Optional[str]
    notes: List[Note]
    pause: Optional[Pause]
    #: The whole arguments to run the call with, when a policy rewrote
    #: them; None when none did.
    arguments: Optional[Dict[str, Any]]
    #: Who answered an earlier pause of this exact call, and how.
    approved_by: Optional[str]
    #: Whether policies check this call's output: hand it to
    #: :meth:`Toolgate.check_output` before the model reads it.
    output_checked: bool
    call_id: str
    #: The decision as toolgate's JSON (every policy's result, the risk, ...).
    raw: Dict[str, Any] = field(repr=False, compare=False)
    #: The request that was decided, for :meth:`Toolgate.observe`.
    request: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW

    @property
    def denied(self) -> bool:
        return self.verdict is Verdict.DENY

    @property
    def paused(self) -> bool:
        return self.verdict is Verdict.PAUSE

    def arguments_for(self, proposed: Mapping[str, Any]) -> Dict[str, Any]:
        """The arguments to run the call with: the rewrite, else ``proposed``."""
        return dict(self.arguments) if self.arguments is not None else dict(proposed)

    def message(self) -> str:
        """One text for the agent: the reason (or how a person answers) and the notes."""
        parts = []
        if self.paused and self.pause is not None:
            parts.append(self.pause.how_to_answer)
        elif self.reason:
            parts.append(self.reason)
        parts.extend(note.text for note in self.notes)
        return "\n".join(parts)

    @classmethod
    def _of(cls, raw: Dict[str, Any], request: Dict[str, Any],
            through_daemon: bool) -> "Decision":
        pause = raw.get("pause")
        return cls(
            verdict=Verdict(raw["verdict"]),
            reason=raw.get("reason"),
            decided_by=raw.get("decided_by"),
            notes=[Note(n["policy"], n["text"]) for n in raw.get("notes", [])],
            pause=None if pause is None else _pause(pause, raw.get("decided_by"), through_daemon),
            arguments=raw.get("arguments"),
            approved_by=raw.get("approved_by"),
            output_checked=bool(raw.get("output_checked", False)),
            call_id=raw["call_id"],
            raw=raw,
            request=request,
        )


def _pause(raw: Dict[str, Any], policy: Optional[str], through_daemon: bool) -> Pause:
    return Pause(
        request_id=raw["request_id"],
        policy=policy,
        user=raw["user_id"],
        thread=raw["thread_id"],
        channel=raw["channel"],
        expires_at_ms=raw["expires_at_ms"],
        kind=raw["kind"],
        description=raw.get("description"),
        allow_always=bool(raw.get("allow_always", False)),
        credential=raw.get("credential"),
        instructions=raw.get("instructions"),
        url=raw.get("url"),
        through_daemon=through_daemon,
    )


@dataclass(frozen=True)
class OutputCheck:
    """What the model may read of a tool's output."""

    #: What the model reads instead, when a policy redacted, replaced or
    #: withheld it; None when it passes unchanged.
    output: Optional[str]
    withheld: bool
    #: Each policy that changed it (or failed), in order.
    changes: List[Dict[str, Any]]

    def text(self, original: str) -> str:
        """The text the model reads."""
        return original if self.output is None else self.output


_OUTCOMES = ("succeeded", "failed", "denied")


class Toolgate:
    """A toolgate host, as an agent runtime reaches it.

    ``config`` is a toolgate config file (default: the bundled default
    config and policies); ``store`` overrides its store; ``socket`` names a
    daemon that must answer (default: the store's daemon when one serves
    it, else a host in this process). Raises :class:`ConfigError`,
    :class:`PluginError`, :class:`StoreError`, ... when it cannot start.
    """

    def __init__(self, config: Optional[str] = None, *, store: Optional[str] = None,
                 socket: Optional[str] = None) -> None:
        self._host = _Host(
            None if config is None else str(config),
            None if store is None else str(store),
            None if socket is None else str(socket),
        )

    @property
    def through_daemon(self) -> bool:
        """Whether requests go to the store's daemon (else this process)."""
        return self._host.through_daemon

    def _request(self, op: str, **fields: Any) -> Any:
        return json.loads(self._host.request(json.dumps({"op": op, **fields})))

    def decide(self, tool: str, arguments: Optional[Mapping[str, Any]] = None, *,
               session: str = "default", user: Optional[str] = None,
               thread: Optional[str] = None, turn: Optional[int] = None,
               mode: Optional[str] = None, mcp_server: Optional[str] = None,
               call_id: Optional[str] = None, cwd: Optional[str] = None,
               input_schema: Optional[Mapping[str, Any]] = None,
               **more: Any) -> Decision:
        """Ask toolgate about one proposed call.

        ``mode`` is ``"interactive"`` (default), ``"interactive-auto-approve"``
        or ``"autonomous"``; ``mcp_server`` names the MCP server a tool
        comes from; ``more`` takes the rest of toolgate's request fields
        (``channel``, ``context_tokens``, ``transcript_path``, ...).
        """
        request: Dict[str, Any] = {
            "tool": tool,
            "arguments": dict(arguments or {}),
            "session_id": session,
            **more,
        }
        optional = {
            "user_id": user,
            "thread_id": thread,
            "turn": turn,
            "mode": mode,
            "call_id": call_id,
            "cwd": cwd,
            "input_schema": None if input_schema is None else dict(input_schema),
            "origin": None if mcp_server is None else {"mcp": mcp_server},
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        return Decision._of(self._request("evaluate", request=request), request,
                            self.through_daemon)

    def observe(self, decision: Decision, outcome: str, summary: str = "") -> None:
        """Report what happened to a decided call: ``"succeeded"``,
        ``"failed"`` or ``"denied"`` (it did not run). Policies that count
        or learn hear of it; ``"denied"`` for a paused call withdraws its
        pause (the person refused it in your own prompt, or the agent gave
        up): the prompt closes, and approves nothing."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(_OUTCOMES)}, not {outcome!r}")
        request = dict(decision.request, call_id=decision.call_id)
        if decision.arguments is not None:
            request["arguments"] = decision.arguments
        self._request("observe", request=request, outcome=outcome, summary=summary)

    def check_output(self, decision: Decision, output: str,
                     outcome: str = "succeeded") -> OutputCheck:
        """What the model may read of a call's output (the ``output`` phase)."""
        request = dict(decision.request, call_id=decision.call_id)
        if decision.arguments is not None:
            request["arguments"] = decision.arguments
        raw = self._request("check_output", request=request, outcome=outcome, output=output)
        return OutputCheck(raw.get("output"), bool(raw.get("withheld")), raw.get("changes", []))

    def visible_tools(self, tools: Sequence[Mapping[str, Any]], *, session: str = "default",
                      user: Optional[str] = None) -> List[bool]:
        """Which of ``tools`` (each ``{"name", "description", "input_schema"}``,
        optionally ``"mcp_server"``) may be offered to the model at all."""
        caller: Dict[str, Any] = {"tool": "tools/list", "session_id": session}
        if user is not None:
            caller["user_id"] = user
        described = [
            {
                "name": t["name"],
                "origin": {"mcp": t["mcp_server"]} if t.get("mcp_server") else "builtin",
                "description": t.get("description", ""),
                "input_schema": t.get("input_schema", {"type": "object"}),
            }
            for t in tools
        ]
        return list(self._request("visible_tools", caller=caller, tools=described)["visible"])

    def next_turn(self, session: str) -> int:
        """Start the session's next turn (per-turn budgets reset); its number."""
        return int(self._request("next_turn", session=session))

    def gates(self, user: Optional[str] = None) -> List[Dict[str, Any]]:
        """The pending gates (paused calls), arguments redacted."""
        return list(self._request("gates", user=user))

    def pending(self, pause: Pause) -> bool:
        """Whether ``pause`` still waits for a person."""
        return any(g["request_id"] == pause.request_id for g in self.gates(pause.user))

    def wait(self, pause: Pause, timeout: Optional[float] = None, poll: float = 0.25) -> bool:
        """Wait until a person answers ``pause`` (or it expires): True then,
        False when ``timeout`` seconds pass first. Then ask toolgate again:
        an approval lets the call run once; a refusal is a deny."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending(pause):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(poll)
        return True
