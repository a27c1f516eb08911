// context-budget: context-cost's warn/stop, ported to TypeScript.
//
// Every tool call re-sends the agent's whole context, so the last cheap
// action of a long-lived agent is its most expensive one. This policy
// measures the context the newest turn carried (as the runtime reports it,
// or from the tail of the transcript) and, past `warn_tokens`, allows the
// call with a note telling the agent to wrap up; past `max_tokens` (off by
// default) it denies everything but reporting back. It fails open
// throughout.
//
// The bundled Rust policy also lets plain `git add/commit/push` commands
// through past the stop; this port keeps to SendMessage.

import * as tg from "./toolgate-guest.js";

const NAME = "context-budget";
const ESCAPE_NOTE =
  "Context ceiling reached: this call is permitted only because it reports your work. Report back now.";

type Settings = {
  enabled: boolean;
  warn_tokens: number;
  max_tokens: number;
  subagents_only: boolean;
  transcript_tail_bytes: number;
};

const policy = tg.definePolicy({
  name: NAME,
  description: "warns (and optionally stops) an agent carrying too much context",
  failMode: "open",

  open: (config): Settings =>
    tg.settings(config, {
      enabled: true,
      warn_tokens: 250_000,
      max_tokens: 0,
      subagents_only: true,
      transcript_tail_bytes: 256 * 1024,
    }),

  account(s, call) {
    const tokens = measure(s, call);
    if (tokens === undefined || !s.enabled) return tg.budgetOk();
    if (s.max_tokens > 0 && tokens >= s.max_tokens) return tg.budgetExceeded(stopText(tokens, s.max_tokens));
    if (s.warn_tokens > 0 && tokens >= s.warn_tokens) return tg.budgetWarning(warnText(tokens, s));
    return tg.budgetOk();
  },

  decide(_s, call, _risk, budget) {
    switch (budget.tag) {
      case "warning":
        return tg.allow([budget.val]);
      case "exceeded":
        return call.tool === "SendMessage" ? tg.allow([ESCAPE_NOTE]) : tg.deny(budget.val);
      default:
        return tg.allow();
    }
  },
});

/** The context size to judge this call by, or undefined (fail open). */
function measure(s: Settings, call: tg.Call): number | undefined {
  if (!s.enabled || (s.subagents_only && !call.isSubagent)) return undefined;
  if (call.contextTokens !== undefined) return call.contextTokens;
  if (!call.hasTranscript) return undefined;
  try {
    return latestContextTokens(tg.transcriptTail(s.transcript_tail_bytes) ?? "");
  } catch (why) {
    tg.log("warn", String(why));
    return undefined;
  }
}

/** The newest turn's prompt size in a JSONL transcript tail: the last line
 * whose `message.usage` has any input-token field, summed. */
function latestContextTokens(jsonl: string): number | undefined {
  const fields = ["input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"];
  for (const line of jsonl.split("\n").reverse()) {
    let usage: Record<string, unknown>;
    try {
      usage = JSON.parse(line).message.usage;
    } catch {
      continue;
    }
    const counts = fields.map((f) => usage?.[f]).filter((n): n is number => Number.isInteger(n));
    if (counts.length > 0) return counts.reduce((a, b) => a + b, 0);
  }
  return undefined;
}

function warnText(tokens: number, s: Settings): string {
  const stop = s.max_tokens > 0 ? ` At ${s.max_tokens} tokens your tool calls will be DENIED.` : "";
  return (
    `Context-cost warning: you are carrying ${tokens} tokens of context, at or past the ` +
    `${s.warn_tokens} warn threshold, and every tool call re-sends all of it, so each step ` +
    `now costs more than the one before.${stop} Wrap up: finish or checkpoint the task at ` +
    "hand and report back with what remains so a fresh agent can continue."
  );
}

function stopText(tokens: number, maxTokens: number): string {
  return (
    `Context ceiling reached: this agent carries ${tokens} tokens of context, at or past the ` +
    `${maxTokens}-token limit, and every further call re-sends all of it. Report back now ` +
    "with SendMessage: what you finished, what remains and what a fresh agent needs. " +
    "Everything else is denied. An operator can raise the ceiling with " +
    `plugins.${NAME}.config.max_tokens in the toolgate config.`
  );
}

export const gate = policy.gate;
export const budget = policy.phase("budget");
