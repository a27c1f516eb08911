// What a decision costs from Node: the bundled default policies in this
// process, warm, one awaited call after another (p50 and p99 over N calls).
//
//   node host/node/bench/decide.mjs [N]

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Toolgate } from "toolgate";

const n = Number(process.argv[2] ?? 2000);
const gate = await Toolgate.open({ store: join(mkdtempSync(join(tmpdir(), "toolgate-bench-")), "toolgate.redb") });
const call = ["Read", { file_path: "README.md" }, { session: "bench" }];
for (let i = 0; i < 200; i++) await gate.decide(...call); // warm the instances
const times = [];
for (let i = 0; i < n; i++) {
  const start = process.hrtime.bigint();
  await gate.decide(...call);
  times.push(Number(process.hrtime.bigint() - start) / 1000);
}
times.sort((a, b) => a - b);
const p50 = times[Math.floor(times.length / 2)];
const p99 = times[Math.floor(times.length * 0.99) - 1];
console.log(`node decide (bundled default, in-process, warm): p50 ${p50.toFixed(1)} µs, p99 ${p99.toFixed(1)} µs over ${n}`);
