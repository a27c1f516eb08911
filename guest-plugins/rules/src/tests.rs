//! The rules' logic natively, over a map standing in for the policy's
//! state. The same behaviour runs through the wasm boundary in
//! `fixtures.toml` (`toolgate test bundled:rules …`).

use std::collections::BTreeMap;

use serde_json::json;
use toolgate_guest::{ApprovalGrant, Caller, Verdict};

use super::*;

#[derive(Default)]
struct MapMemory(BTreeMap<String, u64>);

impl Memory for MapMemory {
    fn take(&mut self, key: &str, limit: u64) -> Result<Option<u64>, StateError> {
        let count = self.0.entry(key.to_string()).or_default();
        if *count >= limit {
            return Ok(None);
        }
        *count += 1;
        Ok(Some(*count))
    }

    fn peek(&mut self, key: &str) -> Result<u64, StateError> {
        Ok(self.0.get(key).copied().unwrap_or(0))
    }

    fn sweep(&mut self, prefix: &str, keep: &str) -> Result<(), StateError> {
        self.0
            .retain(|key, _| !key.starts_with(prefix) || key == keep);
        Ok(())
    }

    fn remembers(&mut self, key: &str) -> Result<bool, StateError> {
        Ok(self.0.contains_key(key))
    }

    fn remember(&mut self, key: &str) -> Result<(), StateError> {
        self.0.insert(key.to_string(), 1);
        Ok(())
    }
}

fn rules(rules: Value) -> Result<Rules, ConfigError> {
    Rules::open(Config::from_json(&json!({ "rule": rules }).to_string()).unwrap())
}

fn call(tool: &str, arguments: Value) -> ToolCall {
    ToolCall {
        call_id: "c1".into(),
        tool: tool.into(),
        origin: toolgate_guest::ToolOrigin::Builtin,
        arguments: arguments.to_string(),
        caller: Caller {
            session_id: "s1".into(),
            thread_id: "s1".into(),
            user_id: "u1".into(),
            channel: "cli".into(),
            thread_kind: "foreground".into(),
            is_subagent: false,
            turn: 1,
            mode: ExecutionMode::Interactive,
        },
        context_tokens: None,
        has_transcript: false,
        resolutions: Vec::new(),
    }
}

fn verdict(rules: &Rules, call: &ToolCall, memory: &mut MapMemory) -> Verdict {
    rules.evaluate(call, 0, memory).unwrap().verdict
}

#[test]
fn the_first_rule_that_fires_decides_so_an_exception_goes_first() {
    let rules = rules(json!([
        {"tool": "Bash", "args": {"command": "git status*"}, "action": "allow"},
        {"tool": "Bash", "args": {"command": {"regex": r"^\s*git\b"}}, "action": "ask", "reason": "git"},
        {"tool": "Bash", "action": "deny", "reason": "no shell"},
    ]))
    .unwrap();
    let memory = &mut MapMemory::default();
    let run = |command: &str, memory: &mut MapMemory| {
        verdict(&rules, &call("Bash", json!({ "command": command })), memory)
    };
    assert_eq!(run("git status --short", memory), Verdict::Allow);
    assert!(matches!(run("git push", memory), Verdict::Pause(_)));
    assert!(
        matches!(run("ls", memory), Verdict::Deny(r) if r.contains("no shell (rule `rule-3`)"))
    );
    assert_eq!(
        verdict(&rules, &call("Read", json!({})), memory),
        Verdict::Skip
    );
}

#[test]
fn notes_gather_until_a_rule_decides() {
    let rules = rules(json!([
        {"tool": "Write", "action": "note", "note": "run the tests after writing"},
        {"tool": "W*", "action": "note", "note": "second"},
        {"tool": "Write", "args": {"file_path": "*.lock"}, "action": "deny", "reason": "lock files are generated", "note": "use the package manager"},
    ]))
    .unwrap();
    let memory = &mut MapMemory::default();
    let written = rules
        .evaluate(&call("Write", json!({"file_path": "src/a.rs"})), 0, memory)
        .unwrap();
    assert_eq!(written.verdict, Verdict::Skip);
    assert_eq!(written.notes, ["run the tests after writing", "second"]);
    let lock = rules
        .evaluate(
            &call("Write", json!({"file_path": "Cargo.lock"})),
            0,
            memory,
        )
        .unwrap();
    assert!(matches!(lock.verdict, Verdict::Deny(_)));
    assert_eq!(lock.notes.len(), 3);
}

#[test]
fn a_limit_fires_past_its_calls_and_a_new_turn_starts_afresh() {
    let rules = rules(json!([{
        "name": "fetches", "tool": "WebFetch", "action": "deny",
        "reason": "Enough fetching.", "limit": {"calls": 2, "per": "turn"},
    }]))
    .unwrap();
    let memory = &mut MapMemory::default();
    let mut fetch = call("WebFetch", json!({"url": "https://example.com"}));
    assert_eq!(verdict(&rules, &fetch, memory), Verdict::Skip);
    assert_eq!(verdict(&rules, &fetch, memory), Verdict::Skip);
    let Verdict::Deny(reason) = verdict(&rules, &fetch, memory) else {
        panic!("the third fetch of the turn must be refused");
    };
    assert_eq!(
        reason,
        "Enough fetching. (rule `fetches`: at most 2 calls per turn)"
    );
    fetch.caller.turn = 2;
    assert_eq!(verdict(&rules, &fetch, memory), Verdict::Skip);
    // The older turn's counter was swept when the new one started.
    assert_eq!(memory.0.len(), 1, "{:?}", memory.0);
}

#[test]
fn a_time_window_counts_per_user_across_sessions() {
    let rules = rules(json!([{
        "name": "pushes", "tool": "Bash", "action": "deny", "reason": "Slow down.",
        "limit": {"calls": 1, "per": "1h"},
    }]))
    .unwrap();
    let memory = &mut MapMemory::default();
    let mut push = call("Bash", json!({}));
    assert_eq!(
        rules.evaluate(&push, 1_000, memory).unwrap().verdict,
        Verdict::Skip
    );
    push.caller.session_id = "s2".into();
    assert!(matches!(
        rules.evaluate(&push, 2_000, memory).unwrap().verdict,
        Verdict::Deny(_)
    ));
    push.caller.user_id = "u2".into();
    assert_eq!(
        rules.evaluate(&push, 2_000, memory).unwrap().verdict,
        Verdict::Skip
    );
    push.caller.user_id = "u1".into();
    assert_eq!(
        rules.evaluate(&push, 3_600_000, memory).unwrap().verdict,
        Verdict::Skip,
        "the next hour's window"
    );
}

#[test]
fn an_approved_call_is_allowed_and_not_counted_again() {
    let rules = rules(json!([{
        "name": "many-writes", "tool": "Write", "action": "ask",
        "reason": "Many writes this turn.", "limit": {"calls": 1, "per": "turn"},
        "allow_always": true,
    }]))
    .unwrap();
    let memory = &mut MapMemory::default();
    let mut write = call("Write", json!({}));
    assert_eq!(verdict(&rules, &write, memory), Verdict::Skip);
    assert!(matches!(verdict(&rules, &write, memory), Verdict::Pause(_)));
    let counted = memory.0.clone();
    write.resolutions = vec![Resolution::Approved(ApprovalGrant { always: true })];
    assert_eq!(verdict(&rules, &write, memory), Verdict::Allow);
    assert!(memory.0.keys().any(|k| k.starts_with("always/")));
    assert_eq!(
        memory
            .0
            .iter()
            .filter(|(k, _)| k.starts_with("limit/"))
            .collect::<Vec<_>>(),
        counted.iter().collect::<Vec<_>>(),
        "the resumed call took no unit"
    );
    // "Always" holds for the session's later calls.
    write.resolutions.clear();
    assert_eq!(verdict(&rules, &write, memory), Verdict::Allow);
}

#[test]
fn with_no_person_present_an_ask_is_a_deny_that_says_so() {
    let rules = rules(json!([{"tool": "Bash", "action": "ask", "reason": "Run a shell command?"}]))
        .unwrap();
    let mut bash = call("Bash", json!({}));
    bash.caller.mode = ExecutionMode::Autonomous;
    let Verdict::Deny(reason) = verdict(&rules, &bash, &mut MapMemory::default()) else {
        panic!("autonomous mode has no one to ask");
    };
    assert!(reason.contains("autonomous"), "{reason}");
}

#[test]
fn mode_subagent_and_thread_kind_narrow_a_rule() {
    let rules = rules(json!([{
        "tool": "*", "mode": ["autonomous"], "subagent": true, "thread_kind": "research*",
        "action": "deny", "reason": "no",
    }]))
    .unwrap();
    let mut read = call("Read", json!({}));
    let memory = &mut MapMemory::default();
    read.caller.mode = ExecutionMode::Autonomous;
    read.caller.is_subagent = true;
    assert_eq!(verdict(&rules, &read, memory), Verdict::Skip, "thread kind");
    read.caller.thread_kind = "research-web".into();
    assert!(matches!(verdict(&rules, &read, memory), Verdict::Deny(_)));
    read.caller.is_subagent = false;
    assert_eq!(verdict(&rules, &read, memory), Verdict::Skip);
}

#[test]
fn mcp_tools_are_matched_by_server_from_their_origin() {
    let rules =
        rules(json!([{"tool": "mcp:everything/*", "action": "deny", "reason": "no"}])).unwrap();
    let mut env = call("get-env", json!({}));
    let memory = &mut MapMemory::default();
    assert_eq!(
        verdict(&rules, &env, memory),
        Verdict::Skip,
        "a builtin of that name"
    );
    env.origin = toolgate_guest::ToolOrigin::Mcp("everything".into());
    assert!(matches!(verdict(&rules, &env, memory), Verdict::Deny(_)));
}

#[test]
fn a_refused_rule_names_itself_and_the_key_path() {
    let refused = |rule: Value| {
        rules(json!([{"tool": "Read", "action": "allow"}, rule]))
            .err()
            .unwrap()
    };
    let cases = [
        (
            json!({"name": "x", "action": "dny"}),
            "rule[1]",
            "rule `x`: unknown variant `dny`",
        ),
        (
            json!({"action": "deny"}),
            "rule[1]",
            "rule 2 (unnamed): a `deny` rule needs `reason`",
        ),
        (json!({"action": "note"}), "rule[1]", "needs `note`"),
        (
            json!({"action": "allow", "tol": "Bash"}),
            "rule[1]",
            "unknown field `tol`",
        ),
        (
            json!({"name": "r", "action": "allow", "args": {"command": {"regex": "("}}}),
            "rule[1].args.command",
            "rule `r`: not a valid regex",
        ),
        (
            json!({"action": "deny", "reason": "r", "limit": {"calls": 3, "per": "week"}}),
            "rule[1].limit",
            "is not a window",
        ),
        (
            json!({"action": "allow", "allow_always": true}),
            "rule[1].allow_always",
            "for `ask` rules only",
        ),
        (
            json!({"name": "rule-1", "action": "allow"}),
            "rule[1].name",
            "named twice",
        ),
    ];
    for (rule, key, message) in cases {
        let err = refused(rule);
        assert_eq!(err.key.as_deref(), Some(key), "{}", err.message);
        assert!(err.message.contains(message), "{}", err.message);
    }
    let typo = Rules::open(Config::from_json(r#"{"rules": []}"#).unwrap())
        .err()
        .unwrap();
    assert_eq!(typo.key.as_deref(), Some("rules"));
}

mod cedar_policies {
    use super::*;

    fn cedar(text: &str) -> Result<Rules, ConfigError> {
        Rules::open(Config::from_json(&json!({ "cedar": text }).to_string()).unwrap())
    }

    fn with_toml(rules: Value, cedar: &str) -> Rules {
        Rules::open(
            Config::from_json(&json!({ "rule": rules, "cedar": cedar }).to_string()).unwrap(),
        )
        .unwrap()
    }

    fn mcp(server: &str, tool: &str, arguments: Value) -> ToolCall {
        ToolCall {
            origin: toolgate_guest::ToolOrigin::Mcp(server.into()),
            ..call(tool, arguments)
        }
    }

    fn approved(call: &ToolCall) -> ToolCall {
        ToolCall {
            resolutions: vec![Resolution::Approved(ApprovalGrant { always: false })],
            ..call.clone()
        }
    }

    const POLICIES: &str = r#"
        @id("no-force-push")
        @reason("Force-pushing rewrites shared history: push normally.")
        forbid(principal, action == Action::"Bash", resource)
        when { context.arguments has command && context.arguments.command like "*git push*--force*" };

        @id("github-reads")
        permit(principal, action in Action::"mcp:github", resource)
        when { context.tool like "get_*" };

        @id("ask-to-deploy")
        @ask("Deploying changes production.")
        permit(principal, action == Action::"mcp:deploy/run", resource);

        @id("big-writes")
        @note("That is a large write; check it before moving on.")
        forbid(principal, action == Action::"Write", resource)
        when { context.arguments has size && context.arguments.size > 100000 };

        @id("autonomous-no-shell")
        forbid(principal, action in Action::"builtin", resource)
        when { context.mode == "autonomous" && context.tool == "Bash" };
    "#;

    #[test]
    fn each_effect_maps_to_a_decision() {
        let rules = cedar(POLICIES).unwrap();
        let memory = &mut MapMemory::default();
        let forced = call("Bash", json!({"command": "git push origin main --force"}));
        assert_eq!(
            verdict(&rules, &forced, memory),
            Verdict::Deny("Force-pushing rewrites shared history: push normally.".into())
        );
        // Nothing satisfied: Cedar's default deny is an abstention here.
        let plain = call("Bash", json!({"command": "git push"}));
        assert_eq!(verdict(&rules, &plain, memory), Verdict::Skip);
        // An action group: every tool of a server.
        for (server, tool, expected) in [
            ("github", "get_issue", Verdict::Allow),
            ("github", "delete_repo", Verdict::Skip),
            ("gitlab", "get_issue", Verdict::Skip),
        ] {
            let got = verdict(&rules, &mcp(server, tool, json!({})), memory);
            assert_eq!(got, expected, "{server}/{tool}");
        }

        let deploy = mcp("deploy", "run", json!({}));
        assert!(matches!(verdict(&rules, &deploy, memory),
            Verdict::Pause(toolgate_guest::PauseRequest::Approval(a)) if a.description == "Deploying changes production."));
        assert_eq!(verdict(&rules, &approved(&deploy), memory), Verdict::Allow);
        let mut unattended = deploy;
        unattended.caller.mode = ExecutionMode::Autonomous;
        assert!(matches!(verdict(&rules, &unattended, memory),
            Verdict::Deny(r) if r.contains("no person is present")));

        // A forbid's note travels with its deny; a policy with no @reason is named.
        let big = rules
            .evaluate(
                &call("Write", json!({"content": "x", "size": 200_000})),
                0,
                memory,
            )
            .unwrap();
        assert_eq!(
            big.notes,
            ["That is a large write; check it before moving on."]
        );
        assert!(matches!(big.verdict, Verdict::Deny(r) if r.contains("`big-writes`")));
        let mut unattended = call("Bash", json!({"command": "ls"}));
        unattended.caller.mode = ExecutionMode::Autonomous;
        assert!(matches!(verdict(&rules, &unattended, memory),
            Verdict::Deny(r) if r.contains("`autonomous-no-shell`")));
    }

    #[test]
    fn a_cedar_forbid_holds_whatever_a_toml_rule_says_and_a_permit_only_where_none_decided() {
        let memory = &mut MapMemory::default();
        let allow_push =
            json!([{"tool": "Bash", "args": {"command": "git push*"}, "action": "allow"}]);
        let rules = with_toml(allow_push, POLICIES);
        let forced = call("Bash", json!({"command": "git push --force"}));
        assert!(
            matches!(verdict(&rules, &forced, memory), Verdict::Deny(r) if r.contains("Force-pushing"))
        );
        let plain = call("Bash", json!({"command": "git push"}));
        assert_eq!(verdict(&rules, &plain, memory), Verdict::Allow);

        let deny_github =
            json!([{"tool": "mcp:github/*", "action": "deny", "reason": "not today"}]);
        let rules = with_toml(deny_github, POLICIES);
        assert!(matches!(
            verdict(&rules, &mcp("github", "get_issue", json!({})), memory),
            Verdict::Deny(r) if r.contains("not today")
        ));
    }

    #[test]
    fn a_forbid_that_cannot_be_checked_refuses_the_call() {
        let rules = cedar(
            r#"@id("small-writes-only")
               forbid(principal, action == Action::"Write", resource) when { context.arguments.size > 100 };
               @id("workspace-only")
               forbid(principal, action == Action::"Bash", resource) unless { context.arguments.cwd like "/work/*" };
               permit(principal, action, resource);"#,
        )
        .unwrap();
        let memory = &mut MapMemory::default();
        // A float (a string to Cedar), a null (dropped) or a missing key make
        // the forbid an evaluation error: refused, not skipped.
        for args in [json!({"size": 1.5e6}), json!({"size": null}), json!({})] {
            assert!(
                matches!(verdict(&rules, &call("Write", args.clone()), memory),
                    Verdict::Deny(r) if r.contains("`small-writes-only` could not be checked")),
                "{args}"
            );
        }
        assert_eq!(
            verdict(&rules, &call("Write", json!({"size": 5})), memory),
            Verdict::Allow
        );
        for args in [json!({"cwd": null}), json!({"cwd": ["/work/a"]})] {
            assert!(matches!(
                verdict(&rules, &call("Bash", args), memory),
                Verdict::Deny(_)
            ));
        }
        assert_eq!(
            verdict(&rules, &call("Bash", json!({"cwd": "/work/a"})), memory),
            Verdict::Allow
        );
    }

    #[test]
    fn the_first_policy_written_speaks_and_origins_have_their_own_groups() {
        let rules = cedar(
            r#"@reason("first") forbid(principal, action, resource) when { context.tool == "X" };
               @reason("second") forbid(principal, action, resource) when { context.tool == "X" };
               @reason("no other origin") forbid(principal, action in Action::"other", resource);
               @reason("a builtin") forbid(principal, action in Action::"builtin", resource) when { context.tool == "builtin" };"#,
        )
        .unwrap();
        let memory = &mut MapMemory::default();
        for _ in 0..8 {
            assert_eq!(
                verdict(&rules, &call("X", json!({})), memory),
                Verdict::Deny("first".into())
            );
        }
        let other = ToolCall {
            origin: toolgate_guest::ToolOrigin::Other("plugin".into()),
            ..call("Y", json!({}))
        };
        assert_eq!(
            verdict(&rules, &other, memory),
            Verdict::Deny("no other origin".into())
        );
        assert_eq!(
            verdict(&rules, &call("Y", json!({})), memory),
            Verdict::Skip
        );
        // A built-in tool named like its group is still in it.
        assert_eq!(
            verdict(&rules, &call("builtin", json!({})), memory),
            Verdict::Deny("a builtin".into())
        );
    }

    #[test]
    fn call_counts_per_turn_and_session_are_context() {
        let rules = cedar(
            r#"@reason("Three fetches a turn is enough.")
               forbid(principal, action == Action::"WebFetch", resource) when { context.calls.turn > 3 };
               @reason("Ten a session.")
               forbid(principal, action == Action::"WebFetch", resource) when { context.calls.session > 10 };"#,
        )
        .unwrap();
        let memory = &mut MapMemory::default();
        let mut fetch = call("WebFetch", json!({"url": "https://example.com"}));
        let mut verdicts = Vec::new();
        for turn in 1..=4 {
            fetch.caller.turn = turn;
            for _ in 0..4 {
                verdicts.push(verdict(&rules, &fetch, memory));
            }
        }
        let denied: Vec<usize> = verdicts
            .iter()
            .enumerate()
            .filter(|(_, v)| matches!(v, Verdict::Deny(_)))
            .map(|(i, _)| i + 1)
            .collect();
        // The 4th of each turn, and every call past the 10th of the session.
        assert_eq!(denied, [4, 8, 11, 12, 13, 14, 15, 16]);
        // Older turns' counters are swept as a new turn starts.
        let turns = memory
            .0
            .keys()
            .filter(|k| k.starts_with("cedar/turn/"))
            .count();
        assert_eq!(turns, 1, "{:?}", memory.0.keys().collect::<Vec<_>>());
        // Only the actions a policy reading `context.calls` covers are counted.
        assert_eq!(
            verdict(&rules, &call("Read", json!({})), memory),
            Verdict::Skip
        );
        assert!(
            !memory.0.keys().any(|k| k.contains("Read")),
            "{:?}",
            memory.0
        );
    }

    #[test]
    fn a_call_resumed_after_approval_is_not_counted_again() {
        let rules = cedar(
            r#"@ask("A second deploy this turn?")
               permit(principal, action == Action::"deploy", resource) when { context.calls.turn > 1 };
               permit(principal, action == Action::"deploy", resource) when { context.calls.turn <= 1 };"#,
        )
        .unwrap();
        let memory = &mut MapMemory::default();
        let deploy = call("deploy", json!({}));
        assert_eq!(verdict(&rules, &deploy, memory), Verdict::Allow);
        assert!(matches!(
            verdict(&rules, &deploy, memory),
            Verdict::Pause(_)
        ));
        assert_eq!(verdict(&rules, &approved(&deploy), memory), Verdict::Allow);
        let counted: Vec<u64> = memory.0.values().copied().collect();
        assert_eq!(counted, [2, 2], "turn and session counters: {:?}", memory.0);
    }

    #[test]
    fn only_a_policy_reading_context_calls_turns_counting_on() {
        let memory = &mut MapMemory::default();
        for text in [
            r#"forbid(principal, action, resource) when { context["calls"]["turn"] > 5 };"#,
            r#"forbid(principal, action, resource) when { context has calls && context.calls.session > 5 };"#,
        ] {
            verdict(&cedar(text).unwrap(), &call("Read", json!({})), memory);
            assert!(!memory.0.is_empty(), "{text}");
            memory.0.clear();
        }
        let named = r#"@reason("too many calls") forbid(principal, action == Action::"list_calls", resource)
                       when { context.arguments has calls };"#;
        verdict(
            &cedar(named).unwrap(),
            &call("list_calls", json!({"calls": 1})),
            memory,
        );
        assert!(memory.0.is_empty(), "{:?}", memory.0);
    }

    #[test]
    fn cedar_escapes_in_arguments_are_dropped() {
        let args = json!({"nested": {"__entity": {"type": "User", "id": "admin"}, "__extn": 1, "keep": 2}});
        assert_eq!(
            crate::cedar::arguments(&args.to_string()),
            json!({"nested": {"keep": 2}})
        );
    }

    #[test]
    fn arguments_arrive_as_cedar_values() {
        let rules = cedar(
            r#"@reason("ok") forbid(principal, action, resource)
               when { context.arguments has ratio && context.arguments.ratio == "0.5"
                      && context.arguments.tags.contains("a")
                      && !(context.arguments has gone)
                      && context.arguments.nested == {} };"#,
        )
        .unwrap();
        let args = json!({
            "ratio": 0.5, "tags": ["a", "b"], "gone": null,
            "nested": {"__entity": {"type": "User", "id": "admin"}},
        });
        assert!(matches!(
            verdict(&rules, &call("X", args), &mut MapMemory::default()),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn a_parse_error_is_refused_with_cedars_message_and_place() {
        let err = cedar("permit(principal, action, resource)\n  when { context.é == };")
            .err()
            .unwrap();
        assert_eq!(err.key.as_deref(), Some("cedar"));
        assert!(
            err.message.starts_with("Cedar refused the policies: "),
            "{}",
            err.message
        );
        assert!(err.message.contains("(line 2, column"), "{}", err.message);
        let templated = cedar("permit(principal == ?principal, action, resource);")
            .err()
            .unwrap();
        assert!(
            templated.message.contains("templates"),
            "{}",
            templated.message
        );
        let unknown = Rules::open(Config::from_json(r#"{"cedr": "x"}"#).unwrap())
            .err()
            .unwrap();
        assert_eq!(unknown.key.as_deref(), Some("cedr"));
    }
}
