"""The behaviour table of tests/polyglot/README.md, in Python."""

import toolgate_guest as tg

LANGUAGE = "python"


class Behaviour(tg.Policy):
    name = "behaviour-python"
    description = "the polyglot behaviour table"

    def __init__(self, config):
        self.settings = tg.settings(config, greeting="noted")

    def decide(self, call, risk, budget):
        tool = call.tool
        if tool == "Read":
            return tg.allow()
        if tool == "Bash":
            if "rm -rf" in call.arguments.get("command", ""):
                return tg.deny(f"rm -rf is refused by the {LANGUAGE} policy; remove files by name")
            return tg.skip()
        if tool == "Deploy":
            if call.approved:
                return tg.allow()
            return tg.pause_for_approval("deploy to production")
        if tool == "Note":
            return tg.allow(notes=[f"{self.settings.greeting} by {LANGUAGE}"])
        if tool == "Write":
            path = call.arguments.get("path", "")
            if not path.startswith("/sandbox/"):
                return tg.allow(rewrite={**call.arguments, "path": "/sandbox/" + path.lstrip("/")})
            return tg.allow()
        if tool == "Count":
            user = tg.state.try_increment(tg.key("user", call.user), 1_000_000)
            session = tg.state.try_increment(tg.key("session", call.session), 1_000_000)
            return tg.allow(notes=[f"user {user}", f"session {session}"])
        if tool == "Remember":
            tg.events.append("remembered", call.session, call.turn, tool, summary=call.arguments.get("text"))
            return tg.allow()
        if tool == "History":
            seen = tg.events.session_recent(call.session, 10)
            texts = [e.summary for e in seen if e.kind == "remembered"]
            return tg.allow(notes=["history: " + ", ".join(texts)])
        if tool == "Stash":
            # Past the host's copy limit (4 MiB): answered, never a trap.
            try:
                tg.state.set("big", b"x" * (5 << 20))
                stored = "stored"
            except tg.StateError as err:
                stored = err.kind
            tg.events.append("stashed", call.session, call.turn, tool, summary="x" * (5 << 20))
            return tg.allow(notes=[f"stash: {stored}"])
        if tool == "Ask":
            return tg.ask_model("Answer ALLOW or DENY <why>.", call.arguments.get("question", ""), 5_000)
        if tool == "Trap":
            raise RuntimeError("the behaviour table traps here")
        if tool == "Spin":
            while True:
                pass
        if tool == "Hog":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        return tg.skip()

    def classify(self, call):
        if call.tool == "Risky":
            return tg.risk("high", "behaviour-test", [f"tool:{call.tool}"])
        return tg.risk("none", "low")

    def check_output(self, output):
        if output.text.startswith("WITHHOLD"):
            return tg.withhold(f"withheld by {LANGUAGE}")
        if output.call.tool == "Summarise":
            return tg.replace(f"{len(output.text)} characters, summarised by {LANGUAGE}")
        return tg.redact(output.text, ["hunter2"])

    def visible(self, caller, tools):
        return [not tool.name.startswith("internal-") for tool in tools]

    def parse(self, call, reply):
        if reply.text is None:
            return tg.deny(f"the model gave no answer ({reply.error})")
        answer = reply.text.strip()
        if answer == "ALLOW":
            return tg.allow(notes=[f"the model allowed it ({LANGUAGE})"])
        if answer.startswith("DENY"):
            return tg.deny(answer[len("DENY"):].strip() or "the model said no")
        raise ValueError(f"unreadable model reply: {answer!r}")


Gate = tg.gate(Behaviour)
Risk = tg.classifier(Behaviour)
Verdict = tg.verdict_parser(Behaviour)
Output = tg.output_checker(Behaviour)
Visibility = tg.tool_filter(Behaviour)
