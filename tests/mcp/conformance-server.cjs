// An MCP server with what the official conformance suite's server scenarios
// ask of one (their tools, resources and prompts, by the names the suite
// uses), on the official TypeScript SDK. The gateway tests run the suite
// against it directly and through `toolgate mcp`.
//
//   node conformance-server.cjs stdio
//   node conformance-server.cjs http PORT      (streamable HTTP at /mcp)
//
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const http = require('http');
const { randomUUID } = require('crypto');
const { Server } = require('@modelcontextprotocol/sdk/server/index.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const types = require('@modelcontextprotocol/sdk/types.js');

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const text = (value) => ({ content: [{ type: 'text', text: value }] });
const noArguments = { type: 'object', properties: {} };

// The tools: name → [input schema, what a call does (params, extra, server)].
const tools = {
  test_simple_text: [noArguments, async () => text('This is a simple text response for testing.')],
  test_image_content: [noArguments, async () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] })],
  test_audio_content: [noArguments, async () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] })],
  test_embedded_resource: [noArguments, async () => ({
    content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }],
  })],
  test_multiple_content_types: [noArguments, async () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) } },
    ],
  })],
  test_tool_with_logging: [noArguments, async (_params, extra) => {
    for (const data of ['Tool execution started', 'Tool processing data', 'Tool execution completed']) {
      await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data } });
      await sleep(50);
    }
    return text('Tool with logging executed successfully');
  }],
  test_tool_with_progress: [noArguments, async (_params, extra) => {
    const progressToken = (extra._meta && extra._meta.progressToken) ?? 0;
    for (const progress of [0, 50, 100]) {
      await extra.sendNotification({
        method: 'notifications/progress',
        params: { progressToken, progress, total: 100, message: `Completed step ${progress} of 100` },
      });
      await sleep(50);
    }
    return text(String(progressToken));
  }],
  test_error_handling: [noArguments, async () => {
    throw new Error('This tool intentionally returns an error for testing');
  }],
  test_sampling: [{ type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] }, async (params, extra) => {
    const result = await extra.sendRequest({
      method: 'sampling/createMessage',
      params: { messages: [{ role: 'user', content: { type: 'text', text: params.arguments.prompt } }], maxTokens: 100 },
    }, types.CreateMessageResultSchema);
    return text(`LLM response: ${(result.content && result.content.text) || 'No response'}`);
  }],
  test_elicitation: [{ type: 'object', properties: { message: { type: 'string' } }, required: ['message'] }, async (params, extra) => {
    const result = await extra.sendRequest({
      method: 'elicitation/create',
      params: {
        message: params.arguments.message,
        requestedSchema: { type: 'object', properties: { response: { type: 'string', description: "User's response" } }, required: ['response'] },
      },
    }, types.ElicitResultSchema);
    return text(`User response: action=${result.action}, content=${JSON.stringify(result.content || {})}`);
  }],
  test_elicitation_sep1034_defaults: [noArguments, async (_params, extra) => {
    const result = await extra.sendRequest({
      method: 'elicitation/create',
      params: {
        message: 'Please review and update the form fields with defaults',
        requestedSchema: {
          type: 'object',
          properties: {
            name: { type: 'string', description: 'User name', default: 'John Doe' },
            age: { type: 'integer', description: 'User age', default: 30 },
            score: { type: 'number', description: 'User score', default: 95.5 },
            status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
            verified: { type: 'boolean', description: 'Verification status', default: true },
          },
          required: [],
        },
      },
    }, types.ElicitResultSchema);
    return text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content || {})}`);
  }],
  test_elicitation_sep1330_enums: [noArguments, async (_params, extra) => {
    const titled = (prefix) => [1, 2, 3].map((n) => ({ const: `value${n}`, title: `${['First', 'Second', 'Third'][n - 1]} ${prefix}` }));
    const result = await extra.sendRequest({
      method: 'elicitation/create',
      params: {
        message: 'Please select options from the enum fields',
        requestedSchema: {
          type: 'object',
          properties: {
            untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
            titledSingle: { type: 'string', description: 'Select one option with titles', oneOf: titled('Option') },
            legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
            untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
            titledMulti: { type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3, items: { anyOf: titled('Choice') } },
          },
          required: [],
        },
      },
    }, types.ElicitResultSchema);
    return text(`Elicitation completed: action=${result.action}, content=${JSON.stringify(result.content || {})}`);
  }],
  // Not a conformance scenario: waits until its call is cancelled, and
  // writes why to the file TOOLGATE_CANCEL_MARKER names.
  test_wait_for_cancellation: [noArguments, async (_params, extra) => {
    await new Promise((done) => extra.signal.addEventListener('abort', done));
    require('fs').writeFileSync(process.env.TOOLGATE_CANCEL_MARKER, String(extra.signal.reason));
    return text('cancelled');
  }],
  // Not a conformance scenario: asks the client to sample, cancels that
  // request once the client has it (the file TOOLGATE_SAMPLING_MARKER.asked
  // exists), and answers once the client heard of it (the file
  // TOOLGATE_SAMPLING_MARKER exists), or after 10 s.
  test_cancel_own_sampling: [noArguments, async (_params, extra) => {
    const fs = require('fs');
    const marker = process.env.TOOLGATE_SAMPLING_MARKER;
    const until = async (path) => {
      const deadline = Date.now() + 10000; // a bound: the test may have failed
      while (!fs.existsSync(path) && Date.now() < deadline) await sleep(20);
    };
    const asking = new AbortController();
    const asked = extra.sendRequest({
      method: 'sampling/createMessage',
      params: { messages: [{ role: 'user', content: { type: 'text', text: 'never mind' } }], maxTokens: 5 },
    }, types.CreateMessageResultSchema, { signal: asking.signal, timeout: 60000 }).catch(() => 'cancelled');
    await until(marker + '.asked');
    asking.abort('the server no longer needs it');
    await asked;
    await until(marker);
    return text('sampling cancelled');
  }],
  json_schema_2020_12_tool: [{
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    type: 'object',
    $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
    properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
    additionalProperties: false,
  }, async (params) => text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(params.arguments || {})}`)],
};

const resources = {
  'test://static-text': { name: 'static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' },
  'test://static-binary': { name: 'static-binary', mimeType: 'image/png', blob: PNG },
  'test://watched-resource': { name: 'watched-resource', mimeType: 'text/plain', text: 'Watched resource content' },
};
const TEMPLATE = /^test:\/\/template\/([^/]+)\/data$/;

const prompts = {
  test_simple_prompt: [[], () => [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }]],
  test_prompt_with_arguments: [[{ name: 'arg1', required: true }, { name: 'arg2', required: true }], (a) => [
    { role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` } },
  ]],
  test_prompt_with_embedded_resource: [[{ name: 'resourceUri', required: true }], (a) => [
    { role: 'user', content: { type: 'resource', resource: { uri: a.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
    { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
  ]],
  test_prompt_with_image: [[], () => [
    { role: 'user', content: { type: 'image', data: PNG, mimeType: 'image/png' } },
    { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
  ]],
};

function newServer() {
  const server = new Server(
    { name: 'toolgate-conformance-fixture', version: '1.0.0' },
    { capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true }, prompts: { listChanged: true }, logging: {}, completions: {} } },
  );
  server.setRequestHandler(types.ListToolsRequestSchema, async () => ({
    tools: Object.entries(tools).map(([name, [inputSchema]]) => ({ name, description: name, inputSchema })),
  }));
  server.setRequestHandler(types.CallToolRequestSchema, async (request, extra) => {
    const tool = tools[request.params.name];
    if (!tool) throw new types.McpError(types.ErrorCode.InvalidParams, `no tool ${request.params.name}`);
    try {
      return await tool[1](request.params, extra);
    } catch (err) {
      return { isError: true, content: [{ type: 'text', text: err.message }] };
    }
  });
  server.setRequestHandler(types.ListResourcesRequestSchema, async () => ({
    resources: Object.entries(resources).map(([uri, r]) => ({ uri, name: r.name, mimeType: r.mimeType })),
  }));
  server.setRequestHandler(types.ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: 'test://template/{id}/data', name: 'template', mimeType: 'application/json' }],
  }));
  server.setRequestHandler(types.ReadResourceRequestSchema, async (request) => {
    const uri = request.params.uri;
    const fixed = resources[uri];
    if (fixed) {
      const { name: _name, ...content } = fixed;
      return { contents: [{ uri, ...content }] };
    }
    const id = (uri.match(TEMPLATE) || [])[1];
    if (id === undefined) throw new types.McpError(types.ErrorCode.InvalidParams, `no resource ${uri}`);
    return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }] };
  });
  server.setRequestHandler(types.SubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(types.UnsubscribeRequestSchema, async () => ({}));
  server.setRequestHandler(types.ListPromptsRequestSchema, async () => ({
    prompts: Object.entries(prompts).map(([name, [args]]) => ({ name, description: name, arguments: args })),
  }));
  server.setRequestHandler(types.GetPromptRequestSchema, async (request) => {
    const prompt = prompts[request.params.name];
    if (!prompt) throw new types.McpError(types.ErrorCode.InvalidParams, `no prompt ${request.params.name}`);
    return { messages: prompt[1](request.params.arguments || {}) };
  });
  server.setRequestHandler(types.SetLevelRequestSchema, async () => ({}));
  server.setRequestHandler(types.CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

async function serveHttp(port) {
  const sessions = {};
  const listener = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
    const id = req.headers['mcp-session-id'];
    let transport = id && sessions[id];
    if (!transport) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableDnsRebindingProtection: true,
        allowedHosts: [`127.0.0.1:${port}`, `localhost:${port}`],
        onsessioninitialized: (sid) => { sessions[sid] = transport; },
      });
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  listener.listen(port, '127.0.0.1', () => process.stdout.write(`http://127.0.0.1:${port}/mcp\n`));
}

if (process.argv[2] === 'http') {
  serveHttp(Number(process.argv[3]));
} else {
  newServer().connect(new StdioServerTransport());
}
