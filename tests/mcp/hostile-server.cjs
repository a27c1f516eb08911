// An MCP server (on the official TypeScript SDK) that misbehaves on purpose,
// for the gateway's tests:
//   ok        answers "fine";
//   garbage   writes a line that is not JSON-RPC to stdout, then answers;
//   huge      answers with a 50 MB text;
//   die       exits in the middle of the call, without answering;
// and it never answers a `resources/list`.
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');

const server = new McpServer({ name: 'hostile', version: '1.0.0' });
const text = (value) => ({ content: [{ type: 'text', text: value }] });

server.registerTool('ok', { description: 'answers fine' }, async () => text('fine'));
server.registerTool('garbage', { description: 'writes non-JSON first' }, async () => {
  process.stdout.write('this is not JSON-RPC {{{\n');
  return text('answered after garbage');
});
server.registerTool('huge', { description: 'a 50 MB result' }, async () =>
  text('x'.repeat(50 * 1024 * 1024)));
server.registerTool('die', { description: 'exits mid-call' }, async () => {
  process.exit(3);
});

const { ListResourcesRequestSchema } = require('@modelcontextprotocol/sdk/types.js');
server.server.registerCapabilities({ resources: {} });
server.server.setRequestHandler(ListResourcesRequestSchema, () => new Promise(() => {}));

server.connect(new StdioServerTransport()).catch((err) => {
  console.error(err);
  process.exit(1);
});
