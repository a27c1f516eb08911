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
use toolgate::{Config, Service, Verdict};

/// The store's audit table, as redb names it: seq → link.
const AUDIT: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("audit");

/// A policy that pauses every call (a person's answer is remembered, so the
/// approved call's retry is allowed).
fn approver() -> String {
    scripted("approver", 1, "verdict = \"pause\"\nreason = \"Deploy?\"")
}

/// A host over `store` from the config file `dir/config.toml` holding `body`.
fn host_from_file(dir: &Path, body: &str, store: StoreLocation) -> Service {
    let path = dir.join("config.toml");
    std::fs::write(&path, config_text(body)).unwrap();
    Service::open(Config::load(&path).unwrap(), Some(store)).unwrap()
}

/// Every link of this host's chain, checked with the host's own key.
fn verify(host: &Service, key: &Path) -> (Vec<LinkHead>, Result<Verified, Broken>) {
    host.persist();
    let page = host
        .store()
        .audit_trail()
        .audit_links(None, 10_000)
        .unwrap();
    let trusted = std::fs::read_to_string(toolgate::audit::public_path(key)).unwrap();
    let mut verifier = Verifier::new(&trusted, None);
    let mut heads = Vec::new();
    for (seq, link) in &page.links {
        heads.push(serde_json::from_str(link).unwrap());
        if let Err(broken) = verifier.next(*seq, link.as_bytes()) {
            return (heads, Err(broken));
        }
    }
    (heads, verifier.finish(Some(page.head.as_ref())))
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

#[test]
fn retention_never_signs_a_prune_over_links_someone_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("t.redb");
    let body = format!(
        "[audit]\nmax_entries = 6\ncheckpoint_every = 3\n{}",
        scripted("allower", 1, "verdict = \"allow\"")
    );
    let decide = |from: usize, to: usize| {
        let host = host_from_file(dir.path(), &body, StoreLocation::File(store.clone()));
        for n in from..to {
            host.evaluate(&call("Read", json!({"file_path": format!("/tmp/{n}")})))
                .unwrap();
            host.persist();
        }
    };
    decide(0, 2);
    // Link 1 rewritten (a denial made an allow, say), by someone without
    // the key: what retention would remove first.
    let db = redb::Database::open(&store).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut table = txn.open_table(AUDIT).unwrap();
        let link = table.get(1).unwrap().unwrap().value().to_vec();
        let edited = String::from_utf8(link)
            .unwrap()
            .replace(r#""tool":"Read""#, r#""tool":"Grep""#);
        table.insert(1, edited.as_bytes()).unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    // Past the count: retention would remove links 0.. and sign a prune.
    decide(5, 20);
    let out = cli(dir.path(), &["audit", "verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("broken at link 2"), "{}", text(&out));
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

use crate::common::output_text as text;

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
    // Its public half is for anyone to read, and for no agent to replace.
    let public = toolgate::audit::public_path(&key);
    let decision = host
        .evaluate(&call("Read", json!({"file_path": public})))
        .unwrap();
    assert_eq!(decision.verdict, Verdict::Allow, "{decision:?}");
    let replace = call("Write", json!({"file_path": public, "content": "00"}));
    let decision = host.evaluate(&replace).unwrap();
    assert_eq!(decision.verdict, Verdict::Deny, "{decision:?}");
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
    // OTLP/JSON, as the collector's file receiver reads it: each line
    // parses into the official request messages.
    let otlp = cli(dir.path(), &["audit", "export", "--format", "otlp"]);
    assert!(otlp.status.success(), "{}", text(&otlp));
    let file = dir.path().join("trail.otlp.jsonl");
    std::fs::write(&file, &otlp.stdout).unwrap();
    let python = common::python::python().expect("python with tests/requirements.txt");
    let parsed = Command::new(python)
        .arg("-c")
        .arg(OTLP_JSON_READER)
        .arg(&file)
        .output()
        .unwrap();
    assert!(parsed.status.success(), "{}", text(&parsed));
    assert_eq!(
        String::from_utf8_lossy(&parsed.stdout).trim(),
        "spans: execute_tool Read x3, toolgate.policy approver x3; logs: 3",
        "{}",
        text(&parsed)
    );
}

/// Reads an OTLP/JSON file (a traces and a logs request per line pair)
/// with the official messages and sums up what it holds.
const OTLP_JSON_READER: &str = r#"
import collections, json, re, sys
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as traces
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs
spans, records = collections.Counter(), 0
lines = open(sys.argv[1]).read().splitlines()
for n, line in enumerate(lines):
    if n % 2 == 0:
        # OTLP/JSON writes ids as hex, where protobuf's own JSON has base64.
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    assert re.fullmatch("[0-9a-f]{32}", span["traceId"]), span
                    assert re.fullmatch("[0-9a-f]{16}", span["spanId"]), span
        request = json_format.Parse(line, traces.ExportTraceServiceRequest())
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans[span.name] += 1
    else:
        request = json_format.Parse(line, logs.ExportLogsServiceRequest())
        records += sum(len(s.log_records) for r in request.resource_logs for s in r.scope_logs)
print("spans: " + ", ".join(f"{k} x{v}" for k, v in sorted(spans.items())) + f"; logs: {records}")
"#;

/// An OTLP/HTTP receiver built from the official protobuf definitions
/// (Python's `opentelemetry-proto`): it parses each request as the
/// collector would and prints what it received as JSON lines; the first
/// `argv[1]` requests are refused (HTTP 503), as a collector that is down.
const OTLP_RECEIVER: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as traces
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2 as logs

refuse = int(sys.argv[1])

def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None

def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        global refuse
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if refuse > 0:
            refuse -= 1
            print(json.dumps({"refused": self.path}), flush=True)
            self.send_response(503)
            self.end_headers()
            return
        assert self.headers["Content-Type"] == "application/x-protobuf", self.headers
        if self.path == "/v1/traces":
            request = traces.ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        print(json.dumps({"span": {
                            "name": span.name, "trace": span.trace_id.hex(),
                            "id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                            "kind": span.kind, "status": span.status.code,
                            "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                            "attributes": attributes(span.attributes),
                            "resource": attributes(resource.resource.attributes),
                            "scope": scope.scope.name}}), flush=True)
            answer = traces.ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/logs":
            request = logs.ExportLogsServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_logs:
                for scope in resource.scope_logs:
                    for record in scope.log_records:
                        print(json.dumps({"log": {
                            "body": value(record.body), "severity": record.severity_number,
                            "event": record.event_name, "trace": record.trace_id.hex(),
                            "span": record.span_id.hex(),
                            "attributes": attributes(record.attributes)}}), flush=True)
            answer = logs.ExportLogsServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(json.dumps({"port": server.server_address[1]}), flush=True)
server.serve_forever()
"#;

/// Lines a child or a listener printed, collected as they come.
type Lines = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// The OTLP receiver, refusing its first `refuse` requests; its URL and
/// what it printed.
fn otlp_receiver(dir: &Path, refuse: usize) -> (common::hooks::KillOnDrop, String, Lines) {
    use std::io::BufRead as _;
    let python = common::python::python().expect("python with tests/requirements.txt");
    let script = dir.join("otlp_receiver.py");
    std::fs::write(&script, OTLP_RECEIVER).unwrap();
    let mut child = Command::new(python)
        .arg(&script)
        .arg(refuse.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first: serde_json::Value = serde_json::from_str(&stdout.next().unwrap().unwrap()).unwrap();
    let url = format!("http://127.0.0.1:{}", first["port"]);
    let lines = Lines::default();
    let seen = lines.clone();
    std::thread::spawn(move || {
        for line in stdout.map_while(Result::ok) {
            seen.lock().unwrap().push(line);
        }
    });
    (common::hooks::KillOnDrop(child), url, lines)
}

/// `toolgate serve` over `dir`'s config and store; its socket.
fn serve(dir: &Path) -> (common::hooks::KillOnDrop, PathBuf) {
    let socket = dir.join("toolgate.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--store")
        .arg(dir.join("t.redb"))
        .args(["serve", "--socket"])
        .arg(&socket)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = toolgate::daemon::Client::new(&socket);
    common::eventually("the daemon to come up", || client.is_up());
    (common::hooks::KillOnDrop(child), socket)
}

/// Decide `calls` Read calls through the daemon at `socket`; then, with
/// `rollout` (a plugin's name), give that plugin a rollout in the config and
/// reload it as an operator does (SIGHUP): a reload link and a rollout link.
fn decide_through(
    (daemon, socket): &(common::hooks::KillOnDrop, PathBuf),
    calls: usize,
    rollout: Option<&str>,
) {
    let client = toolgate::daemon::Client::new(socket);
    for n in 0..calls {
        let request = call("Read", json!({"file_path": format!("/tmp/{n}")}));
        let answer = client
            .call(&toolgate::daemon::DaemonRequest::Evaluate { request })
            .unwrap();
        assert_eq!(answer["verdict"], "deny", "{answer}");
    }
    let Some(plugin) = rollout else {
        return;
    };
    let config = socket.with_file_name("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let rollout = format!("[plugins.{plugin}.rollout]\npercent = 100\n");
    std::fs::write(&config, format!("{text}{rollout}")).unwrap();
    // SAFETY: signals the daemon child this test started and still holds.
    unsafe { libc::kill(daemon.0.id() as libc::pid_t, libc::SIGHUP) };
}

fn parsed(lines: &Lines, key: &str) -> Vec<serde_json::Value> {
    lines
        .lock()
        .unwrap()
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| line.get(key).cloned())
        .collect()
}

#[test]
fn the_daemon_sends_the_trail_to_an_otlp_collector_that_was_down_spans_per_decision_and_policy() {
    let dir = tempfile::tempdir().unwrap();
    // The collector refuses its first three requests.
    let (_receiver, url, lines) = otlp_receiver(dir.path(), 3);
    let body = format!(
        "[audit]\nhost = \"build-7\"\notlp_endpoint = {url:?}\n{}{}",
        scripted("first", 1, "verdict = \"allow\""),
        scripted("approver", 2, "verdict = \"deny\"\nreason = \"no reads\""),
    );
    std::fs::write(dir.path().join("config.toml"), config_text(&body)).unwrap();
    let _daemon = serve(dir.path());
    decide_through(&_daemon, 3, Some("first"));
    common::eventually_showing("every link to reach the collector", || {
        let logs = parsed(&lines, "log");
        let kinds: std::collections::BTreeSet<String> = logs
            .iter()
            .map(|l| l["attributes"]["toolgate.audit.seq"].to_string())
            .collect();
        (kinds.len() == 5, lines.lock().unwrap().join("\n"))
    });
    assert_eq!(parsed(&lines, "refused").len(), 3, "it was down at first");

    let spans = parsed(&lines, "span");
    let by_id: std::collections::BTreeMap<String, &serde_json::Value> =
        spans.iter().map(|s| (s["id"].to_string(), s)).collect();
    let roots: Vec<_> = by_id.values().filter(|s| s["parent"] == "").collect();
    assert_eq!(roots.len(), 3, "a span per decision: {spans:#?}");
    for root in &roots {
        assert_eq!(root["name"], "execute_tool Read");
        let attributes = &root["attributes"];
        assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
        assert_eq!(attributes["gen_ai.tool.name"], "Read");
        assert_eq!(attributes["toolgate.verdict"], "deny");
        assert_eq!(attributes["toolgate.reason"], "no reads");
        assert_eq!(attributes["toolgate.decided_by"], "approver");
        assert_eq!(root["status"], 2, "an error: denied");
        assert_eq!(root["resource"]["service.name"], "toolgate");
        assert_eq!(root["resource"]["host.name"], "build-7");
        assert_eq!(root["trace"].as_str().unwrap().len(), 32);
        assert!(root["start"].as_u64() <= root["end"].as_u64());
        // The arguments leave as the log keeps them: a digest.
        let arguments = attributes["toolgate.arguments"].as_str().unwrap();
        assert!(!arguments.contains("/tmp/"), "{arguments}");
        let children: Vec<_> = by_id
            .values()
            .filter(|s| s["parent"] == root["id"])
            .collect();
        let names: std::collections::BTreeSet<_> = children
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["toolgate.policy approver", "toolgate.policy first"].into(),
            "a child per policy"
        );
        assert!(children.iter().all(|c| c["trace"] == root["trace"]));
    }
    let logs = parsed(&lines, "log");
    let reload = logs
        .iter()
        .find(|l| l["event"] == "toolgate.audit.reload")
        .expect("the reload's log record");
    assert_eq!(reload["attributes"]["toolgate.audit.seq"], 3);
    let decision = logs
        .iter()
        .find(|l| l["event"] == "toolgate.audit.decision")
        .unwrap();
    assert!(
        roots
            .iter()
            .any(|r| r["trace"] == decision["trace"] && r["id"] == decision["span"]),
        "a decision's record is tied to its span"
    );
}

/// An RFC 5424 message's parts: PRI, version, timestamp, host, app,
/// procid, msgid, structured data, text.
fn rfc5424(message: &str) -> Vec<String> {
    let (pri, rest) = message
        .strip_prefix('<')
        .and_then(|m| m.split_once('>'))
        .expect("<PRI>");
    let mut parts = vec![pri.to_string()];
    let mut rest = rest;
    for _ in 0..7 {
        let (field, tail) = rest.split_once(' ').expect("a header field");
        parts.push(field.to_string());
        rest = tail;
    }
    parts.push(rest.to_string());
    parts
}

#[test]
fn the_daemon_sends_the_trail_to_syslog_as_cef_over_udp_and_over_tcp_once_a_receiver_listens() {
    use std::io::Read as _;
    let dir = tempfile::tempdir().unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // The TCP receiver's port, not listening yet.
    let tcp_port = common::free_port();
    let body = format!(
        "[audit]\nhost = \"build-7\"\nsyslog = \"udp://{}\"\n{}",
        udp.local_addr().unwrap(),
        scripted("approver", 1, "verdict = \"deny\"\nreason = \"a|b=c\""),
    );
    std::fs::write(dir.path().join("config.toml"), config_text(&body)).unwrap();
    let daemon = serve(dir.path());
    decide_through(&daemon, 2, Some("approver"));
    let mut messages = Vec::new();
    let mut buf = [0u8; 8192];
    while messages.len() < 4 {
        let (n, _) = udp.recv_from(&mut buf).unwrap();
        messages.push(String::from_utf8(buf[..n].to_vec()).unwrap());
    }
    for (seq, message) in messages.iter().enumerate() {
        let parts = rfc5424(message);
        let kind = ["decision", "decision", "reload", "rollout"][seq];
        let severity = [4, 4, 6, 5][seq];
        assert_eq!(parts[0], (13 * 8 + severity).to_string(), "{message}");
        assert_eq!(parts[1], "1");
        assert!(humantime::parse_rfc3339(&parts[2]).is_ok(), "{message}");
        assert_eq!(parts[3..5], ["build-7", "toolgate"]);
        assert_eq!(parts[6..8], [kind, "-"]);
        let cef = &parts[8];
        assert!(cef.starts_with("CEF:0|toolgate|toolgate|"), "{cef}");
        assert!(cef.contains(&format!(" cn1={seq} ")), "{cef}");
        if seq < 2 {
            assert!(cef.contains("|decision.deny|tool call denied|7|"), "{cef}");
            assert!(cef.contains(r"reason=a|b\=c "), "{cef}");
        }
    }
    // Stopped as an operator stops it.
    let (mut daemon, _) = daemon;
    // SAFETY: signals the daemon child this test started and still holds.
    unsafe { libc::kill(daemon.0.id() as libc::pid_t, libc::SIGTERM) };
    assert!(daemon.0.wait().unwrap().success());

    // Over TCP, to a receiver that starts listening only after the links
    // were written: they arrive, framed by octet counts.
    let config = std::fs::read_to_string(dir.path().join("config.toml")).unwrap();
    let config = config.replace(
        &format!("udp://{}", udp.local_addr().unwrap()),
        &format!("tcp://127.0.0.1:{tcp_port}"),
    );
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    let _daemon = serve(dir.path());
    decide_through(&_daemon, 1, None);
    std::thread::sleep(std::time::Duration::from_millis(500)); // refused meanwhile
    let listener = std::net::TcpListener::bind(("127.0.0.1", tcp_port)).unwrap();
    let (mut stream, _) = listener.accept().unwrap();
    let mut frames = Vec::new();
    let mut received = String::new();
    while frames.len() < 5 {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the daemon closed the stream early: {frames:?}");
        received.push_str(std::str::from_utf8(&chunk[..n]).unwrap());
        while let Some((len, rest)) = received.split_once(' ') {
            let len: usize = len.parse().expect("an octet count");
            if rest.len() < len {
                break;
            }
            frames.push(rest[..len].to_string());
            received = rest[len..].to_string();
        }
    }
    // Every link from the first: the links sent over UDP went to another
    // receiver, and a new one gets the whole trail.
    let seqs: Vec<String> = frames
        .iter()
        .map(|f| {
            let cef = &rfc5424(f)[8];
            let at = cef.find(" cn1=").unwrap() + 5;
            cef[at..].split(' ').next().unwrap().to_string()
        })
        .collect();
    let expected: Vec<String> = (0..seqs.len()).map(|n| n.to_string()).collect();
    assert_eq!(seqs, expected, "from link 0, in order");
}
