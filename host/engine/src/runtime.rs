//! The wasmtime side: one engine with an epoch ticker (`epoch.rs`), components compiled
//! once and cached on disk by content hash and engine settings, an
//! `InstancePre` per plugin, and a fresh `Store` per evaluation.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker};
use wasmtime::{Config, Engine, Store, Trap, UpdateDeadline};

use crate::bindings::toolgate::policy::types as wit;
use crate::bindings::{ExportIndices, Full, PolicyExports, WIT_PACKAGE, WIT_VERSION};
use crate::bounds;
use crate::cache::ArtifactCache;
use crate::chores::{ChoreQueue, Chores};
use crate::config::Limits;
use crate::epoch::EpochTicker;
use crate::error::PluginProblem;
use crate::sandbox::{CallContext, CallDeadline, SandboxState};

/// Set (to anything but `0`) to have the engine write the compiled
/// policies' function names to `/tmp/perf-<pid>.map`, so that `perf` can
/// say which of a policy's own functions its time goes to (Linux).
pub const PERF_MAP_ENV: &str = "TOOLGATE_PERF_MAP";

/// The most of a memory's (or table's) written bytes reset in place, rather
/// than unmapped, when its instance is dropped (see `Runtime::new`).
const KEEP_RESIDENT_MEMORY: usize = 4 << 20;
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

/// The shared wasmtime engine and linker.
pub(crate) struct Runtime {
    /// Instance churn off the decision path. Dropped (stopped and joined)
    /// first, so no chore outlives the engine's owner.
    chores: Chores,
    /// The engine and its epoch clock.
    instances: Instantiator,
    linker: Linker<SandboxState>,
    cache: Option<ArtifactCache>,
}

impl Runtime {
    /// The engine, with `slots` instances live at most (see
    /// [`crate::Config::instance_slots`]) and compiled components cached in
    /// `cache_dir`; cache entries unused for `cache_max_age` are evicted now.
    pub(crate) fn new(
        slots: u32,
        cache_dir: Option<PathBuf>,
        cache_max_age: Duration,
    ) -> wasmtime::Result<Self> {
        let cache = cache_dir.and_then(|dir| ArtifactCache::open(&dir, cache_max_age));
        let mut config = Config::new();
        config.epoch_interruption(true);
        if std::env::var_os(PERF_MAP_ENV).is_some_and(|v| v != "0") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        // Fresh instances are frequent (one per user and session, see
        // `pool.rs`): slots prepared in advance, memory images mapped
        // copy-on-write, make them cheap.
        let mut pooling = wasmtime::PoolingAllocationConfig::default();
        pooling
            .total_component_instances(slots)
            .total_core_instances(slots * 4)
            .total_memories(slots * 2)
            .total_tables(slots * 4)
            .max_memory_size(4 << 30);
        // A slot's memory goes back to its initial image when an instance
        // is dropped. By default that is an `madvise` of the whole memory,
        // and the next instance page-faults every page it touches again
        // (with a TLB shootdown across cores). Where the kernel can report
        // which pages were written (`PAGEMAP_SCAN`, Linux 6.7+), only those
        // are reset, in place, and stay resident. Without it, resetting by
        // `memset` would cost more than it saves, so the default stays.
        if wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
            pooling
                .pagemap_scan(wasmtime::Enabled::Yes)
                .linear_memory_keep_resident(KEEP_RESIDENT_MEMORY)
                .table_keep_resident(KEEP_RESIDENT_TABLE);
        }
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pooling));
        let engine = Engine::new(&config)?;
        let ticker = Arc::new(EpochTicker::start(&engine)?);
        let chores = Chores::start()?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        Full::add_to_linker::<_, HasSelf<SandboxState>>(&mut linker, |state| state)?;
        Ok(Self {
            chores,
            instances: Instantiator { engine, ticker },
            linker,
            cache,
        })
    }

    /// Where work that need not delay a decision goes.
    pub(crate) fn chores(&self) -> &ChoreQueue {
        self.chores.queue()
    }

    /// What makes instances (a chore takes a clone along).
    pub(crate) fn instantiator(&self) -> &Instantiator {
        &self.instances
    }

    /// Compile (or load from cache), check the contract, and pre-link.
    pub(crate) fn prepare(&self, bytes: &[u8], digest: &str) -> Result<Prepared, PluginProblem> {
        check_is_component(bytes)?;
        let component = self.compile(bytes, digest)?;
        check_contract(&self.instances.engine, &component)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|err| PluginProblem::Invalid(format!("{err:#}")))?;
        let exports = ExportIndices::new(&pre)?;
        Ok(Prepared { pre, exports })
    }

    /// The names a component exports and imports (compiling it if needed).
    pub(crate) fn interface_names(
        &self,
        bytes: &[u8],
        digest: &str,
    ) -> Result<(Vec<String>, Vec<String>), PluginProblem> {
        check_is_component(bytes)?;
        let component = self.compile(bytes, digest)?;
        let ty = component.component_type();
        let exports = ty
            .exports(&self.instances.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let imports = ty
            .imports(&self.instances.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        Ok((exports, imports))
    }

    fn compile(&self, bytes: &[u8], digest: &str) -> Result<Component, PluginProblem> {
        let engine = &self.instances.engine;
        let entry = self.cache.as_ref().map(|cache| {
            let mut engine_hash = HashWriter(Sha256::new());
            std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut engine_hash);
            cache.entry(digest, &hex::encode(engine_hash.0.finalize()))
        });
        if let Some(artifact) = entry.as_ref().and_then(|e| e.load()) {
            // SAFETY: deserialising runs native code from the artifact. The
            // entry verified under the cache's key for this component's
            // sha256 and this engine (see `cache`), so toolgate itself
            // compiled it from these bytes.
            match unsafe { Component::deserialize(engine, &artifact) } {
                Ok(component) => return Ok(component),
                Err(err) => tracing::warn!(error = %err, "unusable cache entry; recompiling"),
            }
        }
        let component = Component::new(engine, bytes)
            .map_err(|err| PluginProblem::Invalid(format!("{err:#}")))?;
        if let Some(entry) = &entry {
            match component.serialize() {
                Ok(artifact) => entry.store(&artifact),
                Err(err) => tracing::warn!(error = %err, "cannot serialise a compiled component"),
            }
        }
        Ok(component)
    }
}

/// The engine and its epoch clock: what making an instance needs, apart
/// from the plugin.
#[derive(Clone)]
pub(crate) struct Instantiator {
    engine: Engine,
    ticker: Arc<EpochTicker>,
}

impl Instantiator {
    /// A fresh store and instance for one evaluation of a plugin.
    pub(crate) fn instantiate(
        &self,
        prepared: &Prepared,
        limits: &Limits,
        call: CallContext,
    ) -> Result<PolicyInstance, PolicyFailure> {
        let state = SandboxState::new(
            call,
            limits.memory_mib.get() as usize * 1024 * 1024,
            limits.log_max_bytes as usize,
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        // What one copy out of the sandbox may be: a larger return is
        // refused before it is copied (see `bounds`).
        store.set_hostcall_fuel(crate::bounds::hostcall_fuel(limits));
        let deadline = Duration::from_millis(u64::from(limits.deadline_ms.get()));
        store.data_mut().deadline = Some(CallDeadline::start(deadline));
        store.set_epoch_deadline(LOOK_EVERY);
        let ticker = Arc::clone(&self.ticker);
        store.epoch_deadline_callback(move |ctx| {
            let state = ctx.data();
            let Some(deadline) = &state.deadline else {
                return Ok(UpdateDeadline::Continue(1));
            };
            match deadline.remaining(state.call.wall_deadline) {
                Some(_) => {
                    ticker.take_turns();
                    Ok(UpdateDeadline::Continue(LOOK_EVERY))
                }
                None => Ok(UpdateDeadline::Interrupt),
            }
        });
        let running = self.ticker.running();
        let instance = prepared
            .pre
            .instantiate(&mut store)
            .and_then(|instance| prepared.exports.load(&mut store, &instance));
        drop(running);
        match instance {
            Ok(policy) => Ok(PolicyInstance {
                store,
                policy,
                ticker: Arc::clone(&self.ticker),
                deadline,
                wall_clock: limits.wall_clock(),
                failed: false,
            }),
            Err(err) => Err(classify(&err, store.data())),
        }
    }
}

/// A compiled, pre-linked policy and where its exports are.
pub(crate) struct Prepared {
    pub(crate) pre: InstancePre<SandboxState>,
    pub(crate) exports: ExportIndices,
}

/// A live instance for one evaluation.
pub(crate) struct PolicyInstance {
    pub(crate) store: Store<SandboxState>,
    pub(crate) policy: PolicyExports,
    /// Keeps the epoch advancing while a call runs.
    ticker: Arc<EpochTicker>,
    deadline: Duration,
    /// The hard ceiling on one call, host waits included.
    wall_clock: Duration,
    /// A call into it failed: it must never be reused.
    pub(crate) failed: bool,
}

impl PolicyInstance {
    /// Call into the policy with a fresh deadline; a failure is classified
    /// by type and the store's output is forwarded to the log either way.
    pub(crate) fn call<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&PolicyExports, &mut Store<SandboxState>) -> wasmtime::Result<T>,
    ) -> Result<T, PolicyFailure> {
        let state = self.store.data_mut();
        let now = Instant::now();
        state.deadline = Some(CallDeadline::started_at(now, self.deadline));
        state.call.wall_deadline = Some(now + self.wall_clock);
        self.store.set_epoch_deadline(LOOK_EVERY);
        let running = self.ticker.running();
        let result = f(&self.policy, &mut self.store);
        drop(running);
        // The next call reads what others wrote meanwhile.
        self.store.data_mut().call.reads = None;
        self.forward_output(what);
        self.failed |= result.is_err();
        result.map_err(|err| classify(&err, self.store.data()))
    }

    /// Build the instance from its config (`gate.open`); a refusal names
    /// the key when the policy did.
    pub(crate) fn open(&mut self) -> Result<(), PolicyFailure> {
        self.call("open", |p, s| p.gate.call_open(s))?
            .map_err(|err| PolicyFailure::Config {
                key: err.key.map(|key| bounds::cut(key, bounds::ERROR_TEXT)),
                message: bounds::cut(err.message, bounds::ERROR_TEXT),
            })
    }

    /// Start evaluating `call` on this instance (`gate.begin`): the call
    /// crosses into the sandbox once, and the phases that follow read it.
    pub(crate) fn begin(&mut self, call: &wit::ToolCall) -> Result<(), PolicyFailure> {
        self.call("begin", |p, s| p.gate.call_begin(s, call))
    }

    /// Hand the model's reply to the policy's `verdict.parse`. A policy that
    /// asked without exporting it, whose parser refuses the reply, or that
    /// asks again, has failed (its fail mode applies).
    pub(crate) fn parse_reply(
        &mut self,
        reply: &wit::ModelReply,
    ) -> Result<wit::Decision, PolicyFailure> {
        if self.policy.verdict.is_none() {
            self.failed = true;
            return Err(PolicyFailure::Other(format!(
                "asked the model but does not export {WIT_PACKAGE}/verdict@{WIT_VERSION} to read the reply"
            )));
        }
        let decision = self
            .call("parse", |p, s| match &p.verdict {
                Some(verdict) => verdict.call_parse(s, reply),
                None => unreachable!("checked above"),
            })?
            .map_err(|message| {
                PolicyFailure::Other(format!(
                    "could not parse the model's reply: {}",
                    bounds::cut(message, bounds::ERROR_TEXT)
                ))
            });
        let decision = decision.and_then(|decision| match decision.verdict {
            wit::Verdict::AskModel(_) => Err(PolicyFailure::Other(
                "asked the model again while parsing its reply (one question per decision)".into(),
            )),
            _ => Ok(decision),
        });
        self.failed |= decision.is_err();
        decision
    }

    /// Tell the policy what happened to a call, if it exports `observe`.
    pub(crate) fn observe(&mut self, event: &wit::ToolEvent) -> Result<(), PolicyFailure> {
        if self.policy.observe.is_none() {
            return Ok(());
        }
        self.call("observe", |p, s| match &p.observe {
            Some(observe) => observe.call_observe(s, event),
            None => unreachable!("checked above"),
        })
    }

    /// What the model may see of a tool's output (`output.check`).
    pub(crate) fn check_output(
        &mut self,
        output: &wit::ToolResult,
    ) -> Result<wit::ResultVerdict, PolicyFailure> {
        self.call("check-output", |p, s| match &p.output {
            Some(checker) => checker.call_check(s, output),
            None => unreachable!("only called on policies that export it"),
        })
    }

    /// Which of `tools` may be offered to `caller` (`visibility.visible`):
    /// one answer per tool, or a failure.
    pub(crate) fn visible(
        &mut self,
        caller: &wit::Caller,
        tools: &[wit::ToolDescriptor],
    ) -> Result<Vec<bool>, PolicyFailure> {
        // Pure, as the WIT says: its writes are refused.
        self.store.data_mut().call.read_only = true;
        let answers = self.call("visible", |p, s| match &p.visibility {
            Some(filter) => filter.call_visible(s, caller, tools),
            None => unreachable!("only called on policies that export it"),
        });
        self.store.data_mut().call.read_only = false;
        let answers = answers?;
        if answers.len() != tools.len() {
            self.failed = true;
            return Err(PolicyFailure::Other(format!(
                "answered {} times for {} tools",
                answers.len(),
                tools.len()
            )));
        }
        Ok(answers)
    }

    /// Prepare a warm instance for another evaluation: new per-call context
    /// (fresh host-call budgets), a clean memory-limit record, and an empty
    /// output buffer with its whole log budget.
    pub(crate) fn reset(&mut self, call: CallContext) {
        let state = self.store.data_mut();
        state.call = call;
        state.limiter.refused = false;
        state.deadline = None;
        state.output.reset();
    }

    fn forward_output(&self, what: &'static str) {
        let state = self.store.data();
        let (text, dropped) = state.output.take();
        let policy = &*state.call.policy;
        for line in text.lines().filter(|l| !l.is_empty()) {
            tracing::info!(policy, phase = what, "policy output: {line}");
        }
        if dropped > 0 {
            tracing::warn!(
                policy,
                phase = what,
                dropped,
                "policy output over its log limit was dropped"
            );
        }
    }
}

/// A config refusal as one line: the key first, when there is one.
pub(crate) fn refusal(key: Option<&str>, message: &str) -> String {
    match key {
        Some(key) => format!("`{key}`: {message}"),
        None => message.to_string(),
    }
}

/// The ticks until a running call's deadline is looked at again: every
/// tick, since a tick is only as regular as the ticker thread gets a core.
/// Each look reads the wall clock (see `CallDeadline::remaining`), so under
/// load a deadline ends within a tick of its time, not after its count of
/// slowed ticks (16 looping calls on 2 cores ran a 200 ms deadline 1.6–1.7×
/// when it was counted in ticks; now about 1.05×). A look costs a clock
/// read.
const LOOK_EVERY: u64 = 1;

/// Why a call into a policy failed, classified by type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFailure {
    /// Ran past its deadline (epoch interruption): how long the call
    /// had run when it was cut, so an operator sees how close to the
    /// deadline the cut came.
    #[error("exceeded its deadline: cut after {ran_ms} ms of a {deadline_ms} ms deadline")]
    Deadline {
        /// The call's deadline (`deadline_ms`).
        deadline_ms: u64,
        /// How long the call had run, in wall time.
        ran_ms: u64,
    },
    /// Tried to grow memory past its cap.
    #[error("exceeded its memory limit")]
    MemoryLimit,
    /// Recursed past the wasm stack limit.
    #[error("overflowed its stack")]
    StackOverflow,
    /// Trapped (a panic is `unreachable`).
    #[error("trapped: {0}")]
    Trap(String),
    /// Refused its configuration (`gate.open`), naming the key (or a path
    /// into its table, `rule[2].action`) when it could.
    #[error("refused its configuration: {}", refusal(key.as_deref(), message))]
    Config {
        /// The key or key path to blame.
        key: Option<String>,
        /// What is wrong and the fix.
        message: String,
    },
    /// Returned more than its output limit.
    #[error("returned {bytes} bytes of reason and notes, over its {limit}-byte limit")]
    OutputTooLarge {
        /// What it returned.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Rewrote the call into arguments the host refuses (not a JSON
    /// object, over the size cap, refused by the tool's schema, or with a
    /// verdict other than allow).
    #[error("rewrote the call badly: {0}")]
    BadRewrite(String),
    /// Could not start: every instance slot of the process is taken
    /// (wasmtime's pool limit, named).
    #[error("found no free instance slot ({0}); raise `instance_slots` in the config")]
    NoInstanceSlot(String),
    /// Any other error from the runtime.
    #[error("failed: {0}")]
    Other(String),
}

fn classify(err: &wasmtime::Error, state: &SandboxState) -> PolicyFailure {
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => {
            // Set while any call runs, so always there when one is cut.
            let (deadline_ms, ran_ms) = state.deadline.as_ref().map_or((0, 0), |deadline| {
                let ms = |d: Duration| d.as_millis() as u64;
                (ms(deadline.budget()), ms(deadline.ran()))
            });
            PolicyFailure::Deadline {
                deadline_ms,
                ran_ms,
            }
        }
        Some(Trap::StackOverflow) => PolicyFailure::StackOverflow,
        Some(_) if state.limiter.refused => PolicyFailure::MemoryLimit,
        Some(trap) => PolicyFailure::Trap(trap.to_string()),
        None if state.limiter.refused => PolicyFailure::MemoryLimit,
        None if err
            .downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
            .is_some() =>
        {
            PolicyFailure::NoInstanceSlot(err.to_string())
        }
        // Not a trap: an error of the runtime's, such as a copy past the
        // host-call fuel (whose type wasmtime does not export).
        None => PolicyFailure::Other(bounds::cut(format!("{err:#}"), bounds::ERROR_TEXT)),
    }
}

/// Refuse core modules and non-wasm files with a message that says which.
fn check_is_component(bytes: &[u8]) -> Result<(), PluginProblem> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(PluginProblem::NotAComponent("not WebAssembly at all"));
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes[6..8] == [0, 0] {
        return Err(PluginProblem::NotAComponent(
            "a core WebAssembly module, not a component",
        ));
    }
    Ok(())
}

/// Check the component targets a compatible `toolgate:policy` and imports
/// nothing we do not provide, naming the offending item.
fn check_contract(engine: &Engine, component: &Component) -> Result<(), PluginProblem> {
    let ty = component.component_type();
    let gate_prefix = format!("{WIT_PACKAGE}/gate@");
    let exports: Vec<String> = ty
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    let Some(gate) = exports.iter().find(|name| name.starts_with(&gate_prefix)) else {
        return Err(PluginProblem::MissingExport(format!(
            "{WIT_PACKAGE}/gate@{WIT_VERSION}"
        )));
    };
    let found = &gate[gate_prefix.len()..];
    if !compatible(found) {
        return Err(PluginProblem::IncompatibleVersion {
            found: found.to_string(),
            supported: WIT_VERSION,
        });
    }
    for (name, _) in ty.imports(engine) {
        let ours = name
            .strip_prefix(&format!("{WIT_PACKAGE}/"))
            .and_then(|rest| rest.split_once('@'))
            .is_some_and(|(_, version)| compatible(version));
        if !ours && !name.starts_with("wasi:") {
            return Err(PluginProblem::UnknownImport(name.to_string()));
        }
    }
    Ok(())
}

/// Same major version; for 0.x the same minor too (semver's rule).
fn compatible(version: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split('.');
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(version), parts(WIT_VERSION)) {
        (Some((major, minor)), Some((our_major, our_minor))) => {
            major == our_major && (major != 0 || minor == our_minor)
        }
        _ => false,
    }
}

/// Feeds `Hash` output into a SHA-256 so the engine hash is stable on disk.
struct HashWriter(Sha256);

impl std::hash::Hasher for HashWriter {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The sha256 of a plugin's bytes, hex.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_compatibility_follows_semver() {
        assert!(compatible("0.4.0"));
        assert!(compatible("0.4.7"));
        assert!(!compatible("0.1.0"));
        assert!(!compatible("0.2.0"));
        assert!(!compatible("0.3.0"));
        assert!(!compatible("1.0.0"));
        assert!(!compatible("garbage"));
    }

    #[test]
    fn non_components_are_told_apart() {
        assert!(matches!(
            check_is_component(b"hello world"),
            Err(PluginProblem::NotAComponent("not WebAssembly at all"))
        ));
        let core = b"\0asm\x01\0\0\0";
        assert!(matches!(
            check_is_component(core),
            Err(PluginProblem::NotAComponent(m)) if m.contains("core")
        ));
    }
}
