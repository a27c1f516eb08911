//! Contract 0.4's phases after the call and around it, through wasm: the
//! `output` phase sees a tool's output before the model does (pass, redact,
//! replace, withhold, in priority order, each seeing what the earlier left),
//! and the `visibility` phase says which tools may be offered at all. A
//! policy that fails either is handled by its fail mode.

use crate::common;

use common::{call, host, scripted};
use serde_json::json;
use toolgate::decision::Outcome;

fn closed(name: &str, priority: i32, script: &str) -> String {
    scripted(name, priority, script).replace(
        &format!("[plugins.{name}.config]"),
        &format!("fail_mode = \"closed\"\n[plugins.{name}.config]"),
    )
}

#[test]
fn redactions_compose_in_priority_order_and_a_withhold_ends_the_chain() {
    let host = host(&format!(
        "{}{}",
        scripted("keys", 1, "redact = [\"sk-live-1234\"]"),
        scripted("names", 2, "redact = [\"alice\", \"[redacted]\"]")
    ));
    let request = call("Read", json!({"file_path": "env"}));
    let check = host
        .check_output(&request, Outcome::Succeeded, "alice: sk-live-1234\n")
        .unwrap();
    // The second policy saw the first's redaction, and redacted it again.
    assert_eq!(check.text("?"), "[redacted]: [redacted]\n");
    assert!(!check.withheld);
    assert_eq!(
        check
            .changes
            .iter()
            .map(|c| (c.policy.as_str(), c.action.as_str()))
            .collect::<Vec<_>>(),
        [("keys", "redact"), ("names", "redact")]
    );
    // Nothing to redact: the output passes unchanged.
    let plain = host
        .check_output(&request, Outcome::Succeeded, "nothing secret")
        .unwrap();
    assert_eq!(plain.output, None);
    assert_eq!(plain.text("nothing secret"), "nothing secret");

    let host = common::host(&format!(
        "{}{}",
        scripted(
            "guard",
            1,
            "output = \"withhold\"\noutput_text = \"it holds a private key\""
        ),
        scripted(
            "never-asked",
            2,
            "output = \"replace\"\noutput_text = \"x\""
        )
    ));
    let check = host
        .check_output(&request, Outcome::Succeeded, "-----BEGIN PRIVATE KEY-----")
        .unwrap();
    assert!(check.withheld);
    assert!(
        check
            .text("")
            .contains("guard says: it holds a private key"),
        "{check:?}"
    );
    assert_eq!(check.changes.len(), 1, "a withhold ends the chain");
}

#[test]
fn a_policy_that_fails_on_output_withholds_it_closed_and_passes_it_open() {
    let request = call("WebFetch", json!({"url": "https://example.com"}));
    for (script, failure) in [
        ("output = \"trap\"", "trapped"),
        ("output = \"bad-span\"", "out of bounds"),
    ] {
        let shut = host(&closed("checker", 1, script));
        let check = shut
            .check_output(&request, Outcome::Succeeded, "page text")
            .unwrap();
        assert!(check.withheld, "{script}: {check:?}");
        assert!(check.text("").contains("could not check it"), "{check:?}");
        assert!(
            check.changes[0]
                .failure
                .as_deref()
                .unwrap_or_default()
                .contains(failure)
        );

        let open = host(&scripted("checker", 1, script));
        let check = open
            .check_output(&request, Outcome::Succeeded, "page text")
            .unwrap();
        assert!(!check.withheld, "{script}: {check:?}");
        assert_eq!(check.text("page text"), "page text");
    }
}

#[test]
fn an_output_past_the_cap_reaches_the_model_only_as_far_as_it_was_checked() {
    let host = host(&scripted("keys", 1, "redact = [\"secret\"]"));
    let cap = toolgate::output::MAX_CHECKED_OUTPUT;
    let mut output = "x".repeat(cap - 3);
    output.push_str("é and a secret past the cap");
    let check = host
        .check_output(&call("Read", json!({})), Outcome::Succeeded, &output)
        .unwrap();
    let text = check.text(&output);
    assert!(
        !text.contains("secret"),
        "what was not checked is not shown"
    );
    assert!(
        text.ends_with("as far as the policies checked it]"),
        "{}",
        &text[text.len() - 120..]
    );
}

#[test]
fn a_tool_is_offered_only_if_every_filtering_policy_says_yes() {
    let tools = common::mcp_tools(&["get-env", "echo", "add"]);
    let caller = call("tools/list", json!({}));
    let host = host(&format!(
        "{}{}",
        scripted("a", 1, "hide = [\"get-env\"]"),
        scripted("b", 2, "hide = [\"add\"]")
    ));
    assert_eq!(
        host.visible_tools(&caller, &tools).unwrap(),
        [false, true, false]
    );

    // A policy that fails hides everything when it fails closed, nothing
    // of its own accord when it fails open.
    let shut = common::host(&closed("a", 1, "hide = [\"!trap\"]"));
    assert_eq!(
        shut.visible_tools(&caller, &tools).unwrap(),
        [false, false, false]
    );
    let open = common::host(&scripted("a", 1, "hide = [\"!trap\"]"));
    assert_eq!(
        open.visible_tools(&caller, &tools).unwrap(),
        [true, true, true]
    );
}

/// The visibility phase is pure, as the WIT says: its state writes are
/// refused (a `storage` error saying so) and nothing is written. Before,
/// a filter wrote on every re-check (64 KiB each in the run).
#[test]
fn the_visibility_phase_cannot_write_state() {
    let tools = common::mcp_tools(&["get-env", "echo"]);
    let caller = call("tools/list", json!({}));
    let host = host(&scripted("a", 1, "hide = [\"!write\"]"));
    assert_eq!(
        host.visible_tools(&caller, &tools).unwrap(),
        [true, true],
        "the write was refused"
    );
    let stats = host.store_stats().unwrap();
    let written = stats.policies.get("a").map_or(0, |p| p.state_bytes);
    assert_eq!(written, 0, "nothing was written");
}
