// toolgate for Node agent runtimes: ask toolgate before your agent runs a
// tool. Every policy (a sandboxed WebAssembly component) runs over the
// proposed call; the answer is allow, deny with a reason, or pause for a
// person, plus notes for the agent. See README.md.
//
// Requests go to the store's daemon when one serves it (`toolgate serve`),
// else to a host in this process: the same rule as the `toolgate` command.
// This process is the agent's: it can ask and read, never answer a pause.

import { createRequire } from "node:module";

/**
 * The addon for this platform, named as napi-rs names it
 * (`<platform>-<arch>[-<libc>]`): one built in this tree (`npm run build`
 * writes `native/toolgate.<name>.node`), else the platform package npm
 * installed beside this one (`@toolgate/<name>`, an optional dependency
 * npm installs only where it runs).
 */
function loadNative() {
  const require = createRequire(import.meta.url);
  let name = `${process.platform}-${process.arch}`;
  if (process.platform === "linux") {
    name += process.report?.getReport?.().header?.glibcVersionRuntime ? "-gnu" : "-musl";
  } else if (process.platform === "win32") {
    name += "-msvc";
  }
  const tried = [];
  for (const file of [`./native/toolgate.${name}.node`, `@toolgate/${name}`]) {
    try {
      return require(file);
    } catch (err) {
      tried.push(`${file}: ${err.message}`);
    }
  }
  throw new Error(
    `toolgate has no native addon for ${name} (${tried.join("; ")}): install the package again with ` +
      `its optional dependencies (npm installs @toolgate/${name} where it runs), or build it with \`npm run build\``,
  );
}

const native = loadNative();

/** The WIT contract's version this build speaks. */
export const CONTRACT_VERSION = native.CONTRACT_VERSION;

/** Any failure of toolgate's; `kind` says what sort, as the daemon names it. */
export class ToolgateError extends Error {
  constructor(message, kind = "internal") {
    super(message);
    this.name = new.target.name;
    this.kind = kind;
  }
}
/** The config is invalid. */
export class ConfigError extends ToolgateError {}
/** A plugin could not be loaded. */
export class PluginError extends ToolgateError {}
/** The store could not be opened or used. */
export class StoreError extends ToolgateError {}
/** The store or the daemon is busy: try again shortly. */
export class BusyError extends ToolgateError {}
/** The request was malformed. */
export class RequestError extends ToolgateError {}
/** No toolgate daemon answers at the socket named. */
export class DaemonUnreachable extends ToolgateError {}
/** The caller may not do this (resolving a pause is a person's). */
export class NotAllowed extends ToolgateError {}

const ERRORS = {
  config: ConfigError,
  plugin: PluginError,
  store: StoreError,
  busy: BusyError,
  "invalid-request": RequestError,
  unreachable: DaemonUnreachable,
  unauthorized: NotAllowed,
};

/** The native module's rejection as a typed error (its message is JSON). */
function typed(err) {
  let parsed;
  try {
    parsed = JSON.parse(err.message);
  } catch {
    return err;
  }
  const Type = ERRORS[parsed.kind] ?? ToolgateError;
  return new Type(parsed.message, parsed.kind);
}

async function native_(call) {
  try {
    return await call();
  } catch (err) {
    throw typed(err);
  }
}

/** A call paused for a person: the handle to wait on and ask again with. */
export class Pause {
  constructor(raw, policy, throughDaemon = true) {
    this.requestId = raw.request_id;
    this.policy = policy ?? null;
    this.user = raw.user_id;
    this.thread = raw.thread_id;
    this.channel = raw.channel;
    this.expiresAtMs = raw.expires_at_ms;
    /** "approval" or "authentication" */
    this.kind = raw.kind;
    this.description = raw.description ?? null;
    this.allowAlways = Boolean(raw.allow_always);
    this.credential = raw.credential ?? null;
    this.instructions = raw.instructions ?? null;
    this.url = raw.url ?? null;
    /** Whether the store's daemon holds the pause (else this process does, and nobody can answer it). */
    this.throughDaemon = throughDaemon;
  }

  /** The sentence to show the person: who asks, why, and how they answer. */
  get howToAnswer() {
    const asks = this.policy ? `${this.policy} asks` : "toolgate asks";
    const what = this.description ?? this.instructions ?? "a person's answer";
    if (!this.throughDaemon) {
      return (
        `${asks}: ${what}. No toolgate daemon serves this store and this process holds it, ` +
        `so nobody can answer: serve the store (\`toolgate serve\`, or toolgate in system mode), ` +
        `open toolgate again, and ask again.`
      );
    }
    return (
      `${asks}: ${what}. A person answers on their own terminal with ` +
      `\`toolgate gates resolve --request-id ${this.requestId} --decision approve\` ` +
      `(or deny), or in the approvals inbox (\`toolgate approvals open\`); ` +
      `then ask toolgate again.`
    );
  }
}

/** What toolgate answered on one call. */
export class Decision {
  constructor(raw, request, throughDaemon = true) {
    /** "allow", "deny" or "pause" */
    this.verdict = raw.verdict;
    this.reason = raw.reason ?? null;
    this.decidedBy = raw.decided_by ?? null;
    this.notes = (raw.notes ?? []).map((n) => ({ policy: n.policy, text: n.text }));
    this.pause = raw.pause ? new Pause(raw.pause, raw.decided_by, throughDaemon) : null;
    /** The whole arguments to run the call with, when a policy rewrote them. */
    this.arguments = raw.arguments ?? null;
    this.approvedBy = raw.approved_by ?? null;
    /** Whether policies check this call's output: pass it to `checkOutput`. */
    this.outputChecked = Boolean(raw.output_checked);
    this.callId = raw.call_id;
    /** The decision as toolgate's JSON. */
    this.raw = raw;
    /** The request decided, for `observe` and `checkOutput`. */
    this.request = request;
  }

  get allowed() {
    return this.verdict === "allow";
  }
  get denied() {
    return this.verdict === "deny";
  }
  get paused() {
    return this.verdict === "pause";
  }

  /** The arguments to run the call with: the rewrite, else `proposed`. */
  argumentsFor(proposed) {
    return this.arguments ?? proposed;
  }

  /** One text for the agent: the reason (or how a person answers) and the notes. */
  message() {
    const lead = this.paused && this.pause ? this.pause.howToAnswer : this.reason;
    return [lead, ...this.notes.map((n) => n.text)].filter(Boolean).join("\n");
  }
}

const OUTCOMES = ["succeeded", "failed", "denied"];

/** The request fields `decide` takes by their JavaScript names. */
const FIELDS = {
  session: "session_id",
  user: "user_id",
  thread: "thread_id",
  turn: "turn",
  mode: "mode",
  callId: "call_id",
  cwd: "cwd",
  inputSchema: "input_schema",
  channel: "channel",
  contextTokens: "context_tokens",
  transcriptPath: "transcript_path",
  threadKind: "thread_kind",
  isSubagent: "is_subagent",
};

/** A toolgate host, as an agent runtime reaches it. */
export class Toolgate {
  #host;

  constructor(host) {
    this.#host = host;
  }

  /**
   * Open a host: `config` (a toolgate config file; default: the bundled
   * default config and policies), `store` (overrides its store), `socket`
   * (a daemon that must answer; default: the store's daemon when one serves
   * it, else a host in this process).
   */
  static async open({ config, store, socket } = {}) {
    const host = await native_(() => native.open(config ?? null, store ?? null, socket ?? null));
    return new Toolgate(host);
  }

  /** Whether requests go to the store's daemon (else this process). */
  get throughDaemon() {
    return this.#host.throughDaemon;
  }

  async #request(op, fields) {
    const answer = await native_(() => this.#host.request(JSON.stringify({ op, ...fields })));
    return JSON.parse(answer);
  }

  /**
   * Ask toolgate about one proposed call. `options`: `session` (default
   * "default"), `user`, `thread`, `turn`, `mode` ("interactive",
   * "interactive-auto-approve", "autonomous"), `mcpServer`, `callId`, `cwd`,
   * `inputSchema`, `channel`, `contextTokens`, `transcriptPath`.
   */
  async decide(tool, args = {}, options = {}) {
    const request = { tool, arguments: args };
    for (const [name, value] of Object.entries(options)) {
      if (value === undefined || value === null) continue;
      if (name === "mcpServer") request.origin = { mcp: value };
      else if (name in FIELDS) request[FIELDS[name]] = value;
      else throw new RequestError(`decide does not take the option ${JSON.stringify(name)}`, "invalid-request");
    }
    return new Decision(await this.#request("evaluate", { request }), request, this.throughDaemon);
  }

  #asRun(decision) {
    const request = { ...decision.request, call_id: decision.callId };
    if (decision.arguments !== null) request.arguments = decision.arguments;
    return request;
  }

  /**
   * Report what happened to a decided call: "succeeded", "failed" or
   * "denied" (it did not run; for a paused call, that withdraws its pause:
   * the prompt closes, and approves nothing).
   */
  async observe(decision, outcome, summary = "") {
    if (!OUTCOMES.includes(outcome)) {
      throw new RequestError(`outcome must be one of ${OUTCOMES.join(", ")}, not ${JSON.stringify(outcome)}`, "invalid-request");
    }
    await this.#request("observe", { request: this.#asRun(decision), outcome, summary });
  }

  /** What the model may read of a call's output (the output phase). */
  async checkOutput(decision, output, outcome = "succeeded") {
    const raw = await this.#request("check_output", { request: this.#asRun(decision), outcome, output });
    return {
      output: raw.output ?? null,
      withheld: Boolean(raw.withheld),
      changes: raw.changes ?? [],
      text: (original) => raw.output ?? original,
    };
  }

  /**
   * Which of `tools` (each `{name, description, inputSchema, mcpServer?}`)
   * may be offered to the model at all.
   */
  async visibleTools(tools, { session = "default", user } = {}) {
    const caller = { tool: "tools/list", session_id: session, ...(user ? { user_id: user } : {}) };
    const described = tools.map((t) => ({
      name: t.name,
      origin: t.mcpServer ? { mcp: t.mcpServer } : "builtin",
      description: t.description ?? "",
      input_schema: t.inputSchema ?? { type: "object" },
    }));
    return (await this.#request("visible_tools", { caller, tools: described })).visible;
  }

  /** Start the session's next turn (per-turn budgets reset); its number. */
  async nextTurn(session) {
    return this.#request("next_turn", { session });
  }

  /** The pending gates (paused calls), arguments redacted. */
  async gates(user = null) {
    return this.#request("gates", { user });
  }

  /** Whether `pause` still waits for a person. */
  async pending(pause) {
    return (await this.gates(pause.user)).some((g) => g.request_id === pause.requestId);
  }

  /**
   * Wait until a person answers `pause` (or it expires): true then, false
   * when `timeoutMs` passes first. Then ask again: an approval lets the call
   * run once; a refusal is a deny.
   */
  async wait(pause, { timeoutMs = Infinity, pollMs = 250 } = {}) {
    const deadline = Date.now() + timeoutMs;
    while (await this.pending(pause)) {
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
    return true;
  }
}
