// A real MCP client (the official TypeScript SDK's) that stresses the
// gateway in front of `stress-server.cjs`, and prints one JSON line with what
// it saw and the gateway's peak memory (VmHWM, kB; the gateway is the
// process it launched).
//
//   node stress-client.cjs SPEC.json
//
// SPEC: {"command": ..., "args": [...], "scenario": ..., ...}; scenarios:
//   concurrent {calls, bytes}  that many `sized` calls at once; reports how
//                              many answered with the text, how many said
//                              "not run", the other errors, and what the
//                              server says ran;
//   progress {calls, steps}    that many `progress` calls one after another,
//                              counting the notifications, those out of
//                              order, and those that came before their
//                              call's answer;
//   one {name, arguments}      one call, its result (or protocol error);
//   list                       tools/list, how many tools or the error;
//   idle {ms, cpuOf}           tools/list, then nothing for `ms`: the CPU
//                              time process `cpuOf` (the daemon) took
//                              meanwhile, ms (`idleCpuMs`).
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const fs = require('fs');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');

const TIMEOUT = { timeout: 300000 };

const textOf = (result) => (result.content || [])
  .filter((block) => block.type === 'text')
  .map((block) => block.text)
  .join('\n');

async function concurrent(client, spec) {
  const calls = Array.from({ length: spec.calls }, () => client
    .callTool({ name: 'sized', arguments: { bytes: spec.bytes } }, undefined, TIMEOUT)
    .then((result) => ({ result }), (err) => ({ err: String(err.message || err) })));
  const out = { answered: 0, notRun: 0, errors: [] };
  for (const { result, err } of await Promise.all(calls)) {
    const text = result ? textOf(result) : '';
    if (result && !result.isError && text.startsWith('y'.repeat(Math.min(spec.bytes, 1000)))) {
      out.answered += 1;
    } else if (/not run/.test(text || err)) {
      out.notRun += 1;
      if (out.errors.length < 3) out.errors.push((text || err).slice(0, 400));
    } else if (out.errors.length < 3) {
      out.errors.push((err || text).slice(0, 400));
    }
  }
  out.ran = Number(textOf(await client.callTool({ name: 'ran', arguments: {} }, undefined, TIMEOUT)));
  return out;
}

// Counted as the messages arrive, in order (the SDK's client hands a
// notification to its handler a microtask later, after a response read in
// the same chunk, and so drops some itself): for each call, the
// notifications before its answer, and those out of order.
async function progress(client, spec, seen) {
  const out = { calls: 0, notifications: 0, outOfOrder: 0, beforeAnswers: 0 };
  seen.progress = (note) => {
    out.notifications += 1;
    const last = seen.last.get(note.progressToken) || 0;
    if (note.progress <= last) out.outOfOrder += 1;
    seen.last.set(note.progressToken, note.progress);
  };
  seen.answer = (id) => { out.beforeAnswers += seen.last.has(id) ? seen.last.get(id) : 0; };
  for (let call = 0; call < spec.calls; call += 1) {
    await client.callTool({ name: 'progress', arguments: { steps: spec.steps } }, undefined, {
      ...TIMEOUT,
      onprogress: () => {},
    });
    out.calls += 1;
  }
  return out;
}

async function one(client, spec) {
  try {
    const result = await client.callTool({ name: spec.name, arguments: spec.arguments || {} },
      undefined, { timeout: 60000 });
    const text = textOf(result);
    return { isError: Boolean(result.isError), bytes: text.length, text: text.slice(0, 2000), tail: text.slice(-300) };
  } catch (err) {
    return { protocolError: String(err.message || err).slice(0, 2000) };
  }
}

async function list(client) {
  try {
    return { tools: (await client.listTools(undefined, TIMEOUT)).tools.length };
  } catch (err) {
    return { error: String(err.message || err).slice(0, 2000) };
  }
}

/** utime + stime of process `pid`, ms (the kernel counts in ticks of 10 ms). */
function cpuMs(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

async function idle(client, spec) {
  const out = await list(client);
  const before = cpuMs(spec.cpuOf);
  await new Promise((done) => setTimeout(done, spec.ms));
  out.idleCpuMs = cpuMs(spec.cpuOf) - before;
  return out;
}

async function main() {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const client = new Client({ name: 'toolgate-stress-client', version: '1.0.0' });
  const transport = new StdioClientTransport({
    command: spec.command,
    args: spec.args,
    env: { ...process.env, ...(spec.env || {}) },
    stderr: 'inherit',
  });
  const seen = { last: new Map(), progress: () => {}, answer: () => {} };
  transport.onmessage = (message) => {
    if (message.method === 'notifications/progress') seen.progress(message.params);
    else if (message.id !== undefined && message.method === undefined) seen.answer(message.id);
  };
  await client.connect(transport);
  const scenarios = { concurrent, progress, one, list, idle };
  const out = await scenarios[spec.scenario](client, spec, seen);
  const status = fs.readFileSync(`/proc/${transport.pid}/status`, 'utf8');
  out.gatewayPeakKb = Number(/VmHWM:\s+(\d+)/.exec(status)[1]);
  await client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
