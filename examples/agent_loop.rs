//! A small agent loop embedding toolgate: build a host from a config, ask it
//! before every tool call, report outcomes, and resolve a pause from the
//! channel the call came from.
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
use toolgate_engine::{Config, Outcome, ToolRequest, Toolgate, Verdict};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("toolgate-agent-loop-{}", std::process::id()));
    let host = Arc::new(Toolgate::open(
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

        let mut decision = decide(&host, &request).await?;
        if decision.verdict == Verdict::Pause {
            let pause = decision.pause.clone().expect("a pause carries its gate");
            println!(
                "{tool}: paused — asking the person on {}: {}",
                pause.channel,
                decision.reason.as_deref().unwrap_or("")
            );
            // The person approves from the channel the call came from.
            let key = GateKey {
                user_id: pause.user_id,
                thread_id: pause.thread_id,
            };
            let host_for_resolve = Arc::clone(&host);
            tokio::task::spawn_blocking(move || {
                host_for_resolve.resolve_gate(
                    &key,
                    &pause.request_id,
                    "slack",
                    GateResolution::Approve { always: false },
                )
            })
            .await??;
            decision = decide(&host, &request).await?;
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
                let host = Arc::clone(&host);
                tokio::task::spawn_blocking(move || {
                    host.observe(&request, Outcome::Succeeded, "ok")
                })
                .await?;
            }
            Verdict::Deny => println!("{tool}: denied — {}", decision.reason.unwrap_or_default()),
            Verdict::Pause => println!("{tool}: still paused"),
        }
    }
    drop(host);
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// toolgate is blocking (wasmtime, redb): keep it off the async workers.
async fn decide(
    host: &Arc<Toolgate>,
    request: &ToolRequest,
) -> anyhow::Result<toolgate_engine::Decision> {
    let (host, request) = (Arc::clone(host), request.clone());
    Ok(tokio::task::spawn_blocking(move || host.evaluate(&request)).await??)
}
