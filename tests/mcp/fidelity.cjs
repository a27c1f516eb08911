// A real MCP client (the official TypeScript SDK's) that uses what MCP
// offers besides tool calls, through the gateway: it declares sampling,
// elicitation and roots, answers the server's requests, sets the logging
// level, asks for progress, reads resources, gets prompts and completes an
// argument; it prints one JSON line with what each step saw.
//
//   node fidelity.cjs SPEC.json
//
// SPEC: {"command": ..., "args": [...], "env": {...},
//        "approve": "accept" | "decline" | "cancel"}   (toolgate's own asks)
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const fs = require('fs');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} = require('@modelcontextprotocol/sdk/types.js');

async function main() {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const client = new Client(
    { name: 'toolgate-fidelity-client', version: '1.0.0' },
    { capabilities: { sampling: {}, elicitation: { form: {} }, roots: { listChanged: false } } },
  );
  const out = { sampled: [], elicited: [], approvals: [], rootsAsked: 0, logs: [], steps: {} };
  client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
    out.sampled.push(request.params.messages.map((m) => m.content.text).join(' '));
    return { role: 'assistant', model: 'scripted', content: { type: 'text', text: 'sampled-by-the-client' } };
  });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    if (request.params.message.startsWith('toolgate paused')) {
      out.approvals.push(request.params.message);
      return { action: spec.approve || 'decline', content: spec.approve === 'accept' ? {} : undefined };
    }
    out.elicited.push(request.params.message);
    return { action: 'accept', content: { name: 'Ada', check: true, email: 'ada@example.com' } };
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    out.rootsAsked += 1;
    return { roots: [{ uri: 'file:///work/project', name: 'project' }] };
  });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => {
    out.logs.push(note.params.level);
  });
  await client.connect(new StdioClientTransport({
    command: spec.command,
    args: spec.args,
    env: { ...process.env, ...(spec.env || {}) },
    stderr: 'inherit',
  }));
  out.server = client.getServerVersion();
  out.protocolVersion = client.transport && client.transport.protocolVersion;
  out.capabilities = client.getServerCapabilities();
  const step = async (name, work) => {
    try {
      out.steps[name] = { ok: await work() };
    } catch (err) {
      out.steps[name] = { error: String((err && err.message) || err) };
    }
  };
  const text = (result) => (result.content || [])
    .filter((block) => block.type === 'text')
    .map((block) => block.text)
    .join('\n');
  const callText = async (name, args, options) => {
    const result = await client.callTool({ name, arguments: args || {} }, undefined, {
      timeout: 60000,
      ...(options || {}),
    });
    return { isError: Boolean(result.isError), text: text(result) };
  };
  await step('tools', async () => (await client.listTools()).tools.map((t) => t.name));
  await step('sampling', () => callText('trigger-sampling-request', { prompt: 'hello', maxTokens: 5 }));
  await step('elicitation', () => callText('trigger-elicitation-request'));
  await step('roots', () => callText('get-roots-list'));
  const progress = [];
  await step('progress', async () => {
    const result = await callText('trigger-long-running-operation', { duration: 1, steps: 2 }, {
      onprogress: (p) => progress.push(p.progress),
    });
    return { ...result, progress };
  });
  await step('logging', async () => {
    await client.setLoggingLevel('debug');
    await callText('toggle-simulated-logging');
    const deadline = Date.now() + 20000; // a bound: the server logs every 5 s
    while (out.logs.length === 0 && Date.now() < deadline) {
      await new Promise((done) => setTimeout(done, 100));
    }
    await callText('toggle-simulated-logging');
    return out.logs.length;
  });
  await step('resources', async () => (await client.listResources()).resources.map((r) => r.uri));
  await step('read', async () => {
    const uri = out.steps.resources.ok && out.steps.resources.ok[0];
    const read = await client.readResource({ uri });
    return { uri, contents: read.contents.length };
  });
  await step('prompts', async () => (await client.listPrompts()).prompts.map((p) => p.name));
  await step('prompt', async () => (await client.getPrompt({ name: 'simple-prompt' })).messages.length);
  await step('complete', async () => (await client.complete({
    ref: { type: 'ref/prompt', name: 'completable-prompt' },
    argument: { name: 'department', value: 'E' },
  })).completion.values);
  await client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
