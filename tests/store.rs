//! The store, on every backend (redb, and PostgreSQL where its binaries
//! are): namespaces, atomic counters, quotas, event queries; then what is
//! particular to each — redb's drain on shutdown and clear errors for bad
//! files, PostgreSQL's guarantees across hosts.

use crate::common;

use std::sync::{Arc, Barrier};

use toolgate::store::{StateWriteError, Store, StoredEvent};

/// A redb store (for what is particular to redb).
fn open() -> (Arc<Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("t.redb")).unwrap();
    (Arc::new(store), dir)
}

fn event(policy: &str, session: &str, kind: &str, tool: Option<&str>, n: u64) -> StoredEvent {
    StoredEvent {
        policy: policy.into(),
        session_id: session.into(),
        turn: n,
        kind: kind.into(),
        tool: tool.map(Into::into),
        origin: None,
        risk: None,
        detail: None,
        summary: Some(format!("event {n}")),
        at_ms: n,
    }
}

#[test]
fn namespaces_are_private() {
    for (backend, store, _keep) in common::pg_cluster::every_backend("namespaces_are_private") {
        eprintln!("backend: {backend}");
        store
            .state()
            .state_put("a", "k", Some(b"from a"), u64::MAX)
            .unwrap();
        store
            .state()
            .state_put("b", "k", Some(b"from b"), u64::MAX)
            .unwrap();
        assert_eq!(
            store.state().state_get("a", "k").unwrap().unwrap(),
            b"from a"
        );
        assert_eq!(
            store.state().state_get("b", "k").unwrap().unwrap(),
            b"from b"
        );
        assert_eq!(store.state().state_keys("a", "", 10).unwrap(), ["k"]);
        store.state().state_put("a", "k", None, u64::MAX).unwrap();
        assert!(store.state().state_get("a", "k").unwrap().is_none());
        assert!(store.state().state_get("b", "k").unwrap().is_some());
    }
}

#[test]
fn key_listing_honours_prefix_and_limit() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("key_listing_honours_prefix_and_limit")
    {
        eprintln!("backend: {backend}");
        for key in ["lease/1", "lease/2", "lease/3", "other"] {
            store
                .state()
                .state_put("p", key, Some(b"x"), u64::MAX)
                .unwrap();
        }
        store
            .state()
            .state_put("q", "lease/9", Some(b"x"), u64::MAX)
            .unwrap();
        assert_eq!(
            store.state().state_keys("p", "lease/", 10).unwrap(),
            ["lease/1", "lease/2", "lease/3"]
        );
        assert_eq!(
            store.state().state_keys("p", "lease/", 2).unwrap(),
            ["lease/1", "lease/2"]
        );
    }
}

#[test]
fn concurrent_increments_never_both_take_the_last_unit() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("concurrent_increments_never_both_take_the_last_unit")
    {
        eprintln!("backend: {backend}");
        let limit = 50;
        let barrier = Arc::new(Barrier::new(4));
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (store, barrier) = (store.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..40)
                        .filter(|_| {
                            store
                                .state()
                                .state_try_increment("p", "budget", limit, u64::MAX)
                                .unwrap()
                                .is_some()
                        })
                        .count()
                })
            })
            .collect();
        let granted: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(
            granted as u64, limit,
            "exactly `limit` units are handed out"
        );
        assert_eq!(
            store
                .state()
                .state_try_increment("p", "budget", limit, u64::MAX)
                .unwrap(),
            None
        );
    }
}

#[test]
fn the_quota_refuses_growth_but_allows_shrinking() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("the_quota_refuses_growth_but_allows_shrinking")
    {
        eprintln!("backend: {backend}");
        store
            .state()
            .state_put("p", "a", Some(&[0; 60]), 100)
            .unwrap();
        let err = store
            .state()
            .state_put("p", "b", Some(&[0; 60]), 100)
            .unwrap_err();
        assert!(
            matches!(err, StateWriteError::QuotaExceeded(100)),
            "{err:?}"
        );
        assert!(
            store.state().state_get("p", "b").unwrap().is_none(),
            "the refused write left nothing"
        );
        store
            .state()
            .state_put("p", "a", Some(&[0; 10]), 100)
            .unwrap();
        store
            .state()
            .state_put("p", "b", Some(&[0; 60]), 100)
            .unwrap();
        assert_eq!(store.state().state_usage("p").unwrap(), 2 + 10 + 60);
    }
}

#[test]
fn deleting_keys_present_or_not_keeps_the_quota_exact() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("deleting_keys_present_or_not_keeps_the_quota_exact")
    {
        eprintln!("backend: {backend}");
        // A key that was never there: nothing changes, nothing fails.
        store.state().state_put("p", "never", None, 100).unwrap();
        assert_eq!(store.state().state_usage("p").unwrap(), 0);
        store
            .state()
            .state_put("p", "a", Some(&[0; 60]), 100)
            .unwrap();
        store.state().state_put("p", "gone", None, 100).unwrap();
        assert_eq!(store.state().state_usage("p").unwrap(), 1 + 60);
        // A key that is there goes, and so does its share of the quota.
        store.state().state_put("p", "a", None, 100).unwrap();
        assert!(store.state().state_get("p", "a").unwrap().is_none());
        assert_eq!(store.state().state_usage("p").unwrap(), 0);
        store
            .state()
            .state_put("p", "b", Some(&[0; 90]), 100)
            .unwrap();
    }
}

#[test]
fn session_events_come_newest_limited_oldest_first_without_excluded_kinds() {
    for (backend, store, _keep) in common::pg_cluster::every_backend(
        "session_events_come_newest_limited_oldest_first_without_excluded_kinds",
    ) {
        eprintln!("backend: {backend}");
        for n in 0..10 {
            let kind = if n % 3 == 0 {
                "probe_result"
            } else {
                "tool_call"
            };
            store
                .events()
                .append_event(event("s", "me", kind, Some("Bash"), n));
        }
        store
            .events()
            .append_event(event("s", "other", "tool_call", Some("Bash"), 99));
        store
            .events()
            .append_event(event("not-s", "me", "tool_call", Some("Bash"), 100));
        store.maintenance().persist();
        let recent = store
            .events()
            .session_recent("s", "me", 4, &["probe_result".into()])
            .unwrap();
        let turns: Vec<_> = recent.iter().map(|e| e.turn).collect();
        assert_eq!(turns, [4, 5, 7, 8]);
    }
}

#[test]
fn tool_history_excludes_the_current_session_inside_the_query() {
    for (backend, store, _keep) in common::pg_cluster::every_backend(
        "tool_history_excludes_the_current_session_inside_the_query",
    ) {
        eprintln!("backend: {backend}");
        // Two old events from another session, then a flood from the current one.
        store
            .events()
            .append_event(event("s", "other", "tool_call", Some("Bash"), 1));
        store
            .events()
            .append_event(event("s", "other", "probe_result", Some("Bash"), 2));
        store
            .events()
            .append_event(event("s", "third", "tool_call", Some("Bash"), 3));
        for n in 10..60 {
            store
                .events()
                .append_event(event("s", "me", "tool_call", Some("Bash"), n));
        }
        store
            .events()
            .append_event(event("s", "other", "tool_call", Some("Write"), 70));
        store.maintenance().persist();
        let history = store
            .events()
            .tool_history("s", "Bash", "me", 5, &["probe_result".into()])
            .unwrap();
        let seen: Vec<_> = history
            .iter()
            .map(|e| (e.session_id.as_str(), e.turn))
            .collect();
        assert_eq!(seen, [("other", 1), ("third", 3)]);
    }
}

#[test]
fn tool_history_never_crosses_from_one_tenant_to_another() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("tool_history_never_crosses_from_one_tenant_to_another")
    {
        eprintln!("backend: {backend}");
        for (n, session) in [
            "uid:1001/a",
            "uid:1002/b",
            "uid:10011/c",
            "local-session",
            "uid:1001/d",
            "uid:x/e",
        ]
        .into_iter()
        .enumerate()
        {
            store
                .events()
                .append_event(event("s", session, "tool_call", Some("Bash"), n as u64));
        }
        store.maintenance().persist();
        let seen = |current: &str| -> Vec<String> {
            let history = store
                .events()
                .tool_history("s", "Bash", current, 10, &[])
                .unwrap();
            history.into_iter().map(|e| e.session_id).collect()
        };
        assert_eq!(seen("uid:1001/now"), ["uid:1001/a", "uid:1001/d"]);
        assert_eq!(seen("uid:1002/now"), ["uid:1002/b"]);
        // The operator's sessions see the operator's, not the tenants'.
        assert_eq!(seen("now"), ["local-session", "uid:x/e"]);
    }
}

#[test]
fn queued_events_are_drained_on_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drain.redb");
    {
        let store = Store::open(&path).unwrap();
        for n in 0..1000 {
            store
                .events()
                .append_event(event("s", "me", "tool_call", None, n));
        }
        // No flush: dropping the store must commit everything queued.
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store
            .events()
            .session_recent("s", "me", 5000, &[])
            .unwrap()
            .len(),
        1000
    );
    assert_eq!(store.maintenance().dropped_events(), 0);
}

#[test]
fn logged_decisions_are_drained_on_shutdown() {
    // Decision-log entries wait in a buffer that never wakes the writer:
    // closing the store must still commit them.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drain-log.redb");
    {
        let store = Store::open(&path).unwrap();
        for n in 0..10 {
            let request = toolgate::ToolRequest::new("Bash", serde_json::json!({"n": n}));
            let decision = toolgate::Decision::refused_by_host(&request, "test".into());
            store
                .log()
                .log_decision(toolgate::decision_log::PendingLogEntry::new(
                    &request,
                    request.arguments_text(),
                    &decision,
                    toolgate::decision_log::ArgumentsView::Digest,
                ));
        }
    }
    let store = Store::open(&path).unwrap();
    let logged = store.log().decision_log(&Default::default(), 100).unwrap();
    assert_eq!(logged.len(), 10);
    // The writer hashed what the deciding thread left unhashed.
    for (n, (_, entry)) in logged.iter().enumerate() {
        let compact = format!("{{\"n\":{n}}}");
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(compact));
        assert_eq!(entry.arguments["sha256"], digest.as_str(), "entry {n}");
    }
}

#[test]
fn a_file_that_is_not_a_store_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.redb");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("garbage.redb"), "{err}");
    assert!(err.contains("move it aside"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        vec![0x5a; 8192],
        "the file was not touched"
    );
}

/// A 0-byte store is one a crash or a full disk cut short, not a new
/// one: opening it must not quietly start an empty store in its place.
#[test]
fn an_empty_store_file_is_refused_not_made_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.redb");
    std::fs::write(&path, b"").unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    for said in ["cut.redb", "empty", "move it aside"] {
        assert!(err.contains(said), "{said} in {err}");
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left as it was");
}

/// A damaged store is an error naming the file, never a panic: a byte
/// flipped in the first pages of a real store (its header and tables'
/// roots) is opened, or refused, in this process.
#[test]
fn a_flipped_byte_in_a_store_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.redb");
    {
        let store = Store::open(&good).unwrap();
        for n in 0..50 {
            store
                .events()
                .append_event(event("p", "s", "tool_call", Some("Bash"), n));
        }
        store
            .state()
            .state_put("p", "k", Some(b"v"), 1 << 20)
            .unwrap();
        store.maintenance().shutdown();
    }
    let bytes = std::fs::read(&good).unwrap();
    let damaged = dir.path().join("damaged.redb");
    let mut panicked = Vec::new();
    // The first bytes of each of the first pages (the header, the tables'
    // roots), where a flip once made redb panic, and a sample of the rest.
    let page_starts = (0..bytes.len()).step_by(4096).take(8);
    let offsets = page_starts
        .flat_map(|page| page..(page + 48).min(bytes.len()))
        .chain((0..bytes.len()).step_by((bytes.len() / 256).max(1)));
    for at in offsets {
        let mut copy = bytes.clone();
        copy[at] ^= 0xff;
        std::fs::write(&damaged, &copy).unwrap();
        let opened =
            std::panic::catch_unwind(|| Store::open(&damaged).map(|s| s.maintenance().shutdown()));
        match opened {
            Err(_) => panicked.push(at),
            Ok(Err(err)) => assert!(err.to_string().contains("damaged.redb"), "{err}"),
            Ok(Ok(())) => {}
        }
    }
    assert!(
        panicked.is_empty(),
        "open panicked on a byte flipped at {panicked:?}"
    );
}

#[test]
fn a_store_in_use_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.redb");
    let _first = Store::open(&path).unwrap();
    let err = Store::open(&path).unwrap_err().to_string();
    assert!(err.contains("another process has it open"), "{err}");
}

#[test]
fn an_event_that_cannot_be_persisted_is_counted_and_logged_with_its_context() {
    let (captured, _guard) = common::logs::Captured::start();
    let (store, _dir) = open();
    store.maintenance().shutdown();
    store
        .events()
        .append_event(event("shadow-sentinel", "me", "tool_call", Some("Bash"), 1));
    assert_eq!(store.maintenance().dropped_events(), 1);
    assert!(
        captured.has(&["WARN", "event dropped", "shadow-sentinel", "tool_call"]),
        "{:?}",
        captured.lines()
    );
}

#[test]
fn state_written_without_waiting_for_the_disk_survives_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("durable.redb");
    {
        let store = Store::open(&path).unwrap();
        store
            .state()
            .state_put("p", "k", Some(b"v"), u64::MAX)
            .unwrap();
        store
            .state()
            .state_try_increment("p", "n", 10, u64::MAX)
            .unwrap();
        assert_eq!(store.turns().next_turn("s").unwrap(), 1);
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.state().state_get("p", "k").unwrap().unwrap(), b"v");
    assert_eq!(
        store
            .state()
            .state_try_increment("p", "n", 10, u64::MAX)
            .unwrap(),
        Some(2)
    );
    assert_eq!(store.turns().turn("s").unwrap(), 1);
}

/// Found by `redb_and_postgres_agree_on_any_sequence_of_state_operations`:
/// PostgreSQL answered a key's second mention in one read with "absent".
#[test]
fn a_key_asked_for_twice_in_one_read_is_read_twice() {
    for (backend, store, _keep) in
        common::pg_cluster::every_backend("a_key_asked_for_twice_in_one_read_is_read_twice")
    {
        store
            .state()
            .state_put("p", "n", Some(b"1"), u64::MAX)
            .unwrap();
        assert_eq!(
            store.state().state_get_many("p", &["n", "x", "n"]).unwrap(),
            vec![Some(b"1".to_vec()), None, Some(b"1".to_vec())],
            "{backend}"
        );
    }
}

/// Found by the same property: PostgreSQL turned a value of another size
/// into a counter without counting the change, so an empty value under a
/// key let a counter grow past the namespace's quota.
#[test]
fn a_failed_state_write_names_its_store_and_keeps_its_kind() {
    // A host may hold several stores (a fleet's database, a local file): a
    // policy's failed write says which one, as every other store error does.
    let Some(cluster) = common::pg_cluster::Cluster::start("a_failed_state_write_names_its_store")
    else {
        return;
    };
    let store = cluster.store();
    store
        .state()
        .state_put("p", "k", Some(b"v"), u64::MAX)
        .unwrap();
    let stalled = cluster.stall();
    let err = store
        .state()
        .state_put("p", "k", Some(b"w"), u64::MAX)
        .unwrap_err();
    drop(stalled);
    let StateWriteError::Storage(cause) = &err else {
        panic!("not a storage failure: {err:?}");
    };
    assert_eq!(cause.kind(), toolgate::ErrorKind::Store);
    let said = err.to_string();
    assert!(
        said.starts_with("store ") && said.contains("PostgreSQL"),
        "{said}"
    );
}

#[test]
fn a_counter_over_a_value_of_another_size_counts_against_the_quota() {
    for (backend, store, _keep) in common::pg_cluster::every_backend(
        "a_counter_over_a_value_of_another_size_counts_against_the_quota",
    ) {
        store.state().state_put("p", "n", Some(b""), 4).unwrap();
        assert!(
            matches!(
                store.state().state_try_increment("p", "n", 10, 4),
                Err(StateWriteError::QuotaExceeded(4))
            ),
            "{backend}"
        );
        store
            .state()
            .state_put("q", "n", Some(&[0; 9]), u64::MAX)
            .unwrap();
        assert_eq!(
            store
                .state()
                .state_try_increment("q", "n", 10, u64::MAX)
                .unwrap(),
            Some(1)
        );
        assert_eq!(
            store.state().state_usage("q").unwrap(),
            9,
            "{backend}: 1 + 8 bytes"
        );
    }
}

/// One state operation of [`redb_and_postgres_agree_on_any_sequence_of_state_operations`],
/// over a few policies, keys and sessions (so operations meet).
#[derive(Debug, Clone)]
enum StateOp {
    Put(usize, usize, Option<Vec<u8>>, u64),
    Increment(usize, usize, u64, u64),
    Get(usize, usize),
    GetMany(usize, Vec<usize>),
    Keys(usize, usize, usize),
    Usage(usize),
    NextTurn(usize),
    Turn(usize),
}

const POLICIES: [&str; 2] = ["p", "q"];
const KEYS: [&str; 5] = ["a", "ab", "abc", "b", "n"];
const SESSIONS: [&str; 2] = ["s1", "s2"];

fn state_op() -> impl proptest::strategy::Strategy<Value = StateOp> {
    use proptest::prelude::*;
    let policy = 0..POLICIES.len();
    let key = 0..KEYS.len();
    let quota = prop::sample::select(vec![12u64, 40, 1024, u64::MAX]);
    let value = prop::option::of(prop::collection::vec(any::<u8>(), 0..24));
    prop_oneof![
        (policy.clone(), key.clone(), value, quota.clone())
            .prop_map(|(p, k, v, q)| StateOp::Put(p, k, v, q)),
        (policy.clone(), key.clone(), 0u64..4, quota)
            .prop_map(|(p, k, l, q)| StateOp::Increment(p, k, l, q)),
        (policy.clone(), key.clone()).prop_map(|(p, k)| StateOp::Get(p, k)),
        (policy.clone(), prop::collection::vec(key.clone(), 0..4))
            .prop_map(|(p, ks)| StateOp::GetMany(p, ks)),
        (policy.clone(), 0..KEYS.len() + 1, 0usize..4)
            .prop_map(|(p, prefix, l)| StateOp::Keys(p, prefix, l)),
        policy.prop_map(StateOp::Usage),
        (0..SESSIONS.len()).prop_map(StateOp::NextTurn),
        (0..SESSIONS.len()).prop_map(StateOp::Turn),
    ]
}

/// What an operation returned, comparable across backends: a storage
/// failure's text is the backend's own, so only its kind is kept.
fn apply(store: &Store, op: &StateOp) -> String {
    let written = |result: Result<String, StateWriteError>| match result {
        Err(StateWriteError::Storage(_)) => "storage error".to_string(),
        other => format!("{other:?}"),
    };
    let read = |result: toolgate::Result<String>| result.unwrap_or_else(|_| "error".into());
    match op {
        StateOp::Put(p, k, v, q) => written(
            store
                .state()
                .state_put(POLICIES[*p], KEYS[*k], v.as_deref(), *q)
                .map(|()| "put".into()),
        ),
        StateOp::Increment(p, k, l, q) => written(
            store
                .state()
                .state_try_increment(POLICIES[*p], KEYS[*k], *l, *q)
                .map(|n| format!("{n:?}")),
        ),
        StateOp::Get(p, k) => read(
            store
                .state()
                .state_get(POLICIES[*p], KEYS[*k])
                .map(|v| format!("{v:?}")),
        ),
        StateOp::GetMany(p, ks) => {
            let keys: Vec<&str> = ks.iter().map(|k| KEYS[*k]).collect();
            read(
                store
                    .state()
                    .state_get_many(POLICIES[*p], &keys)
                    .map(|v| format!("{v:?}")),
            )
        }
        StateOp::Keys(p, prefix, l) => {
            let prefix = KEYS.get(*prefix).copied().unwrap_or("");
            read(
                store
                    .state()
                    .state_keys(POLICIES[*p], prefix, *l)
                    .map(|v| format!("{v:?}")),
            )
        }
        StateOp::Usage(p) => read(
            store
                .state()
                .state_usage(POLICIES[*p])
                .map(|u| u.to_string()),
        ),
        StateOp::NextTurn(s) => read(store.turns().next_turn(SESSIONS[*s]).map(|t| t.to_string())),
        StateOp::Turn(s) => read(store.turns().turn(SESSIONS[*s]).map(|t| t.to_string())),
    }
}

/// A differential property: the embedded store and PostgreSQL answer any
/// sequence of state operations (writes under quotas, bounded increments,
/// reads, key listings, usage, turns) alike, step by step, each case on
/// fresh stores.
#[test]
fn redb_and_postgres_agree_on_any_sequence_of_state_operations() {
    use proptest::test_runner::{Config, TestRunner};
    let Some(cluster) = common::pg_cluster::Cluster::start("backends_agree") else {
        return;
    };
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    let ops = proptest::collection::vec(state_op(), 1..40);
    runner
        .run(&ops, |ops| {
            let (redb, _dir) = open();
            let postgres = cluster.store();
            for (step, op) in ops.iter().enumerate() {
                proptest::prop_assert_eq!(
                    apply(&redb, op),
                    apply(&postgres, op),
                    "step {} ({:?}) of {:?}",
                    step,
                    op,
                    ops
                );
            }
            Ok(())
        })
        .unwrap();
}

/// What a quota means on disk. A policy overwriting its 4 MiB of state
/// again and again grows the redb file past the quota (copy-on-write pages
/// wait for reuse); `toolgate store compact` brings it within twice the
/// quota. The safety chapter says so.
#[test]
fn after_a_compaction_a_policys_state_takes_at_most_twice_its_quota_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.redb");
    let quota: u64 = 4 << 20;
    let value = vec![7u8; 64 * 1024];
    {
        let store = toolgate::store::Store::open(&path).unwrap();
        for round in 0..40u8 {
            for key in 0..60 {
                let mut value = value.clone();
                value[0] = round;
                store
                    .state()
                    .state_put("flood", &format!("k{key}"), Some(&value), quota)
                    .unwrap();
            }
        }
    }
    let grown = std::fs::metadata(&path).unwrap().len();
    let out = std::process::Command::new(common::hooks::BIN)
        .args(["store", "--store"])
        .arg(&path)
        .arg("compact")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let compacted = std::fs::metadata(&path).unwrap().len();
    eprintln!("state quota {quota} B: file {grown} B before compaction, {compacted} B after");
    assert!(compacted <= 2 * quota, "{compacted} bytes after compaction");
}
