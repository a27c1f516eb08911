// Latency of MCP tool calls through `toolgate mcp` against the same server
// called directly, with the official TypeScript SDK client: N `echo` calls
// each way, p50 and p99 in milliseconds. A benchmark, not a test:
//
//   NODE_PATH=target/real-clients/node_modules node tests/mcp/latency.cjs \
//     target/debug/toolgate CONFIG.toml [N]
//
// CONFIG must let `mcp:everything/echo` run (see README, "Performance").
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = require('@modelcontextprotocol/sdk/client/stdio.js');
const path = require('path');

async function measure(command, args, n) {
  const client = new Client({ name: 'toolgate-latency', version: '1.0.0' });
  await client.connect(new StdioClientTransport({ command, args, stderr: 'ignore' }));
  const times = [];
  for (let i = 0; i < n + 20; i++) {
    const start = process.hrtime.bigint();
    const result = await client.callTool({ name: 'echo', arguments: { message: 'hi ' + i } });
    if (result.isError) throw new Error(JSON.stringify(result.content));
    if (i >= 20) times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  await client.close();
  times.sort((a, b) => a - b);
  const at = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))].toFixed(2);
  return { p50: at(0.5), p99: at(0.99) };
}

async function main() {
  const [toolgate, config, count] = process.argv.slice(2);
  const n = Number(count || 500);
  const server = path.join(path.dirname(require.resolve('@modelcontextprotocol/server-everything/package.json')), 'dist/index.js');
  const direct = await measure('node', [server, 'stdio'], n);
  const gated = await measure(toolgate, ['--config', config, 'mcp', '--name', 'everything', '--', 'node', server, 'stdio'], n);
  console.log(`direct:  p50 ${direct.p50} ms, p99 ${direct.p99} ms (${n} calls)`);
  console.log(`gateway: p50 ${gated.p50} ms, p99 ${gated.p99} ms (${n} calls)`);
}

main().catch((err) => { console.error(err); process.exit(1); });
