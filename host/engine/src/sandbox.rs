//! The per-evaluation sandbox: what one wasmtime `Store` holds.
//!
//! WASI is linked deny-by-default: the context has no preopened directories,
//! no environment, no arguments, no stdin, no sockets and no name lookup, so
//! std's WASI imports resolve but return errors. Stdout and stderr go to a
//! bounded in-memory sink that the host forwards to its log after each call.
//! Memory growth is capped per policy, and a denied growth is recorded so a
//! resulting trap is classified as "memory limit", not guessed from text.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::config::Limits;
use crate::store::{EventStore, Role, StateStore, Store};

/// Everything a policy's store holds for one evaluation.
pub(crate) struct SandboxState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) output: LogSink,
    pub(crate) call: CallContext,
    /// The deadline of the call into the policy now running.
    pub(crate) deadline: Option<CallDeadline>,
}

impl SandboxState {
    pub(crate) fn new(call: CallContext, memory_bytes: usize, log_bytes: usize) -> Self {
        let output = LogSink::new(log_bytes);
        let wasi = WasiCtxBuilder::new()
            .stdout(output.clone())
            .stderr(output.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .wall_clock(SteadyWallClock)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter::new(memory_bytes),
            output,
            call,
            deadline: None,
        }
    }
}

/// The policies' wall clock (`wasi:clocks/wall-clock`) is the host's
/// ([`crate::now`]): a system clock stepped back cannot keep a lease a
/// policy granted alive.
struct SteadyWallClock;

impl wasmtime_wasi::HostWallClock for SteadyWallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        crate::now()
    }
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps linear memory (and table) growth and remembers whether it refused.
pub(crate) struct MemoryLimiter {
    memory_bytes: usize,
    pub(crate) refused: bool,
}

/// Generous, fixed caps on things a policy has no reason to grow.
const MAX_TABLE_ELEMENTS: usize = 100_000;
const MAX_INSTANCES: usize = 64;

impl MemoryLimiter {
    fn new(memory_bytes: usize) -> Self {
        Self {
            memory_bytes,
            refused: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.memory_bytes;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= MAX_TABLE_ELEMENTS;
        self.refused |= !allowed;
        Ok(allowed)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_INSTANCES
    }
}

/// A bounded sink for a policy's stdout and stderr. It accepts every write
/// (so a chatty policy never fails because of it) but keeps only the first
/// `capacity` bytes and counts the rest.
#[derive(Clone)]
pub(crate) struct LogSink(Arc<Mutex<SinkBuffer>>);

struct SinkBuffer {
    kept: Vec<u8>,
    /// Bytes of the budget used: kept output plus host `log` lines.
    used: usize,
    capacity: usize,
    dropped: u64,
}

impl LogSink {
    fn new(capacity: usize) -> Self {
        Self(Arc::new(Mutex::new(SinkBuffer {
            kept: Vec::new(),
            used: 0,
            capacity,
            dropped: 0,
        })))
    }

    fn keep(&self, bytes: &[u8]) {
        let mut buffer = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let take = buffer.capacity.saturating_sub(buffer.used).min(bytes.len());
        buffer.kept.extend_from_slice(&bytes[..take]);
        buffer.used += take;
        buffer.dropped += (bytes.len() - take) as u64;
    }

    /// Empty the sink and restore its whole budget, for a new evaluation.
    pub(crate) fn reset(&self) {
        let mut buffer = self.0.lock().unwrap_or_else(|p| p.into_inner());
        buffer.kept.clear();
        buffer.used = 0;
        buffer.dropped = 0;
    }

    /// The output kept so far and how many bytes were dropped; empties the
    /// sink.
    pub(crate) fn take(&self) -> (String, u64) {
        let mut buffer = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let text = String::from_utf8_lossy(&buffer.kept).into_owned();
        buffer.kept.clear();
        (text, std::mem::take(&mut buffer.dropped))
    }

    /// Charge a host `log` line against the same budget; false (and
    /// counted as dropped) when it does not fit.
    pub(crate) fn charge(&self, len: usize) -> bool {
        let mut buffer = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if buffer.used + len > buffer.capacity {
            buffer.dropped += len as u64;
            return false;
        }
        buffer.used += len;
        true
    }
}

impl IsTerminal for LogSink {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogSink {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogSink {
    async fn ready(&mut self) {}
}

impl OutputStream for LogSink {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for LogSink {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.keep(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// What the capabilities need to serve one policy for one evaluation, and
/// what it has used of its per-evaluation host-call budgets.
pub(crate) struct CallContext {
    /// The plugin's name: its namespace.
    pub policy: Arc<str>,
    /// The store's state role: the state capability reaches nothing else.
    pub state: Role<dyn StateStore>,
    /// The store's event role: the events capability reaches nothing else.
    pub events: Role<dyn EventStore>,
    /// The policy's config table, as `wasi:config/store` serves it.
    pub config: Arc<[(String, String)]>,
    /// Byte cap on the policy's state namespace.
    pub state_quota: u64,
    /// The transcript the runtime named for this call, if any, and the
    /// user who must own it (a tenant's call: see [`crate::hooks::transcript`]).
    pub transcript: Option<(PathBuf, Option<u32>)>,
    /// Host cap on one transcript-tail read.
    pub transcript_cap: u32,
    /// Lines the policy logged in this evaluation (`level: message`).
    pub logs: Vec<String>,
    /// Transcript bytes read for this policy in this evaluation.
    pub transcript_bytes: u64,
    /// When the call into the policy now running must end, whatever it
    /// waits for.
    pub wall_deadline: Option<Instant>,
    /// Events appended in this evaluation, and the most allowed.
    pub events_appended: u32,
    pub events_per_call: u32,
    /// The snapshot the policy's reads in the call now running see: taken
    /// at its first read, dropped after the policy's own writes (so it reads
    /// them) and when the call ends (so the next one sees what others
    /// wrote). One read transaction per call instead of one per read.
    pub reads: Option<Box<dyn crate::store::StateSnapshot>>,
    /// Set while a phase that must be pure runs (visibility): state
    /// writes and event appends are refused.
    pub read_only: bool,
    /// The call in hand's session, files and directories, for the flow
    /// labels; none for an operator's command or a spare being opened.
    pub flow: Option<crate::flows::FlowScope>,
}

impl CallContext {
    /// A fresh context for one evaluation of the plugin `policy`.
    pub(crate) fn new(
        policy: Arc<str>,
        limits: &Limits,
        store: &Arc<Store>,
        config: Arc<[(String, String)]>,
        transcript: Option<(PathBuf, Option<u32>)>,
        transcript_cap: u32,
    ) -> Self {
        Self {
            policy,
            state: store.state_role(),
            events: store.event_role(),
            config,
            state_quota: limits.state_max_bytes,
            transcript,
            transcript_cap,
            logs: Vec::new(),
            transcript_bytes: 0,
            wall_deadline: None,
            events_appended: 0,
            events_per_call: limits.events_per_call,
            reads: None,
            read_only: false,
            flow: None,
        }
    }
}

/// A call's CPU deadline, never past its wall-clock ceiling.
pub(crate) struct CallDeadline {
    started: Instant,
    budget: Duration,
}

impl CallDeadline {
    pub(crate) fn start(budget: Duration) -> Self {
        Self::started_at(Instant::now(), budget)
    }

    /// One started at `started` (a clock read the caller already made).
    pub(crate) fn started_at(started: Instant, budget: Duration) -> Self {
        Self { started, budget }
    }

    /// The budget it was given.
    pub(crate) fn budget(&self) -> Duration {
        self.budget
    }

    /// How long the call has run.
    pub(crate) fn ran(&self) -> Duration {
        self.started.elapsed()
    }

    /// What is left of the budget, and never past the wall-clock ceiling.
    pub(crate) fn remaining(&self, wall: Option<Instant>) -> Option<Duration> {
        let left = self.budget.checked_sub(self.started.elapsed())?;
        let left = match wall {
            Some(wall) => left.min(wall.saturating_duration_since(Instant::now())),
            None => left,
        };
        (!left.is_zero()).then_some(left)
    }
}
