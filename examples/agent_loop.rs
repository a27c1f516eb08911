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
use toolgate_engine::gates::{GateKey, GateResolution};
use toolgate_engine::request::Mode;
use toolgate_engine::{Config, Outcome, Service, ToolRequest, Verdict};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("toolgate-agent-loop-{}", std::process::id()));
    let service = Arc::new(Service::open(
        Config::bundled_default()?,
        Some(dir.join("agent.redb").into()),
    )?);

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
        let request = Arc::new(request);

        let evaluate = |s: &Service, r: &ToolRequest| s.evaluate(r);
        let mut decision = blocking(&service, &request, evaluate).await?;
        if decision.verdict == Verdict::Pause {
            let pause = decision.pause.clone().expect("a pause carries its gate");
            println!(
                "{tool}: paused — asking the person on {}: {}",
                pause.channel,
                decision.reason.as_deref().unwrap_or("")
            );
            // The person approves from the channel the call came from.
            blocking(&service, &request, move |s, _| {
                let key = GateKey {
                    user_id: pause.user_id.clone(),
                    thread_id: pause.thread_id.clone(),
                };
                let approve = GateResolution::Approve { always: false };
                s.resolve_gate(&key, &pause.request_id, "slack", approve)
            })
            .await?;
            decision = blocking(&service, &request, evaluate).await?;
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
                blocking(&service, &request, |s, r| {
                    s.observe(r, Outcome::Succeeded, "ok")
                })
                .await?;
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
async fn blocking<T: Send + 'static>(
    service: &Arc<Service>,
    request: &Arc<ToolRequest>,
    ask: impl FnOnce(&Service, &ToolRequest) -> toolgate_engine::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (service, request) = (Arc::clone(service), Arc::clone(request));
    Ok(tokio::task::spawn_blocking(move || ask(&service, &request)).await??)
}
