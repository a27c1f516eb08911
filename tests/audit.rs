//! The audit trail: every decision, a person's answers and every reload
//! chained by hash in the store (a real redb file, and a real PostgreSQL
//! where its binaries are), proven whole by `toolgate audit verify`, and
//! each kind of tampering with the store — an edited, deleted, reordered or
//! inserted link — named at the link where the chain breaks.

use crate::common;

use std::path::{Path, PathBuf};

use redb::ReadableTable as _;
use std::process::{Command, Output};

use common::pg_cluster::Cluster;
use common::{answer, call, config_text, scripted};
use serde_json::json;
use toolgate::audit::{AuditKind, Broken, LinkHead, Verified, Verifier, link_hash};
use toolgate::gates::GateResolution;
use toolgate::locations::StoreLocation;
use toolgate::{Config, Toolgate, Verdict};

/// The store's audit table, as redb names it: seq → link.
const AUDIT: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("audit");

/// A policy that pauses every call (a person's answer is remembered, so the
/// approved call's retry is allowed).
fn approver() -> String {
    scripted("approver", 1, "verdict = \"pause\"\nreason = \"Deploy?\"")
}

/// A host over `store` from the config file `dir/config.toml` holding `body`.
fn host_from_file(dir: &Path, body: &str, store: StoreLocation) -> Toolgate {
    let path = dir.join("config.toml");
    std::fs::write(&path, config_text(body)).unwrap();
    Toolgate::open(Config::load(&path).unwrap(), Some(store)).unwrap()
}

/// Every link of this host's chain, checked with the host's own key.
fn verify(host: &Toolgate, key: &Path) -> (Vec<LinkHead>, Result<Verified, Broken>) {
    host.persist();
    let page = host.store().audit_links(None, 10_000).unwrap();
    let trusted = std::fs::read_to_string(toolgate::audit::public_path(key)).unwrap();
    let mut verifier = Verifier::new(&trusted, None);
    let mut heads = Vec::new();
    for (seq, link) in &page.links {
        heads.push(serde_json::from_str(link).unwrap());
        if let Err(broken) = verifier.next(*seq, link.as_bytes()) {
            return (heads, Err(broken));
        }
    }
    (heads, verifier.finish(page.head.as_ref()))
}

fn kinds(links: &[LinkHead]) -> Vec<AuditKind> {
    links.iter().map(|l| l.kind).collect()
}

/// Pause a call and approve it, retry it, pause another and refuse it, then
/// reload with a rollout: each is a link, in that order, and the chain is
/// whole. `audit` is the config's `[audit]` table (or nothing).
fn decisions_answers_and_reloads_are_chained(
    store: StoreLocation,
    dir: &Path,
    (audit, key): (&str, &Path),
) {
    let host = host_from_file(dir, &format!("{audit}{}", approver()), store);
    let deploy = call("Bash", json!({"command": "./deploy.sh"}));
    let paused = host.evaluate(&deploy).unwrap();
    assert_eq!(paused.verdict, Verdict::Pause);
    host.persist();
    answer(&host, &paused, GateResolution::Approve { always: false });
    host.persist();
    assert_eq!(host.evaluate(&deploy).unwrap().verdict, Verdict::Allow);
    host.persist();
    let other = host
        .evaluate(&call("Bash", json!({"command": "./drop-db.sh"})))
        .unwrap();
    host.persist();
    answer(&host, &other, GateResolution::Deny);
    host.persist();
    let rollout = format!(
        "{audit}{}[plugins.approver.rollout]\npercent = 50\n",
        approver()
    );
    std::fs::write(dir.join("config.toml"), config_text(&rollout)).unwrap();
    host.reload().unwrap();

    let (links, verified) = verify(&host, key);
    use AuditKind::*;
    assert_eq!(
        kinds(&links),
        [
            Decision, Approval, Decision, Decision, Refusal, Reload, Rollout
        ],
        "the pause, its approval, the retry, the second pause, its refusal, the reload"
    );
    let verified = verified.unwrap();
    assert!(verified.head_signed, "{verified:?}");
    assert_eq!(verified.links, 7);
}

#[test]
fn decisions_answers_and_reloads_are_chained_in_a_redb_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.redb");
    let key = dir.path().join("t.redb.audit-key");
    decisions_answers_and_reloads_are_chained(StoreLocation::File(store), dir.path(), ("", &key));
}

#[test]
fn each_host_of_a_postgresql_fleet_keeps_its_own_chain_and_two_processes_of_one_host_share_theirs()
{
    let Some(cluster) = Cluster::start("each_host_of_a_postgresql_fleet_keeps_its_own_chain")
    else {
        return;
    };
    let url = cluster.database();
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    // Host "a" in one process decides what `decisions_answers…` expects.
    let key_a = dirs[0].path().join("a.key");
    let with = |host: &str, key: &Path| {
        format!(
            "[audit]\nhost = {host:?}\nkey = {:?}\n",
            key.display().to_string()
        )
    };
    let body_a = format!("{}{}", with("a", &key_a), approver());
    let host_a = host_from_file(dirs[0].path(), &body_a, StoreLocation::from(url.as_str()));
    let first = host_a.evaluate(&call("Bash", json!({"command": "./deploy.sh"})));
    assert_eq!(first.unwrap().verdict, Verdict::Pause);
    drop(host_a);
    // Host "b" (its own key) and two more processes of "a" (the same key:
    // one machine) decide at once, 200 calls each.
    let key_b = dirs[1].path().join("b.key");
    let allow = scripted("allower", 1, "verdict = \"allow\"");
    let hosts = [
        (dirs[1].path(), format!("{}{allow}", with("b", &key_b))),
        (dirs[2].path(), format!("{}{allow}", with("a", &key_a))),
        (dirs[3].path(), format!("{}{allow}", with("a", &key_a))),
    ]
    .map(|(dir, body)| host_from_file(dir, &body, StoreLocation::from(url.as_str())));
    std::thread::scope(|scope| {
        for host in &hosts {
            scope.spawn(|| {
                for n in 0..200 {
                    let request = call("Read", json!({"file_path": format!("/tmp/{n}")}));
                    assert_eq!(host.evaluate(&request).unwrap().verdict, Verdict::Allow);
                }
            });
        }
    });
    for host in &hosts {
        host.persist();
    }
    let (links_b, verified_b) = verify(&hosts[0], &key_b);
    assert_eq!(verified_b.unwrap().links, links_b.len() as u64);
    assert_eq!(
        links_b
            .iter()
            .filter(|l| l.kind == AuditKind::Decision)
            .count(),
        200,
        "host b's chain holds its own decisions only"
    );
    let (links_a, verified_a) = verify(&hosts[1], &key_a);
    verified_a.unwrap();
    assert_eq!(
        links_a
            .iter()
            .filter(|l| l.kind == AuditKind::Decision)
            .count(),
        401,
        "host a's chain: its three processes' decisions, one chain"
    );
    // The first process of "a" started the chain.
    assert_eq!(links_a[0].seq, 0);
    // And the whole sequence of answers, on a chain of its own.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("c.key");
    let store = StoreLocation::from(url.as_str());
    decisions_answers_and_reloads_are_chained(store, dir.path(), (&with("c", &key), &key));
}

#[test]
fn retention_keeps_the_chain_verifiable_with_a_signed_prune_and_not_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.redb");
    let body = format!(
        "[audit]\nmax_entries = 6\ncheckpoint_every = 3\n{}",
        scripted("allower", 1, "verdict = \"allow\"")
    );
    let host = host_from_file(dir.path(), &body, StoreLocation::File(store.clone()));
    for n in 0..20 {
        host.evaluate(&call("Read", json!({"file_path": format!("/tmp/{n}")})))
            .unwrap();
        host.persist();
    }
    let key = dir.path().join("t.redb.audit-key");
    let (links, verified) = verify(&host, &key);
    assert!(links[0].seq > 20, "the front went: {:?}", links[0]);
    assert!(
        links.len() <= 10,
        "6 kept, 3 over at most, and the prune: {}",
        links.len()
    );
    assert!(links.iter().any(|l| l.kind == AuditKind::Prune));
    verified.unwrap();
    drop(host);

    // Without the prune links, the gap at the front is unexplained.
    let db = redb::Database::open(&store).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(AUDIT).unwrap();
        for link in &links {
            if link.kind == AuditKind::Prune {
                table.remove(link.seq).unwrap();
            }
        }
    }
    txn.commit().unwrap();
    drop(db);
    let out = cli(dir.path(), &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no signed prune") || text(&out).contains("missing"),
        "{}",
        text(&out)
    );
}

/// `toolgate --config dir/config.toml --store dir/t.redb ARGS`.
fn cli(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--store")
        .arg(dir.join("t.redb"))
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A store of 9 decisions made through the CLI, whose chain verifies; then
/// `tamper` changes its audit table directly, and `audit verify` must say
/// where the chain breaks.
fn tampered(tamper: impl FnOnce(&mut redb::Table<u64, &[u8]>, &[(u64, Vec<u8>)])) -> String {
    let dir = tempfile::tempdir().unwrap();
    let body = scripted("allower", 1, "verdict = \"allow\"");
    std::fs::write(dir.path().join("config.toml"), config_text(&body)).unwrap();
    let mut args = vec!["check".to_string(), "--compact".to_string()];
    for n in 0..9 {
        let file: PathBuf = dir.path().join(format!("call-{n}.json"));
        let call = json!({"tool": "Read", "arguments": {"file_path": format!("/tmp/{n}")}});
        std::fs::write(&file, call.to_string()).unwrap();
        args.push(file.display().to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli(dir.path(), &args);
    assert!(out.status.success(), "{}", text(&out));
    let out = cli(dir.path(), &["audit", "verify"]);
    assert!(
        out.status.success(),
        "the untouched chain verifies: {}",
        text(&out)
    );
    assert!(text(&out).contains("links 0..=8"), "{}", text(&out));

    let db = redb::Database::open(dir.path().join("t.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(AUDIT).unwrap();
        let links: Vec<(u64, Vec<u8>)> = table
            .iter()
            .unwrap()
            .map(|r| r.unwrap())
            .map(|(seq, link)| (seq.value(), link.value().to_vec()))
            .collect();
        tamper(&mut table, &links);
    }
    txn.commit().unwrap();
    drop(db);
    let out = cli(dir.path(), &["audit", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "tampering is found: {}",
        text(&out)
    );
    text(&out)
}

#[test]
fn an_edited_link_is_named_by_audit_verify() {
    // A denial rewritten as an allow, in the middle of the chain.
    let said = tampered(|table, links| {
        let edited = String::from_utf8(links[4].1.clone())
            .unwrap()
            .replace(r#""tool":"Read""#, r#""tool":"Grep""#);
        table.insert(4, edited.as_bytes()).unwrap();
    });
    assert!(said.contains("broken at link 5"), "{said}");
    // The newest link: only the signed head shows it.
    let said = tampered(|table, links| {
        let edited = String::from_utf8(links[8].1.clone())
            .unwrap()
            .replace(r#""tool":"Read""#, r#""tool":"Grep""#);
        table.insert(8, edited.as_bytes()).unwrap();
    });
    assert!(
        said.contains("broken at link 8") && said.contains("edited"),
        "{said}"
    );
}

#[test]
fn a_deleted_link_is_named_by_audit_verify() {
    let said = tampered(|table, _| {
        table.remove(3).unwrap();
    });
    assert!(
        said.contains("broken at link 3") && said.contains("missing"),
        "{said}"
    );
    let said = tampered(|table, _| {
        table.remove(8).unwrap();
    });
    assert!(said.contains("removed"), "the newest removed: {said}");
}

#[test]
fn reordered_links_are_named_by_audit_verify() {
    let said = tampered(|table, links| {
        table.insert(5, links[6].1.as_slice()).unwrap();
        table.insert(6, links[5].1.as_slice()).unwrap();
    });
    assert!(
        said.contains("broken at link 5") && said.contains("reordered"),
        "{said}"
    );
}

#[test]
fn an_inserted_link_is_named_by_audit_verify_even_with_the_rest_rehashed() {
    let said = tampered(|table, links| {
        // A decision nobody made, after link 4, with every later link
        // renumbered and rehashed as someone without the key can.
        let mut prev = link_hash(&links[4].1);
        let forged = links[4].1.clone();
        let mut rest: Vec<Vec<u8>> = vec![forged];
        rest.extend(links[5..].iter().map(|(_, bytes)| bytes.clone()));
        for (n, bytes) in rest.into_iter().enumerate() {
            let seq = 5 + n as u64;
            let mut link: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            link["seq"] = seq.into();
            link["prev"] = prev.clone().into();
            let bytes = serde_json::to_vec(&link).unwrap();
            prev = link_hash(&bytes);
            table.insert(seq, bytes.as_slice()).unwrap();
        }
    });
    assert!(said.contains("broken at link"), "{said}");
    assert!(
        said.contains("signature") || said.contains("come after the signed head"),
        "only a signature shows a chain rehashed without the key: {said}"
    );
}

#[test]
fn the_agent_may_not_read_or_change_the_audit_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("keys").join("audit.key");
    let body = format!(
        "[audit]\nkey = {:?}\n{}",
        key.display().to_string(),
        scripted("allower", 1, "verdict = \"allow\"")
    );
    let host = host_from_file(
        dir.path(),
        &body,
        StoreLocation::File(dir.path().join("t.redb")),
    );
    assert!(key.exists(), "made on first start");
    for request in [
        call("Read", json!({"file_path": key})),
        call("Bash", json!({"command": format!("cat {}", key.display())})),
        call("Write", json!({"file_path": key, "content": "00"})),
    ] {
        let decision = host.evaluate(&request).unwrap();
        assert_eq!(decision.verdict, Verdict::Deny, "{request:?}: {decision:?}");
    }
    // Its public half is for anyone to read.
    let public = toolgate::audit::public_path(&key);
    let decision = host
        .evaluate(&call("Read", json!({"file_path": public})))
        .unwrap();
    assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
}

#[test]
fn audit_export_writes_links_as_stored_and_as_cef() {
    let dir = tempfile::tempdir().unwrap();
    let body = scripted("approver", 1, "verdict = \"deny\"\nreason = \"no\"");
    let host = host_from_file(
        dir.path(),
        &body,
        StoreLocation::File(dir.path().join("t.redb")),
    );
    for n in 0..3 {
        host.evaluate(&call("Read", json!({"file_path": format!("/tmp/{n}")})))
            .unwrap();
    }
    drop(host);
    let jsonl = cli(dir.path(), &["audit", "export"]);
    assert!(jsonl.status.success(), "{}", text(&jsonl));
    let lines: Vec<&str> = std::str::from_utf8(&jsonl.stdout)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(lines.len(), 3, "three decisions");
    // The copy verifies as the store does.
    let trusted = std::fs::read_to_string(dir.path().join("t.redb.audit-key.pub")).unwrap();
    let mut verifier = Verifier::new(&trusted, None);
    for (seq, line) in lines.iter().enumerate() {
        verifier.next(seq as u64, line.as_bytes()).unwrap();
    }
    let cef = cli(
        dir.path(),
        &["audit", "export", "--format", "cef", "--from", "1"],
    );
    assert!(cef.status.success(), "{}", text(&cef));
    let cef = String::from_utf8(cef.stdout).unwrap();
    let lines: Vec<&str> = cef.lines().collect();
    assert_eq!(lines.len(), 2, "{cef}");
    for (n, line) in lines.iter().enumerate() {
        assert!(line.starts_with("CEF:0|toolgate|toolgate|"), "{line}");
        assert!(
            line.contains("|decision.deny|tool call denied|7|"),
            "{line}"
        );
        assert!(line.contains(&format!("cn1={} ", n + 1)), "{line}");
        assert!(line.contains("cs1Label=tool cs1=Read"), "{line}");
    }
}
