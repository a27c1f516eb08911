// toolgate in the real Vercel AI SDK (ai from npm), its model scripted with
// the SDK's own mock (ai/test): a refused call, a pause that waits for a
// person's answer through toolgate, and approval responses that are not
// approvals.

import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { gateTools } from "toolgate/ai-sdk";
import { Setup } from "./setup.js";

const usage = { inputTokens: { total: 1 }, outputTokens: { total: 1 } };

/** A model that asks for `name(input)` once, then says "done". */
function scripted(name, input) {
  let asked = false;
  return new MockLanguageModelV4({
    doGenerate: async () => {
      if (asked) {
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      }
      asked = true;
      return {
        content: [{ type: "tool-call", toolCallId: "call-1", toolName: name, input: JSON.stringify(input) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
}

/** The agent's tools, named as the operator's rules name them; `ran` records what ran. */
function agentTools(ran) {
  return {
    Bash: tool({
      description: "Run a shell command.",
      inputSchema: z.object({ command: z.string() }),
      execute: async ({ command }) => {
        ran.push(command);
        return `ran: ${command}`;
      },
    }),
    Write: tool({
      description: "Write a file.",
      inputSchema: z.object({ file_path: z.string(), content: z.string() }),
      execute: async ({ file_path }) => {
        ran.push(`write ${file_path}`);
        return "written";
      },
    }),
  };
}

const parts = (result, type) => result.steps.flatMap((s) => s.content).filter((p) => p.type === type);

/** The outputs of the tool calls a resumed generation ran before asking the model. */
const resumedOutputs = (result) =>
  result.initialResponseMessages.flatMap((m) => m.content).filter((p) => p.type === "tool-result").map((p) => p.output);

/** The conversation so far, and the app's approval response. */
function answered(prompt, result, approved) {
  const [request] = parts(result, "tool-approval-request");
  return [
    { role: "user", content: prompt },
    ...result.response.messages,
    { role: "tool", content: [{ type: "tool-approval-response", approvalId: request.approvalId, approved }] },
  ];
}

test("a refused call never runs and the model reads why", async (t) => {
  const gate = await new Setup(t).toolgate();
  const ran = [];
  const guarded = gateTools(gate, agentTools(ran), { session: "ai-1" });
  const result = await generateText({
    model: scripted("Write", { file_path: "Cargo.lock", content: "x" }),
    tools: guarded.tools,
    prompt: "bump the lock",
    stopWhen: stepCountIs(3),
  });
  const [error] = parts(result, "tool-error");
  assert.match(String(error.error?.message ?? error.error), /Lock files are generated/);
  assert.deepEqual(ran, []);
  assert.equal(result.text, "done");
});

test("a pause waits for a person's answer through toolgate, then runs once", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const gate = await setup.toolgate();
  const ran = [];
  const guarded = gateTools(gate, agentTools(ran), { session: "ai-2" });
  const prompt = "publish";
  const model = scripted("Bash", { command: "git push origin main" });
  const first = await generateText({ model, tools: guarded.tools, prompt, stopWhen: stepCountIs(3) });
  const [request] = parts(first, "tool-approval-request");
  assert.ok(request, "the SDK asks for approval");
  const pause = guarded.pauseFor(request.toolCall.toolCallId);
  assert.equal(pause.policy, "rules");
  assert.match(pause.howToAnswer, /git push publishes commits/);
  assert.deepEqual(ran, []);

  setup.personAnswers(pause.requestId);
  const second = await generateText({
    model,
    tools: guarded.tools,
    messages: answered(prompt, first, true),
    stopWhen: stepCountIs(3),
  });
  assert.deepEqual(ran, ["git push origin main"], "it ran, once");
  assert.deepEqual(resumedOutputs(second), [{ type: "text", value: "ran: git push origin main" }]);
  assert.equal(second.text, "done");
});

test("an approval response is not a person's answer, and a refusal ends the call", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const gate = await setup.toolgate();
  for (const approved of [true, false]) {
    const ran = [];
    const guarded = gateTools(gate, agentTools(ran), { session: `ai-3-${approved}` });
    const model = scripted("Bash", { command: "git push origin main" });
    const first = await generateText({ model, tools: guarded.tools, prompt: "publish", stopWhen: stepCountIs(3) });
    const second = await generateText({
      model,
      tools: guarded.tools,
      messages: answered("publish", first, approved),
      stopWhen: stepCountIs(3),
    });
    assert.deepEqual(ran, [], `approved: ${approved}: nobody answered through toolgate`);
    const [output] = resumedOutputs(second);
    if (approved) {
      assert.equal(output.type, "error-text");
      assert.match(output.value, /rules asks: git push publishes commits/);
    } else {
      assert.equal(output.type, "execution-denied");
    }
  }
});

test("a remembered decision is for its own call only", async (t) => {
  const gate = await new Setup(t).toolgate();
  const ran = [];
  const { tools } = gateTools(gate, agentTools(ran), { session: "ai-4" });
  const context = { toolCallId: "reused", messages: [], context: undefined };
  // Allowed for one file ...
  assert.equal(await tools.Write.needsApproval({ file_path: "notes.txt", content: "x" }, context), false);
  // ... then run under the same id with other arguments: asked again.
  await assert.rejects(tools.Write.execute({ file_path: "Cargo.lock", content: "x" }, context), /Lock files are generated/);
  assert.deepEqual(ran, []);
});
