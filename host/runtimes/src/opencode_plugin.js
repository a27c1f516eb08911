// toolgate's OpenCode plugin, written by `toolgate hook install --for opencode`.
// It asks toolgate about every tool call before OpenCode runs it (built-in and
// MCP tools alike), and throws toolgate's reason when the call is refused: the
// model reads it as the tool's error.
//
// It must not fail open. OpenCode skips a plugin that fails to import, without
// a word, so this file imports nothing but Node's own child_process; a call
// whose answer never comes would hang the run, so each ask has a deadline; and
// anything but a clear answer (toolgate missing, a crash, a timeout, output
// that is not JSON) refuses the call.
import { spawn } from "node:child_process";

// The installed hook command (it prints toolgate's answer, or exits 2).
const COMMAND = __TOOLGATE_COMMAND__;
// How long one answer may take, ms: long enough for a daemon that starts and
// compiles its policies.
const DEADLINE_MS = __TOOLGATE_DEADLINE_MS__;

function ask(event) {
  return new Promise((resolve, reject) => {
    const refuse = (why) =>
      reject(new Error(`toolgate: ${why}, so this call is blocked (is toolgate installed? \`toolgate hook install --for opencode\` writes this plugin again)`));
    let child;
    try {
      // A process group of its own, so a deadline stops the whole hook.
      child = spawn("/bin/sh", ["-c", COMMAND], { stdio: ["pipe", "pipe", "pipe"], detached: true });
    } catch (err) {
      return refuse(`the hook could not start (${err.message})`);
    }
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8");
    child.stderr.setEncoding("utf8");
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
      refuse(`no answer in ${DEADLINE_MS / 1000} s`);
    }, DEADLINE_MS);
    child.stdout.on("data", (chunk) => (out += chunk));
    child.stderr.on("data", (chunk) => (err += chunk));
    child.on("error", (e) => {
      clearTimeout(timer);
      refuse(`the hook failed (${e.message})`);
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      if (code !== 0) return refuse(`the hook exited ${code}${err ? ": " + err.trim() : ""}`);
      let answer;
      try {
        answer = JSON.parse(out);
      } catch {
        return refuse("the hook's answer is not JSON");
      }
      if (answer === null || typeof answer !== "object") return refuse("the hook's answer is not an object");
      resolve(answer);
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(event));
  });
}

// What runs must be what toolgate decided: OpenCode runs the tool with the
// very object the plugins were handed, so a plugin after this one could
// change an allowed call in place. Frozen, such a change throws, and the call
// fails instead.
function freeze(value) {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) freeze(inner);
  }
  return value;
}

export const Toolgate = async ({ directory }) => {
  // Notes toolgate gave for an allowed call, added to what the model reads.
  const notes = new Map();
  return {
    // A new prompt starts the session's next turn. A failure here does not
    // stop the prompt (OpenCode would end the run with a bare "Unexpected
    // server error"): each tool call is still refused, with toolgate's reason.
    "chat.message": async (input, output) => {
      await ask({
        hook_event_name: "chat.message",
        session_id: input.sessionID,
        message_id: output?.message?.id ?? input.messageID ?? null,
        cwd: directory,
      }).catch(() => {});
    },
    "tool.execute.before": async (input, output) => {
      const answer = await ask({
        hook_event_name: "tool.execute.before",
        session_id: input.sessionID,
        call_id: input.callID,
        tool: input.tool,
        args: output.args,
        cwd: directory,
      });
      if (answer.decision === "deny") throw new Error(answer.reason || "toolgate refused this call");
      if (answer.decision !== "allow") throw new Error("toolgate: the hook's answer has no decision, so this call is blocked");
      freeze(output.args);
      if (answer.notes) notes.set(input.callID, answer.notes);
    },
    "tool.execute.after": async (input, output) => {
      const note = notes.get(input.callID);
      notes.delete(input.callID);
      if (note && typeof output.output === "string") output.output += `\n\n${note}`;
      await ask({
        hook_event_name: "tool.execute.after",
        session_id: input.sessionID,
        call_id: input.callID,
        tool: input.tool,
        args: input.args,
        output: typeof output.output === "string" ? output.output.slice(0, 1000) : null,
        metadata: output.metadata ?? null,
        cwd: directory,
      }).catch(() => {});
    },
  };
};
