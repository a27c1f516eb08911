//! Pending gates: the seed's lifecycle and attack cases against every store
//! backend (a real redb file, and a real PostgreSQL where its binaries are),
//! plus pause → resolve → resume through the pipeline.

use crate::common;

use std::sync::{Arc, Barrier};

use common::{approve, call, host, scripted};
use serde_json::json;
use toolgate::Verdict;
use toolgate::gates::{GateError, GateKey, GateResolution, PauseKind, PendingGate, new_request_id};
use toolgate::store::{Store, TakeGateError};

const TRUSTED: &[&str] = &["web", "gateway"];
/// The store's table of pending gates, as redb names it: (user, thread,
/// request id) → gate.
const PENDING_GATES: redb::TableDefinition<(&str, &str, &str), &[u8]> =
    redb::TableDefinition::new("pending_gates");
const MINUTE_MS: u64 = 60_000;

fn trusted() -> Vec<String> {
    TRUSTED.iter().map(|s| s.to_string()).collect()
}

fn sample_gate(user: &str, thread: &str, channel: &str) -> PendingGate {
    let now = toolgate::now_ms();
    PendingGate {
        request_id: new_request_id(),
        policy: "lease-gate".into(),
        user_id: user.into(),
        thread_id: thread.into(),
        session_id: "s1".into(),
        source_channel: channel.into(),
        tool: "http".into(),
        call_id: "call_1".into(),
        arguments: json!({"url": "https://example.com"}).to_string(),
        fingerprint: "fp-http-example".into(),
        pause: PauseKind::Approval {
            description: "Tool 'http' requires approval".into(),
            allow_always: true,
        },
        risk: None,
        transcript_path: None,
        created_at_ms: now,
        expires_at_ms: now + 30 * MINUTE_MS,
        policy_sha256: String::new(),
        rewritten_sha256: None,
        project: None,
        always_digest: None,
    }
}

fn take(
    store: &Store,
    gate: &PendingGate,
    request_id: &str,
    channel: &str,
) -> Result<PendingGate, GateError> {
    store
        .gates()
        .take_gate(
            &gate.key(),
            request_id,
            channel,
            &trusted(),
            toolgate::now_ms(),
        )
        .map_err(refusal)
}

/// The contract's refusal; a store failure fails the test, naming it.
fn refusal(err: TakeGateError) -> GateError {
    match err {
        TakeGateError::Refused(refusal) => refusal,
        TakeGateError::Storage(err) => panic!("the store failed: {}", err.report()),
    }
}

#[test]
fn full_lifecycle_insert_peek_take_gone() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("full_lifecycle_insert_peek_take_gone")
    {
        eprintln!("backend: {backend}");
        let gate = sample_gate("user1", "t1", "telegram");
        store.gates().insert_gate(&gate).unwrap();
        let seen = store
            .gates()
            .thread_gates(&gate.key(), toolgate::now_ms())
            .unwrap();
        assert_eq!(seen[0].tool, "http");
        let taken = take(&store, &gate, &gate.request_id, "telegram").unwrap();
        assert_eq!(taken.tool, "http");
        assert!(
            store
                .gates()
                .thread_gates(&gate.key(), toolgate::now_ms())
                .unwrap()
                .is_empty()
        );
    }
}

/// A thread holds a pending gate per distinct call: each pause a model was
/// told of (three calls in one response, or one after the other) can be
/// resolved by its own id, the same call paused again keeps its id, and
/// past the cap the oldest ends.
#[test]
fn every_call_paused_in_a_thread_keeps_its_own_gate() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("every_call_paused_in_a_thread_keeps_its_own_gate")
    {
        eprintln!("backend: {backend}");
        let now = toolgate::now_ms();
        let call = |n: usize| {
            let mut gate = sample_gate("user1", "t1", "claude-code");
            gate.fingerprint = format!("fp-{n}");
            gate.call_id = format!("call_{n}");
            gate.created_at_ms = now + n as u64;
            gate
        };
        let raised: Vec<PendingGate> = (0..3)
            .map(|n| store.gates().raise_gate(&call(n), now).unwrap())
            .collect();
        let again = store.gates().raise_gate(&call(1), now).unwrap();
        assert_eq!(
            again.request_id, raised[1].request_id,
            "the same call keeps its id"
        );
        let key = raised[0].key();
        assert_eq!(store.gates().thread_gates(&key, now).unwrap().len(), 3);
        for gate in [&raised[2], &raised[0], &raised[1]] {
            let taken = take(&store, gate, &gate.request_id, "claude-code").unwrap();
            assert_eq!(taken.call_id, gate.call_id);
        }
        assert!(store.gates().thread_gates(&key, now).unwrap().is_empty());
        // An agent pausing call after call keeps the newest ones only.
        let max = toolgate::store::MAX_GATES_PER_THREAD;
        let flood: Vec<PendingGate> = (0..max + 2)
            .map(|n| store.gates().raise_gate(&call(100 + n), now).unwrap())
            .collect();
        let kept = store.gates().thread_gates(&key, now).unwrap();
        assert_eq!(kept.len(), max);
        assert!(!kept.iter().any(|g| g.request_id == flood[0].request_id));
        assert!(
            kept.iter()
                .any(|g| g.request_id == flood[max + 1].request_id)
        );
    }
}

/// A store written when a thread held one pause at most (its gates in the
/// table `gates`, by user and thread) opens with every gate still pending
/// and resolvable.
#[test]
fn gates_of_a_store_from_before_many_per_thread_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    let gates = [
        sample_gate("alice", "t1", "cli"),
        sample_gate("bob", "t2", "cli"),
    ];
    {
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let old = redb::TableDefinition::<(&str, &str), &[u8]>::new("gates");
            let mut table = txn.open_table(old).unwrap();
            for gate in &gates {
                let body = serde_json::to_vec(gate).unwrap();
                table
                    .insert(
                        (gate.user_id.as_str(), gate.thread_id.as_str()),
                        body.as_slice(),
                    )
                    .unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let listed = store.gates().list_gates(None, toolgate::now_ms()).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    for gate in &gates {
        assert!(take(&store, gate, &gate.request_id, "cli").is_ok());
    }
    drop(store);
    // The old table is gone, so nothing is moved twice.
    let db = redb::Database::open(&path).unwrap();
    let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
    let old = redb::TableDefinition::<(&str, &str), &[u8]>::new("gates");
    assert!(matches!(
        txn.open_table(old),
        Err(redb::TableError::TableDoesNotExist(_))
    ));
}

/// The same in PostgreSQL: a database at schema version 1 (one gate per
/// thread) migrates with its gates pending and resolvable.
#[test]
fn gates_of_a_postgres_store_from_before_many_per_thread_are_kept() {
    let Some(cluster) = common::pg_cluster::Cluster::start("gates_before_many") else {
        return;
    };
    let url = cluster.database();
    let gate = sample_gate("alice", "t1", "cli");
    cluster.store_at(&url).gates().insert_gate(&gate).unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "ALTER TABLE gates DROP CONSTRAINT gates_pkey; \
             ALTER TABLE gates DROP COLUMN request_id; \
             ALTER TABLE gates ADD PRIMARY KEY (user_id, thread_id); \
             DROP TABLE audit; DROP TABLE audit_heads; \
             UPDATE toolgate_schema SET version = 1;",
        )
        .unwrap();
    let store = cluster.store_at(&url);
    let version: i32 = admin
        .query_one("SELECT version FROM toolgate_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, 3, "migrated to this build's schema");
    assert_eq!(
        store
            .gates()
            .list_gates(None, toolgate::now_ms())
            .unwrap()
            .len(),
        1
    );
    assert!(take(&store, &gate, &gate.request_id, "cli").is_ok());
}

#[test]
fn another_channel_cannot_resolve_and_does_not_consume() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("another_channel_cannot_resolve_and_does_not_consume")
    {
        eprintln!("backend: {backend}");
        let gate = sample_gate("user1", "t1", "telegram");
        store.gates().insert_gate(&gate).unwrap();
        let err = take(&store, &gate, &gate.request_id, "slack").unwrap_err();
        assert!(matches!(err, GateError::ChannelMismatch { .. }), "{err:?}");
        assert!(
            !store
                .gates()
                .thread_gates(&gate.key(), toolgate::now_ms())
                .unwrap()
                .is_empty()
        );
        assert!(take(&store, &gate, &gate.request_id, "telegram").is_ok());
    }
}

#[test]
fn trusted_channels_resolve_any_channels_gate() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("trusted_channels_resolve_any_channels_gate")
    {
        eprintln!("backend: {backend}");
        for (i, channel) in TRUSTED.iter().enumerate() {
            let gate = sample_gate("user1", &format!("t{i}"), "signal");
            store.gates().insert_gate(&gate).unwrap();
            assert!(
                take(&store, &gate, &gate.request_id, channel).is_ok(),
                "trusted channel {channel} must resolve a gate from signal"
            );
        }
    }
}

#[test]
fn gates_are_scoped_to_user_and_thread() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("gates_are_scoped_to_user_and_thread")
    {
        eprintln!("backend: {backend}");
        let gate = sample_gate("user1", "thread-a", "web");
        store.gates().insert_gate(&gate).unwrap();
        let now = toolgate::now_ms();
        let other_thread = GateKey {
            user_id: "user1".into(),
            thread_id: "thread-b".into(),
        };
        let other_user = GateKey {
            user_id: "user2".into(),
            thread_id: "thread-a".into(),
        };
        assert!(
            store
                .gates()
                .thread_gates(&other_thread, now)
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .gates()
                .thread_gates(&other_user, now)
                .unwrap()
                .is_empty()
        );
        assert!(
            !store
                .gates()
                .thread_gates(&gate.key(), now)
                .unwrap()
                .is_empty()
        );
        let err = store
            .gates()
            .take_gate(&other_user, &gate.request_id, "web", &trusted(), now)
            .map_err(refusal)
            .unwrap_err();
        assert!(matches!(err, GateError::NotFound { .. }));
    }
}

#[test]
fn an_expired_gate_never_resolves_and_does_not_show() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("an_expired_gate_never_resolves_and_does_not_show")
    {
        eprintln!("backend: {backend}");
        let mut gate = sample_gate("user1", "t1", "web");
        gate.expires_at_ms = toolgate::now_ms() - 10_000;
        store.gates().insert_gate(&gate).unwrap();
        assert!(
            store
                .gates()
                .thread_gates(&gate.key(), toolgate::now_ms())
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .gates()
                .list_gates(None, toolgate::now_ms())
                .unwrap()
                .is_empty()
        );
        let err = take(&store, &gate, &gate.request_id, "web").unwrap_err();
        assert_eq!(err, GateError::Expired);
    }
}

#[test]
fn a_wrong_request_id_does_not_consume() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("a_wrong_request_id_does_not_consume")
    {
        eprintln!("backend: {backend}");
        let gate = sample_gate("user1", "t1", "web");
        store.gates().insert_gate(&gate).unwrap();
        let err = take(&store, &gate, &new_request_id(), "web").unwrap_err();
        assert!(matches!(err, GateError::NotFound { .. }), "{err:?}");
        assert!(take(&store, &gate, &gate.request_id, "web").is_ok());
    }
}

#[test]
fn concurrent_takes_exactly_one_wins() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("concurrent_takes_exactly_one_wins")
    {
        eprintln!("backend: {backend}");
        for round in 0..20 {
            let gate = sample_gate("user1", &format!("race-{round}"), "web");
            store.gates().insert_gate(&gate).unwrap();
            let barrier = Arc::new(Barrier::new(2));
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    let (store, barrier, gate) = (store.clone(), barrier.clone(), gate.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        take(&store, &gate, &gate.request_id, "web")
                    })
                })
                .collect();
            let results: Vec<_> = takers.into_iter().map(|t| t.join().unwrap()).collect();
            let wins = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(wins, 1, "round {round}: {results:?}");
            assert!(
                results
                    .iter()
                    .any(|r| matches!(r, Err(GateError::NotFound { .. })))
            );
        }
    }
}

#[test]
fn gates_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("restart.redb");
    let gate = sample_gate("user1", "t1", "telegram");
    {
        let store = Store::open(&path).unwrap();
        store.gates().insert_gate(&gate).unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store
            .gates()
            .list_gates(None, toolgate::now_ms())
            .unwrap()
            .len(),
        1
    );
    let taken = take(&store, &gate, &gate.request_id, "telegram").unwrap();
    assert_eq!(taken.tool, "http");
}

/// A pending gate whose record no longer parses is an error naming it,
/// not a gate that quietly leaves `gates list` (and that a re-asked call
/// would then overwrite).
#[test]
fn an_unreadable_gate_is_an_error_naming_it_not_a_gate_that_vanishes() {
    let bad = b"{\"request_id\": 1".as_slice();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.redb");
    let alice = sample_gate("alice", "t1", "cli");
    {
        let store = Store::open(&path).unwrap();
        store.gates().insert_gate(&alice).unwrap();
        store
            .gates()
            .insert_gate(&sample_gate("bob", "t2", "cli"))
            .unwrap();
    }
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(PENDING_GATES).unwrap();
            table
                .insert(("alice", "t1", alice.request_id.as_str()), bad)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    assert_an_unreadable_gate_is_named(&Store::open(&path).unwrap(), "damaged.redb", &alice);

    let Some(cluster) = common::pg_cluster::Cluster::start("an_unreadable_gate") else {
        return;
    };
    let url = cluster.database();
    let store = cluster.store_at(&url);
    let alice = sample_gate("alice", "t1", "cli");
    store.gates().insert_gate(&alice).unwrap();
    store
        .gates()
        .insert_gate(&sample_gate("bob", "t2", "cli"))
        .unwrap();
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    admin
        .execute(
            "UPDATE gates SET body = $1 WHERE user_id = 'alice'",
            &[&bad],
        )
        .unwrap();
    assert_an_unreadable_gate_is_named(&store, "postgres://", &alice);
}

/// A damaged store is checked and salvaged, not only refused: `store
/// check` names every record it cannot read (exit 1) and `store salvage`
/// copies every other record into a new store, saying what was lost.
#[test]
fn a_damaged_store_is_checked_and_salvaged_record_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.redb");
    let alice = sample_gate("alice", "t1", "cli");
    {
        let store = Store::open(&path).unwrap();
        store.gates().insert_gate(&alice).unwrap();
        store
            .gates()
            .insert_gate(&sample_gate("bob", "t2", "cli"))
            .unwrap();
        store
            .state()
            .state_put("p", "k", Some(b"v"), u64::MAX)
            .unwrap();
    }
    let db = redb::Database::open(&path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(PENDING_GATES).unwrap();
        let bad = b"{\"request_id\": 1".as_slice();
        table
            .insert(("alice", "t1", alice.request_id.as_str()), bad)
            .unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    let toolgate = |store: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(common::hooks::BIN)
            .args(["--store", store.to_str().unwrap()])
            .args(args)
            .env("XDG_RUNTIME_DIR", dir.path())
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), said)
    };
    let (code, said) = toolgate(&path, &["store", "check"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("gates") && said.contains("alice") && said.contains("store salvage"),
        "{said}"
    );
    assert!(!said.contains("bob"), "bob's gate reads: {said}");

    let new = dir.path().join("salvaged.redb");
    let (code, said) = toolgate(&path, &["store", "salvage", new.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("lost") && said.contains("alice"), "{said}");
    let salvaged = Store::open(&new).unwrap();
    let gates = salvaged
        .gates()
        .list_gates(None, toolgate::now_ms())
        .unwrap();
    assert_eq!(
        gates.iter().map(|g| g.user_id.as_str()).collect::<Vec<_>>(),
        ["bob"]
    );
    assert_eq!(
        salvaged.state().state_get("p", "k").unwrap(),
        Some(b"v".to_vec())
    );
    drop(salvaged);
    let (code, said) = toolgate(&new, &["store", "check"]);
    assert_eq!(code, Some(0), "the salvaged store is sound: {said}");
}

/// `store` holds alice's damaged gate (stored as `alice`) and bob's sound
/// one. Taking it (a person's answer) is the store's error too, with the
/// parser's cause kept, and leaves it where it was.
fn assert_an_unreadable_gate_is_named(store: &Store, store_name: &str, alice: &PendingGate) {
    let now = toolgate::now_ms();
    let listed = store.gates().list_gates(None, now).unwrap_err().to_string();
    let taken = store
        .gates()
        .take_gate(&alice.key(), &alice.request_id, "cli", &trusted(), now)
        .unwrap_err();
    let TakeGateError::Storage(taken) = taken else {
        panic!("a damaged gate is the store's failure, not a refusal: {taken:?}");
    };
    assert!(
        std::error::Error::source(&taken).is_some_and(|cause| cause.is::<serde_json::Error>()),
        "the parser's error is kept as the cause: {taken:?}"
    );
    let alice = GateKey {
        user_id: "alice".into(),
        thread_id: "t1".into(),
    };
    let peeked = store
        .gates()
        .thread_gates(&alice, now)
        .unwrap_err()
        .to_string();
    for err in [listed, peeked, taken.report()] {
        for said in [store_name, "alice", "t1", "unreadable"] {
            assert!(err.contains(said), "{said} in {err}");
        }
    }
    let bob = GateKey {
        user_id: "bob".into(),
        thread_id: "t2".into(),
    };
    assert!(
        !store.gates().thread_gates(&bob, now).unwrap().is_empty(),
        "the others still read"
    );
    assert!(
        store.gates().thread_gates(&alice, now).is_err(),
        "the damaged gate is still there for `toolgate store check` to salvage"
    );
}

#[test]
fn a_resolution_recorded_before_a_restart_is_still_found() {
    // The embedded store skips the lookup while it knows it holds no
    // resolution; what it finds in the file at open counts.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resolutions.redb");
    let gate = sample_gate("user1", "t1", "telegram");
    let lookup = |store: &Store| {
        store
            .gates()
            .resolutions_for("user1", "t1", &gate.fingerprint, toolgate::now_ms())
            .unwrap()
    };
    {
        let store = Store::open(&path).unwrap();
        assert!(lookup(&store).is_empty());
        store
            .gates()
            .record_resolution(
                &gate,
                GateResolution::Approve { always: false },
                std::time::Duration::from_secs(600),
                "terminal",
            )
            .unwrap();
        assert_eq!(lookup(&store).len(), 1);
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(lookup(&store).len(), 1);
}

#[test]
fn a_resolved_pause_lets_the_same_call_run_without_pausing_again() {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"Deploy?\"",
    ));
    let mut request = call("Bash", json!({"command": "./deploy.sh"}));
    request.channel = "telegram".into();
    let first = host.evaluate(&request).unwrap();
    assert_eq!(first.verdict, Verdict::Pause);
    let pause = first.pause.unwrap();
    let key = GateKey {
        user_id: pause.user_id.clone(),
        thread_id: pause.thread_id.clone(),
    };

    let refused = host.resolve_gate(
        &key,
        &pause.request_id,
        "slack",
        GateResolution::Approve { always: false },
    );
    assert!(refused.is_err(), "the wrong channel is refused");
    host.resolve_gate(
        &key,
        &pause.request_id,
        "telegram",
        GateResolution::Approve { always: false },
    )
    .unwrap();

    let second = host.evaluate(&request).unwrap();
    assert_eq!(second.verdict, Verdict::Allow);
    assert!(
        host.gates(None).unwrap().is_empty(),
        "exactly one gate was ever raised"
    );
    assert_eq!(host.command("approver", "decided", "{}").unwrap(), "2");

    // The resolution was consumed by the allowed call: a third attempt asks again.
    let third = host.evaluate(&request).unwrap();
    assert_eq!(third.verdict, Verdict::Pause);
}

#[test]
fn asking_again_before_anyone_answered_keeps_the_prompt_the_person_was_shown() {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"Deploy?\"",
    ));
    let request = call("Bash", json!({"command": "./deploy.sh"}));
    let first = host.evaluate(&request).unwrap().pause.unwrap();
    // The agent retries (a new call id), as agents and resumed graphs do.
    let retried = host.evaluate(&request).unwrap().pause.unwrap();
    assert_eq!(retried.request_id, first.request_id, "the same prompt");
    assert_eq!(retried.expires_at_ms, first.expires_at_ms, "no longer life");
    assert_eq!(host.gates(None).unwrap().len(), 1);

    // The person answers the prompt they saw first: the retry runs.
    let key = GateKey {
        user_id: first.user_id.clone(),
        thread_id: first.thread_id.clone(),
    };
    host.resolve_gate(
        &key,
        &first.request_id,
        "cli",
        GateResolution::Approve { always: false },
    )
    .unwrap();
    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);

    // Another call in the thread is another question.
    let asked = host.evaluate(&request).unwrap().pause.unwrap();
    let other = call("Bash", json!({"command": "./deploy.sh --prod"}));
    let other = host.evaluate(&other).unwrap().pause.unwrap();
    assert_ne!(other.request_id, asked.request_id);
}

#[test]
fn a_persons_always_becomes_a_rule_in_the_operators_file_for_this_call_in_this_project() {
    const SAFEGUARDS: &str =
        "[plugins.safeguards]\npath = \"bundled:safeguards\"\nalways = \"project\"\n";
    let publish = |description: &str, cwd: &str| {
        let mut request = call(
            "Bash",
            json!({"command": "npm publish", "description": description}),
        );
        request.cwd = Some(cwd.into());
        request
    };
    let common::TestHost { host, dir } = host(SAFEGUARDS);
    let first = host
        .evaluate(&publish("Publish", "/home/alice/app"))
        .unwrap();
    assert_eq!(first.verdict, Verdict::Pause, "{first:?}");
    let pause = first.pause.as_ref().unwrap();
    assert!(
        matches!(
            pause.kind,
            PauseKind::Approval {
                allow_always: true,
                ..
            }
        ),
        "safeguards offers always: {pause:?}"
    );
    common::answer(&host, &first, GateResolution::Approve { always: true });

    // The rule is in the operator's file, readable, before the answer returned.
    let file = dir.path().join("toolgate.redb.always.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    for needed in [
        "policy = \"safeguards\"",
        "npm publish",
        "/home/alice/app",
        "cli",
    ] {
        assert!(text.contains(needed), "{needed} in {text}");
    }
    assert_eq!(host.standing_approvals().rules().len(), 1);

    // The resubmitted call runs (and uses up the one-time answer); the
    // same call, described otherwise, in the project and below, runs every
    // time after it: a standing approval is not used up.
    let resubmitted = host
        .evaluate(&publish("Publish", "/home/alice/app"))
        .unwrap();
    assert_eq!(resubmitted.verdict, Verdict::Allow);
    for _ in 0..3 {
        let again = host
            .evaluate(&publish("Publish the package", "/home/alice/app/web"))
            .unwrap();
        assert_eq!(again.verdict, Verdict::Allow, "{again:?}");
        assert!(again.approved_by.unwrap().starts_with("always (cli at "));
    }
    // Another project, or another call, asks.
    let elsewhere = host
        .evaluate(&publish("Publish", "/home/alice/other"))
        .unwrap();
    assert_eq!(elsewhere.verdict, Verdict::Pause);
    let mut other = publish("Publish", "/home/alice/app");
    other.arguments["command"] = json!("npm publish --tag next");
    assert_eq!(host.evaluate(&other).unwrap().verdict, Verdict::Pause);

    // The agent can neither widen nor remove it.
    for command in [
        format!("echo '[[always]]' >> {}", file.display()),
        format!("rm {}", file.display()),
    ] {
        let refused = host
            .evaluate(&call("Bash", json!({ "command": command })))
            .unwrap();
        assert_eq!(refused.verdict, Verdict::Deny, "{command}: {refused:?}");
    }

    // A restart keeps it.
    drop(host);
    let (config, _other_dir) = common::config(SAFEGUARDS);
    let host =
        toolgate::Service::open(config, Some(dir.path().join("toolgate.redb").into())).unwrap();
    let after = host
        .evaluate(&publish("Publish", "/home/alice/app"))
        .unwrap();
    assert_eq!(after.verdict, Verdict::Allow, "{after:?}");
}

/// `[approvals] always_file` can put the standing approvals anywhere: they
/// stay out of the agent's reach there too.
#[test]
fn a_standing_approvals_file_of_the_operators_choosing_is_protected_too() {
    let host = host("[approvals]\nalways_file = \"reviewed/always.toml\"\n");
    let file = host.standing_approvals().path().unwrap().to_path_buf();
    assert!(file.ends_with("reviewed/always.toml"), "{}", file.display());
    for request in [
        call("Write", json!({"file_path": file, "content": "[[always]]"})),
        call(
            "Bash",
            json!({"command": format!("rm -f {}", file.display())}),
        ),
    ] {
        let refused = host.evaluate(&request).unwrap();
        assert_eq!(refused.verdict, Verdict::Deny, "{request:?}: {refused:?}");
    }
}

/// Two copies of one call paused at the same moment (a resend racing the
/// original, two connections) get one gate and one request id, not two
/// prompts of which a person answers one.
#[test]
fn two_copies_of_a_call_paused_at_once_get_one_request_id() {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"Deploy?\"",
    ));
    for round in 0..20 {
        let mut request = call("Bash", json!({"command": "./deploy.sh"}));
        request.thread_id = Some(format!("t-{round}"));
        let barrier = Barrier::new(2);
        let ids: Vec<String> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        host.evaluate(&request).unwrap().pause.unwrap().request_id
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(ids[0], ids[1], "round {round}");
    }
    assert_eq!(host.gates(None).unwrap().len(), 20);
}

/// A host whose one policy pauses; evaluate `request` and resolve the pause
/// from `cli` with `resolution`.
fn pause_then_resolve(
    request: &toolgate::ToolRequest,
    resolution: GateResolution,
) -> common::TestHost {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"ok?\"",
    ));
    let pause = host.evaluate(request).unwrap().pause.unwrap();
    let key = GateKey {
        user_id: pause.user_id,
        thread_id: pause.thread_id,
    };
    host.resolve_gate(&key, &pause.request_id, "cli", resolution)
        .unwrap();
    host
}

#[test]
fn a_resolution_applies_only_to_the_same_call() {
    let request = call("Bash", json!({"command": "./deploy.sh"}));
    let host = pause_then_resolve(&request, GateResolution::Approve { always: false });
    let different = call("Bash", json!({"command": "./deploy.sh --prod"}));
    assert_eq!(host.evaluate(&different).unwrap().verdict, Verdict::Pause);
}

#[test]
fn a_denied_resolution_refuses_the_retry_instead_of_asking_again() {
    // A person's "no" is an answer (it used to leave nothing, so the retry
    // was asked about again with a new pause).
    let request = call("Bash", json!({"command": "./deploy.sh"}));
    let host = pause_then_resolve(&request, GateResolution::Deny);
    let retry = host.evaluate(&request).unwrap();
    assert_eq!(retry.verdict, Verdict::Deny);
    let reason = retry.reason.unwrap_or_default();
    assert!(reason.contains("A person refused this call"), "{reason}");
    assert!(host.gates(None).unwrap().is_empty(), "no new pause");
}

/// A call a built-in policy refuses reaches no policy and leaves the
/// store as it was: a person's refusal of that call still holds after the
/// thread's stop (a call ran as toolgate did not judge it) is lifted. (A
/// review found the refusal used up by the stop's deny, and the call then
/// asked about anew.)
#[test]
fn a_persons_refusal_outlasts_a_stop_of_the_thread() {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"ok?\"",
    ));
    let refused = call("Bash", json!({"command": "./deploy.sh"}));
    let pause = host.evaluate(&refused).unwrap().pause.unwrap();
    let key = GateKey {
        user_id: pause.user_id,
        thread_id: pause.thread_id,
    };
    host.resolve_gate(&key, &pause.request_id, "cli", GateResolution::Deny)
        .unwrap();

    // Another call of the thread runs with input toolgate did not judge.
    let mut judged = call("Bash", json!({"command": "make"}));
    judged.call_id = Some("toolu_judged".into());
    assert_eq!(host.evaluate(&judged).unwrap().verdict, Verdict::Pause);
    let mut ran = judged.clone();
    ran.arguments = json!({"command": "something else"});
    let stop = host.check_ran_as_judged(&ran).unwrap().expect("a stop");

    let stopped = host.evaluate(&refused).unwrap();
    assert_eq!(stopped.verdict, Verdict::Deny);
    let reason = stopped.reason.unwrap_or_default();
    assert!(reason.contains("did not judge"), "{reason}");

    host.resolve_gate(
        &key,
        &stop.request_id,
        "cli",
        GateResolution::Approve { always: false },
    )
    .unwrap();
    let again = host.evaluate(&refused).unwrap();
    assert_eq!(again.verdict, Verdict::Deny, "{again:?}");
    let reason = again.reason.unwrap_or_default();
    assert!(reason.contains("A person refused this call"), "{reason}");
}

#[test]
fn a_resolution_is_not_replayed_after_it_expires() {
    let host = host(&format!(
        "gate_ttl_secs = 1\n{}",
        scripted("approver", 1, "verdict = \"pause\"\nreason = \"ok?\"")
    ));
    let request = call("Bash", json!({"command": "./deploy.sh"}));
    approve(&host, &host.evaluate(&request).unwrap());
    // Past the gate's TTL, the recorded approval counts for nothing.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Pause);
}

#[test]
fn one_policys_approval_never_satisfies_anothers_pause() {
    let host = host(&format!(
        "{}{}",
        scripted("first", 1, "verdict = \"pause\"\nreason = \"first asks\""),
        scripted("second", 2, "verdict = \"pause\"\nreason = \"second asks\"")
    ));
    let request = call("Bash", json!({"command": "./deploy.sh"}));
    let first = host.evaluate(&request).unwrap();
    assert_eq!(first.decided_by.as_deref(), Some("first"));
    approve(&host, &first);
    // `first` sees its approval; `second` sees none and still asks.
    let again = host.evaluate(&request).unwrap();
    assert_eq!(again.verdict, Verdict::Pause);
    assert_eq!(again.decided_by.as_deref(), Some("second"));
    assert_eq!(
        again.policies[0].verdict,
        toolgate::decision::PolicyVerdict::Allow
    );
}

#[test]
fn an_approval_for_one_mcp_server_is_not_one_for_another() {
    let host = host(&scripted(
        "approver",
        1,
        "verdict = \"pause\"\nreason = \"ok?\"",
    ));
    let from = |server: &str| {
        let mut request = call("create_issue", json!({"title": "x"}));
        request.origin = toolgate::request::Origin::Mcp(server.into());
        request
    };
    approve(&host, &host.evaluate(&from("a")).unwrap());
    assert_eq!(
        host.evaluate(&from("b")).unwrap().verdict,
        Verdict::Pause,
        "the same tool and arguments from another server"
    );
    assert_eq!(host.evaluate(&from("a")).unwrap().verdict, Verdict::Allow);
}
