//! A blocking PostgreSQL connection whose every round trip has a deadline.
//!
//! The `postgres` crate blocks until the server answers: a stalled server
//! (SIGSTOPped, a hung host, a lock held by one) hung every decision that
//! waited on it for as long as the stall lasted. Here each connect, query
//! and commit runs on the connection's own small runtime under
//! [`tokio::time::timeout`]: past the deadline it fails with
//! [`PgError::TimedOut`], naming PostgreSQL, and the connection is not
//! used again (what it was doing is unknown); the next call connects anew,
//! so the store recovers by itself once the server answers again.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, GenericClient, Notification, Socket, Statement};

pub(crate) use tokio_postgres::Row;

/// The most statements a connection keeps prepared; past it a statement is
/// prepared for each use, as before it was kept. The store's statements are
/// a few dozen fixed texts.
const MAX_STATEMENTS: usize = 256;

/// One query parameter.
pub(crate) type Param<'a> = &'a (dyn ToSql + Sync);

/// Why a round trip to PostgreSQL failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PgError {
    /// The server or the driver said so.
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
    /// No answer within the deadline.
    #[error(
        "PostgreSQL did not answer within {} ms (it is stalled or unreachable); the \
         connection was dropped and the next call connects again",
        .0.as_millis()
    )]
    TimedOut(Duration),
    /// The connection is closed.
    #[error("the connection to PostgreSQL is closed")]
    Closed,
    /// The connection's runtime could not be made.
    #[error("cannot start a PostgreSQL connection: {0}")]
    Io(#[from] std::io::Error),
}

type Result<T> = std::result::Result<T, PgError>;

/// What drives a connection's socket, whatever its TLS.
trait Drive: Send {
    fn poll_message(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<AsyncMessage, tokio_postgres::Error>>>;
}

impl<T> Drive for tokio_postgres::Connection<Socket, T>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send,
{
    fn poll_message(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<AsyncMessage, tokio_postgres::Error>>> {
        tokio_postgres::Connection::poll_message(self, cx)
    }
}

/// The socket's side: the runtime its futures run on, the deadline, and
/// the notifications that came while a query ran.
struct Connection {
    runtime: tokio::runtime::Runtime,
    driver: Box<dyn Drive>,
    notifications: VecDeque<Notification>,
    deadline: Duration,
    /// Set when a round trip timed out or the socket failed.
    broken: bool,
    /// The statements prepared on this connection, by their text: a query
    /// by text alone is two round trips (prepare, then execute), a kept
    /// statement one.
    statements: HashMap<String, Statement>,
}

impl Connection {
    /// Run `future` while driving the socket, within the deadline.
    fn block_on<T>(
        &mut self,
        future: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> Result<T> {
        if self.broken {
            return Err(PgError::Closed);
        }
        let deadline = self.deadline;
        let (driver, notifications) = (&mut self.driver, &mut self.notifications);
        let mut future = pin!(future);
        let driven = std::future::poll_fn(|cx| {
            loop {
                match driver.poll_message(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(note)))) => {
                        notifications.push_back(note);
                    }
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(err))) => return Poll::Ready(Err(PgError::from(err))),
                    Poll::Ready(None) | Poll::Pending => break,
                }
            }
            future.as_mut().poll(cx).map_err(PgError::from)
        });
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(deadline, driven).await });
        let answer = answer.unwrap_or(Err(PgError::TimedOut(deadline)));
        if matches!(answer, Err(PgError::TimedOut(_) | PgError::Closed)) {
            self.broken = true;
        }
        if let Err(PgError::Postgres(err)) = &answer
            && err.code().is_some_and(stale_statement)
        {
            // Another host changed the schema under a kept statement: the
            // next use prepares it again.
            self.statements.clear();
        }
        answer
    }

    /// `sql` prepared on this connection, and whether it was kept from an
    /// earlier use (else it is prepared now, through `inner`: the client or
    /// its transaction).
    fn statement(&mut self, inner: &impl GenericClient, sql: &str) -> Result<(Statement, bool)> {
        if let Some(kept) = self.statements.get(sql) {
            return Ok((kept.clone(), true));
        }
        let statement = self.block_on(inner.prepare(sql))?;
        if self.statements.len() < MAX_STATEMENTS {
            self.statements.insert(sql.to_string(), statement.clone());
        }
        Ok((statement, false))
    }
}

/// Whether a refusal means a kept statement no longer fits the schema
/// (`cached plan must not change result type`) or no longer exists.
fn stale_statement(code: &SqlState) -> bool {
    *code == SqlState::FEATURE_NOT_SUPPORTED || *code == SqlState::INVALID_SQL_STATEMENT_NAME
}

/// Whether `answer` failed because a statement `kept` from an earlier use
/// no longer fits the schema, where running it again can succeed: outside
/// a transaction (inside one, the refusal has aborted it).
fn retry_fresh<T>(answer: &Result<T>, kept: bool, in_transaction: bool) -> bool {
    matches!(answer, Err(PgError::Postgres(err)) if err.code().is_some_and(stale_statement))
        && kept
        && !in_transaction
}

/// A connection to PostgreSQL.
pub(crate) struct Client {
    connection: Connection,
    client: tokio_postgres::Client,
}

impl Client {
    /// Connect as `config` says, over `tls`, within `deadline` (which then
    /// bounds each round trip).
    pub(crate) fn connect<T>(
        config: &tokio_postgres::Config,
        tls: T,
        deadline: Duration,
    ) -> Result<Self>
    where
        T: MakeTlsConnect<Socket> + 'static,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let connecting = async { tokio::time::timeout(deadline, config.connect(tls)).await };
        let (client, connection) = runtime
            .block_on(connecting)
            .map_err(|_| PgError::TimedOut(deadline))??;
        Ok(Self {
            connection: Connection {
                runtime,
                driver: Box::new(connection),
                notifications: VecDeque::new(),
                deadline,
                broken: false,
                statements: HashMap::new(),
            },
            client,
        })
    }

    /// Whether the connection can no longer be used.
    pub(crate) fn is_closed(&self) -> bool {
        self.connection.broken || self.client.is_closed()
    }

    /// Give each round trip `deadline` from now on (maintenance that may
    /// rightly take long: a sweep, a copy, a migration).
    pub(crate) fn set_deadline(&mut self, deadline: Duration) {
        self.connection.deadline = deadline;
    }

    /// Begin a transaction; it rolls back unless committed.
    pub(crate) fn transaction(&mut self) -> Result<Transaction<'_>> {
        let Self { connection, client } = self;
        let inner = connection.block_on(client.transaction())?;
        Ok(Transaction {
            connection,
            inner: Some(inner),
        })
    }

    /// The next notification (of a channel this connection `LISTEN`s on),
    /// waiting up to `wait`; none if none came.
    pub(crate) fn notification(&mut self, wait: Duration) -> Result<Option<Notification>> {
        if let Some(note) = self.connection.notifications.pop_front() {
            return Ok(Some(note));
        }
        let connection = &mut self.connection;
        let (driver, notifications) = (&mut connection.driver, &mut connection.notifications);
        // A timer is made inside its runtime.
        let mut slept = {
            let _inside = connection.runtime.enter();
            Box::pin(tokio::time::sleep(wait))
        };
        let heard = std::future::poll_fn(|cx| {
            loop {
                match driver.poll_message(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(note)))) => {
                        return Poll::Ready(Ok(Some(note)));
                    }
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(err))) => return Poll::Ready(Err(PgError::from(err))),
                    Poll::Ready(None) => return Poll::Ready(Err(PgError::Closed)),
                    Poll::Pending => break,
                }
            }
            match slept.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Ok(notifications.pop_front())),
                Poll::Pending => Poll::Pending,
            }
        });
        let heard = connection.runtime.block_on(heard);
        if heard.is_err() {
            connection.broken = true;
        }
        heard
    }
}

/// A transaction on a [`Client`]; dropped without [`Transaction::commit`],
/// it rolls back there and then (tokio-postgres would only queue the
/// rollback, and the connection, idle in the pool, would keep its locks).
pub(crate) struct Transaction<'a> {
    connection: &'a mut Connection,
    inner: Option<tokio_postgres::Transaction<'a>>,
}

impl Transaction<'_> {
    /// Commit it.
    pub(crate) fn commit(mut self) -> Result<()> {
        let inner = self
            .inner
            .take()
            .expect("present until committed or dropped");
        self.connection.block_on(inner.commit())
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // A failed rollback leaves the connection marked broken.
            let _ = self.connection.block_on(inner.rollback());
        }
    }
}

/// The queries a connection and a transaction both run.
pub(crate) trait Queries {
    /// The rows `sql` returns.
    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>>;
    /// Exactly one row.
    fn query_one(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Row>;
    /// At most one row.
    fn query_opt(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>>;
    /// How many rows `sql` changed.
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64>;
    /// Several statements, no parameters.
    fn batch_execute(&mut self, sql: &str) -> Result<()>;
}

/// What [`Queries`] runs on: the connection, and the client or the
/// transaction whose queries it drives.
trait Parts {
    type Inner: GenericClient;
    /// Whether its queries run inside a transaction.
    const IN_TRANSACTION: bool;
    fn parts(&mut self) -> (&mut Connection, &Self::Inner);
}

impl Parts for Client {
    type Inner = tokio_postgres::Client;
    const IN_TRANSACTION: bool = false;
    fn parts(&mut self) -> (&mut Connection, &Self::Inner) {
        (&mut self.connection, &self.client)
    }
}

impl<'a> Parts for Transaction<'a> {
    type Inner = tokio_postgres::Transaction<'a>;
    const IN_TRANSACTION: bool = true;
    fn parts(&mut self) -> (&mut Connection, &Self::Inner) {
        let inner = self
            .inner
            .as_ref()
            .expect("present until committed or dropped");
        (&mut *self.connection, inner)
    }
}

/// Run `$call` (an expression over `$inner` and `$statement`) with `$sql`
/// prepared on the connection of `$parts`; when the statement was kept and
/// the schema changed under it, once more, freshly prepared (the refusal
/// cleared what was kept), where the transaction allows.
macro_rules! prepared {
    ($parts:ident, $sql:ident, |$inner:ident, $statement:ident| $call:expr) => {{
        let (connection, $inner) = $parts.parts();
        let (statement, kept) = connection.statement($inner, $sql)?;
        let $statement = &statement;
        let answer = connection.block_on($call);
        if !retry_fresh(&answer, kept, P::IN_TRANSACTION) {
            return answer;
        }
        let (statement, _) = connection.statement($inner, $sql)?;
        let $statement = &statement;
        connection.block_on($call)
    }};
}

impl<P: Parts> Queries for P {
    fn query(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        prepared!(self, sql, |inner, statement| GenericClient::query(
            inner, statement, params
        ))
    }
    fn query_one(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Row> {
        prepared!(self, sql, |inner, statement| GenericClient::query_one(
            inner, statement, params
        ))
    }
    fn query_opt(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<Row>> {
        prepared!(self, sql, |inner, statement| GenericClient::query_opt(
            inner, statement, params
        ))
    }
    fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        prepared!(self, sql, |inner, statement| GenericClient::execute(
            inner, statement, params
        ))
    }
    fn batch_execute(&mut self, sql: &str) -> Result<()> {
        let (connection, inner) = self.parts();
        // Several statements, unprepared: a migration may change what the
        // kept statements were prepared against.
        connection.statements.clear();
        connection.block_on(GenericClient::batch_execute(inner, sql))
    }
}
