//! Capture what the host logs (level, message and fields) during a test.

use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::SubscriberExt as _;

/// Log lines captured so far.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    /// Capture on this thread until the guard drops.
    pub fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let captured = Self::default();
        let subscriber = tracing_subscriber::registry().with(captured.clone());
        (captured, tracing::subscriber::set_default(subscriber))
    }

    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Whether some line contains every one of `needles`.
    pub fn has(&self, needles: &[&str]) -> bool {
        self.lines()
            .iter()
            .any(|line| needles.iter().all(|n| line.contains(n)))
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Captured {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(format!("{} ", event.metadata().level()));
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
}
