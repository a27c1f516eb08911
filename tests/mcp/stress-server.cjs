// An MCP server (on the official TypeScript SDK) for the gateway's stress
// tests:
//   sized {bytes, fill} answers a text of that many bytes, all `fill`
//                     (default "y"), and counts the call;
//   ran               answers how many `sized` calls ran;
//   progress {steps}  sends that many progress notifications (1..steps) for
//                     the call, then answers "done";
// and with STRESS_ENDLESS_LIST=1, its tools/list never ends: every page has
// one tool with a 64 KB description and a cursor to the next.
// Run with NODE_PATH pointing at the node_modules holding the SDK.
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StdioServerTransport } = require('@modelcontextprotocol/sdk/server/stdio.js');
const { ListToolsRequestSchema } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');

const server = new McpServer({ name: 'stress', version: '1.0.0' });
const text = (value) => ({ content: [{ type: 'text', text: value }] });
let ran = 0;

server.registerTool('sized', { inputSchema: { bytes: z.number(), fill: z.string().optional() } },
  async ({ bytes, fill }) => {
    ran += 1;
    return text((fill || 'y').repeat(bytes));
  });
server.registerTool('ran', {}, async () => text(String(ran)));
server.registerTool('progress', { inputSchema: { steps: z.number() } }, async ({ steps }, extra) => {
  const token = extra._meta && extra._meta.progressToken;
  for (let step = 1; token !== undefined && step <= steps; step += 1) {
    await extra.sendNotification({
      method: 'notifications/progress',
      params: { progressToken: token, progress: step, total: steps },
    });
  }
  return text('done');
});

if (process.env.STRESS_ENDLESS_LIST) {
  const description = 'd'.repeat(64 * 1024);
  server.server.setRequestHandler(ListToolsRequestSchema, async (request) => {
    const page = Number((request.params && request.params.cursor) || 0);
    return {
      tools: [{ name: `t${page}`, description, inputSchema: { type: 'object' } }],
      nextCursor: String(page + 1),
    };
  });
}

server.connect(new StdioServerTransport()).catch((err) => {
  console.error(err);
  process.exit(1);
});
