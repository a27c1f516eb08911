// The behaviour table of tests/polyglot/README.md, in TypeScript.

import * as tg from "./toolgate-guest.js";

const LANGUAGE = "typescript";

const policy = tg.definePolicy({
  name: "behaviour-typescript",
  description: "the polyglot behaviour table",
  open: (config) => tg.settings(config, { greeting: "noted" }),

  decide(settings, call) {
    switch (call.tool) {
      case "Read":
        return tg.allow();
      case "Bash":
        return String(call.arguments.command ?? "").includes("rm -rf")
          ? tg.deny(`rm -rf is refused by the ${LANGUAGE} policy; remove files by name`)
          : tg.skip();
      case "Deploy":
        return call.approved ? tg.allow() : tg.pauseForApproval("deploy to production");
      case "Note":
        return tg.allow([`${settings.greeting} by ${LANGUAGE}`]);
      case "Write": {
        const path = String(call.arguments.path ?? "");
        return path.startsWith("/sandbox/")
          ? tg.allow()
          : tg.allow([], { ...call.arguments, path: "/sandbox/" + path.replace(/^\/+/, "") });
      }
      case "Count": {
        const user = tg.state.tryIncrement(tg.key("user", call.user), 1_000_000);
        const session = tg.state.tryIncrement(tg.key("session", call.session), 1_000_000);
        return tg.allow([`user ${user}`, `session ${session}`]);
      }
      case "Remember":
        tg.events.append("remembered", call.session, call.turn, {
          tool: call.tool,
          summary: String(call.arguments.text ?? ""),
        });
        return tg.allow();
      case "Stash": {
        // Past the host's copy limit (4 MiB): answered, never a trap.
        let stored = "stored";
        try {
          tg.state.set("big", new Uint8Array(5 << 20));
        } catch (err) {
          stored = err instanceof tg.StateError ? err.kind : String(err);
        }
        tg.events.append("stashed", call.session, call.turn, { summary: "x".repeat(5 << 20) });
        return tg.allow([`stash: ${stored}`]);
      }
      case "History": {
        const texts = tg.events
          .sessionRecent(call.session, 10)
          .filter((e) => e.kind === "remembered")
          .map((e) => e.summary);
        return tg.allow([`history: ${texts.join(", ")}`]);
      }
      case "Ask":
        return tg.askModel("Answer ALLOW or DENY <why>.", String(call.arguments.question ?? ""), 5_000);
      case "Trap":
        throw new Error("the behaviour table traps here");
      case "Spin":
        for (;;) {
          // the deadline ends this
        }
      case "Hog": {
        const hoard: Uint8Array[] = [];
        for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
      }
      default:
        return tg.skip();
    }
  },

  classify(_settings, call) {
    return call.tool === "Risky" ? tg.risk("high", "behaviour-test", [`tool:${call.tool}`]) : tg.risk("none", "low");
  },

  checkOutput(_settings, output) {
    if (output.text.startsWith("WITHHOLD")) return tg.withhold(`withheld by ${LANGUAGE}`);
    if (output.call.tool === "Summarise") {
      return tg.replace(`${output.text.length} characters, summarised by ${LANGUAGE}`);
    }
    return tg.redact(output.text, ["hunter2"]);
  },

  visible(_settings, _caller, tools) {
    return tools.map((tool) => !tool.name.startsWith("internal-"));
  },

  parse(_settings, _call, reply) {
    if (reply.text === undefined) return tg.deny(`the model gave no answer (${reply.error})`);
    const answer = reply.text.trim();
    if (answer === "ALLOW") return tg.allow([`the model allowed it (${LANGUAGE})`]);
    if (answer.startsWith("DENY")) return tg.deny(answer.slice("DENY".length).trim() || "the model said no");
    throw new Error(`unreadable model reply: ${JSON.stringify(answer)}`);
  },
});

export const gate = policy.gate;
export const risk = policy.phase("risk");
export const verdict = policy.phase("verdict");
export const output = policy.phase("output");
export const visibility = policy.phase("visibility");
