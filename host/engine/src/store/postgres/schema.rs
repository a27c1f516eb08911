//! The schema, created and migrated by toolgate on start.
//!
//! `toolgate_schema` holds the version; each migration runs in one
//! transaction under an advisory lock, so hosts starting together migrate
//! once. A database newer than this build is refused, not downgraded.

use super::client::{Client, PgError, Queries as _};

/// Advisory-lock key for migrations ("toolgate" in ASCII, as a number).
const MIGRATION_LOCK: i64 = 0x746f_6f6c_6761_7465;

/// The tables, for `store stats`.
pub(super) const TABLES: &[&str] = &[
    "state",
    "state_usage",
    "events",
    "gates",
    "resolutions",
    "decisions",
    "turns",
    "agent_terminals",
    "audit",
    "audit_heads",
];

/// Migrations in order; the schema version is how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: everything the embedded store keeps. Keys compare bytewise
    // (COLLATE "C") so prefix scans order as they do in redb.
    r#"
    CREATE TABLE state (
        policy text COLLATE "C" NOT NULL,
        key text COLLATE "C" NOT NULL,
        value bytea NOT NULL,
        PRIMARY KEY (policy, key)
    );
    CREATE TABLE state_usage (
        policy text PRIMARY KEY,
        bytes bigint NOT NULL
    );
    CREATE TABLE events (
        seq bigserial PRIMARY KEY,
        policy text NOT NULL,
        session_id text NOT NULL,
        tool text,
        kind text NOT NULL,
        at_ms bigint NOT NULL,
        body bytea NOT NULL
    );
    CREATE INDEX events_by_session ON events (policy, session_id, seq);
    CREATE INDEX events_by_tool ON events (policy, tool, seq);
    CREATE INDEX events_by_age ON events (at_ms);
    CREATE TABLE gates (
        user_id text NOT NULL,
        thread_id text NOT NULL,
        expires_at_ms bigint NOT NULL,
        body bytea NOT NULL,
        PRIMARY KEY (user_id, thread_id)
    );
    CREATE TABLE resolutions (
        seq bigserial PRIMARY KEY,
        user_id text NOT NULL,
        thread_id text NOT NULL,
        fingerprint text NOT NULL,
        expires_at_ms bigint NOT NULL,
        body bytea NOT NULL
    );
    CREATE INDEX resolutions_by_call ON resolutions (user_id, thread_id, fingerprint, seq);
    CREATE TABLE decisions (
        seq bigserial PRIMARY KEY,
        at_ms bigint NOT NULL,
        session_id text NOT NULL,
        tool text NOT NULL,
        verdict text NOT NULL,
        body bytea NOT NULL
    );
    CREATE TABLE turns (
        session_id text PRIMARY KEY,
        turn bigint NOT NULL,
        seen_at_ms bigint NOT NULL
    );
    CREATE TABLE agent_terminals (
        key text PRIMARY KEY,
        seen_at_ms bigint NOT NULL
    );
    "#,
    // 2: any number of pending gates per thread, one per request id.
    r#"
    ALTER TABLE gates ADD COLUMN request_id text;
    UPDATE gates SET request_id = convert_from(body, 'UTF8')::jsonb ->> 'request_id';
    UPDATE gates SET request_id = 'unreadable' WHERE request_id IS NULL;
    ALTER TABLE gates ALTER COLUMN request_id SET NOT NULL;
    ALTER TABLE gates DROP CONSTRAINT gates_pkey;
    ALTER TABLE gates ADD PRIMARY KEY (user_id, thread_id, request_id);
    "#,
    // 3: the audit trail, one hash chain per host (see `crate::audit`).
    r#"
    CREATE TABLE audit (
        host text NOT NULL,
        seq bigint NOT NULL,
        at_ms bigint NOT NULL,
        link bytea NOT NULL,
        PRIMARY KEY (host, seq)
    );
    CREATE TABLE audit_heads (
        host text PRIMARY KEY,
        head bytea NOT NULL
    );
    "#,
];

/// Bring the database to this build's schema version.
pub(super) fn migrate(client: &mut Client) -> Result<(), PgError> {
    let mut txn = client.transaction()?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    txn.batch_execute("CREATE TABLE IF NOT EXISTS toolgate_schema (version integer NOT NULL)")?;
    let version: i32 = match txn.query_opt("SELECT version FROM toolgate_schema", &[])? {
        Some(row) => row.get(0),
        None => {
            txn.execute("INSERT INTO toolgate_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    let known = MIGRATIONS.len() as i32;
    if version > known {
        // Refusing is the only safe answer: a newer toolgate wrote this.
        txn.batch_execute(&format!(
            "DO $$ BEGIN RAISE EXCEPTION 'the toolgate schema here is version {version}, \
             newer than this build knows ({known}); upgrade toolgate'; END $$"
        ))?;
    }
    for migration in &MIGRATIONS[version as usize..] {
        txn.batch_execute(migration)?;
    }
    txn.execute("UPDATE toolgate_schema SET version = $1", &[&known])?;
    txn.commit()
}
