//! The audit trail as ArcSight Common Event Format (CEF) lines: what SIEMs
//! read from syslog. One line per link:
//!
//! ```text
//! CEF:0|toolgate|toolgate|VERSION|SIGNATURE ID|NAME|SEVERITY|EXTENSIONS
//! ```
//!
//! A decision's signature id is `decision.<verdict>`; the others are the
//! link's kind. Every line carries the link's number and hash (`cn1`,
//! `cs6`), so what a SIEM holds can be matched against the chain.

use serde_json::Value;
use toolgate_engine::audit::{AuditKind, Link, link_hash};

/// The CEF line of a stored link (`bytes`: exactly as stored).
pub fn line(bytes: &str) -> Result<String, String> {
    let link: Link =
        serde_json::from_str(bytes).map_err(|err| format!("not an audit link: {err}"))?;
    let body = &link.body;
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default();
    let (signature, name, severity) = match link.kind {
        AuditKind::Decision => match text("verdict") {
            "deny" => ("decision.deny".to_string(), "tool call denied", 7),
            "pause" => (
                "decision.pause".to_string(),
                "tool call paused for a person",
                5,
            ),
            verdict => (format!("decision.{verdict}"), "tool call allowed", 1),
        },
        AuditKind::Approval => ("approval".into(), "a person approved a paused call", 3),
        AuditKind::Refusal => ("refusal".into(), "a person refused a paused call", 5),
        AuditKind::Reload => ("reload".into(), "policies reloaded", 3),
        AuditKind::Rollout => ("rollout".into(), "a policy's rollout changed", 5),
        AuditKind::Checkpoint => ("checkpoint".into(), "audit chain checkpoint", 1),
        AuditKind::Prune => ("prune".into(), "audit links removed by retention", 3),
    };
    let mut extensions = vec![
        ("rt", link.at_ms.to_string()),
        ("cn1Label", "seq".into()),
        ("cn1", link.seq.to_string()),
        ("cs6Label", "linkHash".into()),
        ("cs6", link_hash(bytes.as_bytes())),
    ];
    let mut add = |key: &'static str, label: Option<&'static str>, value: &str| {
        if value.is_empty() {
            return;
        }
        if let Some(label) = label {
            extensions.push((label_key(key), label.into()));
        }
        extensions.push((key, value.to_string()));
    };
    match link.kind {
        AuditKind::Decision => {
            add("suser", None, text("user_id"));
            add("act", None, text("verdict"));
            add("reason", None, text("reason"));
            add("externalId", None, text("call_id"));
            add("cs1", Some("tool"), text("tool"));
            add("cs2", Some("session"), text("session_id"));
            add("cs3", Some("decidedBy"), text("decided_by"));
        }
        AuditKind::Approval | AuditKind::Refusal => {
            add("suser", None, text("by"));
            add("duser", None, text("user_id"));
            add("act", None, text("answer"));
            add("externalId", None, text("call_id"));
            add("cs1", Some("tool"), text("tool"));
            add("cs2", Some("session"), text("session_id"));
            add("cs3", Some("policy"), text("policy"));
            add("cs4", Some("channel"), text("channel"));
        }
        _ => add("msg", None, &body.to_string()),
    }
    let header = [
        "toolgate",
        "toolgate",
        env!("CARGO_PKG_VERSION"),
        &signature,
        name,
    ]
    .map(escape_header)
    .join("|");
    let extensions: Vec<String> = extensions
        .iter()
        .map(|(key, value)| format!("{key}={}", escape_extension(value)))
        .collect();
    Ok(format!(
        "CEF:0|{header}|{severity}|{}",
        extensions.join(" ")
    ))
}

/// The label key CEF pairs with a custom field (`cs1` → `cs1Label`).
fn label_key(key: &'static str) -> &'static str {
    match key {
        "cs1" => "cs1Label",
        "cs2" => "cs2Label",
        "cs3" => "cs3Label",
        "cs4" => "cs4Label",
        _ => "cs5Label",
    }
}

/// A header field: `\` and `|` escaped, line breaks as spaces.
fn escape_header(field: &str) -> String {
    field
        .replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\r', '\n'], " ")
}

/// An extension value: `\` and `=` escaped, line breaks as `\n` and `\r`.
fn escape_extension(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('=', "\\=")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_decision_is_a_severe_event_with_its_fields_escaped() {
        let link = r#"{"seq":7,"at_ms":1700000000000,"kind":"decision","prev":"00","body":{"verdict":"deny","tool":"Bash","user_id":"ana","session_id":"s1","call_id":"c|1","reason":"a=b\nc\\d","decided_by":"safeguards"}}"#;
        let line = line(link).unwrap();
        assert!(line.starts_with("CEF:0|toolgate|toolgate|"), "{line}");
        assert!(
            line.contains("|decision.deny|tool call denied|7|"),
            "{line}"
        );
        assert!(line.contains(r"reason=a\=b\nc\\d "), "{line}");
        assert!(line.contains("externalId=c|1 "), "{line}");
        assert!(line.contains("cs1Label=tool cs1=Bash"), "{line}");
        assert!(line.contains("cn1=7 "), "{line}");
        assert!(
            line.contains(&format!("cs6={}", link_hash(link.as_bytes()))),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }
}
