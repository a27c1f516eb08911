"""Helpers for writing toolgate policies in Python (contract toolgate:policy@0.4.0).

The Python counterpart of the `toolgate-guest` Rust crate. A policy is a
subclass of `Policy`; the module that componentize-py builds (`app.py`) then
names one class per export of its world:

    import toolgate_guest as tg

    class MyPolicy(tg.Policy):
        name = "my-policy"

        def __init__(self, config):
            self.blocked = tg.settings(config, blocked=["rm -rf /"]).blocked

        def decide(self, call, risk, budget):
            if call.tool == "Bash" and "rm -rf /" in call.arguments.get("command", ""):
                return tg.deny("not here; remove what you need by name")
            return tg.skip()

    Gate = tg.gate(MyPolicy)            # every policy
    Risk = tg.classifier(MyPolicy)      # only if the world includes `classifier`

The optional phases (`classifier`, `accountant`, `verdict_parser`,
`observer`, `output_checker`, `tool_filter`) are exported by naming them
here *and* including the phase's world in `wit/world.wit`: a policy exports only what it implements, and the
host never calls anything else.

Lifecycle, as in Rust: the host opens an instance once (`__init__` gets the
policy's config table), then every evaluation starts with `begin`, which
keeps the call for the phases that follow; a phase with no begun call
raises, which traps the instance (a failure the host handles by the
policy's fail mode). An instance may serve several calls of one user and
session, or be replaced at any time: keep what must last in `state` or
`events`, never in Python objects.
"""

import json
import time
from types import SimpleNamespace

from componentize_py_types import Err
from wit_world.imports import context as _context
from wit_world.imports import events as _events
from wit_world.imports import logging as _logging
from wit_world.imports import state as _state
from wit_world.imports import store as _store
from wit_world.imports import types as _types

__all__ = [
    "Policy", "Call", "Risk", "Budget", "Reply", "Observed", "ConfigError", "StateError",
    "gate", "classifier", "accountant", "verdict_parser", "observer",
    "allow", "deny", "skip", "pause_for_approval", "pause_for_credential",
    "ask_model", "with_note", "risk", "budget_ok", "budget_warning",
    "output_pass", "redact", "replace", "withhold", "output_checker", "tool_filter",
    "budget_exceeded", "settings", "key", "action_name", "state", "events",
    "transcript_tail", "now_ms", "log",
]


# --- the policy ---------------------------------------------------------

class Policy:
    """A toolgate policy. Subclass it; set `name` (and the other class
    attributes), and implement `decide` plus any optional phase."""

    #: Stable identifier; also names the policy's state namespace.
    name = "policy"
    version = "0.1.0"
    description = ""
    #: What a failure of this policy turns into unless the operator says
    #: otherwise: "closed" (a deny) or "open" (an abstention).
    fail_mode = "closed"
    #: Admin commands answered by `command`.
    commands = ()

    def __init__(self, config):
        """Build the policy from its config table (a dict of JSON values).
        Raise `ConfigError(key, message)` to refuse it: the operator sees the
        message, at the line of the config file the key is written on."""

    def decide(self, call, risk, budget):
        """Decide on `call` (a `Call`): return `allow()`, `deny(...)`,
        `skip()`, `pause_for_approval(...)`, ... `risk` (a `Risk`) is the
        highest risk any policy reported; `budget` (a `Budget`) this policy's
        own `account` result."""
        raise NotImplementedError(f"{type(self).__name__} has no decide")

    def command(self, name, args):
        """Answer an admin command; `args` is the parsed JSON arguments.
        Return something JSON can encode (it is sent as JSON); raise to
        refuse, with the message for the operator."""
        raise ValueError(f"this policy has no command named `{name}`")


class ConfigError(Exception):
    """The config table is refused: `key` is the offending key (or a path
    into the table, `rule[2].args`), `message` says what is wrong and the fix."""

    def __init__(self, key, message):
        super().__init__(message)
        self.key = key
        self.message = message


class StateError(Exception):
    """The policy's state could not be read or written: `kind` is
    "quota-exceeded", "too-large" or "storage". Never means "no data"."""

    def __init__(self, kind, message=""):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind


# --- what a policy reads ------------------------------------------------

_MODES = {
    _types.ExecutionMode.INTERACTIVE: "interactive",
    _types.ExecutionMode.INTERACTIVE_AUTO_APPROVE: "interactive-auto-approve",
    _types.ExecutionMode.AUTONOMOUS: "autonomous",
}
_LEVELS = {
    "none": _types.RiskLevel.NONE,
    "low": _types.RiskLevel.LOW,
    "medium": _types.RiskLevel.MEDIUM,
    "high": _types.RiskLevel.HIGH,
    "critical": _types.RiskLevel.CRITICAL,
}


class Call:
    """The proposed tool call, with its arguments parsed.

    `raw` is the call as the contract defines it (`wit_world.imports.types.ToolCall`).
    """

    __slots__ = ("raw", "_arguments")

    def __init__(self, raw):
        self.raw = raw
        self._arguments = None

    @property
    def arguments(self):
        """The arguments as JSON values; `{}` when they are not a JSON
        object. Parsed when first read: a policy that never reads them
        never pays for it."""
        if self._arguments is None:
            try:
                parsed = json.loads(self.raw.arguments)
            except ValueError:
                parsed = None
            self._arguments = parsed if isinstance(parsed, dict) else {}
        return self._arguments

    id = property(lambda self: self.raw.call_id)
    tool = property(lambda self: self.raw.tool)
    #: The MCP server the tool comes from, or None for a built-in tool.
    mcp_server = property(
        lambda self: self.raw.origin.value if isinstance(self.raw.origin, _types.ToolOrigin_Mcp) else None
    )
    #: The action name operators write patterns in: `Bash`, `mcp:SERVER/TOOL`.
    action = property(lambda self: action_name(self.raw))
    session = property(lambda self: self.raw.caller.session_id)
    thread = property(lambda self: self.raw.caller.thread_id)
    user = property(lambda self: self.raw.caller.user_id)
    channel = property(lambda self: self.raw.caller.channel)
    thread_kind = property(lambda self: self.raw.caller.thread_kind)
    is_subagent = property(lambda self: self.raw.caller.is_subagent)
    turn = property(lambda self: self.raw.caller.turn)
    #: "interactive", "interactive-auto-approve" or "autonomous".
    mode = property(lambda self: _MODES[self.raw.caller.mode])
    #: The context-window size in tokens, when the runtime reports it.
    context_tokens = property(lambda self: self.raw.context_tokens)
    has_transcript = property(lambda self: self.raw.has_transcript)

    @property
    def approved(self):
        """None, or "once"/"always" when a person approved one of this
        policy's pauses of this call (verified by the host)."""
        for resolution in self.raw.resolutions:
            if isinstance(resolution, _types.Resolution_Approved):
                return "always" if resolution.value.always else "once"
        return None

    @property
    def credentials(self):
        """The credentials a person supplied for this policy's pauses."""
        return [
            r.value for r in self.raw.resolutions if isinstance(r, _types.Resolution_Authenticated)
        ]


class Risk:
    """A composed risk report: `level` ("none", "low", "medium", "high",
    "critical"), `category` and `signals`."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    level = property(lambda self: self.raw.level.name.lower())
    category = property(lambda self: self.raw.category)
    signals = property(lambda self: list(self.raw.signals))


class Budget:
    """How this policy's budget stands for the call (its `account` result):
    `status` is "ok", "warning" or "exceeded"; `text` is for the agent."""

    __slots__ = ("status", "text")

    def __init__(self, raw):
        if isinstance(raw, _types.BudgetStatus_Warning):
            self.status, self.text = "warning", raw.value
        elif isinstance(raw, _types.BudgetStatus_Exceeded):
            self.status, self.text = "exceeded", raw.value
        else:
            self.status, self.text = "ok", None


class Reply:
    """The model's answer to the question `decide` asked: `text`, or
    `error` ("not-configured", "timeout", "budget-spent", "transport: ...")."""

    __slots__ = ("text", "error")

    def __init__(self, raw):
        self.text = raw.value if isinstance(raw, _types.ModelReply_Answered) else None
        self.error = None if self.text is not None else _model_error(raw.value)


def _model_error(error):
    if isinstance(error, _types.ModelError_Transport):
        return f"transport: {error.value}"
    return {
        _types.ModelError_NotConfigured: "not-configured",
        _types.ModelError_Timeout: "timeout",
        _types.ModelError_BudgetSpent: "budget-spent",
    }[type(error)]


class Observed:
    """What happened to a call (`observer`): `call`, `outcome` ("succeeded",
    "failed" or "denied"), `summary`, and the composed `risk`."""

    __slots__ = ("call", "outcome", "summary", "risk")

    def __init__(self, raw):
        self.call = Call(raw.call)
        self.outcome = raw.outcome.name.lower()
        self.summary = raw.summary
        self.risk = Risk(raw.risk)


# --- what a policy answers ----------------------------------------------

def _decision(verdict, notes, rewrite=None):
    return _types.Decision(verdict, list(notes), None if rewrite is None else json.dumps(rewrite))


def allow(notes=(), rewrite=None):
    """Let the call run (as far as this policy is concerned). With `rewrite`
    (a dict: the whole new arguments), run it with those arguments instead;
    later policies decide on the rewritten call."""
    return _decision(_types.Verdict_Allow(), notes, rewrite)


def deny(reason, notes=()):
    """Refuse the call; `reason` is shown to the agent: say what to do instead."""
    return _decision(_types.Verdict_Deny(reason), notes)


def skip(notes=()):
    """Abstain: no opinion on this call."""
    return _decision(_types.Verdict_Skip(), notes)


def pause_for_approval(description, allow_always=False, notes=()):
    """Hold the call until a person approves it."""
    request = _types.ApprovalRequest(description, allow_always)
    return _decision(_types.Verdict_Pause(_types.PauseRequest_Approval(request)), notes)


def pause_for_credential(credential, instructions, url=None, notes=()):
    """Hold the call until a person supplies a credential."""
    request = _types.AuthRequest(credential, instructions, url)
    return _decision(_types.Verdict_Pause(_types.PauseRequest_Authentication(request)), notes)


def ask_model(system, user, timeout_ms=10_000):
    """Ask the host's model first; the `verdict_parser` phase turns the
    reply into this policy's decision."""
    return _decision(_types.Verdict_AskModel(_types.ModelQuestion(system, user, timeout_ms)), ())


def with_note(decision, note):
    """`decision` with one more note for the agent."""
    return _types.Decision(decision.verdict, [*decision.notes, note], decision.rewrite)


def risk(level, category, signals=()):
    """A risk classification: `level` is "none", "low", "medium", "high" or
    "critical"; `category` a short kebab-case name."""
    return _types.Risk(_LEVELS[level], category, list(signals))


def output_pass():
    """The `output` phase: the model may read the output as it is."""
    return _types.ResultVerdict_Pass()


def redact(output, words, replacement="[redacted]"):
    """The `output` phase: `output` with every occurrence of each of `words`
    replaced (the spans are computed in UTF-8 bytes, as the contract wants)."""
    data = output.encode()
    spans = []
    for word in words:
        needle = word.encode()
        at = data.find(needle) if needle else -1
        while at >= 0:
            spans.append((at, at + len(needle)))
            at = data.find(needle, at + len(needle))
    spans.sort()
    kept, end = [], -1
    for start, stop in spans:
        if start >= end:
            kept.append(_types.Redaction(start, stop, replacement))
            end = stop
    return _types.ResultVerdict_Redact(kept) if kept else output_pass()


def replace(text):
    """The `output` phase: the model reads `text` instead of the output."""
    return _types.ResultVerdict_Replace(text)


def withhold(reason):
    """The `output` phase: the model reads none of the output, only why."""
    return _types.ResultVerdict_Withhold(reason)


def budget_ok():
    return _types.BudgetStatus_Ok()


def budget_warning(text):
    """Over a soft limit; `text` is meant for the agent."""
    return _types.BudgetStatus_Warning(text)


def budget_exceeded(text):
    """Over a hard limit; `text` says what the agent may still do."""
    return _types.BudgetStatus_Exceeded(text)


# --- config -------------------------------------------------------------

def settings(config, **defaults):
    """The config table as attributes, each key's default given here. A key
    not named here, or a value of another type than its default's, is a
    `ConfigError` naming the key (a typo is an error, not a silent default)."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ConfigError(
            unknown[0], f"unknown key; this policy reads {', '.join(sorted(defaults)) or 'no keys'}"
        )
    values = dict(defaults)
    for name, value in config.items():
        default = defaults[name]
        if default is not None and not _same_kind(value, default):
            raise ConfigError(name, f"expected {_kind(default)}, found {_kind(value)} {json.dumps(value)}")
        values[name] = value
    return SimpleNamespace(**values)


def _same_kind(value, default):
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def _kind(value):
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)


def _read_config():
    try:
        entries = _store.get_all()
    except Err as err:
        raise ConfigError(None, f"the host could not serve the config: {err.value.value}")
    table = {}
    for name, text in entries:
        try:
            table[name] = json.loads(text)
        except ValueError as err:
            raise ConfigError(name, f"not valid JSON: {err}")
    return table


# --- names --------------------------------------------------------------

def action_name(call):
    """The call's action name: a built-in tool keeps its name (`Bash`), an
    MCP tool is `mcp:SERVER/TOOL`. The server comes from the call's origin,
    never from the tool's spelling. Takes a `Call` or the raw record."""
    raw = call.raw if isinstance(call, Call) else call
    if isinstance(raw.origin, _types.ToolOrigin_Mcp):
        return f"mcp:{raw.origin.value}/{raw.tool}"
    return raw.tool


def key(*parts):
    """A state key of `parts` joined by "/", each part escaped ("%" → "%25",
    "/" → "%2F") so that no part reaches into another's keys."""
    return "/".join(str(p).replace("%", "%25").replace("/", "%2F") for p in parts)


# --- host capabilities --------------------------------------------------

def _state_error(err):
    value = err.value
    if isinstance(value, _state.StateError_QuotaExceeded):
        return StateError("quota-exceeded")
    if isinstance(value, _state.StateError_TooLarge):
        return StateError("too-large")
    return StateError("storage", value.value)


# The host's caps (host.wit, `too-large`), checked before a call with the
# host's own answers: what is past the host's copy limit (4 MiB) would
# trap the policy on the way out instead of being answered.
MAX_KEY = 1024
MAX_VALUE = 1024 * 1024
MAX_KEYS = 1000
MAX_FIELD = 256
MAX_TEXT = 1024
MAX_LOG_LINE = 4096


def _utf8_len(text):
    return len(text.encode())


def _cut(text, max_bytes):
    """`text`'s first `max_bytes` bytes of UTF-8 at most, on a character
    boundary, as the host cuts it."""
    if text is None:
        return None
    return text.encode()[:max_bytes].decode(errors="ignore")


class _State:
    """Durable key-value state in this policy's own namespace. Every
    function raises `StateError` when the store fails, and
    `StateError("too-large")` past the host's caps (a key of `MAX_KEY`
    bytes, a value of `MAX_VALUE`, `MAX_KEYS` keys at once)."""

    @staticmethod
    def _storable(key, value=b""):
        if _utf8_len(key) > MAX_KEY or len(value) > MAX_VALUE:
            raise StateError("too-large")

    @staticmethod
    def _call(function, *args):
        try:
            return function(*args)
        except Err as err:
            raise _state_error(err) from None

    def get(self, key):
        """The bytes at `key`, or None."""
        if _utf8_len(key) > MAX_KEY:
            return None
        return self._call(_state.get, key)

    def get_many(self, keys):
        """The values of several keys (at most 1 000), in the order asked."""
        keys = list(keys)
        if len(keys) > MAX_KEYS:
            raise StateError("too-large")
        # Keys no store holds read as None, as the host reads them.
        stored = [k for k in keys if _utf8_len(k) <= MAX_KEY]
        found = iter(self._call(_state.get_many, stored))
        return [next(found) if _utf8_len(k) <= MAX_KEY else None for k in keys]

    def get_json(self, key, default=None):
        """The JSON value at `key`; `default` when missing or undecodable."""
        raw = self.get(key)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError:
            return default

    def set(self, key, value):
        """Write bytes (or a str, as UTF-8)."""
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"state values are bytes or str, not {type(value).__name__}; use set_json")
        self._storable(key, value)
        self._call(_state.set, key, bytes(value))

    def set_json(self, key, value):
        self.set(key, json.dumps(value))

    def delete(self, key):
        self._storable(key)
        self._call(_state.delete, key)

    def keys(self, prefix, limit=100):
        """Keys that start with `prefix`, in order, at most `limit`."""
        if _utf8_len(prefix) > MAX_KEY:
            return []
        return self._call(_state.list_keys, prefix, limit)

    def try_increment(self, key, limit):
        """Atomically add one to the counter at `key` if it is below `limit`:
        the new count, or None when it is at the limit."""
        self._storable(key)
        return self._call(_state.try_increment, key, limit)


class _Events:
    """This policy's append-only event stream."""

    Event = _events.Event

    def append(self, kind, session_id, turn=0, tool=None, detail=None, summary=None):
        """Append an event (queued; never blocks the decision), each field
        cut to what the host keeps of it before it leaves the sandbox."""
        short = lambda text: _cut(text, MAX_FIELD)  # noqa: E731
        event = _events.Event(
            short(session_id), turn, short(kind), short(tool), None, None,
            _cut(detail, MAX_TEXT), _cut(summary, MAX_TEXT), 0,
        )
        _events.append(event)

    @staticmethod
    def _call(function, *args):
        try:
            return function(*args)
        except Err as err:
            raise StateError("storage", err.value.value) from None

    def session_recent(self, session_id, limit=50, exclude_kinds=()):
        """The newest `limit` events of one session, oldest first."""
        return self._call(_events.session_recent, session_id, limit, list(exclude_kinds))

    def tool_history(self, tool, exclude_session, limit=50, exclude_kinds=()):
        """The newest `limit` events for `tool` from other sessions, oldest first."""
        return self._call(_events.tool_history, tool, exclude_session, limit, list(exclude_kinds))


state = _State()
events = _Events()


def transcript_tail(max_bytes):
    """The end of this call's transcript (None when the runtime named
    none). Raises `OSError` when the host could not read it."""
    try:
        return _context.transcript_tail(max_bytes)
    except Err as err:
        raise OSError(err.value.value) from None


def now_ms():
    """Milliseconds since the Unix epoch (the host's wall clock)."""
    return int(time.time() * 1000)


_LOG_LEVELS = {
    "trace": _logging.Level.TRACE, "debug": _logging.Level.DEBUG, "info": _logging.Level.INFO,
    "warn": _logging.Level.WARN, "error": _logging.Level.ERROR,
}


def log(level, message):
    """Log through the host, attributed to this policy: `level` is "trace",
    "debug", "info", "warn" or "error". Cut to what the host keeps of a
    line (`MAX_LOG_LINE` bytes) before it leaves the sandbox."""
    _logging.log(_LOG_LEVELS[level], "", _cut(message, MAX_LOG_LINE))


# --- the exports --------------------------------------------------------

_opened = None
_begun = None


def _policy():
    if _opened is None:
        raise RuntimeError("toolgate called the policy before gate.open")
    return _opened


def _begun_call():
    if _begun is None:
        raise RuntimeError("toolgate called a phase before gate.begin")
    return _begun


def _needs(policy_class, method, world):
    if not callable(getattr(policy_class, method, None)):
        raise TypeError(f"{policy_class.__name__} exports `{world}` but has no `{method}` method")


def gate(policy_class):
    """The `gate` export for `policy_class`: name it `Gate` in app.py."""

    class Gate:
        def describe(self):
            fail_mode = {"open": _types.FailMode.OPEN, "closed": _types.FailMode.CLOSED}[
                policy_class.fail_mode
            ]
            return _types.PolicyInfo(
                policy_class.name, policy_class.version, policy_class.description, fail_mode,
                list(policy_class.commands),
            )

        def open(self):
            global _opened
            try:
                _opened = policy_class(_read_config())
            except ConfigError as err:
                raise Err(_types.ConfigError(err.key, err.message)) from None

        def begin(self, call):
            global _begun
            _begun = Call(call)

        def decide(self, risk, budget):
            return _policy().decide(_begun_call(), Risk(risk), Budget(budget))

        def command(self, name, args):
            try:
                answer = _policy().command(name, json.loads(args) if args.strip() else None)
            except Exception as err:  # an answer to the operator, not a trap
                raise Err(str(err) or type(err).__name__) from None
            return json.dumps(answer)

    return Gate


def classifier(policy_class):
    """The optional `risk` export: name it `Risk`; the policy implements
    `classify(call) -> risk(...)`. Must be pure: no state writes."""
    _needs(policy_class, "classify", "classifier")

    class Risk:
        def classify(self):
            return _policy().classify(_begun_call())

    return Risk


def accountant(policy_class):
    """The optional `budget` export: name it `Budget`; the policy implements
    `account(call, risk) -> budget_ok() | budget_warning(...) | ...`."""
    _needs(policy_class, "account", "accountant")

    class Budget:
        def account(self, risk):
            return _policy().account(_begun_call(), Risk(risk))

    return Budget


def verdict_parser(policy_class):
    """The optional `verdict` export: name it `Verdict`; the policy
    implements `parse(call, reply: Reply) -> decision`. Raising is a
    failure of the policy (its fail mode applies)."""
    _needs(policy_class, "parse", "verdict_parser")

    class Verdict:
        def parse(self, reply):
            try:
                return _policy().parse(_begun_call(), Reply(reply))
            except Exception as err:
                raise Err(str(err) or type(err).__name__) from None

    return Verdict


def observer(policy_class):
    """The optional `observe` export: name it `Observe`; the policy
    implements `observe(event: Observed)` and must tolerate hearing of one
    call more than once."""
    _needs(policy_class, "observe", "observer")

    class Observe:
        def observe(self, event):
            _policy().observe(Observed(event))

    return Observe


class Output:
    """A tool's output for the `output` phase: `call` (a `Call`, with the
    arguments as run), `outcome` ("succeeded" or "failed"), `text` (cut to
    the host's cap: `truncated` says so) and the composed `risk`."""

    __slots__ = ("call", "outcome", "text", "truncated", "risk")

    def __init__(self, raw):
        self.call = Call(raw.call)
        self.outcome = raw.outcome.name.lower()
        self.text = raw.output
        self.truncated = raw.truncated
        self.risk = Risk(raw.risk)


def output_checker(policy_class):
    """The optional `output` export: name it `Output`; the policy implements
    `check_output(output: Output) -> output_pass() | redact(...) | replace(...)
    | withhold(...)`. The output is untrusted input."""
    _needs(policy_class, "check_output", "output_checker")

    class Output_:
        def check(self, output):
            return _policy().check_output(Output(output))

    Output_.__name__ = "Output"
    return Output_


def tool_filter(policy_class):
    """The optional `visibility` export: name it `Visibility`; the policy
    implements `visible(caller, tools) -> [bool]`, one answer per tool
    (each with `name`, `origin`, `description`, `input_schema`). Pure: no
    state writes. Hiding is not refusing: `decide` must still refuse."""
    _needs(policy_class, "visible", "tool_filter")

    class Visibility:
        def visible(self, caller, tools):
            answers = [bool(a) for a in _policy().visible(caller, tools)]
            if len(answers) != len(tools):
                raise RuntimeError(f"visible answered {len(answers)} times for {len(tools)} tools")
            return answers

    return Visibility
