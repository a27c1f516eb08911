// Types for the `toolgate` package (index.js).

export declare const CONTRACT_VERSION: string;

export declare class ToolgateError extends Error {
  /** What sort, as the daemon's protocol names it ("config", "store", ...). */
  readonly kind: string;
}
export declare class ConfigError extends ToolgateError {}
export declare class PluginError extends ToolgateError {}
export declare class StoreError extends ToolgateError {}
export declare class BusyError extends ToolgateError {}
export declare class RequestError extends ToolgateError {}
export declare class DaemonUnreachable extends ToolgateError {}
export declare class NotAllowed extends ToolgateError {}

export type Verdict = "allow" | "deny" | "pause";
export type Outcome = "succeeded" | "failed" | "denied";
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export interface Note {
  policy: string;
  text: string;
}

export declare class Pause {
  readonly requestId: string;
  readonly policy: string | null;
  readonly user: string;
  readonly thread: string;
  readonly channel: string;
  readonly expiresAtMs: number;
  readonly kind: "approval" | "authentication";
  readonly description: string | null;
  readonly allowAlways: boolean;
  readonly credential: string | null;
  readonly instructions: string | null;
  readonly url: string | null;
  /** Whether the store's daemon holds the pause (else this process does, and nobody can answer it). */
  readonly throughDaemon: boolean;
  /** The sentence to show the person: who asks, why, and how they answer. */
  readonly howToAnswer: string;
}

export declare class Decision {
  readonly verdict: Verdict;
  readonly reason: string | null;
  readonly decidedBy: string | null;
  readonly notes: Note[];
  readonly pause: Pause | null;
  /** The whole arguments to run the call with, when a policy rewrote them. */
  readonly arguments: { [key: string]: Json } | null;
  readonly approvedBy: string | null;
  readonly outputChecked: boolean;
  readonly callId: string;
  readonly raw: { [key: string]: Json };
  /** The request decided, as toolgate's JSON. */
  readonly request: { [key: string]: Json };
  readonly allowed: boolean;
  readonly denied: boolean;
  readonly paused: boolean;
  argumentsFor<T>(proposed: T): T | { [key: string]: Json };
  message(): string;
}

export interface DecideOptions {
  session?: string;
  user?: string;
  thread?: string;
  turn?: number;
  mode?: "interactive" | "interactive-auto-approve" | "autonomous";
  mcpServer?: string;
  callId?: string;
  cwd?: string;
  inputSchema?: { [key: string]: Json };
  channel?: string;
  contextTokens?: number;
  transcriptPath?: string;
  threadKind?: string;
  isSubagent?: boolean;
}

export interface OutputCheck {
  output: string | null;
  withheld: boolean;
  changes: { policy: string; action: string; failure?: string }[];
  text(original: string): string;
}

export interface ToolDescription {
  name: string;
  description?: string;
  inputSchema?: { [key: string]: Json };
  mcpServer?: string;
}

export declare class Toolgate {
  static open(options?: { config?: string; store?: string; socket?: string }): Promise<Toolgate>;
  readonly throughDaemon: boolean;
  decide(tool: string, args?: { [key: string]: unknown }, options?: DecideOptions): Promise<Decision>;
  observe(decision: Decision, outcome: Outcome, summary?: string): Promise<void>;
  checkOutput(decision: Decision, output: string, outcome?: Outcome): Promise<OutputCheck>;
  visibleTools(tools: ToolDescription[], options?: { session?: string; user?: string }): Promise<boolean[]>;
  nextTurn(session: string): Promise<number>;
  gates(user?: string | null): Promise<{ [key: string]: Json }[]>;
  pending(pause: Pause): Promise<boolean>;
  wait(pause: Pause, options?: { timeoutMs?: number; pollMs?: number }): Promise<boolean>;
}
