//! The engine's epoch clock: policy deadlines are counted in its ticks, and
//! it ticks only while guest code may run.
//!
//! A 1 kHz ticker that never stops wakes an idle daemon a thousand times a
//! second. This one parks after a quiet spell and is woken by the next call
//! into a guest; while calls keep coming it stays awake, so a busy host pays
//! no wake-up (a syscall) per call, only two atomic updates.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances while guests may run.
pub(crate) const TICK: Duration = Duration::from_millis(1);

/// Ticks without any call into a guest before the ticker parks (~100 ms).
const QUIET_TICKS: u32 = 100;

/// The ticker thread and what callers share with it. Stops when dropped.
pub(crate) struct EpochTicker {
    shared: Arc<Shared>,
    thread: Thread,
}

struct Shared {
    /// Calls into guests running now.
    running: AtomicUsize,
    /// The cores this process may run on: more guest calls running than
    /// this take turns (see [`EpochTicker::take_turns`]).
    cores: usize,
    /// Calls into guests started so far: tells the ticker whether a call
    /// came and went while it slept.
    started: AtomicU64,
    /// The ticker is parked (or about to park): the next call wakes it.
    parked: AtomicBool,
    stop: AtomicBool,
    /// Ticks so far (for tests).
    ticks: AtomicU64,
}

impl EpochTicker {
    /// Start ticking `engine`'s epoch on a thread of its own.
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            running: AtomicUsize::new(0),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            started: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ticks: AtomicU64::new(0),
        });
        let weak = engine.weak();
        let ticker = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("toolgate-epoch".into())
            .spawn(move || ticker.run(&weak))?;
        Ok(Self {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Mark a call into a guest as running until the guard is dropped; the
    /// epoch advances meanwhile.
    pub(crate) fn running(&self) -> Running<'_> {
        self.shared.started.fetch_add(1, SeqCst);
        self.shared.running.fetch_add(1, SeqCst);
        if self.shared.parked.swap(false, SeqCst) {
            self.thread.unpark();
        }
        Running(&self.shared)
    }

    /// Called by a running guest call at each tick: when more guest calls
    /// run than there are cores, give the rest of this one's time slice
    /// to another thread, so a call whose deadline has passed waits less
    /// for the scheduler to come round to it. Sixteen looping calls on two
    /// cores, 200 ms deadlines: the cuts came at most at 224 ms without
    /// this and 225 ms with it (the same), each policy's whole time — its
    /// instance made and opened under the same load — at most 276 ms
    /// without and 241 ms with it. A call of microseconds never sees a
    /// tick.
    pub(crate) fn take_turns(&self) {
        if self.shared.running.load(SeqCst) > self.shared.cores {
            std::thread::yield_now();
        }
    }

    /// Whether the ticker is parked now (for tests).
    #[cfg(test)]
    fn is_parked(&self) -> bool {
        self.shared.parked.load(SeqCst)
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.shared.stop.store(true, SeqCst);
        self.thread.unpark();
    }
}

/// A call into a guest in progress (see [`EpochTicker::running`]).
pub(crate) struct Running<'t>(&'t Shared);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, SeqCst);
    }
}

impl Shared {
    fn run(&self, engine: &wasmtime::EngineWeak) {
        let mut quiet = 0;
        let mut seen = self.started.load(SeqCst);
        while !self.stop.load(SeqCst) {
            let Some(engine) = engine.upgrade() else {
                return;
            };
            engine.increment_epoch();
            drop(engine);
            self.ticks.fetch_add(1, SeqCst);
            std::thread::sleep(TICK);
            let started = self.started.load(SeqCst);
            let idle = self.running.load(SeqCst) == 0 && started == seen;
            seen = started;
            quiet = if idle { quiet + 1 } else { 0 };
            if quiet >= QUIET_TICKS {
                self.park();
                quiet = 0;
                seen = self.started.load(SeqCst);
            }
        }
    }

    /// Sleep until a call starts. The flag is raised before the last look,
    /// so a call that starts in between either is seen here or sees the
    /// flag and unparks (an unpark before `park` makes it return at once).
    fn park(&self) {
        self.parked.store(true, SeqCst);
        while self.parked.load(SeqCst) && self.running.load(SeqCst) == 0 && !self.stop.load(SeqCst)
        {
            std::thread::park();
        }
        self.parked.store(false, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_advances_during_calls_and_the_ticker_parks_when_quiet() {
        let engine = Engine::default();
        let ticker = EpochTicker::start(&engine).unwrap();
        let ticks = || ticker.shared.ticks.load(SeqCst);
        let wait_for_a_tick = || {
            let before = ticks();
            while ticks() == before {
                std::thread::sleep(TICK);
            }
        };
        let call = ticker.running();
        wait_for_a_tick();
        drop(call);
        // Quiet: it parks.
        while !ticker.is_parked() {
            std::thread::sleep(TICK);
        }
        // The next call wakes it.
        let call = ticker.running();
        assert!(!ticker.is_parked());
        wait_for_a_tick();
        drop(call);
    }
}
