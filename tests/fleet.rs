//! A fleet: several toolgate hosts, each with its own engine, plugin
//! instances and connections, sharing one PostgreSQL database. What makes
//! the policies work — probe budgets, leases and their use counters, pending
//! gates and resolutions, turns, cross-session history — holds across them.
//!
//! Every test starts its own throwaway cluster (see `common::pg_cluster`)
//! and is skipped, saying so, on a machine without PostgreSQL binaries.

mod common;

use std::sync::{Arc, Barrier};

use common::model_server::{ModelServer, Reply};
use common::pg_cluster::Cluster;
use common::{call, config, guest};
use serde_json::json;
use toolgate::gates::{GateKey, GateResolution};
use toolgate::request::Mode;
use toolgate::{ToolRequest, Toolgate, Verdict};

/// `n` hosts from one config body, all on the database at `url`.
fn hosts(url: &str, body: &str, n: usize) -> Vec<Arc<Toolgate>> {
    (0..n)
        .map(|_| {
            let (config, _dir) = config(body);
            Arc::new(Toolgate::open(config, Some(url.into())).expect("host starts"))
        })
        .collect()
}

#[test]
fn a_probe_budget_is_never_exceeded_across_hosts() {
    let Some(cluster) = Cluster::start("a_probe_budget_is_never_exceeded_across_hosts") else {
        return;
    };
    let model = ModelServer::start(Reply::Content(r#"{"verdict": "allow"}"#.into()));
    let body = format!(
        "[probe]\nendpoint = {:?}\n[plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n[plugins.shadow-sentinel.config]\nmax_probes_per_turn = 3\n",
        model.url
    );
    let fleet = hosts(&cluster.database(), &body, 3);
    // 8 clients spread over 3 hosts, 1 000 shell calls of one session's turn.
    let barrier = Arc::new(Barrier::new(8));
    let clients: Vec<_> = (0..8)
        .map(|client| {
            let (host, barrier) = (fleet[client % 3].clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for n in 0..125 {
                    let mut request = call("Bash", json!({"command": format!("ls {client}-{n}")}));
                    request.session_id = "shared-session".into();
                    request.turn = 1;
                    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(
        model.requests().len(),
        3,
        "exactly the turn's budget of probes, whichever host decided"
    );
}

#[test]
fn a_gate_paused_on_one_host_is_resolved_on_another_and_resumes_on_a_third_once() {
    let Some(cluster) = Cluster::start("a_gate_paused_on_one_host_is_resolved_on_another") else {
        return;
    };
    let body = format!(
        "[plugins.approver]\npath = {:?}\npriority = 1\n[plugins.approver.config]\nverdict = \"pause\"\nreason = \"Deploy?\"\n",
        guest("scripted-policy").display().to_string()
    );
    let fleet = hosts(&cluster.database(), &body, 3);
    let (a, b, c) = (&fleet[0], &fleet[1], &fleet[2]);
    let deploy = call("deploy", json!({"env": "prod"}));

    let paused = a.evaluate(&deploy).unwrap();
    assert_eq!(paused.verdict, Verdict::Pause);
    let pause = paused.pause.unwrap();
    let key = GateKey {
        user_id: pause.user_id.clone(),
        thread_id: pause.thread_id.clone(),
    };
    assert_eq!(c.gates(None).unwrap().len(), 1, "every host sees the gate");
    let approve = GateResolution::Approve { always: false };
    b.resolve_gate(&key, &pause.request_id, "cli", approve.clone())
        .unwrap();
    assert!(
        a.resolve_gate(&key, &pause.request_id, "cli", approve)
            .is_err(),
        "taken once, whichever host is asked"
    );

    assert_eq!(c.evaluate(&deploy).unwrap().verdict, Verdict::Allow);
    assert_eq!(
        a.evaluate(&deploy).unwrap().verdict,
        Verdict::Pause,
        "the approval was used by the resumed call, once"
    );
}

#[test]
fn a_lease_granted_on_one_host_is_used_up_on_another() {
    let Some(cluster) = Cluster::start("a_lease_granted_on_one_host_is_used_up_on_another") else {
        return;
    };
    let body = "[plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n\
                [plugins.lease-gate.config]\nauto_plan = false\n\
                [plugins.lease-gate.config.actions.echo]\neffects = [\"read-local\"]\n";
    let fleet = hosts(&cluster.database(), body, 3);
    let echo = || {
        let mut request: ToolRequest = call("echo", json!({}));
        request.thread_id = Some("t1".into());
        request.mode = Mode::Autonomous;
        request
    };
    assert_eq!(fleet[1].evaluate(&echo()).unwrap().verdict, Verdict::Deny);
    fleet[0]
        .command(
            "lease-gate",
            "lease-grant",
            &json!({"thread": "t1", "actions": ["echo"], "max_uses": 2}).to_string(),
        )
        .unwrap();
    assert_eq!(fleet[1].evaluate(&echo()).unwrap().verdict, Verdict::Allow);
    assert_eq!(fleet[2].evaluate(&echo()).unwrap().verdict, Verdict::Allow);
    let spent = fleet[0].evaluate(&echo()).unwrap();
    assert_eq!(
        spent.verdict,
        Verdict::Deny,
        "two uses in all, over three hosts"
    );
    assert!(spent.reason.unwrap().contains("used up"));
}

#[test]
fn turns_and_counters_are_shared_and_quotas_hold_per_policy_across_hosts() {
    let Some(cluster) = Cluster::start("turns_and_counters_are_shared") else {
        return;
    };
    let url = cluster.database();
    let stores: Vec<_> = (0..3).map(|_| Arc::new(cluster.store_at(&url))).collect();
    assert_eq!(stores[0].next_turn("s").unwrap(), 1);
    assert_eq!(stores[1].next_turn("s").unwrap(), 2);
    assert_eq!(stores[2].turn("s").unwrap(), 2);

    // Three hosts race to fill one policy's 1 000-byte namespace with
    // 100-byte entries: never more than the quota, whoever wins.
    let barrier = Arc::new(Barrier::new(3));
    let writers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(host, store)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (0..10)
                    .filter(|n| {
                        store
                            .state_put("p", &format!("{host}-{n}"), Some(&[0; 97]), 1000)
                            .is_ok()
                    })
                    .count()
            })
        })
        .collect();
    let written: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(written, 10, "exactly as many as fit");
    assert_eq!(stores[0].state_usage("p").unwrap(), 1000);
}

#[test]
fn credentials_stay_out_of_messages_and_a_newer_schema_is_refused() {
    let Some(cluster) = Cluster::start("credentials_stay_out_of_messages") else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let with_password = "postgres://someone:hunter2-secret@%2Fnonexistent%2Fsocket/db";
    let err = toolgate::store::Store::connect(with_password, local.path())
        .unwrap_err()
        .to_string();
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("postgres://someone@"), "{err}");

    let url = cluster.database();
    drop(cluster.store_at(&url)); // creates the schema
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("UPDATE toolgate_schema SET version = 99")
        .unwrap();
    let err = toolgate::store::Store::connect(&url, local.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("newer than this build"), "{err}");
}
