// The client side of the official MCP conformance suite, through the
// gateway: the suite starts its test server and runs this with the server's
// URL last; this starts `toolgate mcp` in front of that URL (over stdio)
// and does, through it, what the scenario asks of a client. What the test
// server sees is then the gateway's upstream side, an rmcp HTTP client.
//
//   TOOLGATE_GATEWAY='["toolgate", "--config", "…", "mcp", "--name", "conf", "--"]' \
//     node conformance-client.cjs URL
//
// The scenario is in MCP_CONFORMANCE_SCENARIO (set by the suite). Run with
// NODE_PATH pointing at the node_modules holding the SDK.
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const { ElicitRequestSchema } = require('@modelcontextprotocol/sdk/types.js');

async function main() {
  const url = process.argv[process.argv.length - 1];
  const scenario = process.env.MCP_CONFORMANCE_SCENARIO || '';
  const [command, ...args] = JSON.parse(process.env.TOOLGATE_GATEWAY);
  // SEP-1034: the client fills in the defaults of fields a person left out.
  const client = new Client(
    { name: 'toolgate-conformance-client', version: '1.0.0' },
    { capabilities: { elicitation: { form: { applyDefaults: true } } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: {} }));
  await client.connect(new StdioClientTransport({ command, args: [...args, url], stderr: 'inherit' }));
  const names = (await client.listTools()).tools.map((tool) => tool.name);
  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 20000 });
    if (result.isError) throw new Error(`${name}: ${JSON.stringify(result.content)}`);
  };
  switch (scenario) {
    case 'initialize':
      break;
    case 'tools_call':
      await call('add_numbers', { a: 5, b: 3 });
      break;
    case 'elicitation-sep1034-client-defaults':
      await call('test_client_elicitation_defaults', {});
      break;
    case 'sse-retry':
      await call('test_reconnection', {});
      break;
    default:
      throw new Error(`no client behaviour for scenario ${scenario} (tools: ${names})`);
  }
  await client.close();
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(1);
  },
);
