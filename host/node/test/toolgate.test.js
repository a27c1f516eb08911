// The package against the real bundled policies (setup.js's CONFIG).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import * as toolgate from "toolgate";
import { Setup, addon } from "./setup.js";

const PUSH = { command: "git push origin main" };

test("a harmless call is allowed in this process", async (t) => {
  const gate = await new Setup(t).toolgate();
  assert.equal(gate.throughDaemon, false);
  const decision = await gate.decide("Read", { file_path: "README.md" }, { session: "s1" });
  assert.equal(decision.verdict, "allow");
  assert.ok(decision.allowed && decision.arguments === null);
  assert.deepEqual(decision.argumentsFor({ file_path: "README.md" }), { file_path: "README.md" });
  await gate.observe(decision, "succeeded", "read 12 lines");
});

test("a refused call carries the policy's reason", async (t) => {
  const gate = await new Setup(t).toolgate();
  const decision = await gate.decide("Write", { file_path: "Cargo.lock", content: "x" });
  assert.ok(decision.denied);
  assert.equal(decision.decidedBy, "rules");
  assert.match(decision.reason, /Lock files are generated/);
});

test("notes reach the agent", async (t) => {
  const gate = await new Setup(t).toolgate();
  const decision = await gate.decide("WebFetch", { url: "https://example.com" });
  assert.ok(decision.allowed);
  assert.deepEqual(decision.notes, [{ policy: "rules", text: "Cite the pages you fetch." }]);
});

test("a pause says who asks and how a person answers", async (t) => {
  const gate = await new Setup(t).toolgate();
  const decision = await gate.decide("Bash", PUSH, { session: "s1" });
  assert.ok(decision.paused);
  assert.equal(decision.pause.policy, "rules");
  assert.equal(decision.pause.kind, "approval");
  assert.match(decision.reason, /git push publishes commits/);
  assert.ok(decision.pause.howToAnswer.startsWith("rules asks: git push publishes commits"));
  // In this process, with no daemon, nobody can answer: it says so.
  assert.equal(decision.pause.throughDaemon, false);
  assert.match(decision.pause.howToAnswer, /No toolgate daemon serves this store/);
});

test("an approved pause lets the call run once", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const gate = await setup.toolgate();
  assert.ok(gate.throughDaemon);
  const paused = await gate.decide("Bash", PUSH, { session: "s1" });
  assert.ok(paused.paused);
  assert.ok(paused.pause.howToAnswer.includes(`toolgate gates resolve --request-id ${paused.pause.requestId}`));
  assert.equal(await gate.wait(paused.pause, { timeoutMs: 300 }), false, "nobody answered yet");
  setup.personAnswers(paused.pause.requestId);
  assert.ok(await gate.wait(paused.pause, { timeoutMs: 10_000 }));
  const ran = await gate.decide("Bash", PUSH, { session: "s1" });
  assert.ok(ran.allowed, JSON.stringify(ran.raw));
  assert.match(ran.approvedBy, /ci/);
  assert.ok((await gate.decide("Bash", PUSH, { session: "s1" })).paused, "once");
});

test("a person's refusal is a deny", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const gate = await setup.toolgate();
  const paused = await gate.decide("Bash", PUSH, { session: "s2" });
  setup.personAnswers(paused.pause.requestId, "deny");
  const refused = await gate.decide("Bash", PUSH, { session: "s2" });
  assert.ok(refused.denied);
  assert.match(refused.reason, /refused/);
});

test("state is shared across processes through the daemon", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const paused = await (await setup.toolgate()).decide("Bash", PUSH, { session: "shared" });
  setup.personAnswers(paused.pause.requestId);
  const script = `
    import { Toolgate } from ${JSON.stringify(import.meta.resolve("toolgate"))};
    const gate = await Toolgate.open({ config: process.argv[1], store: process.argv[2] });
    const d = await gate.decide("Bash", { command: "git push origin main" }, { session: "shared" });
    console.log(JSON.stringify([gate.throughDaemon, d.verdict]));`;
  const other = spawnSync(process.execPath, ["--input-type=module", "-e", script, setup.config, setup.store], {
    encoding: "utf8",
    timeout: 120_000,
  });
  assert.equal(other.status, 0, other.stderr);
  assert.deepEqual(JSON.parse(other.stdout), [true, "allow"]);
  assert.ok((await (await setup.toolgate()).decide("Bash", PUSH, { session: "shared" })).paused);
});

test("an embedding process cannot resolve a pause", async (t) => {
  const setup = new Setup(t);
  await setup.serve();
  const gate = await setup.toolgate();
  const paused = await gate.decide("Bash", PUSH, { session: "s3" });
  assert.equal(typeof gate.resolve, "undefined", "the package has no way to resolve");
  // The native pipe refuses a resolution even when asked directly.
  const host = await addon().open(setup.config, setup.store, null);
  const forged = {
    op: "resolve", user: paused.pause.user, thread: paused.pause.thread,
    request_id: paused.pause.requestId, channel: "ci",
    resolution: { decision: "approve", always: false },
  };
  await assert.rejects(host.request(JSON.stringify(forged)), (err) => JSON.parse(err.message).kind === "unauthorized");
  assert.ok(await gate.pending(paused.pause));
});

test("a broken config is a typed error", async (t) => {
  const setup = new Setup(t);
  const broken = join(setup.dir, "broken.toml");
  writeFileSync(broken, '[plugins.rules]\npath = "bundled:rules"\npriority = "first"\n');
  await assert.rejects(toolgate.Toolgate.open({ config: broken, store: setup.store }), (err) => {
    assert.ok(err instanceof toolgate.ConfigError && err instanceof toolgate.ToolgateError);
    assert.equal(err.kind, "config");
    assert.match(err.message, /priority/);
    return true;
  });
  await assert.rejects(toolgate.Toolgate.open({ config: join(setup.dir, "missing.toml") }), toolgate.ConfigError);
});

test("a malformed call is a typed error", async (t) => {
  const gate = await new Setup(t).toolgate();
  await assert.rejects(gate.decide("Read", {}, { turn: "third" }), toolgate.RequestError);
  await assert.rejects(gate.decide("Read", {}, { sesion: "typo" }), toolgate.RequestError);
});

test("a named socket must answer", async (t) => {
  const setup = new Setup(t);
  await assert.rejects(setup.toolgate({ socket: join(setup.dir, "nobody.sock") }), (err) => {
    assert.ok(err instanceof toolgate.DaemonUnreachable);
    assert.match(err.message, /toolgate serve/);
    return true;
  });
});

test("a secret in an output is redacted", async (t) => {
  const gate = await new Setup(t).toolgate();
  const decision = await gate.decide("Read", { file_path: ".env" });
  assert.ok(decision.outputChecked);
  const secret = "AKIA" + "IOSFODNN7EXAMPLE";
  const output = `AWS_ACCESS_KEY_ID=${secret}\n`;
  const checked = await gate.checkOutput(decision, output);
  assert.ok(!checked.text(output).includes(secret));
  assert.equal(checked.changes[0].policy, "shadow-sentinel");
});

test("the example agent loop runs", async (t) => {
  const setup = new Setup(t);
  // The driver (tests/embed_node.rs) puts it inside the installed package.
  const example = process.env.TOOLGATE_EXAMPLE;
  assert.ok(example, "TOOLGATE_EXAMPLE names examples/node/agent_loop.mjs inside the package");
  const ran = spawnSync(process.execPath, [example, setup.config], {
    encoding: "utf8",
    timeout: 120_000,
    env: { ...process.env, XDG_STATE_HOME: setup.dir },
  });
  assert.equal(ran.status, 0, ran.stderr);
  const lines = ran.stdout.split("\n");
  assert.match(lines[0], /^Read: allowed -> \(ran Read/);
  assert.match(lines[1], /^Write: denied -> Lock files are generated/);
  assert.match(lines[2], /^Bash: paused -> rules asks: git push publishes commits/);
});
