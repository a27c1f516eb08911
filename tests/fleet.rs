//! A fleet: several toolgate hosts, each with its own engine, plugin
//! instances and connections, sharing one PostgreSQL database. What makes
//! the policies work — probe budgets, leases and their use counters, pending
//! gates and resolutions, turns, cross-session history — holds across them.
//!
//! Every test starts its own throwaway cluster (see `common::pg_cluster`)
//! and fails, naming the install command, on a machine without PostgreSQL
//! binaries (see `common::missing` for skipping on purpose).

use crate::common;

use std::sync::{Arc, Barrier};

use common::model_server::{ModelServer, Reply};
use common::pg_cluster::{Cluster, STORE_DEADLINE};
use common::{call, config, guest};
use serde_json::json;
use toolgate::gates::{GateKey, GateResolution};
use toolgate::request::Mode;
use toolgate::{Service, ToolRequest, Verdict};

/// `n` hosts from one config body, all on the database at `url`.
fn hosts(url: &str, body: &str, n: usize) -> Vec<Arc<Service>> {
    (0..n)
        .map(|_| {
            let (config, _dir) = config(body);
            Arc::new(Service::open(config, Some(url.into())).expect("host starts"))
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
    assert_eq!(stores[0].turns().next_turn("s").unwrap(), 1);
    assert_eq!(stores[1].turns().next_turn("s").unwrap(), 2);
    assert_eq!(stores[2].turns().turn("s").unwrap(), 2);

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
                            .state()
                            .state_put("p", &format!("{host}-{n}"), Some(&[0; 97]), 1000)
                            .is_ok()
                    })
                    .count()
            })
        })
        .collect();
    let written: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(written, 10, "exactly as many as fit");
    assert_eq!(stores[0].state().state_usage("p").unwrap(), 1000);
}

/// A database that stalls (every PostgreSQL process stopped) fails each
/// decision that waits on it closed within `store_wait_ms`, with a reason
/// naming PostgreSQL, and the host recovers by itself once it answers
/// again. Before, the decision hung for as long as the stall lasted.
#[test]
fn a_stalled_database_fails_decisions_closed_and_the_host_recovers() {
    let Some(cluster) =
        Cluster::start("a_stalled_database_fails_decisions_closed_and_the_host_recovers")
    else {
        return;
    };
    let body = "store_wait_ms = 1500\n\
                [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n\
                [plugins.lease-gate.config]\nauto_plan = false\n\
                [plugins.lease-gate.config.actions.echo]\neffects = [\"read-local\"]\n";
    let host = hosts(&cluster.database(), body, 1).remove(0);
    let echo = || {
        let mut request: ToolRequest = call("echo", json!({}));
        request.thread_id = Some("t1".into());
        request.mode = Mode::Autonomous;
        request
    };
    let grant = json!({"thread": "t1", "actions": ["echo"], "max_uses": 10}).to_string();
    host.command("lease-gate", "lease-grant", &grant).unwrap();
    assert_eq!(host.evaluate(&echo()).unwrap().verdict, Verdict::Allow);

    let stalled = cluster.stall();
    let (answered, answer) = std::sync::mpsc::channel();
    let asking = Arc::clone(&host);
    std::thread::spawn(move || {
        let _ = answered.send(asking.evaluate(&echo()));
    });
    // A bound far past the deadline: the stall itself never ends on its own.
    let answer = answer
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a stalled database hung the decision");
    let why = match answer {
        Ok(decision) => {
            assert_ne!(decision.verdict, Verdict::Allow, "{decision:?}");
            decision.reason.unwrap_or_default()
        }
        Err(err) => err.to_string(),
    };
    assert!(why.contains("PostgreSQL did not answer"), "{why}");
    drop(stalled);

    let again = host.evaluate(&echo()).unwrap();
    assert_eq!(again.verdict, Verdict::Allow, "recovered: {again:?}");
}

#[test]
fn credentials_stay_out_of_messages_and_a_newer_schema_is_refused() {
    let Some(cluster) = Cluster::start("credentials_stay_out_of_messages") else {
        return;
    };
    let local = tempfile::tempdir().unwrap();
    let with_password = "postgres://someone:hunter2-secret@%2Fnonexistent%2Fsocket/db";
    let err =
        toolgate::store::Store::connect(with_password, local.path(), STORE_DEADLINE).unwrap_err();
    // What is shown here, and what the daemon sends (with the causes).
    for err in [err.to_string(), err.report()] {
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("postgres://someone@"), "{err}");
    }

    let url = cluster.database();
    drop(cluster.store_at(&url)); // creates the schema
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("UPDATE toolgate_schema SET version = 99")
        .unwrap();
    let err = toolgate::store::Store::connect(&url, local.path(), STORE_DEADLINE)
        .unwrap_err()
        .to_string();
    assert!(err.contains("newer than this build"), "{err}");
}

/// A host keeps the statements it prepared (one round trip a query, not
/// two); when another host's migration changes the schema under one, a
/// query outside a transaction prepares it again and runs, rather than
/// failing (from then on, or once per pooled connection).
#[test]
fn a_kept_statement_is_prepared_again_when_the_schema_changes_under_it() {
    let Some(cluster) = Cluster::start("a_kept_statement_is_prepared_again") else {
        return;
    };
    let url = cluster.database();
    let store = cluster.store_at(&url);
    store
        .state()
        .state_put("p", "k", Some(b"v"), u64::MAX)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(store.state().state_keys("p", "", 10).unwrap(), ["k"]);
    }
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute("ALTER TABLE state ALTER COLUMN key TYPE varchar COLLATE \"C\"")
        .unwrap();
    // The kept statement's result type changed under it.
    for _ in 0..3 {
        assert_eq!(store.state().state_keys("p", "", 10).unwrap(), ["k"]);
    }
}

/// Every record of a store, in export order.
fn records(store: &toolgate::store::Store) -> Vec<toolgate::store::Record> {
    let mut all = Vec::new();
    store
        .transfer()
        .export(&mut |record| {
            all.push(record);
            Ok(())
        })
        .unwrap();
    all
}

#[test]
fn store_copy_moves_everything_from_redb_to_postgres_and_back() {
    let Some(cluster) = Cluster::start("store_copy_moves_everything") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original.redb");
    {
        // A store with a bit of everything, written by a real host.
        let body = format!(
            "{}[plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n",
            common::scripted("approver", 1, "verdict = \"pause\"\nreason = \"Deploy?\"")
        );
        let (config, _config_dir) = config(&body);
        let host = Service::open(config, Some(original.clone().into())).unwrap();
        let mut deploy = call("deploy", json!({}));
        deploy.call_id = Some("toolu_1".into());
        let paused = host.evaluate(&deploy).unwrap();
        common::approve(&host, &paused);
        host.observe(&deploy, toolgate::Outcome::Succeeded, "deployed")
            .unwrap();
        host.command("approver", "decided", "{}").unwrap();
        host.next_turn("s").unwrap();
        host.agent_terminals()
            .record_agent_terminals(&["sid:42".into()])
            .unwrap();
        host.evaluate(&call("other", json!({}))).unwrap();
        host.persist();
    }
    let before = records(&toolgate::store::Store::open(&original).unwrap());
    for kind in [
        "State",
        "Event",
        "Gate",
        "Resolutions",
        "Decision",
        "Turn",
        "AgentTerminal",
    ] {
        assert!(
            before.iter().any(|r| format!("{r:?}").starts_with(kind)),
            "the sample has a {kind} record: {before:?}"
        );
    }

    let url = cluster.database();
    let back = dir.path().join("back.redb");
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["store", "copy", "--from"])
            .arg(from)
            .arg("--to")
            .arg(to)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let report = copy(&original, std::path::Path::new(&url));
    assert!(
        report.contains("pending gates") || report.contains("events"),
        "{report}"
    );
    copy(std::path::Path::new(&url), &back);
    assert_eq!(
        records(&toolgate::store::Store::open(&back).unwrap()),
        before,
        "redb → PostgreSQL → redb gives back every record"
    );

    // A destination that already holds something is refused.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["store", "copy", "--from"])
        .arg(&original)
        .arg("--to")
        .arg(&url)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn three_serve_processes_share_the_budget_and_survive_losing_one() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use toolgate::daemon::{Client, DaemonRequest};

    let Some(cluster) = Cluster::start("three_serve_processes_share_the_budget") else {
        return;
    };
    let model = ModelServer::start(Reply::Content(r#"{"verdict": "allow"}"#.into()));
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_file,
        common::config_text(&format!(
            "[probe]\nendpoint = {:?}\n[plugins.shadow-sentinel]\npath = \"bundled:shadow-sentinel\"\npriority = 10\n[plugins.shadow-sentinel.config]\nmax_probes_per_turn = 3\n",
            model.url
        )),
    )
    .unwrap();
    let url = cluster.database();
    let sockets: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("host{i}.sock")))
        .collect();
    let mut servers: Vec<Option<common::hooks::KillOnDrop>> = sockets
        .iter()
        .map(|socket| {
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .arg("--config")
                .arg(&config_file)
                .args(["--store", &url, "serve", "--socket"])
                .arg(socket)
                .env("XDG_STATE_HOME", dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            Some(common::hooks::KillOnDrop(child))
        })
        .collect();
    for socket in &sockets {
        common::eventually("a host to answer", || Client::new(socket).is_up());
    }

    // 8 clients spread over the hosts; when half the decisions are in, one
    // host is killed outright, and its clients move to the next host.
    let decided = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..8)
        .map(|client| {
            let (sockets, decided) = (sockets.clone(), decided.clone());
            std::thread::spawn(move || {
                let mut host = client % 3;
                for n in 0..125 {
                    let mut request = call("Bash", json!({"command": format!("ls {client}-{n}")}));
                    request.session_id = "shared-session".into();
                    request.turn = 1;
                    let ask = DaemonRequest::Evaluate { request };
                    let answer = loop {
                        match Client::new(&sockets[host]).call(&ask) {
                            Ok(answer) => break answer,
                            Err(_) => host = (host + 1) % 3,
                        }
                    };
                    assert_eq!(answer["verdict"], "allow", "{answer}");
                    decided.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    common::eventually("half the decisions", || {
        decided.load(Ordering::SeqCst) >= 500
    });
    drop(servers[2].take()); // SIGKILL, mid-load
    for client in clients {
        client.join().unwrap();
    }
    assert_eq!(
        decided.load(Ordering::SeqCst),
        1000,
        "every call was decided"
    );
    assert_eq!(
        model.requests().len(),
        3,
        "the turn's budget held across the hosts, the killed one included"
    );
    // The survivors keep serving.
    for socket in &sockets[..2] {
        assert!(Client::new(socket).is_up());
    }
}

#[test]
fn a_reload_on_one_host_reaches_every_host_of_the_fleet() {
    let Some(cluster) = Cluster::start("a_reload_on_one_host_reaches_every_host") else {
        return;
    };
    // One plugin file and one config, as a fleet deploys them to every host.
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("flip.wasm");
    std::fs::copy(guest("flip-allow-policy"), &plugin).unwrap();
    let config_file = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_file,
        common::config_text("[plugins.flip]\npath = \"flip.wasm\"\npriority = 1\n"),
    )
    .unwrap();
    let url = cluster.database();
    let fleet: Vec<_> = (0..3)
        .map(|_| {
            let config = toolgate::Config::load(&config_file).unwrap();
            Service::open(config, Some(url.clone().into())).unwrap()
        })
        .collect();
    let verdict = |host: &Service| host.evaluate(&call("Bash", json!({}))).unwrap().verdict;
    assert!(fleet.iter().all(|h| verdict(h) == Verdict::Allow));

    // The operator swaps the plugin and reloads one host.
    let swapped = dir.path().join("flip.wasm.new");
    std::fs::copy(guest("flip-deny-policy"), &swapped).unwrap();
    std::fs::rename(&swapped, &plugin).unwrap();
    fleet[0].reload().unwrap();
    assert_eq!(verdict(&fleet[0]), Verdict::Deny);
    for (n, host) in fleet.iter().enumerate().skip(1) {
        common::eventually(&format!("host {n} to follow the reload"), || {
            verdict(host) == Verdict::Deny
        });
    }
}

#[test]
fn sslmode_require_connects_over_verified_tls_only() {
    let Some(cluster) = Cluster::start_tls("sslmode_require_connects_over_verified_tls_only")
    else {
        return;
    };
    let (port, ca) = cluster.tls.clone().unwrap();
    let database = cluster.database();
    let name = database.rsplit('/').next().unwrap();
    let url = format!("postgres://toolgate@localhost:{port}/{name}?sslmode=require");
    let stats = |root: Option<&std::path::Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        command
            .args(["--store", &url, "store", "stats", "--json"])
            .env("XDG_STATE_HOME", cluster.socket_dir())
            .env("XDG_RUNTIME_DIR", cluster.socket_dir())
            .env_remove("PGSSLROOTCERT");
        if let Some(root) = root {
            command.env("PGSSLROOTCERT", root);
        }
        command.output().unwrap()
    };
    // The database's CA is not a web PKI root: refused, saying why.
    let refused = stats(None);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.to_lowercase().contains("certificate"), "{why}");

    // Trusting its CA: connected, and over TLS.
    let ok = stats(Some(&ca));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert!(report["tables"]["state"].is_object(), "{report}");
    let mut admin = postgres::Client::connect(&database, postgres::NoTls).unwrap();
    let schema_made = admin
        .query_one("SELECT count(*) FROM toolgate_schema", &[])
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(schema_made, 1, "the TLS connection created the schema");
}

/// `n` `toolgate serve` processes on the database at `url`, each on its own
/// socket in `dir`, none watching files (reloads come from SIGHUP or the
/// fleet).
fn serve_hosts(
    n: usize,
    config_file: &std::path::Path,
    url: &str,
    dir: &std::path::Path,
) -> (Vec<common::hooks::KillOnDrop>, Vec<std::path::PathBuf>) {
    let sockets: Vec<_> = (0..n).map(|i| dir.join(format!("host{i}.sock"))).collect();
    let servers = sockets
        .iter()
        .map(|socket| {
            let child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
                .arg("--config")
                .arg(config_file)
                .args(["--store", url, "serve", "--watch-ms", "0", "--socket"])
                .arg(socket)
                .env("XDG_STATE_HOME", dir)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            common::hooks::KillOnDrop(child)
        })
        .collect();
    for socket in &sockets {
        common::eventually("a host to answer", || {
            toolgate::daemon::Client::new(socket).is_up()
        });
    }
    (servers, sockets)
}

#[test]
fn serve_processes_share_gates_leases_and_reloads() {
    use sha2::Digest as _;
    use toolgate::daemon::{Client, DaemonRequest};

    let Some(cluster) = Cluster::start("serve_processes_share_gates_leases_and_reloads") else {
        return;
    };
    const TOKEN: &str = "web-adapter-token";
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("flip.wasm");
    std::fs::copy(guest("flip-allow-policy"), &plugin).unwrap();
    let config_file = dir.path().join("toolgate.toml");
    std::fs::write(
        &config_file,
        common::config_text(&format!(
            "[approvals.tokens]\nweb = \"{}\"\n\
             [plugins.flip]\npath = \"flip.wasm\"\npriority = 1\n\
             [plugins.lease-gate]\npath = \"bundled:lease-gate\"\npriority = 20\n\
             [plugins.lease-gate.config]\nauto_plan = false\n\
             [plugins.lease-gate.config.actions.echo]\neffects = [\"read-local\"]\n\
             [plugins.lease-gate.config.actions.deploy]\neffects = [\"write-external\"]\napproval = \"always\"\n",
            hex::encode(sha2::Sha256::digest(TOKEN))
        )),
    )
    .unwrap();
    let url = cluster.database();
    let (servers, sockets) = serve_hosts(3, &config_file, &url, dir.path());
    let host = |n: usize| Client::new(&sockets[n]);
    let on_t1 = |tool: &str| {
        let mut request: ToolRequest = call(tool, json!({}));
        request.thread_id = Some("t1".into());
        request.channel = "web".into();
        request.mode = Mode::Interactive;
        request
    };
    let decide = |n: usize, request: &ToolRequest| {
        host(n)
            .call(&DaemonRequest::Evaluate {
                request: request.clone(),
            })
            .unwrap()
    };

    // An operator's embedding of toolgate on the same database grants the
    // leases (admin commands over a daemon's socket need a person at a
    // terminal, which a test is not).
    let config = toolgate::Config::load(&config_file).unwrap();
    let operator = Service::open(config, Some(url.clone().into())).unwrap();
    for grant in [
        json!({"thread": "t1", "actions": ["echo"], "max_uses": 2}),
        json!({"thread": "t1", "actions": ["deploy"]}),
    ] {
        operator
            .command("lease-gate", "lease-grant", &grant.to_string())
            .unwrap();
    }

    // A lease granted elsewhere is used up over hosts B, C and A.
    assert_eq!(decide(1, &on_t1("echo"))["verdict"], "allow");
    assert_eq!(decide(2, &on_t1("echo"))["verdict"], "allow");
    let spent = decide(0, &on_t1("echo"));
    assert_eq!(spent["verdict"], "deny", "{spent}");

    // A gate paused on A is resolved through B; the call resumes on C, once.
    let paused = decide(0, &on_t1("deploy"));
    assert_eq!(paused["verdict"], "pause", "{paused}");
    let resolve = |n: usize| {
        host(n).call(&DaemonRequest::Resolve {
            user: paused["pause"]["user_id"].as_str().unwrap().into(),
            thread: "t1".into(),
            request_id: paused["pause"]["request_id"].as_str().unwrap().into(),
            channel: "web".into(),
            token: Some(TOKEN.into()),
            resolution: GateResolution::Approve { always: false },
        })
    };
    resolve(1).unwrap();
    assert!(resolve(2).is_err(), "taken once, whichever host is asked");
    assert_eq!(decide(2, &on_t1("deploy"))["verdict"], "allow");
    assert_eq!(decide(0, &on_t1("deploy"))["verdict"], "pause");

    // The operator swaps a plugin and signals one host; all three follow.
    let swapped = dir.path().join("flip.wasm.new");
    std::fs::copy(guest("flip-deny-policy"), &swapped).unwrap();
    std::fs::rename(&swapped, &plugin).unwrap();
    let a = servers[0].0.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-HUP", &a])
            .status()
            .unwrap()
            .success()
    );
    for n in 0..3 {
        common::eventually(&format!("host {n} to serve the new plugin"), || {
            let decision = decide(n, &on_t1("echo"));
            decision["decided_by"] == "flip"
        });
    }
}
