//! The PostgreSQL backend: one database shared by a fleet of toolgate hosts.
//!
//! Every guarantee the embedded store gives within one process holds here
//! across hosts, from PostgreSQL's row locks under its default isolation
//! (READ COMMITTED), never from a lock of our own:
//!
//! - `try-increment` reads the counter `FOR UPDATE`: a second host racing for
//!   the last unit waits for the first to commit, then re-reads the row and
//!   finds it taken. A counter that does not exist yet, or a value of
//!   another size becoming one, changes the namespace's size: that is done
//!   under the usage row's lock (below), taken first, as every write that
//!   changes a size takes it, so no two writes wait on each other.
//! - State quotas: every write that changes a namespace's size holds that
//!   policy's `state_usage` row `FOR UPDATE` while it checks and updates the
//!   total, so two hosts cannot both squeeze under the quota.
//! - A gate is taken with its row `FOR UPDATE` and deleted in the same
//!   transaction: exactly one taker, whichever host the person and the agent
//!   talk to.
//! - Turns: one `INSERT … ON CONFLICT DO UPDATE … RETURNING` statement.
//!
//! Event appends go through a bounded queue, decision-log entries through a
//! buffer, to one writer thread per host that inserts them in batches (never
//! blocking a decision), as the embedded store does.

mod client;
mod reload;
mod schema;
mod tls;
mod transfer;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use client::{Client, PgError, Queries as _, Row};
use tokio_postgres::{Config as PgConfig, NoTls};

use super::{
    AuditPage, AuditTrail, DecisionLog, EVENT_QUEUE_CAPACITY, EventStore, GateStore, LogBuffer,
    MAX_STATE_ENTRY, MAX_STATE_KEY, Maintenance, Settings, StateSnapshot, StateStore,
    StateWriteError, StoredEvent, Take, TakeGateError, TerminalStore, TurnStore, judge_take,
    parse_gate,
};
use crate::audit::{AuditRecord, AuditSettings};
use crate::config::LogConfig;
use crate::decision_log::{LogEntry, LogFilter, PendingLogEntry};
use crate::error::{Error, Result};
use crate::gates::{GateError, GateKey, GateResolution, PendingGate, RecordedResolution};
use crate::locations::redacted_url as redacted;
use crate::store::hygiene::{PolicyStats, Retention, StoreStats, SweepReport, TableStats};
use writer::Message;

/// What the server is told unless the URL sets `options`: end a session
/// idle inside a transaction for a minute.
///
/// (Kept statements may get PostgreSQL's generic plan after five runs.
/// Every query a decision makes filters on an equality prefix of an index
/// in the order it asks — `events_by_tool` for a tool's history, newest
/// first under a `LIMIT` — so the generic plan is the one a custom plan
/// would choose;
/// `plan_cache_mode=force_custom_plan` measured 2 830–2 956 decisions/s on
/// one host against 4 057–5 061 without it.)
const SESSION_OPTIONS: &str = "-c idle_in_transaction_session_timeout=60000";

/// How long maintenance (a migration, a sweep, a copy) may take per round
/// trip: longer than a decision's, which must answer within a hook's time.
const MAINTENANCE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// The shortest deadline a round trip gets.
const MIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Idle connections kept per host.
const MAX_IDLE_CONNECTIONS: usize = 8;

/// The PostgreSQL store.
pub(crate) struct PostgresStore {
    pool: Arc<Pool>,
    /// The local name of this store (see `StoreLocation::local_name`): where the
    /// daemon's socket goes, and what messages name.
    path: PathBuf,
    queue: Mutex<Option<SyncSender<Message>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    dropped: Arc<AtomicU64>,
    settings: Settings,
    log_buffer: Arc<LogBuffer>,
    reloads: reload::Listener,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.pool.display)
            .finish()
    }
}

/// Connections to one database, reused. Credentials come from the URL or
/// the standard `PG*` variables and are never logged: messages name the
/// database by [`Pool::display`], which has no password.
pub(crate) struct Pool {
    config: PgConfig,
    /// Set when the URL asks for TLS (`sslmode=require`).
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    display: String,
    idle: Mutex<Vec<Client>>,
    /// How long a connection, or one round trip on it, may take before
    /// the decision waiting on it fails closed (`store_wait_ms`).
    deadline: std::time::Duration,
}

/// A connection on loan; it goes back to the pool unless it broke.
pub(crate) struct Pooled<'p> {
    pool: &'p Pool,
    client: Option<Client>,
}

impl std::ops::Deref for Pooled<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(mut client) = self.client.take().filter(|c| !c.is_closed()) {
            // Back to a decision's deadline, whatever this loan was for.
            client.set_deadline(self.pool.deadline);
            let mut idle = self.pool.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE_CONNECTIONS {
                idle.push(client);
            }
        }
    }
}

impl Pool {
    /// Parse `url` (a `postgres://` or `postgresql://` URL; unset parts from
    /// `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`).
    fn new(url: &str, deadline: std::time::Duration) -> Result<Self> {
        let mut config: PgConfig = url.parse().map_err(|err| {
            Error::store_caused(redacted(url), "not a usable PostgreSQL URL", err)
        })?;
        apply_environment(&mut config);
        let tls = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Require => {
                Some(tls::connector().map_err(|message| Error::store(redacted(url), message))?)
            }
            _ => None,
        };
        config.application_name("toolgate");
        // A host that stops mid-transaction (holding a gate's row lock)
        // must not hold up the others for long: the server ends such a
        // session. The URL's own `options` are kept as they are.
        if config.get_options().is_none() {
            config.options(SESSION_OPTIONS);
        }
        Ok(Self {
            display: redacted(url),
            config,
            tls,
            idle: Mutex::new(Vec::new()),
            // `store_wait_ms = 0` means "never wait for a busy redb file";
            // a database round trip still needs a moment.
            deadline: deadline.max(MIN_DEADLINE),
        })
    }

    /// A new connection, over TLS when the URL asks for it; it and each
    /// of its round trips fail after [`Pool::deadline`].
    pub(crate) fn connect(&self) -> std::result::Result<Client, PgError> {
        match &self.tls {
            Some(tls) => Client::connect(&self.config, tls.clone(), self.deadline),
            None => Client::connect(&self.config, NoTls, self.deadline),
        }
    }

    /// A connection for maintenance (a migration, a sweep, statistics, a
    /// copy), whose round trips may take [`MAINTENANCE_DEADLINE`].
    pub(crate) fn for_maintenance(&self) -> Result<Pooled<'_>> {
        let mut pooled = self.get()?;
        pooled.set_deadline(MAINTENANCE_DEADLINE);
        Ok(pooled)
    }

    pub(crate) fn get(&self) -> Result<Pooled<'_>> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let client = match idle {
            Some(client) => client,
            None => self.connect().map_err(|e| self.error(e))?,
        };
        Ok(Pooled {
            pool: self,
            client: Some(client),
        })
    }

    /// A refusal by the database in its own words ([`describe`]: its
    /// message and SQLSTATE); any other failure (connection, protocol,
    /// conversion) kept as the cause.
    pub(crate) fn error(&self, err: PgError) -> Error {
        match err {
            PgError::Postgres(err) if err.as_db_error().is_none() => {
                Error::store_caused(&self.display, "PostgreSQL failed", err)
            }
            err => Error::store(&self.display, describe(&err)),
        }
    }
}

/// A PostgreSQL error as one line: the server's message when there is one,
/// else the error and its causes (a TLS handshake failure says why).
pub(super) fn describe(err: &PgError) -> String {
    match err {
        PgError::Postgres(err) => match err.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => crate::error::with_causes(err),
        },
        err => err.to_string(),
    }
}

/// Fill what the URL left unset from the standard `PG*` variables.
fn apply_environment(config: &mut PgConfig) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() {
        match var("PGHOST") {
            Some(host) => {
                config.host(&host);
            }
            None => {
                config.host("/var/run/postgresql");
            }
        }
    }
    if config.get_ports().is_empty()
        && let Some(port) = var("PGPORT").and_then(|p| p.parse().ok())
    {
        config.port(port);
    }
    if config.get_user().is_none()
        && let Some(user) = var("PGUSER").or_else(|| var("USER"))
    {
        config.user(&user);
    }
    if config.get_password().is_none()
        && let Some(password) = var("PGPASSWORD")
    {
        config.password(password);
    }
    if config.get_dbname().is_none()
        && let Some(db) = var("PGDATABASE")
    {
        config.dbname(&db);
    }
}

impl PostgresStore {
    /// Connect, create or migrate the schema, and start the writer.
    pub(crate) fn connect(url: &str, path: &Path, deadline: std::time::Duration) -> Result<Self> {
        let pool = Arc::new(Pool::new(url, deadline)?);
        schema::migrate(&mut *pool.for_maintenance()?).map_err(|e| pool.error(e))?;
        let (sender, receiver) = mpsc::sync_channel(EVENT_QUEUE_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let settings = Settings::default();
        let log_buffer = Arc::new(LogBuffer::default());
        let writer = writer::Writer {
            pool: Arc::clone(&pool),
            settings: settings.clone(),
            log_buffer: Arc::clone(&log_buffer),
            dropped: Arc::clone(&dropped),
        };
        let writer = std::thread::Builder::new()
            .name("toolgate-pg-writer".into())
            .spawn(move || writer.run(receiver))
            .map_err(|err| Error::store_caused(path, "cannot start the event writer", err))?;
        let reloads = reload::Listener::start(Arc::clone(&pool))
            .map_err(|err| Error::store_caused(path, "cannot listen for fleet reloads", err))?;
        Ok(Self {
            reloads,
            pool,
            path: path.to_path_buf(),
            queue: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
            dropped,
            settings,
            log_buffer,
        })
    }

    fn send(&self, message: Message) {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let sent = queue.as_ref().is_some_and(|q| q.try_send(message).is_ok());
        if !sent {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("store write dropped: the write queue is full or closed");
        }
    }

    fn storage(&self, err: PgError) -> StateWriteError {
        self.pool.error(err).into()
    }
}

fn counter(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
}

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Lock `policy`'s usage row (creating it) and return its bytes: every
/// size-changing write of one policy, from any host, serialises here.
fn lock_usage(
    txn: &mut client::Transaction<'_>,
    policy: &str,
) -> std::result::Result<u64, PgError> {
    txn.execute(
        "INSERT INTO state_usage (policy, bytes) VALUES ($1, 0) ON CONFLICT DO NOTHING",
        &[&policy],
    )?;
    let row = txn.query_one(
        "SELECT bytes FROM state_usage WHERE policy = $1 FOR UPDATE",
        &[&policy],
    )?;
    Ok(row.get::<_, i64>(0).max(0) as u64)
}

fn entry_size(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// `policy`'s values of `keys`, in order.
fn read_many(pool: &Pool, policy: &str, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = pool
        .get()?
        .query(
            "SELECT key, value FROM state WHERE policy = $1 AND key = ANY($2)",
            &[&policy, &keys],
        )
        .map_err(|e| pool.error(e))?;
    let found: std::collections::HashMap<String, Vec<u8>> = rows
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    // A key asked for twice is read twice (not taken out at the first).
    Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
}

/// `policy`'s keys under `prefix`, in order, at most `limit`.
fn read_keys(pool: &Pool, policy: &str, prefix: &str, limit: usize) -> Result<Vec<String>> {
    // A range, not LIKE: a prefix may hold `%` or `_`. Keys compare by bytes
    // (the column is COLLATE "C"), as the embedded store orders them.
    let rows = pool
        .get()?
        .query(
            "SELECT key FROM state WHERE policy = $1 AND key >= $2 \
             AND left(key, length($2)) = $2 ORDER BY key LIMIT $3",
            &[&policy, &prefix, &(limit as i64)],
        )
        .map_err(|e| pool.error(e))?;
    Ok(rows.into_iter().map(|row| row.get(0)).collect())
}

/// Reads of the live data: each one current, which is never older than a
/// snapshot taken at the start of the call would be.
struct Live {
    pool: Arc<Pool>,
    policy: String,
}

impl StateSnapshot for Live {
    fn get_many(&self, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
        read_many(&self.pool, &self.policy, keys)
    }

    fn keys(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        read_keys(&self.pool, &self.policy, prefix, limit)
    }
}

impl StateStore for PostgresStore {
    fn state_get_many(&self, policy: &str, keys: &[&str]) -> Result<Vec<Option<Vec<u8>>>> {
        read_many(&self.pool, policy, keys)
    }

    fn state_keys(&self, policy: &str, prefix: &str, limit: usize) -> Result<Vec<String>> {
        read_keys(&self.pool, policy, prefix, limit)
    }

    fn state_snapshot(&self, policy: &str) -> Result<Box<dyn StateSnapshot>> {
        Ok(Box::new(Live {
            pool: Arc::clone(&self.pool),
            policy: policy.to_string(),
        }))
    }

    fn state_put(
        &self,
        policy: &str,
        key: &str,
        value: Option<&[u8]>,
        quota: u64,
    ) -> std::result::Result<(), StateWriteError> {
        if key.len() > MAX_STATE_KEY || value.is_some_and(|v| v.len() > MAX_STATE_ENTRY) {
            return Err(StateWriteError::TooLarge);
        }
        let mut client = self.pool.get()?;
        let mut txn = client.transaction().map_err(|e| self.storage(e))?;
        let used = lock_usage(&mut txn, policy).map_err(|e| self.storage(e))?;
        let old = txn
            .query_opt(
                "SELECT value FROM state WHERE policy = $1 AND key = $2",
                &[&policy, &key],
            )
            .map_err(|e| self.storage(e))?
            .map(|row| entry_size(key, &row.get::<_, Vec<u8>>(0)));
        let new = value.map(|v| entry_size(key, v));
        let total = used - old.unwrap_or(0).min(used) + new.unwrap_or(0);
        if new > old && total > quota {
            return Err(StateWriteError::QuotaExceeded(quota));
        }
        match value {
            Some(value) => txn.execute(
                "INSERT INTO state (policy, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (policy, key) DO UPDATE SET value = EXCLUDED.value",
                &[&policy, &key, &value],
            ),
            None => txn.execute(
                "DELETE FROM state WHERE policy = $1 AND key = $2",
                &[&policy, &key],
            ),
        }
        .map_err(|e| self.storage(e))?;
        txn.execute(
            "UPDATE state_usage SET bytes = $2 WHERE policy = $1",
            &[&policy, &i64_of(total)],
        )
        .map_err(|e| self.storage(e))?;
        txn.commit().map_err(|e| self.storage(e))
    }

    fn state_try_increment(
        &self,
        policy: &str,
        key: &str,
        limit: u64,
        quota: u64,
    ) -> std::result::Result<Option<u64>, StateWriteError> {
        if key.len() > MAX_STATE_KEY {
            return Err(StateWriteError::TooLarge);
        }
        let mut client = self.pool.get()?;
        // A counter that exists and keeps its size needs no usage lock; any
        // other change (a new counter, or a value of another size turned
        // into one) locks the usage row first, as `state_put` does, so the
        // two never wait on each other's locks.
        let mut usage_first = false;
        loop {
            let mut txn = client.transaction().map_err(|e| self.storage(e))?;
            let used = if usage_first {
                Some(lock_usage(&mut txn, policy).map_err(|e| self.storage(e))?)
            } else {
                None
            };
            let current: Option<Vec<u8>> = txn
                .query_opt(
                    "SELECT value FROM state WHERE policy = $1 AND key = $2 FOR UPDATE",
                    &[&policy, &key],
                )
                .map_err(|e| self.storage(e))?
                .map(|row| row.get(0));
            let count = current.as_deref().map_or(0, counter);
            if count >= limit {
                return Ok(None);
            }
            let next = count + 1;
            let bytes = next.to_le_bytes().to_vec();
            let same_size = current.as_ref().is_some_and(|v| v.len() == bytes.len());
            if !same_size && used.is_none() {
                usage_first = true;
                continue;
            }
            if let Some(used) = used {
                let old = current.as_deref().map_or(0, |v| entry_size(key, v));
                let new = entry_size(key, &bytes);
                let total = used - old.min(used) + new;
                if new > old && total > quota {
                    return Err(StateWriteError::QuotaExceeded(quota));
                }
                txn.execute(
                    "UPDATE state_usage SET bytes = $2 WHERE policy = $1",
                    &[&policy, &i64_of(total)],
                )
                .map_err(|e| self.storage(e))?;
            }
            let written = txn
                .execute(
                    "INSERT INTO state (policy, key, value) VALUES ($1, $2, $3) \
                     ON CONFLICT (policy, key) DO UPDATE SET value = EXCLUDED.value \
                     WHERE $4",
                    &[&policy, &key, &bytes, &current.is_some()],
                )
                .map_err(|e| self.storage(e))?;
            if written == 0 {
                // Another host created the counter first: read it again.
                continue;
            }
            txn.commit().map_err(|e| self.storage(e))?;
            return Ok(Some(next));
        }
    }

    fn state_usage(&self, policy: &str) -> Result<u64> {
        let mut client = self.pool.get()?;
        let row = client
            .query_opt(
                "SELECT bytes FROM state_usage WHERE policy = $1",
                &[&policy],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0).max(0) as u64))
    }
}

/// Events as stored: the JSON of [`StoredEvent`], with its sequence number.
fn events_of(rows: Vec<Row>) -> Vec<(u64, StoredEvent)> {
    rows.into_iter()
        .filter_map(|row| {
            let seq: i64 = row.get(0);
            let body: Vec<u8> = row.get(1);
            serde_json::from_slice(&body).ok().map(|e| (seq as u64, e))
        })
        .collect()
}

impl EventStore for PostgresStore {
    fn append_event(&self, event: StoredEvent) {
        self.send(Message::Event(Box::new(event)));
    }

    fn session_recent(
        &self,
        policy: &str,
        session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>> {
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT seq, body FROM events WHERE policy = $1 AND session_id = $2 \
                 AND NOT (kind = ANY($3)) ORDER BY seq DESC LIMIT $4",
                &[&policy, &session, &exclude_kinds, &(limit as i64)],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(events_of(rows).into_iter().rev().map(|(_, e)| e).collect())
    }

    fn tool_history(
        &self,
        policy: &str,
        tool: &str,
        exclude_session: &str,
        limit: usize,
        exclude_kinds: &[String],
    ) -> Result<Vec<StoredEvent>> {
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT seq, body FROM events WHERE policy = $1 AND tool = $2 \
                 AND session_id <> $3 AND NOT (kind = ANY($4)) \
                 AND COALESCE(substring(session_id from '^uid:[0-9]+/'), '') = $6 \
                 ORDER BY seq DESC LIMIT $5",
                &[
                    &policy,
                    &tool,
                    &exclude_session,
                    &exclude_kinds,
                    &(limit as i64),
                    &crate::tenant::of_session(exclude_session),
                ],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(events_of(rows).into_iter().rev().map(|(_, e)| e).collect())
    }

    fn recent_events(&self, limit: usize) -> Result<Vec<(u64, StoredEvent)>> {
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT seq, body FROM events ORDER BY seq DESC LIMIT $1",
                &[&(limit as i64)],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(events_of(rows).into_iter().rev().collect())
    }
}

/// Store `gate` in its (user, thread, request id) slot, replacing what is
/// there.
fn upsert_gate(
    client: &mut impl client::Queries,
    gate: &PendingGate,
) -> std::result::Result<(), PgError> {
    let body = serde_json::to_vec(gate).expect("gates always serialise");
    client.execute(
        "INSERT INTO gates (user_id, thread_id, request_id, expires_at_ms, body) \
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (user_id, thread_id, request_id) DO UPDATE \
         SET expires_at_ms = EXCLUDED.expires_at_ms, body = EXCLUDED.body",
        &[
            &gate.user_id,
            &gate.thread_id,
            &gate.request_id,
            &i64_of(gate.expires_at_ms),
            &body,
        ],
    )?;
    Ok(())
}

/// The gates of the thread (`user`, `thread`), parsed, oldest first.
fn thread_rows(
    client: &mut impl client::Queries,
    pool: &Pool,
    (user, thread): (&str, &str),
) -> Result<Vec<PendingGate>> {
    let rows = client
        .query(
            "SELECT body FROM gates WHERE user_id = $1 AND thread_id = $2",
            &[&user, &thread],
        )
        .map_err(|e| pool.error(e))?;
    let mut gates = rows
        .iter()
        .map(|row| crate::store::parse_gate(&pool.display, user, thread, &row.get::<_, Vec<u8>>(0)))
        .collect::<Result<Vec<_>>>()?;
    gates.sort_by_key(|g| g.created_at_ms);
    Ok(gates)
}

impl GateStore for PostgresStore {
    fn insert_gate(&self, gate: &PendingGate) -> Result<()> {
        let mut client = self.pool.get()?;
        upsert_gate(&mut *client, gate).map_err(|e| self.pool.error(e))
    }

    fn raise_gate(&self, gate: &PendingGate, now_ms: u64) -> Result<PendingGate> {
        let mut client = self.pool.get()?;
        let mut txn = client.transaction().map_err(|e| self.pool.error(e))?;
        // Held to the end of the transaction: hosts raising a gate for the
        // same (user, thread) take turns, whether or not a row exists yet
        // (`FOR UPDATE` locks only a row that does); a hash collision only
        // makes two others wait their turn.
        txn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))",
            &[&gate.user_id, &gate.thread_id],
        )
        .map_err(|e| self.pool.error(e))?;
        let thread = (gate.user_id.as_str(), gate.thread_id.as_str());
        let pending = thread_rows(&mut txn, &self.pool, thread)?;
        let (stored, gone) = crate::store::raised(pending, gate, now_ms);
        txn.execute(
            "DELETE FROM gates WHERE user_id = $1 AND thread_id = $2 AND request_id = ANY($3)",
            &[&thread.0, &thread.1, &gone],
        )
        .map_err(|e| self.pool.error(e))?;
        upsert_gate(&mut txn, &stored).map_err(|e| self.pool.error(e))?;
        txn.commit().map_err(|e| self.pool.error(e))?;
        Ok(stored)
    }

    fn thread_gates(&self, key: &GateKey, now_ms: u64) -> Result<Vec<PendingGate>> {
        let mut client = self.pool.get()?;
        let thread = (key.user_id.as_str(), key.thread_id.as_str());
        let mut gates = thread_rows(&mut *client, &self.pool, thread)?;
        gates.retain(|g| !g.is_expired(now_ms));
        Ok(gates)
    }

    fn list_gates(&self, user_id: Option<&str>, now_ms: u64) -> Result<Vec<PendingGate>> {
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT body, user_id, thread_id FROM gates \
                 WHERE ($1::text IS NULL OR user_id = $1) ORDER BY user_id, thread_id, request_id",
                &[&user_id],
            )
            .map_err(|e| self.pool.error(e))?;
        let mut gates = Vec::new();
        for row in rows {
            let (user, thread): (String, String) = (row.get(1), row.get(2));
            let gate = crate::store::parse_gate(
                &self.pool.display,
                &user,
                &thread,
                &row.get::<_, Vec<u8>>(0),
            )?;
            if !gate.is_expired(now_ms) {
                gates.push(gate);
            }
        }
        Ok(gates)
    }

    fn take_gate(
        &self,
        key: &GateKey,
        request_id: &str,
        channel: &str,
        trusted_channels: &[String],
        now_ms: u64,
    ) -> std::result::Result<PendingGate, TakeGateError> {
        let storage = |e: PgError| TakeGateError::Storage(self.pool.error(e));
        let mut client = self.pool.get()?;
        let mut txn = client.transaction().map_err(storage)?;
        let stored = txn
            .query_opt(
                "SELECT body FROM gates WHERE user_id = $1 AND thread_id = $2 \
                 AND request_id = $3 FOR UPDATE",
                &[&key.user_id, &key.thread_id, &request_id],
            )
            .map_err(storage)?;
        let stored = match stored {
            Some(row) => Some(parse_gate(
                &self.pool.display,
                &key.user_id,
                &key.thread_id,
                &row.get::<_, Vec<u8>>(0),
            )?),
            None => None,
        };
        let delete = |txn: &mut client::Transaction<'_>| {
            txn.execute(
                "DELETE FROM gates WHERE user_id = $1 AND thread_id = $2 AND request_id = $3",
                &[&key.user_id, &key.thread_id, &request_id],
            )
        };
        let outcome = match judge_take(stored, key, request_id, channel, trusted_channels, now_ms) {
            Take::Taken(gate) => {
                delete(&mut txn).map_err(storage)?;
                Ok(*gate)
            }
            Take::Expired => {
                delete(&mut txn).map_err(storage)?;
                Err(GateError::Expired.into())
            }
            Take::Refused(refusal) => return Err(refusal.into()),
        };
        txn.commit().map_err(storage)?;
        outcome
    }

    fn record_resolution(
        &self,
        gate: &PendingGate,
        resolution: GateResolution,
        ttl: std::time::Duration,
        by: &str,
    ) -> Result<()> {
        let recorded = RecordedResolution::of(gate, resolution, ttl, by, crate::now_ms());
        let body = serde_json::to_vec(&recorded).expect("resolutions always serialise");
        let mut client = self.pool.get()?;
        client
            .execute(
                "INSERT INTO resolutions (user_id, thread_id, fingerprint, expires_at_ms, body) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &gate.user_id,
                    &gate.thread_id,
                    &gate.fingerprint,
                    &i64_of(recorded.expires_at_ms),
                    &body,
                ],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(())
    }

    fn resolutions_for(
        &self,
        user_id: &str,
        thread_id: &str,
        fingerprint: &str,
        now_ms: u64,
    ) -> Result<Vec<RecordedResolution>> {
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT body FROM resolutions WHERE user_id = $1 AND thread_id = $2 \
                 AND fingerprint = $3 AND expires_at_ms > $4 ORDER BY seq",
                &[&user_id, &thread_id, &fingerprint, &i64_of(now_ms)],
            )
            .map_err(|e| self.pool.error(e))?;
        rows.into_iter()
            .map(|row| {
                crate::store::parse_resolutions(
                    &self.pool.display,
                    user_id,
                    thread_id,
                    &row.get::<_, Vec<u8>>(0),
                )
            })
            .collect()
    }

    fn clear_resolutions(&self, user_id: &str, thread_id: &str, fingerprint: &str) -> Result<()> {
        let mut client = self.pool.get()?;
        client
            .execute(
                "DELETE FROM resolutions WHERE user_id = $1 AND thread_id = $2 AND fingerprint = $3",
                &[&user_id, &thread_id, &fingerprint],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(())
    }
}

impl DecisionLog for PostgresStore {
    fn log_decision(&self, entry: PendingLogEntry) {
        self.log_buffer.queue(entry, &self.dropped, || {
            let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            // A full queue wakes the writer anyway; a closed one drains.
            let _ = queue.as_ref().map(|q| q.try_send(Message::Drain));
        });
    }

    fn decision_log(&self, filter: &LogFilter, limit: usize) -> Result<Vec<(u64, LogEntry)>> {
        let verdict = filter
            .verdict
            .map(|v| writer::verdict_name(&v))
            .transpose()
            .map_err(|message| Error::store(&self.path, message))?;
        let mut client = self.pool.get()?;
        let rows = client
            .query(
                "SELECT seq, body FROM decisions WHERE ($1::text IS NULL OR session_id = $1) \
                 AND ($2::text IS NULL OR tool = $2) AND ($3::text IS NULL OR verdict = $3) \
                 ORDER BY seq DESC LIMIT $4",
                &[&filter.session, &filter.tool, &verdict, &(limit as i64)],
            )
            .map_err(|e| self.pool.error(e))?;
        let mut found: Vec<(u64, LogEntry)> = rows
            .into_iter()
            .filter_map(|row| {
                let seq: i64 = row.get(0);
                let body: Vec<u8> = row.get(1);
                serde_json::from_slice(&body).ok().map(|e| (seq as u64, e))
            })
            .collect();
        found.reverse();
        Ok(found)
    }
}

impl AuditTrail for PostgresStore {
    fn set_audit(&self, settings: Option<AuditSettings>) {
        self.settings.audit.set(settings);
    }

    fn audit(&self, record: AuditRecord) {
        self.settings.audit.push(record);
    }

    /// This host's chain (`[audit] host`): each host of a fleet keeps its
    /// own, so none waits for another's to append.
    fn audit_links(&self, after: Option<u64>, limit: usize) -> Result<AuditPage> {
        let mut page = AuditPage::default();
        let Some(host) = self.settings.audit.settings().map(|s| s.host) else {
            return Ok(page);
        };
        let mut client = self.pool.get()?;
        let from = after.map_or(0, |seq| i64_of(seq.saturating_add(1)));
        let rows = client
            .query(
                "SELECT seq, link FROM audit WHERE host = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
                &[&host, &from, &(limit.min(i64::MAX as usize) as i64)],
            )
            .map_err(|e| self.pool.error(e))?;
        for row in rows {
            let link: Vec<u8> = row.get(1);
            page.links.push((
                row.get::<_, i64>(0) as u64,
                String::from_utf8_lossy(&link).into_owned(),
            ));
        }
        page.head = client
            .query_opt("SELECT head FROM audit_heads WHERE host = $1", &[&host])
            .map_err(|e| self.pool.error(e))?
            .and_then(|row| serde_json::from_slice(&row.get::<_, Vec<u8>>(0)).ok());
        Ok(page)
    }
}

impl TurnStore for PostgresStore {
    fn next_turn(&self, session: &str) -> Result<u64> {
        let mut client = self.pool.get()?;
        let row = client
            .query_one(
                "INSERT INTO turns (session_id, turn, seen_at_ms) VALUES ($1, 1, $2) \
                 ON CONFLICT (session_id) DO UPDATE \
                 SET turn = turns.turn + 1, seen_at_ms = EXCLUDED.seen_at_ms RETURNING turn",
                &[&session, &i64_of(crate::now_ms())],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn turn(&self, session: &str) -> Result<u64> {
        let mut client = self.pool.get()?;
        let row = client
            .query_opt("SELECT turn FROM turns WHERE session_id = $1", &[&session])
            .map_err(|e| self.pool.error(e))?;
        Ok(row.map_or(0, |r| r.get::<_, i64>(0) as u64))
    }
}

impl TerminalStore for PostgresStore {
    fn record_agent_terminals(&self, keys: &[String]) -> Result<()> {
        let mut client = self.pool.get()?;
        let now = i64_of(crate::now_ms());
        for key in keys {
            client
                .execute(
                    "INSERT INTO agent_terminals (key, seen_at_ms) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET seen_at_ms = EXCLUDED.seen_at_ms",
                    &[key, &now],
                )
                .map_err(|e| self.pool.error(e))?;
        }
        Ok(())
    }

    fn is_agent_terminal(&self, keys: &[String]) -> Result<bool> {
        let mut client = self.pool.get()?;
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM agent_terminals WHERE key = ANY($1))",
                &[&keys],
            )
            .map_err(|e| self.pool.error(e))?;
        Ok(row.get(0))
    }
}

impl Maintenance for PostgresStore {
    fn set_log_config(&self, config: LogConfig) {
        self.settings.set_log(config);
    }

    fn set_retention(&self, retention: Retention) {
        self.settings.set_retention(retention);
    }

    fn sweep(&self) -> Result<SweepReport> {
        let retention = self.settings.retention();
        let mut client = self.pool.for_maintenance()?;
        writer::sweep(&mut client, &retention, crate::now_ms()).map_err(|e| self.pool.error(e))
    }

    fn log_config(&self) -> LogConfig {
        self.settings.log()
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn dropped_events(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    fn persist(&self) {
        let (done, wait) = mpsc::channel();
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let sent = queue
            .as_ref()
            .is_some_and(|q| q.send(Message::Flush(done)).is_ok());
        drop(queue);
        if sent {
            let _ = wait.recv();
        }
    }

    fn shutdown(&self) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(writer) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = writer.join();
        }
    }

    fn announce_reload(&self, pins: &crate::store::FleetPins) {
        if let Err(err) = self.reloads.announce(&self.pool, pins) {
            tracing::warn!(error = %err, "could not tell the fleet about this reload");
        }
    }

    fn reload_requested(&self) -> Option<crate::store::FleetPins> {
        self.reloads.requested()
    }

    fn stats(&self) -> Result<StoreStats> {
        let mut client = self.pool.for_maintenance()?;
        let mut tables = std::collections::BTreeMap::new();
        for table in schema::TABLES {
            let row = client
                .query_one(
                    &format!(
                        "SELECT count(*), coalesce(pg_total_relation_size('{table}'), 0) FROM {table}"
                    ),
                    &[],
                )
                .map_err(|e| self.pool.error(e))?;
            tables.insert(
                table.to_string(),
                TableStats {
                    rows: row.get::<_, i64>(0) as u64,
                    stored_bytes: row.get::<_, i64>(1) as u64,
                },
            );
        }
        let mut policies = std::collections::BTreeMap::<String, PolicyStats>::new();
        for row in client
            .query("SELECT policy, bytes FROM state_usage", &[])
            .map_err(|e| self.pool.error(e))?
        {
            policies.entry(row.get(0)).or_default().state_bytes = row.get::<_, i64>(1) as u64;
        }
        for row in client
            .query("SELECT policy, count(*) FROM events GROUP BY policy", &[])
            .map_err(|e| self.pool.error(e))?
        {
            policies.entry(row.get(0)).or_default().events = row.get::<_, i64>(1) as u64;
        }
        let file_bytes = client
            .query_one("SELECT pg_database_size(current_database())", &[])
            .map_err(|e| self.pool.error(e))?
            .get::<_, i64>(0) as u64;
        Ok(StoreStats {
            file_bytes,
            tables,
            policies,
        })
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.shutdown();
    }
}
