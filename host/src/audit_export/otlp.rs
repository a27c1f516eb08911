//! The audit trail as OpenTelemetry (OTLP over HTTP, protobuf; the official
//! messages from `opentelemetry-proto`):
//!
//! - a **span per decision**, named and attributed as the GenAI semantic
//!   conventions name a tool's execution (`execute_tool {gen_ai.tool.name}`,
//!   `gen_ai.operation.name`, `gen_ai.tool.name`, `gen_ai.tool.call.id`,
//!   `gen_ai.conversation.id`), with toolgate's verdict, reason and deciding
//!   policy as `toolgate.*` attributes and **each policy as a child span**;
//! - a **log record per link** (decisions, approvals, refusals, reloads,
//!   rollouts, checkpoints, prunes), a decision's tied to its span.
//!
//! Ids come from the link's hash, so sending a link again (after a failed
//! attempt) repeats the same span rather than adding one. Arguments leave
//! only as the decision log keeps them (a digest by default).

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value::Value as Any,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, Status, span::SpanKind, status::StatusCode,
};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use toolgate_engine::audit::{AuditKind, Link, link_hash};

/// The two requests for a batch of stored links: the spans and the logs.
pub fn requests(
    links: &[(u64, String)],
    host: &str,
) -> (ExportTraceServiceRequest, ExportLogsServiceRequest) {
    let mut spans = Vec::new();
    let mut records = Vec::new();
    for (_, bytes) in links {
        let link = match serde_json::from_str::<Link>(bytes) {
            Ok(link) => link,
            Err(err) => {
                // `audit verify` names it; the rest still leaves.
                tracing::error!(error = %err, "an audit link that cannot be read is not sent");
                continue;
            }
        };
        let hash = link_hash(bytes.as_bytes());
        let ids = Ids::of(&hash);
        if link.kind == AuditKind::Decision {
            spans.extend(decision_spans(&link, &ids));
        }
        records.push(log_record(&link, &hash, &ids));
    }
    let resource = Some(Resource {
        attributes: vec![
            string("service.name", "toolgate"),
            string("service.version", env!("CARGO_PKG_VERSION")),
            string("host.name", host),
        ],
        ..Default::default()
    });
    let scope = Some(InstrumentationScope {
        name: "toolgate.audit".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    });
    let traces = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: resource.clone(),
            scope_spans: vec![ScopeSpans {
                scope: scope.clone(),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let logs = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource,
            scope_logs: vec![ScopeLogs {
                scope,
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    (traces, logs)
}

/// A link's trace and span ids, from its hash.
struct Ids {
    trace: Vec<u8>,
    span: Vec<u8>,
}

impl Ids {
    fn of(hash: &str) -> Self {
        let bytes = hex::decode(hash).unwrap_or_else(|_| Sha256::digest(hash).to_vec());
        Self {
            trace: bytes[..16].to_vec(),
            span: bytes[16..24].to_vec(),
        }
    }
}

/// The decision's span, then one child per policy that ran.
fn decision_spans(link: &Link, ids: &Ids) -> Vec<Span> {
    let body = &link.body;
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default();
    let end = link.at_ms.saturating_mul(1_000_000);
    let took = body["duration_us"]
        .as_u64()
        .unwrap_or(0)
        .saturating_mul(1000);
    let start = end.saturating_sub(took);
    let verdict = text("verdict");
    let mut attributes = vec![
        string("gen_ai.operation.name", "execute_tool"),
        string("gen_ai.tool.name", text("tool")),
        string("gen_ai.tool.call.id", text("call_id")),
        string("gen_ai.conversation.id", text("session_id")),
        string("toolgate.verdict", verdict),
        string("toolgate.user", text("user_id")),
        string("toolgate.channel", text("channel")),
        string("toolgate.arguments", &body["arguments"].to_string()),
        int("toolgate.audit.seq", link.seq),
    ];
    for (key, field) in [
        ("toolgate.reason", "reason"),
        ("toolgate.decided_by", "decided_by"),
    ] {
        if !text(field).is_empty() {
            attributes.push(string(key, text(field)));
        }
    }
    let status = match verdict {
        "deny" => Status {
            code: StatusCode::Error as i32,
            message: text("reason").into(),
        },
        _ => Status::default(),
    };
    let mut spans = vec![Span {
        trace_id: ids.trace.clone(),
        span_id: ids.span.clone(),
        name: format!("execute_tool {}", text("tool")),
        kind: SpanKind::Internal as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        status: Some(status),
        ..Default::default()
    }];
    for policy in body["policies"].as_array().into_iter().flatten() {
        let field = |key: &str| policy.get(key).and_then(Value::as_str).unwrap_or_default();
        let name = field("name");
        let verdict = match &policy["verdict"] {
            Value::String(verdict) => verdict.clone(),
            other => other.to_string(),
        };
        let mut attributes = vec![
            string("toolgate.policy.name", name),
            string("toolgate.policy.sha256", field("sha256")),
            string("toolgate.policy.verdict", &verdict),
        ];
        if !field("failure").is_empty() {
            attributes.push(string("toolgate.policy.failure", field("failure")));
        }
        let child = Sha256::digest(format!("{}/{name}", hex::encode(&ids.span)));
        spans.push(Span {
            trace_id: ids.trace.clone(),
            span_id: child[..8].to_vec(),
            parent_span_id: ids.span.clone(),
            name: format!("toolgate.policy {name}"),
            kind: SpanKind::Internal as i32,
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            attributes,
            ..Default::default()
        });
    }
    spans
}

/// The log record of any link.
fn log_record(link: &Link, hash: &str, ids: &Ids) -> LogRecord {
    let body = &link.body;
    let text = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default();
    let (severity, summary) = match link.kind {
        AuditKind::Decision => {
            let verdict = text("verdict");
            let severity = match verdict {
                "deny" => SeverityNumber::Warn,
                "pause" => SeverityNumber::Info2,
                _ => SeverityNumber::Info,
            };
            let mut summary = format!("{} {verdict}", text("tool"));
            if !text("reason").is_empty() {
                summary = format!("{summary}: {}", text("reason"));
            }
            (severity, summary)
        }
        AuditKind::Approval | AuditKind::Refusal => (
            SeverityNumber::Info2,
            format!(
                "{} answered {} to {} ({})",
                text("by"),
                text("answer"),
                text("tool"),
                text("policy")
            ),
        ),
        kind => (SeverityNumber::Info, format!("{} {}", kind.name(), body)),
    };
    let mut attributes = vec![
        string("toolgate.audit.kind", link.kind.name()),
        int("toolgate.audit.seq", link.seq),
        string("toolgate.audit.hash", hash),
        string("toolgate.audit.prev", &link.prev),
    ];
    for key in ["tool", "session_id", "user_id", "call_id", "by", "channel"] {
        if !text(key).is_empty() {
            attributes.push(string(&format!("toolgate.{key}"), text(key)));
        }
    }
    let decision = link.kind == AuditKind::Decision;
    LogRecord {
        time_unix_nano: link.at_ms.saturating_mul(1_000_000),
        observed_time_unix_nano: toolgate_engine::now_ms().saturating_mul(1_000_000),
        severity_number: severity as i32,
        severity_text: severity.as_str_name().into(),
        body: Some(AnyValue {
            value: Some(Any::StringValue(summary)),
        }),
        attributes,
        event_name: format!("toolgate.audit.{}", link.kind.name()),
        trace_id: if decision {
            ids.trace.clone()
        } else {
            Vec::new()
        },
        span_id: if decision {
            ids.span.clone()
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Any::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

fn int(key: &str, value: u64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Any::IntValue(value.min(i64::MAX as u64) as i64)),
        }),
        ..Default::default()
    }
}
