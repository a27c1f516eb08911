//! A call's progress, from the server to the client, in order and whole.
//!
//! rmcp hands each notification to its handler on a task of its own, and
//! the call's answer straight to the caller: notifications overtook one
//! another, and those still on their way when the answer came were lost
//! with the call's token. So progress is taken off the server connection
//! where messages are read one by one ([`Ordered`]), queued for its call,
//! and the call relays the queue ([`Progress::relay`]) until its answer
//! and everything queued before it have gone to the client.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use rmcp::model::{JsonRpcMessage, ProgressNotificationParam, ProgressToken, ServerNotification};
use rmcp::service::{Peer, RoleClient, RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::mpsc;

/// The calls being made, by the progress token the gateway's own request
/// to the server carries: where each call's progress goes, if the client
/// asked for it.
#[derive(Default)]
pub(super) struct ProgressTokens(Mutex<Routes>);

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, Option<Route>>,
    /// Progress for a call whose route is not there yet: the server may
    /// answer its request before the gateway knows the request's token.
    early: VecDeque<ProgressNotificationParam>,
    /// Their size, as [`size`] counts it.
    early_bytes: usize,
}

/// A progress notification's size, near enough: its message and a little.
fn size(params: &ProgressNotificationParam) -> usize {
    64 + params.message.as_ref().map_or(0, String::len)
}

/// The most bytes of early progress kept.
const EARLY_BYTES: usize = 1024 * 1024;

/// The client's token for a call, and where the call's progress queues.
struct Route {
    clients: ProgressToken,
    queue: mpsc::UnboundedSender<ProgressNotificationParam>,
}

/// The most early progress kept (for calls that do not exist, it is
/// dropped oldest first).
const EARLY: usize = 1024;

impl Route {
    fn send(&self, mut params: ProgressNotificationParam) {
        params.progress_token = self.clients.clone();
        let _ = self.queue.send(params);
    }
}

impl ProgressTokens {
    /// Queue `params` for its call, under the client's token (dropped if
    /// the client did not ask for it).
    fn queue(&self, params: ProgressNotificationParam) {
        let mut routes = self.lock();
        match routes.calls.get(&params.progress_token) {
            Some(Some(route)) => route.send(params),
            Some(None) => {}
            None => {
                // Bounded in count and in bytes (a message may be long).
                routes.early_bytes += size(&params);
                routes.early.push_back(params);
                while routes.early.len() > EARLY || routes.early_bytes > EARLY_BYTES {
                    let Some(dropped) = routes.early.pop_front() else {
                        break;
                    };
                    routes.early_bytes -= size(&dropped);
                }
            }
        }
    }

    /// Relay the progress of the gateway's request `ours` to `client`
    /// under the client's token `clients` (none: the client did not ask;
    /// it is dropped), until [`Progress::finish`].
    pub(super) fn relay(
        self: &Arc<Self>,
        ours: ProgressToken,
        clients: Option<ProgressToken>,
        client: Peer<RoleServer>,
    ) -> Progress {
        let mut routes = self.lock();
        let (early, others): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut routes.early)
            .into_iter()
            .partition(|params| params.progress_token == ours);
        routes.early_bytes = others.iter().map(size).sum();
        routes.early = others;
        let Some(clients) = clients else {
            routes.calls.insert(ours.clone(), None);
            return Progress {
                tokens: self.clone(),
                ours,
                relaying: None,
            };
        };
        let (queue, mut queued) = mpsc::unbounded_channel();
        let route = Route { clients, queue };
        early.into_iter().for_each(|params| route.send(params));
        routes.calls.insert(ours.clone(), Some(route));
        let relaying = tokio::spawn(async move {
            // One at a time, each sent before the next: in order.
            while let Some(params) = queued.recv().await {
                let _ = client.notify_progress(params).await;
            }
        });
        Progress {
            tokens: self.clone(),
            ours,
            relaying: Some(relaying),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One call's progress being relayed.
pub(super) struct Progress {
    tokens: Arc<ProgressTokens>,
    ours: ProgressToken,
    relaying: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Once the call's answer has come: wait until the progress that came
    /// before it has reached the client, so the answer goes after it.
    pub(super) async fn finish(mut self) {
        self.forget();
        if let Some(relaying) = self.relaying.take() {
            let _ = relaying.await;
        }
    }

    fn forget(&self) {
        self.tokens.lock().calls.remove(&self.ours);
    }
}

impl Drop for Progress {
    /// A call given up (cancelled, timed out) relays what was queued and
    /// takes no more.
    fn drop(&mut self) {
        self.forget();
    }
}

/// A server connection whose progress notifications are queued for their
/// calls as they are read, in the order they came (see the module docs).
pub(super) struct Ordered<T> {
    inner: T,
    tokens: Arc<ProgressTokens>,
}

impl<T> Ordered<T> {
    pub(super) fn new(inner: T, tokens: Arc<ProgressTokens>) -> Self {
        Self { inner, tokens }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Ordered<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.inner.receive().await? {
                JsonRpcMessage::Notification(message) => match message.notification {
                    ServerNotification::ProgressNotification(progress) => {
                        self.tokens.queue(progress.params);
                    }
                    notification => {
                        return Some(JsonRpcMessage::Notification(
                            rmcp::model::JsonRpcNotification {
                                notification,
                                ..message
                            },
                        ));
                    }
                },
                other => return Some(other),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
