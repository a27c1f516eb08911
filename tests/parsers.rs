//! Property tests for every parser of untrusted input: whatever the bytes,
//! a typed error or a value, never a panic; and what the guard and the
//! redactor promise holds for generated input.

use proptest::prelude::*;
use toolgate::daemon::protocol::{decode_answer, decode_request};
use toolgate::guard::ControlPlane;
use toolgate::hooks::HookRuntime;
use toolgate::{ErrorKind, ToolRequest};

/// JSON-ish text: mostly well-formed fragments, sometimes garbage.
fn jsonish() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,300}",
        proptest::collection::vec(
            proptest::sample::select(vec![
                "{",
                "}",
                "[",
                "]",
                ",",
                ":",
                "\"tool\"",
                "\"op\"",
                "\"hook\"",
                "\"evaluate\"",
                "\"Bash\"",
                "\"arguments\"",
                "\"session_id\"",
                "\"hook_event_name\"",
                "\"PreToolUse\"",
                "\"tool_input\"",
                "null",
                "true",
                "1e999",
                "-1",
                "\"\\u0000\"",
                "\"request\"",
                "\"event\"",
                "\"runtime\"",
                "\"claude-code\"",
            ]),
            0..40
        )
        .prop_map(|parts| parts.concat()),
    ]
}

proptest! {
    #[test]
    fn tool_requests_parse_or_fail_typed(text in jsonish()) {
        if let Err(err) = ToolRequest::from_json(&text) {
            prop_assert_eq!(toolgate::Error::from(err).kind(), ErrorKind::InvalidRequest);
        }
    }

    #[test]
    fn hook_payloads_parse_or_fail_typed(text in jsonish()) {
        for runtime in HookRuntime::ALL {
            match toolgate::hooks::adapter(runtime).parse(&text) {
                // A parsed event always says what it needs.
                Ok(event) => {
                    let _ = event.needs();
                }
                Err(err) => prop_assert_eq!(toolgate::Error::from(err).kind(), ErrorKind::InvalidRequest),
            }
        }
    }

    #[test]
    fn daemon_requests_and_answers_never_panic(text in jsonish()) {
        if let Err(err) = decode_request(&text) {
            prop_assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        }
        let _ = decode_answer(&text);
    }

    #[test]
    fn the_guard_reads_any_arguments(text in ".{0,300}", tool in "[A-Za-z_]{1,12}") {
        let plane = ControlPlane::new(
            [std::path::PathBuf::from("/etc/toolgate/toolgate.toml")],
            std::path::Path::new("/var/lib/toolgate/toolgate.redb"),
        );
        let request = ToolRequest::new(tool, serde_json::json!({"command": text, "file_path": text}));
        let _ = plane.check(&request);
    }

    #[test]
    fn redaction_never_panics_and_caps_what_it_shows(text in ".{0,5000}") {
        let shown = toolgate::redact::for_display(&text);
        prop_assert!(shown.len() <= toolgate::redact::MAX_DISPLAY_BYTES + 64);
    }

    #[test]
    fn a_token_never_survives_redaction(
        prefix in "[ a-z=:]{0,20}",
        token in "[A-Za-z0-9]{36}",
    ) {
        let text = format!("{prefix} ghp_{token} and more");
        let redacted = toolgate::redact::redact(&text);
        prop_assert!(!redacted.contains(&token), "{}", redacted);
    }

    #[test]
    fn fixture_files_parse_or_fail_with_a_message(text in ".{0,400}", json in proptest::bool::ANY) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(if json { "cases.json" } else { "cases.toml" });
        std::fs::write(&path, &text).unwrap();
        if let Err(err) = toolgate::fixtures::parse(&path) {
            prop_assert!(!err.to_string().is_empty());
        }
    }
}
