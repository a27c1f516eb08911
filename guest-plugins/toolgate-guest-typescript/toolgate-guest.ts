/**
 * Helpers for writing toolgate policies in TypeScript (contract
 * toolgate:policy@0.4.0): the counterpart of the `toolgate-guest` Rust crate.
 *
 * A policy is an object passed to `definePolicy`; the entry module exports
 * one object per export of its world:
 *
 * ```ts
 * import * as tg from "./toolgate-guest.js";
 *
 * const policy = tg.definePolicy({
 *   name: "my-policy",
 *   open: (config) => tg.settings(config, { blocked: ["rm -rf /"] }),
 *   decide(settings, call) {
 *     const command = String(call.arguments.command ?? "");
 *     return settings.blocked.some((b) => command.includes(b))
 *       ? tg.deny("not here; remove what you need by name")
 *       : tg.skip();
 *   },
 * });
 * export const gate = policy.gate;             // every policy
 * export const risk = policy.phase("risk");    // only if the world includes `classifier`
 * ```
 *
 * The optional phases (`classify`, `account`, `parse`, `observe`,
 * `checkOutput`, `visible`) are exported by implementing them *and*
 * including the phase's world in `wit/world.wit`: a policy exports only what it implements, and the host
 * never calls anything else.
 *
 * Lifecycle, as in Rust: the host opens an instance once (`open` gets the
 * policy's config table and returns what the other functions receive as
 * `settings`), then every evaluation starts with `begin`, which keeps the
 * call for the phases that follow; a phase with no begun call throws, which
 * traps the instance (a failure the host handles by the policy's fail mode).
 * An instance may serve several calls of one user and session, or be
 * replaced at any time: keep what must last in `state` or `events`, never in
 * module variables.
 *
 * The bindings (jco's QuickJS backend): numbers the contract holds as u64
 * (turns, counters, token counts) are JavaScript numbers, exact to 2^53; an
 * absent `option` is `null`; a host call that fails throws its error value.
 */

import wasiConfig from "wasi:config/store@0.2.0-rc.1";
import wasiLogging from "wasi:logging/logging@0.1.0-draft";
import rawState from "toolgate:policy/state@0.4.0";
import rawEvents from "toolgate:policy/events@0.4.0";
import rawContext from "toolgate:policy/context@0.4.0";

// --- the contract's types, as the bindings lift and lower them ----------

export type ToolOrigin = { tag: "builtin" } | { tag: "mcp"; val: string } | { tag: "other"; val: string };
export type ExecutionMode = "interactive" | "interactive-auto-approve" | "autonomous";
export type RiskLevel = "none" | "low" | "medium" | "high" | "critical";
export interface Risk {
  level: RiskLevel;
  category: string;
  signals: string[];
}
export interface Caller {
  sessionId: string;
  threadId: string;
  userId: string;
  channel: string;
  threadKind: string;
  isSubagent: boolean;
  turn: number;
  mode: ExecutionMode;
}
export type Resolution = { tag: "approved"; val: { always: boolean } } | { tag: "authenticated"; val: string };
export interface RawToolCall {
  callId: string;
  tool: string;
  origin: ToolOrigin;
  arguments: string;
  caller: Caller;
  contextTokens: number | null;
  hasTranscript: boolean;
  resolutions: Resolution[];
}
export type BudgetStatus = { tag: "ok" } | { tag: "warning"; val: string } | { tag: "exceeded"; val: string };
export type PauseRequest =
  | { tag: "approval"; val: { description: string; allowAlways: boolean } }
  | { tag: "authentication"; val: { credential: string; instructions: string; url: string | null } };
export type Verdict =
  | { tag: "allow" }
  | { tag: "deny"; val: string }
  | { tag: "pause"; val: PauseRequest }
  | { tag: "skip" }
  | { tag: "ask-model"; val: { system: string; user: string; timeoutMs: number } };
export interface Decision {
  verdict: Verdict;
  notes: string[];
  /** With `allow` only: the whole new arguments (JSON text) to run the call with. */
  rewrite: string | null;
}
export interface Redaction {
  start: number;
  end: number;
  replacement: string;
}
export type ResultVerdict =
  | { tag: "pass" }
  | { tag: "redact"; val: Redaction[] }
  | { tag: "replace"; val: string }
  | { tag: "withhold"; val: string };
export interface RawToolResult {
  call: RawToolCall;
  outcome: "succeeded" | "failed" | "denied";
  output: string;
  truncated: boolean;
  risk: Risk;
}
/** A tool a runtime could offer the model (the `visibility` phase). */
export interface ToolDescriptor {
  name: string;
  origin: ToolOrigin;
  description: string;
  /** The JSON Schema of its arguments, as JSON text. */
  inputSchema: string;
}
export type ModelError =
  | { tag: "not-configured" }
  | { tag: "timeout" }
  | { tag: "budget-spent" }
  | { tag: "transport"; val: string };
export type RawModelReply = { tag: "answered"; val: string } | { tag: "unanswered"; val: ModelError };
export interface RawToolEvent {
  call: RawToolCall;
  outcome: "succeeded" | "failed" | "denied";
  summary: string;
  risk: Risk;
}
export interface Event {
  sessionId: string;
  turn: number;
  kind: string;
  tool: string | null;
  origin: ToolOrigin | null;
  risk: Risk | null;
  detail: string | null;
  summary: string | null;
  atMs: number;
}
type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

// --- what a policy reads ------------------------------------------------

/** The proposed tool call, with its arguments parsed. */
export class Call {
  /** The arguments as JSON values; `{}` when they are not a JSON object. */
  readonly arguments: { [key: string]: Json };

  constructor(readonly raw: RawToolCall) {
    let parsed: Json = null;
    try {
      parsed = JSON.parse(raw.arguments);
    } catch {
      // not JSON: no arguments to read
    }
    this.arguments = parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? parsed : {};
  }

  get id(): string {
    return this.raw.callId;
  }
  get tool(): string {
    return this.raw.tool;
  }
  /** The MCP server the tool comes from, or undefined for a built-in tool. */
  get mcpServer(): string | undefined {
    return this.raw.origin.tag === "mcp" ? this.raw.origin.val : undefined;
  }
  /** The action name operators write patterns in: `Bash`, `mcp:SERVER/TOOL`. */
  get action(): string {
    return actionName(this.raw);
  }
  get session(): string {
    return this.raw.caller.sessionId;
  }
  get thread(): string {
    return this.raw.caller.threadId;
  }
  get user(): string {
    return this.raw.caller.userId;
  }
  get channel(): string {
    return this.raw.caller.channel;
  }
  get threadKind(): string {
    return this.raw.caller.threadKind;
  }
  get isSubagent(): boolean {
    return this.raw.caller.isSubagent;
  }
  get turn(): number {
    return this.raw.caller.turn;
  }
  get mode(): ExecutionMode {
    return this.raw.caller.mode;
  }
  /** The context-window size in tokens, when the runtime reports it. */
  get contextTokens(): number | undefined {
    return this.raw.contextTokens ?? undefined;
  }
  get hasTranscript(): boolean {
    return this.raw.hasTranscript;
  }
  /** "once"/"always" when a person approved one of this policy's pauses of this call (verified by the host). */
  get approved(): "once" | "always" | undefined {
    for (const resolution of this.raw.resolutions) {
      if (resolution.tag === "approved") return resolution.val.always ? "always" : "once";
    }
    return undefined;
  }
  /** The credentials a person supplied for this policy's pauses. */
  get credentials(): string[] {
    return this.raw.resolutions.flatMap((r) => (r.tag === "authenticated" ? [r.val] : []));
  }
}

/** The model's answer to the question `decide` asked: `text`, or `error`. */
export interface Reply {
  text?: string;
  /** "not-configured", "timeout", "budget-spent" or "transport: ..." */
  error?: string;
}

/** A tool's output (`output`): the call as run, and the output cut to the host's cap. */
export interface Output {
  call: Call;
  outcome: "succeeded" | "failed" | "denied";
  text: string;
  truncated: boolean;
  risk: Risk;
}

/** What happened to a call (`observe`). */
export interface Observed {
  call: Call;
  outcome: "succeeded" | "failed" | "denied";
  summary: string;
  risk: Risk;
}

// --- what a policy answers ----------------------------------------------

const decision = (verdict: Verdict, notes: string[] = [], rewrite: Json = null): Decision => ({
  verdict,
  notes: [...notes],
  rewrite: rewrite === null ? null : JSON.stringify(rewrite),
});

/** Let the call run (as far as this policy is concerned). */
/**
 * Let the call run (as far as this policy is concerned). With `rewrite`
 * (the whole new arguments, an object), run it with those instead; later
 * policies decide on the rewritten call.
 */
export const allow = (notes: string[] = [], rewrite: { [key: string]: Json } | null = null): Decision =>
  decision({ tag: "allow" }, notes, rewrite);
/** Refuse the call; `reason` is shown to the agent: say what to do instead. */
export const deny = (reason: string, notes: string[] = []): Decision => decision({ tag: "deny", val: reason }, notes);
/** Abstain: no opinion on this call. */
export const skip = (notes: string[] = []): Decision => decision({ tag: "skip" }, notes);
/** Hold the call until a person approves it. */
export const pauseForApproval = (description: string, allowAlways = false, notes: string[] = []): Decision =>
  decision({ tag: "pause", val: { tag: "approval", val: { description, allowAlways } } }, notes);
/** Hold the call until a person supplies a credential. */
export const pauseForCredential = (
  credential: string,
  instructions: string,
  url?: string,
  notes: string[] = [],
): Decision =>
  decision({ tag: "pause", val: { tag: "authentication", val: { credential, instructions, url: url ?? null } } }, notes);
/** Ask the host's model first; `parse` turns the reply into this policy's decision. */
export const askModel = (system: string, user: string, timeoutMs = 10_000): Decision =>
  decision({ tag: "ask-model", val: { system, user, timeoutMs } });
/** `d` with one more note for the agent. */
export const withNote = (d: Decision, note: string): Decision => ({ ...d, notes: [...d.notes, note] });

/** The `output` phase: the model may read the output as it is. */
export const outputPass = (): ResultVerdict => ({ tag: "pass" });
/** The `output` phase: the model reads `text` instead of the output. */
export const replace = (text: string): ResultVerdict => ({ tag: "replace", val: text });
/** The `output` phase: the model reads none of the output, only why. */
export const withhold = (reason: string): ResultVerdict => ({ tag: "withhold", val: reason });

/**
 * The `output` phase: `output` with every occurrence of each of `words`
 * replaced (the spans counted in UTF-8 bytes, as the contract wants).
 */
export function redact(output: string, words: string[], replacement = "[redacted]"): ResultVerdict {
  const found: [number, number][] = [];
  for (const word of words.filter((w) => w.length > 0)) {
    for (let at = output.indexOf(word); at >= 0; at = output.indexOf(word, at + word.length)) {
      found.push([at, at + word.length]);
    }
  }
  found.sort((a, b) => a[0] - b[0]);
  const spans: Redaction[] = [];
  let end = -1;
  for (const [start, stop] of found) {
    if (start < end) continue;
    spans.push({ start: utf8(output.slice(0, start)).length, end: utf8(output.slice(0, stop)).length, replacement });
    end = stop;
  }
  return spans.length > 0 ? { tag: "redact", val: spans } : outputPass();
}

/** A risk classification; `category` is a short kebab-case name. */
export const risk = (level: RiskLevel, category: string, signals: string[] = []): Risk => ({ level, category, signals });
export const budgetOk = (): BudgetStatus => ({ tag: "ok" });
/** Over a soft limit; `text` is meant for the agent. */
export const budgetWarning = (text: string): BudgetStatus => ({ tag: "warning", val: text });
/** Over a hard limit; `text` says what the agent may still do. */
export const budgetExceeded = (text: string): BudgetStatus => ({ tag: "exceeded", val: text });

// --- config -------------------------------------------------------------

/** The config table is refused: `key` names the offending key (or a path into the table). */
export class ConfigError extends Error {
  constructor(
    readonly key: string | undefined,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The config table with each key's default given here. A key not named
 * here, or a value of another type than its default's, is a `ConfigError`
 * naming the key (a typo is an error, not a silent default).
 */
export function settings<T extends { [key: string]: Json }>(config: { [key: string]: Json }, defaults: T): T {
  const known = Object.keys(defaults);
  const values: { [key: string]: Json } = { ...defaults };
  for (const [name, value] of Object.entries(config)) {
    if (!known.includes(name)) {
      throw new ConfigError(name, `unknown key; this policy reads ${known.sort().join(", ") || "no keys"}`);
    }
    const expected = kind(defaults[name]);
    if (defaults[name] !== null && kind(value) !== expected) {
      throw new ConfigError(name, `expected ${expected}, found ${kind(value)} ${JSON.stringify(value)}`);
    }
    values[name] = value;
  }
  return values as T;
}

function kind(value: Json): string {
  if (Array.isArray(value)) return "a list";
  if (value === null) return "null";
  return { boolean: "a boolean", number: "a number", string: "a string", object: "a table" }[
    typeof value as "boolean" | "number" | "string" | "object"
  ];
}

function readConfig(): { [key: string]: Json } {
  let entries: [string, string][];
  try {
    entries = wasiConfig.getAll();
  } catch (err) {
    throw new ConfigError(undefined, `the host could not serve the config: ${JSON.stringify(err)}`);
  }
  const table: { [key: string]: Json } = {};
  for (const [name, text] of entries) {
    try {
      table[name] = JSON.parse(text);
    } catch (err) {
      throw new ConfigError(name, `not valid JSON: ${err}`);
    }
  }
  return table;
}

// --- names --------------------------------------------------------------

/**
 * The call's action name: a built-in tool keeps its name (`Bash`), an MCP
 * tool is `mcp:SERVER/TOOL`. The server comes from the call's origin, never
 * from the tool's spelling.
 */
export function actionName(call: RawToolCall): string {
  return call.origin.tag === "mcp" ? `mcp:${call.origin.val}/${call.tool}` : call.tool;
}

/**
 * A state key of `parts` joined by "/", each part escaped ("%" → "%25",
 * "/" → "%2F") so that no part reaches into another's keys.
 */
export function key(...parts: (string | number)[]): string {
  return parts.map((p) => String(p).replaceAll("%", "%25").replaceAll("/", "%2F")).join("/");
}

// --- host capabilities --------------------------------------------------

/** The policy's state could not be read or written. Never means "no data". */
export class StateError extends Error {
  constructor(
    readonly kind: "quota-exceeded" | "too-large" | "storage",
    message = "",
  ) {
    super(message ? `${kind}: ${message}` : kind);
  }
}

/** A host call that failed threw its error value, `{ tag, val }`. */
function hostError(err: unknown): { tag: string; val?: string } {
  if (err !== null && typeof err === "object" && "tag" in err) return err as { tag: string; val?: string };
  throw err; // not the host's answer: an error of the policy's own
}

function stateCall<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    const { tag, val } = hostError(err);
    throw new StateError(tag as StateError["kind"], val);
  }
}

/** UTF-8, by hand: not every JavaScript engine a component can carry has `TextEncoder`. */
function utf8(text: string): Uint8Array {
  const bytes: number[] = [];
  for (const ch of text) {
    let c = ch.codePointAt(0) as number;
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // a lone surrogate has no UTF-8 form
    if (c < 0x80) bytes.push(c);
    else if (c < 0x800) bytes.push(0xc0 | (c >> 6), 0x80 | (c & 63));
    else if (c < 0x10000) bytes.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    else bytes.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
  }
  return Uint8Array.from(bytes);
}

function fromUtf8(bytes: Uint8Array): string {
  let text = "";
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i];
    const extra = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
    let c = extra === 0 ? b : b & (0x3f >> extra);
    for (let k = 1; k <= extra; k++) c = (c << 6) | (bytes[i + k] & 63);
    text += String.fromCodePoint(c);
    i += extra + 1;
  }
  return text;
}

/**
 * The host's caps (host.wit, `too-large`), checked before a call with the
 * host's own answers: what is past the host's copy limit (4 MiB) would trap
 * the policy on the way out instead of being answered.
 */
export const MAX_KEY = 1024;
export const MAX_VALUE = 1024 * 1024;
export const MAX_KEYS = 1000;
export const MAX_FIELD = 256;
export const MAX_TEXT = 1024;
export const MAX_LOG_LINE = 4096;

/** Whether a key fits the host's cap: its UTF-8 takes 1 to 3 bytes per UTF-16 unit. */
function keyFits(k: string): boolean {
  return k.length <= MAX_KEY && (k.length * 3 <= MAX_KEY || utf8(k).length <= MAX_KEY);
}

function storable(k: string, value: Uint8Array = new Uint8Array()): void {
  if (!keyFits(k) || value.length > MAX_VALUE) throw new StateError("too-large");
}

/** `text`'s first `max` bytes of UTF-8 at most, on a character boundary, as the host cuts it. */
function cut(text: string | null | undefined, max: number): string | null {
  if (text == null) return null;
  if (text.length * 3 <= max) return text;
  let bytes = 0;
  let end = 0;
  for (const ch of text) {
    const c = ch.codePointAt(0) as number;
    const size = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (bytes + size > max) break;
    bytes += size;
    end += ch.length;
  }
  return text.slice(0, end);
}

/**
 * Durable key-value state in this policy's own namespace; every function
 * throws `StateError` when the store fails, and `StateError("too-large")`
 * past the host's caps (a key of `MAX_KEY` bytes, a value of `MAX_VALUE`,
 * `MAX_KEYS` keys at once).
 */
export const state = {
  get: (k: string): Uint8Array | null => (keyFits(k) ? stateCall(() => rawState.get(k)) : null),
  getMany(keys: string[]): (Uint8Array | null)[] {
    if (keys.length > MAX_KEYS) throw new StateError("too-large");
    // Keys no store holds read as null, as the host reads them.
    const found = stateCall(() => rawState.getMany(keys.filter(keyFits)));
    let next = 0;
    return keys.map((k) => (keyFits(k) ? found[next++] : null));
  },
  /** The JSON value at `k`; `fallback` when missing or undecodable. */
  getJson<T extends Json>(k: string, fallback?: T): T | undefined {
    const bytes = state.get(k);
    if (bytes === null) return fallback;
    try {
      return JSON.parse(fromUtf8(bytes));
    } catch {
      return fallback;
    }
  },
  /** Write bytes (or a string, as UTF-8). */
  set(k: string, value: Uint8Array | string): void {
    const bytes = typeof value === "string" ? utf8(value) : value;
    storable(k, bytes);
    stateCall(() => rawState.set(k, bytes));
  },
  setJson: (k: string, value: Json): void => state.set(k, JSON.stringify(value)),
  delete(k: string): void {
    storable(k);
    stateCall(() => rawState.delete(k));
  },
  /** Keys that start with `prefix`, in order, at most `limit`. */
  keys: (prefix: string, limit = 100): string[] =>
    keyFits(prefix) ? stateCall(() => rawState.listKeys(prefix, limit)) : [],
  /** Atomically add one to the counter at `k` if it is below `limit`: the new count, or null at the limit. */
  tryIncrement(k: string, limit: number): number | null {
    storable(k);
    return stateCall(() => rawState.tryIncrement(k, Math.min(limit, Number.MAX_SAFE_INTEGER)));
  },
};

function eventsCall<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw new StateError("storage", hostError(err).val);
  }
}

/** This policy's append-only event stream. */
export const events = {
  /** Append an event (queued; never blocks the decision), each field cut to what the host keeps of it before it leaves the sandbox. */
  append(
    kind: string,
    sessionId: string,
    turn = 0,
    fields: { tool?: string; detail?: string; summary?: string } = {},
  ): void {
    rawEvents.append({
      sessionId: cut(sessionId, MAX_FIELD) as string,
      turn,
      kind: cut(kind, MAX_FIELD) as string,
      tool: cut(fields.tool, MAX_FIELD),
      origin: null,
      risk: null,
      detail: cut(fields.detail, MAX_TEXT),
      summary: cut(fields.summary, MAX_TEXT),
      atMs: 0,
    });
  },
  /** The newest `limit` events of one session, oldest first. */
  sessionRecent: (sessionId: string, limit = 50, excludeKinds: string[] = []): Event[] =>
    eventsCall(() => rawEvents.sessionRecent(sessionId, limit, excludeKinds)),
  /** The newest `limit` events for `tool` from other sessions, oldest first. */
  toolHistory: (tool: string, excludeSession: string, limit = 50, excludeKinds: string[] = []): Event[] =>
    eventsCall(() => rawEvents.toolHistory(tool, excludeSession, limit, excludeKinds)),
};

/** The end of this call's transcript (null when the runtime named none); throws when the host could not read it. */
export function transcriptTail(maxBytes: number): string | null {
  try {
    return rawContext.transcriptTail(maxBytes);
  } catch (err) {
    throw new Error(`transcript unreadable: ${hostError(err).val}`);
  }
}

/** Milliseconds since the Unix epoch (the host's wall clock). */
export const nowMs = (): number => Date.now();

/** Log through the host, attributed to this policy. */
/** Log through the host, attributed to this policy; cut to what the host keeps of a line (`MAX_LOG_LINE` bytes) before it leaves the sandbox. */
export function log(level: "trace" | "debug" | "info" | "warn" | "error", message: string): void {
  wasiLogging.log(level, "", cut(message, MAX_LOG_LINE) as string);
}

// --- the exports --------------------------------------------------------

/** A policy: who it is, how it opens, and what it answers. `S` is what `open` builds. */
export interface PolicyDefinition<S> {
  /** Stable identifier; also names the policy's state namespace. */
  name: string;
  version?: string;
  description?: string;
  /** What a failure turns into unless the operator says otherwise (default "closed"). */
  failMode?: "open" | "closed";
  /** Admin commands answered by `command`. */
  commands?: string[];
  /** Build the policy's settings from its config table; throw `ConfigError` to refuse it. */
  open(config: { [key: string]: Json }): S;
  decide(settings: S, call: Call, risk: Risk, budget: BudgetStatus): Decision;
  /** The optional `risk` phase; must be pure (no state writes). */
  classify?(settings: S, call: Call): Risk;
  /** The optional `budget` phase, right before `decide`. */
  account?(settings: S, call: Call, risk: Risk): BudgetStatus;
  /** The optional `verdict` phase; throwing is a failure of the policy. */
  parse?(settings: S, call: Call, reply: Reply): Decision;
  /** The optional `observe` phase; must tolerate hearing of one call more than once. */
  observe?(settings: S, event: Observed): void;
  /** The optional `output` phase: what the model may read of a tool's output (untrusted input). */
  checkOutput?(settings: S, output: Output): ResultVerdict;
  /**
   * The optional `visibility` phase: for each tool, may it be offered to
   * `caller` at all? Pure. Hiding is not refusing: `decide` must still refuse.
   */
  visible?(settings: S, caller: Caller, tools: ToolDescriptor[]): boolean[];
  /** Answer an admin command; throw to refuse. */
  command?(settings: S, name: string, args: Json): Json;
}

/** The optional phases, by the name the entry module exports each under. */
export type Phase = "risk" | "budget" | "verdict" | "observe" | "output" | "visibility";

/**
 * What the entry module exports: `gate` always, and `phase(name)` for each
 * optional phase its world includes. `phase` throws for a phase the policy
 * does not implement, while the module is loaded at build time: the build
 * fails rather than every call.
 */
export interface PolicyExports {
  gate: object;
  phase(name: Phase): object;
}

const NOT_OPENED = "toolgate called the policy before gate.open";

/** The export objects for `definition`; export only those your world includes. */
export function definePolicy<S>(definition: PolicyDefinition<S>): PolicyExports {
  let opened: { settings: S } | undefined;
  let begun: Call | undefined;
  const settings = (): S => {
    if (opened === undefined) throw new Error(NOT_OPENED);
    return opened.settings;
  };
  const call = (): Call => {
    if (begun === undefined) throw new Error("toolgate called a phase before gate.begin");
    return begun;
  };
  // A function returning a `result` answers its error by throwing the
  // error's value (a record, a string), never an `Error`: an `Error` traps.
  const phases: { [name in Phase]?: object } = {
    risk: definition.classify && {
      classify: (): Risk => definition.classify!(settings(), call()),
    },
    budget: definition.account && {
      account: (risk: Risk): BudgetStatus => definition.account!(settings(), call(), risk),
    },
    verdict: definition.parse && {
      parse(raw: RawModelReply): Decision {
        const reply: Reply = raw.tag === "answered" ? { text: raw.val } : { error: modelError(raw.val) };
        try {
          return definition.parse!(settings(), call(), reply);
        } catch (err) {
          throw err instanceof Error ? err.message : String(err);
        }
      },
    },
    output: definition.checkOutput && {
      check(raw: RawToolResult): ResultVerdict {
        const output = {
          call: new Call(raw.call),
          outcome: raw.outcome,
          text: raw.output,
          truncated: raw.truncated,
          risk: raw.risk,
        };
        return definition.checkOutput!(settings(), output);
      },
    },
    visibility: definition.visible && {
      visible(caller: Caller, tools: ToolDescriptor[]): boolean[] {
        const answers = definition.visible!(settings(), caller, tools).map(Boolean);
        if (answers.length !== tools.length) {
          throw new Error(`visible answered ${answers.length} times for ${tools.length} tools`);
        }
        return answers;
      },
    },
    observe: definition.observe && {
      observe(raw: RawToolEvent): void {
        const event = { call: new Call(raw.call), outcome: raw.outcome, summary: raw.summary, risk: raw.risk };
        definition.observe!(settings(), event);
      },
    },
  };
  return {
    gate: {
      describe: () => ({
        name: definition.name,
        version: definition.version ?? "0.1.0",
        description: definition.description ?? "",
        defaultFailMode: definition.failMode ?? "closed",
        commands: definition.commands ?? [],
      }),
      open() {
        try {
          opened = { settings: definition.open(readConfig()) };
        } catch (err) {
          if (err instanceof ConfigError) throw { key: err.key ?? null, message: err.message };
          throw err;
        }
      },
      begin(raw: RawToolCall) {
        begun = new Call(raw);
      },
      decide: (risk: Risk, budget: BudgetStatus): Decision => definition.decide(settings(), call(), risk, budget),
      command(name: string, args: string): string {
        if (definition.command === undefined) throw `this policy has no command named \`${name}\``;
        try {
          return JSON.stringify(definition.command(settings(), name, args.trim() ? JSON.parse(args) : null));
        } catch (err) {
          throw err instanceof Error ? err.message : String(err);
        }
      },
    },
    phase(name: Phase): object {
      const phase = phases[name];
      if (phase === undefined) {
        const needs = {
          risk: "classify",
          budget: "account",
          verdict: "parse",
          observe: "observe",
          output: "checkOutput",
          visibility: "visible",
        }[name];
        throw new Error(`${definition.name} exports its \`${name}\` phase but defines no \`${needs}\``);
      }
      return phase;
    },
  };
}

function modelError(error: ModelError): string {
  return error.tag === "transport" ? `transport: ${error.val}` : error.tag;
}
