// toolgate in the Vercel AI SDK: every tool call is asked first, through
// the SDK's own seams, per tool: `needsApproval` (a pause becomes the SDK's
// tool-approval request) and a wrapped `execute`.
//
//   const guarded = gateTools(gate, { shell, writeFile }, { session: "s1" });
//   const result = await generateText({ model, tools: guarded.tools, ... });
//
// - allow: the tool runs (with the arguments a policy rewrote them to, when
//   one did); its output goes through the policies' output checks (a
//   changed output reaches the model as text), a string output gets their
//   notes; the outcome is reported.
// - deny: the tool does not run; `execute` throws toolgate's reason, which
//   the SDK hands the model as the tool's error.
// - pause: the SDK stops with a `tool-approval-request`; `guarded.pauseFor(
//   toolCallId)` says which policy asks, why, and how a person answers. A
//   person answers through toolgate, then you send the SDK's
//   `tool-approval-response`: `approved: true` makes the SDK call `execute`,
//   which asks toolgate again and runs only if the person approved there
//   (an approval response is not a person's answer: an agent's process
//   could forge it). `approved: false` is a refusal: the tool never runs.

import { isDeepStrictEqual } from "node:util";

import { RequestError } from "./index.js";

/**
 * `tools` (an AI SDK tool set) with each call asked of `gate` first.
 * `options`: `session` (default "default"), `user`, `mode`, `mcpServer`.
 * Returns `{ tools, pauseFor(toolCallId) }`; keep it across the calls of
 * one conversation (a pause is remembered until the call runs).
 */
export function gateTools(gate, tools, options = {}) {
  const decided = new Map();
  const ask = (name, input) => gate.decide(name, input ?? {}, options);

  const guard = (name, tool) => {
    if (typeof tool.execute !== "function") {
      throw new RequestError(`tool ${JSON.stringify(name)} has no execute: toolgate cannot stand before it`, "invalid-request");
    }
    return {
      ...tool,
      async needsApproval(input, context) {
        const decision = await ask(name, input);
        decided.set(context.toolCallId, decision);
        if (decision.paused) return true;
        // A tool that asks on its own still asks (after toolgate allowed).
        const own = tool.needsApproval;
        return decision.allowed && (typeof own === "function" ? await own(input, context) : Boolean(own));
      },
      async execute(input, context) {
        let decision = decided.get(context.toolCallId);
        decided.delete(context.toolCallId);
        // After an approval response, without a remembered decision, or
        // for other arguments under the same id: ask again (only toolgate
        // knows whether a person approved, and what).
        const same = decision?.request.tool === name && isDeepStrictEqual(decision?.request.arguments, input ?? {});
        if (!same || decision.paused) decision = await ask(name, input);
        if (!decision.allowed) throw new Error(decision.message());
        let output;
        try {
          output = await tool.execute(decision.argumentsFor(input), context);
        } catch (err) {
          await gate.observe(decision, "failed", String(err?.message ?? err).slice(0, 200));
          throw err;
        }
        if (decision.outputChecked) {
          // Whatever the tool returned is checked as the model would read it.
          const text = typeof output === "string" ? output : JSON.stringify(output) ?? "";
          const checked = await gate.checkOutput(decision, text);
          if (checked.output !== null) output = checked.output;
        }
        if (typeof output === "string" && decision.notes.length > 0) {
          output = [output, ...decision.notes.map((n) => n.text)].join("\n");
        }
        const summary = typeof output === "string" ? output : JSON.stringify(output) ?? "";
        await gate.observe(decision, "succeeded", summary.slice(0, 200));
        return output;
      },
    };
  };

  return {
    tools: Object.fromEntries(Object.entries(tools).map(([name, tool]) => [name, guard(name, tool)])),
    /** The pause behind a tool-approval request, while it waits. */
    pauseFor(toolCallId) {
      return decided.get(toolCallId)?.pause ?? null;
    },
  };
}
