//! Work taken off the decision path: one thread per engine that drops the
//! instances calls give up and makes spare instances ahead of need (see
//! `pool.rs`).
//!
//! A call from a session with no warm instance needs a fresh one per
//! policy. Instantiating and opening it costs about as much as the decision
//! itself, and so does dropping the instance the warm pool lets go to make
//! room (its memory slot is reset to the policy's image, so the slot's next
//! instance sees nothing of it). Neither needs a caller waiting.
//!
//! Bounded: at most [`MAX_QUEUED`] chores wait. Past that a retirement runs
//! on the caller's thread (an instance waiting to be dropped holds a pool
//! slot) and an optional chore (a refill) is not queued.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;

/// Chores that may wait at once.
const MAX_QUEUED: usize = 64;

/// A piece of work for the chores thread.
pub(crate) type Chore = Box<dyn FnOnce() + Send>;

enum Message {
    /// Run it; `optional` chores are dropped unrun once stopping.
    Run {
        chore: Chore,
        optional: bool,
    },
    Stop,
}

/// The thread, owned by the engine's `Runtime`: stopped and joined when
/// dropped, so nothing a chore holds (an instance, and through it the
/// store) outlives the host.
pub(crate) struct Chores {
    queue: ChoreQueue,
    thread: Option<JoinHandle<()>>,
}

/// Where chores are handed in; cheap to clone (each plugin's pool keeps one).
#[derive(Clone)]
pub(crate) struct ChoreQueue {
    sender: mpsc::Sender<Message>,
    shared: Arc<Shared>,
}

struct Shared {
    queued: AtomicUsize,
    stopping: AtomicBool,
}

impl Chores {
    /// Start the thread.
    pub(crate) fn start() -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let shared = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("toolgate-chores".into())
            .spawn(move || {
                while let Ok(Message::Run { chore, optional }) = receiver.recv() {
                    if !(optional && worker.stopping.load(Ordering::Relaxed)) {
                        // A chore that panics loses its own work only; the
                        // thread carries on with the next.
                        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(chore));
                        if ran.is_err() {
                            tracing::error!("a chore panicked; its work is lost, later chores run");
                        }
                    }
                    worker.queued.fetch_sub(1, Ordering::Relaxed);
                }
            })?;
        Ok(Self {
            queue: ChoreQueue { sender, shared },
            thread: Some(thread),
        })
    }

    /// A handle to queue chores with.
    pub(crate) fn queue(&self) -> &ChoreQueue {
        &self.queue
    }
}

impl Drop for Chores {
    fn drop(&mut self) {
        self.queue.shared.stopping.store(true, Ordering::Relaxed);
        let _ = self.queue.sender.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl ChoreQueue {
    /// Run `chore` on the chores thread; it comes back when the queue is
    /// full or the thread has stopped, for the caller to run or drop.
    pub(crate) fn offer(&self, chore: Chore, optional: bool) -> Result<(), Chore> {
        let shared = &self.shared;
        if shared.queued.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED
            || shared.stopping.load(Ordering::Relaxed)
        {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(chore);
        }
        self.sender
            .send(Message::Run { chore, optional })
            .map_err(|mpsc::SendError(message)| {
                shared.queued.fetch_sub(1, Ordering::Relaxed);
                match message {
                    Message::Run { chore, .. } => chore,
                    Message::Stop => unreachable!("only `Chores::drop` sends Stop"),
                }
            })
    }

    /// Drop `value` on the chores thread (on this one when it cannot wait).
    pub(crate) fn drop_later<T: Send + 'static>(&self, value: T) {
        if let Err(chore) = self.offer(Box::new(move || drop(value)), false) {
            chore();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chores_run_in_order_and_all_required_ones_run_before_the_thread_stops() {
        let chores = Chores::start().unwrap();
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            chores
                .queue()
                .offer(Box::new(move || tx.send(i).unwrap()), false)
                .unwrap_or_else(|_| panic!("chore {i} refused"));
        }
        drop(chores);
        assert_eq!(
            rx.try_iter().collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_chore_that_panics_does_not_stop_the_ones_after_it() {
        let chores = Chores::start().unwrap();
        let (tx, rx) = mpsc::channel();
        chores
            .queue()
            .offer(Box::new(|| panic!("a bug in a chore")), false)
            .unwrap_or_else(|_| panic!("refused"));
        chores
            .queue()
            .offer(Box::new(move || tx.send("after").unwrap()), false)
            .unwrap_or_else(|_| panic!("refused"));
        drop(chores);
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["after"]);
    }

    #[test]
    fn a_full_queue_hands_the_chore_back_and_a_stopped_one_runs_drops_inline() {
        let chores = Chores::start().unwrap();
        let queue = chores.queue().clone();
        // Hold the thread inside its first chore so the queue fills.
        let (release, hold) = mpsc::channel::<()>();
        queue
            .offer(Box::new(move || hold.recv().unwrap()), false)
            .unwrap_or_else(|_| panic!("first chore refused"));
        for i in 1..MAX_QUEUED {
            queue
                .offer(Box::new(|| {}), true)
                .unwrap_or_else(|_| panic!("chore {i} refused below the bound"));
        }
        assert!(
            queue.offer(Box::new(|| {}), true).is_err(),
            "over the bound"
        );
        release.send(()).unwrap();
        drop(chores);
        // The thread is gone: a drop happens here and now.
        let dropped = Arc::new(());
        queue.drop_later(Arc::clone(&dropped));
        assert_eq!(Arc::strong_count(&dropped), 1);
    }
}
