//! A small agent loop embedding toolgate: build a host from a config, ask it
//! before every tool call, report outcomes, and resolve a pause from the
//! channel the call came from — each through the engine's `Service`, which
//! answers only once what the answer depends on is durable, as the daemon
//! does.
//!
//!     cargo run --example agent_loop
//!
//! The "agent" here is a fixed script of tool calls and the "tools" only
//! print; everything toolgate does is real (bundled policies, a redb store in
//! a temporary directory).

use std::sync::Arc;

use serde_json::json;
use toolgate_engine::gates::GateResolution;
use toolgate_engine::request::Mode;
use toolgate_engine::service::{DaemonRequest, Service};
use toolgate_engine::{Config, Decision, Outcome, ToolRequest, Toolgate, Verdict};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("toolgate-agent-loop-{}", std::process::id()));
    let host = Toolgate::open(
        Config::bundled_default()?,
        Some(dir.join("agent.redb").into()),
    )?;
    let service = Arc::new(Service::new(Arc::new(host)));

    let script = [
        ("Read", json!({"file_path": "src/main.rs"})),
        (
            "Edit",
            json!({"file_path": "src/main.rs", "old_string": "a", "new_string": "b"}),
        ),
        ("Bash", json!({"command": "cargo test"})),
    ];
    for (turn, (tool, arguments)) in script.into_iter().enumerate() {
        let mut request = ToolRequest::new(tool, arguments);
        request.session_id = "demo".into();
        request.channel = "slack".into();
        request.turn = turn as u64;
        request.mode = Mode::Interactive;

        let evaluate = || DaemonRequest::Evaluate {
            request: request.clone(),
        };
        let mut decision: Decision = serde_json::from_value(ask(&service, evaluate()).await?)?;
        if decision.verdict == Verdict::Pause {
            let pause = decision.pause.clone().expect("a pause carries its gate");
            println!(
                "{tool}: paused — asking the person on {}: {}",
                pause.channel,
                decision.reason.as_deref().unwrap_or("")
            );
            // The person approves from the channel the call came from.
            let approve = DaemonRequest::Resolve {
                user: pause.user_id,
                thread: pause.thread_id,
                request_id: pause.request_id,
                channel: "slack".into(),
                resolution: GateResolution::Approve { always: false },
                token: None,
            };
            ask(&service, approve).await?;
            decision = serde_json::from_value(ask(&service, evaluate()).await?)?;
        }
        for note in &decision.notes {
            println!("{tool}: note from {}: {}", note.policy, note.text);
        }
        match decision.verdict {
            Verdict::Allow => {
                println!(
                    "{tool}: allowed (risk {:?}) — running it",
                    decision.risk.category
                );
                let observe = DaemonRequest::Observe {
                    request,
                    outcome: Outcome::Succeeded,
                    summary: "ok".into(),
                };
                ask(&service, observe).await?;
            }
            Verdict::Deny => println!("{tool}: denied — {}", decision.reason.unwrap_or_default()),
            Verdict::Pause => println!("{tool}: still paused"),
        }
    }
    drop(service);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// toolgate is blocking (wasmtime, redb): keep it off the async workers.
async fn ask(service: &Arc<Service>, request: DaemonRequest) -> anyhow::Result<serde_json::Value> {
    let service = Arc::clone(service);
    Ok(tokio::task::spawn_blocking(move || service.handle(request)).await??)
}
