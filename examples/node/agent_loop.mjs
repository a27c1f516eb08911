// A small agent loop that asks toolgate before each tool call.
//
//   (cd host/node && npm install && npm run build)
//   cd examples/node && npm install --no-save ../../host/node && node agent_loop.mjs [CONFIG]
//
// With no CONFIG it runs the bundled default policies. The "model" here is
// a fixed list of proposed calls, so the example runs offline; in your agent
// the calls come from the model, and `runTool` is your tool executor.

import { Toolgate } from "toolgate";

const PROPOSED = [
  ["Read", { file_path: "README.md" }],
  ["Write", { file_path: "Cargo.lock", content: "edited by hand" }],
  ["Bash", { command: "git push origin main" }],
];

/** Stands in for your tool executor (it runs nothing). */
const runTool = (tool, args) => `(ran ${tool} with ${JSON.stringify(args)})`;

const gate = await Toolgate.open({ config: process.argv[2] });
for (const [tool, args] of PROPOSED) {
  const decision = await gate.decide(tool, args, { session: "example" });
  if (decision.allowed) {
    let output = runTool(tool, decision.argumentsFor(args));
    if (decision.outputChecked) output = (await gate.checkOutput(decision, output)).text(output);
    await gate.observe(decision, "succeeded", output.slice(0, 200));
    console.log(`${tool}: allowed -> ${output}`);
  } else if (decision.paused) {
    // Show the person the prompt; this process cannot answer it.
    console.log(`${tool}: paused -> ${decision.pause.howToAnswer}`);
  } else {
    console.log(`${tool}: denied -> ${decision.reason}`);
  }
  for (const note of decision.notes) console.log(`  note from ${note.policy}: ${note.text}`);
}
