// A real MCP client (the official TypeScript SDK's) for the gateway tests:
// it launches a server command over stdio, lists the tools, makes the calls
// a spec file names, and prints one JSON line with what it saw.
//
//   node client.cjs SPEC.json
//
// SPEC: {"command": ..., "args": [...], "env": {...},   (stdio), or
//       {"url": ..., "headers": {...}}                    (streamable HTTP),
//        "elicitation": "accept" | "decline" | "cancel" | null, "skipList": true | null,
//        "samplingMarker": PATH | null, "listResources": true | null,
//        "calls": [{"name": ..., "arguments": {...}, "gate": PATH, "abortAfterMs": N}],
//        "awaitListChanged": PATH | null}
// (`awaitListChanged`: after the calls, create PATH.ready, wait for the
// server's notifications/tools/list_changed, and list the tools again)
// (`gate`: before the call, create PATH.ready and wait until PATH exists, so
// the test can act between two calls)
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const fs = require('fs');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ToolListChangedNotificationSchema,
} = require('@modelcontextprotocol/sdk/types.js');

async function main() {
  const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const capabilities = spec.elicitation ? { elicitation: {} } : {};
  // `samplingMarker`: the client takes sampling requests and answers none;
  // it creates MARKER.asked when asked, and writes MARKER when the server
  // cancels the request (with the reason the client was given).
  if (spec.samplingMarker) capabilities.sampling = {};
  const client = new Client({ name: 'toolgate-test-client', version: '1.0.0' }, { capabilities });
  const elicitations = [];
  // Only a change after the test was told the first listing counts.
  let listChanged = () => {};
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => listChanged());
  if (spec.elicitation) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicitations.push(request.params.message);
      return { action: spec.elicitation, content: spec.elicitation === 'accept' ? {} : undefined };
    });
  }
  if (spec.samplingMarker) {
    client.setRequestHandler(CreateMessageRequestSchema, async (_request, extra) => {
      fs.writeFileSync(spec.samplingMarker + '.asked', '');
      await new Promise((done) => extra.signal.addEventListener('abort', done));
      fs.writeFileSync(spec.samplingMarker, String(extra.signal.reason));
      throw new Error('cancelled');
    });
  }
  const transport = spec.url
    ? new StreamableHTTPClientTransport(new URL(spec.url), {
      requestInit: { headers: spec.headers || {} },
    })
    : new StdioClientTransport({
      command: spec.command,
      args: spec.args,
      env: { ...process.env, ...(spec.env || {}) },
      stderr: 'inherit',
    });
  await client.connect(transport);
  // `skipList`: call without listing the tools first, as a client may.
  const listed = spec.skipList ? { tools: [] } : await client.listTools();
  const out = {
    server: client.getServerVersion(),
    tools: listed.tools.map((tool) => tool.name),
    calls: [],
    elicitations,
  };
  // `listResources`: list the resources (or say why not) before the calls.
  if (spec.listResources) {
    try {
      out.resources = (await client.listResources(undefined, { timeout: 120000 })).resources;
    } catch (err) {
      out.resources = { error: String((err && err.message) || err) };
    }
  }
  for (const call of spec.calls || []) {
    if (call.gate) {
      fs.writeFileSync(call.gate + '.ready', '');
      const deadline = Date.now() + 60000; // a bound: the test may have failed
      while (!fs.existsSync(call.gate)) {
        if (Date.now() > deadline) throw new Error('gave up waiting for ' + call.gate);
        await new Promise((done) => setTimeout(done, 20));
      }
    }
    try {
      // `abortAfterMs`: the client cancels the call that long after sending it.
      const controller = new AbortController();
      if (call.abortAfterMs) setTimeout(() => controller.abort('cancelled by the test'), call.abortAfterMs);
      const result = await client.callTool(
        { name: call.name, arguments: call.arguments || {} },
        undefined,
        { timeout: 120000, signal: controller.signal },
      );
      const text = (result.content || [])
        .filter((block) => block.type === 'text')
        .map((block) => block.text)
        .join('\n');
      out.calls.push({ isError: Boolean(result.isError), text });
    } catch (err) {
      out.calls.push({ protocolError: String((err && err.message) || err) });
    }
  }
  if (spec.awaitListChanged) {
    const changed = new Promise((done) => { listChanged = done; });
    fs.writeFileSync(spec.awaitListChanged + '.ready', '');
    // unref: the bound must not keep the client alive once it is met.
    const bound = new Promise((_, fail) => setTimeout(() => fail(new Error('no tools/list_changed within 60 s')), 60000).unref());
    await Promise.race([changed, bound]); // a bound: the test may have failed
    out.relisted = (await client.listTools()).tools.map((tool) => tool.name);
  }
  await client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
