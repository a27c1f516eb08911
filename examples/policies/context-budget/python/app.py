"""context-budget: context-cost's warn/stop, ported to Python.

Every tool call re-sends the agent's whole context, so the last cheap action
of a long-lived agent is its most expensive one. This policy measures the
context the newest turn carried (as the runtime reports it, or from the tail
of the transcript) and, past `warn_tokens`, allows the call with a note
telling the agent to wrap up; past `max_tokens` (off by default) it denies
everything but reporting back. It fails open throughout.

The bundled Rust policy also lets plain `git add/commit/push` commands
through past the stop; this port keeps to SendMessage.
"""

import json

import toolgate_guest as tg

NAME = "context-budget"
ESCAPE_NOTE = (
    "Context ceiling reached: this call is permitted only because it reports your work. "
    "Report back now."
)


class ContextBudget(tg.Policy):
    name = NAME
    version = "0.1.0"
    description = "warns (and optionally stops) an agent carrying too much context"
    fail_mode = "open"

    def __init__(self, config):
        self.settings = tg.settings(
            config,
            enabled=True,
            warn_tokens=250_000,
            max_tokens=0,
            subagents_only=True,
            transcript_tail_bytes=256 * 1024,
        )

    def measure(self, call):
        """The context size to judge this call by, or None (fail open)."""
        s = self.settings
        if not s.enabled or (s.subagents_only and not call.is_subagent):
            return None
        if call.context_tokens is not None:
            return call.context_tokens
        if not call.has_transcript:
            return None
        try:
            tail = tg.transcript_tail(s.transcript_tail_bytes)
        except OSError as why:
            tg.log("warn", f"transcript unreadable: {why}")
            return None
        return latest_context_tokens(tail or "")

    def account(self, call, risk):
        tokens = self.measure(call)
        s = self.settings
        if tokens is None or not s.enabled:
            return tg.budget_ok()
        if s.max_tokens > 0 and tokens >= s.max_tokens:
            return tg.budget_exceeded(stop_text(tokens, s.max_tokens))
        if s.warn_tokens > 0 and tokens >= s.warn_tokens:
            return tg.budget_warning(warn_text(tokens, s))
        return tg.budget_ok()

    def decide(self, call, risk, budget):
        if budget.status == "warning":
            return tg.allow(notes=[budget.text])
        if budget.status == "exceeded":
            if call.tool == "SendMessage":
                return tg.allow(notes=[ESCAPE_NOTE])
            return tg.deny(budget.text)
        return tg.allow()


def latest_context_tokens(jsonl):
    """The newest turn's prompt size in a JSONL transcript tail: the last
    line whose `message.usage` has any input-token field, summed."""
    fields = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    for line in reversed(jsonl.splitlines()):
        try:
            usage = json.loads(line)["message"]["usage"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(usage, dict):
            continue
        counts = [usage[f] for f in fields if type(usage.get(f)) is int]
        if counts:
            return sum(counts)
    return None


def warn_text(tokens, s):
    stop = f" At {s.max_tokens} tokens your tool calls will be DENIED." if s.max_tokens > 0 else ""
    return (
        f"Context-cost warning: you are carrying {tokens} tokens of context, at or past the "
        f"{s.warn_tokens} warn threshold, and every tool call re-sends all of it, so each step "
        f"now costs more than the one before.{stop} Wrap up: finish or checkpoint the task at "
        "hand and report back with what remains so a fresh agent can continue."
    )


def stop_text(tokens, max_tokens):
    return (
        f"Context ceiling reached: this agent carries {tokens} tokens of context, at or past the "
        f"{max_tokens}-token limit, and every further call re-sends all of it. Report back now "
        "with SendMessage: what you finished, what remains and what a fresh agent needs. "
        f"Everything else is denied. An operator can raise the ceiling with "
        f"plugins.{NAME}.config.max_tokens in the toolgate config."
    )


Gate = tg.gate(ContextBudget)
Budget = tg.accountant(ContextBudget)
