//! Which tools the client is offered: the servers' tools, less those the
//! policies would never let run (the `visibility` phase). What may be
//! offered changes without the servers changing (a reload, a lease a person
//! grants), so while any policy filters tools the gateway asks again (every
//! [`RECHECK`] to 10 s, see there) and tells the client
//! `notifications/tools/list_changed` when the answer differs from what it
//! last listed.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ErrorData as McpError, ListToolsResult, Tool};
use rmcp::service::{Peer, RoleServer};

use super::{Gateway, Session, Upstreams, blocking};
use crate::daemon::DaemonRequest;
use crate::output::ToolDescriptor;
use crate::request::Origin;

/// How soon the gateway asks again which tools may be offered, after the
/// first listing and after a change; while nothing changes (or asking
/// fails) the wait grows to [`MAX_RECHECK`], and it is always at least 20
/// times what the last check took, so a slow or looping visibility phase
/// costs a session at most a twentieth of a core.
pub const RECHECK: Duration = Duration::from_secs(2);
/// The longest wait between two re-checks.
const MAX_RECHECK: Duration = Duration::from_secs(10);

/// Re-checks running at once in this gateway, all sessions together.
static RECHECKING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

impl Gateway {
    /// `listed` (a later page of the listing if `paged`) as the client may
    /// see it: the tools no policy hides.
    pub(super) async fn offered(
        &self,
        peer: &Peer<RoleServer>,
        mut listed: ListToolsResult,
        paged: bool,
    ) -> Result<ListToolsResult, McpError> {
        let upstreams = self.upstreams()?.clone();
        upstreams.remember_tools(&listed.tools);
        let started = std::time::Instant::now();
        let (visible, filtered) = self
            .session
            .visible(&upstreams, &listed.tools)
            .await
            .map_err(|err| {
                McpError::internal_error(
                    format!("toolgate failed, so no tool is listed: {err}"),
                    None,
                )
            })?;
        let took = started.elapsed();
        let mut answers = visible.iter();
        listed.tools.retain(|_| *answers.next().unwrap_or(&false));
        if filtered {
            // One page of several is no baseline: the first re-check makes it.
            let shown =
                (!paged && listed.next_cursor.is_none()).then(|| names(listed.tools.iter()));
            self.watch_listing(peer.clone(), upstreams, shown, took);
        }
        Ok(listed)
    }

    /// Start, once per session, asking again which tools may be offered,
    /// and telling the client when that changes from `shown`, what the
    /// whole listing that just took `took` offered (so the first re-check
    /// waits as every later one does); none when it was one page of
    /// several.
    fn watch_listing(
        &self,
        peer: Peer<RoleServer>,
        upstreams: Arc<Upstreams>,
        shown: Option<BTreeSet<Cow<'static, str>>>,
        took: Duration,
    ) {
        if self
            .watching
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        // Held weakly, and the client's end watched: a session that ended
        // frees its upstream servers and its slot, and stops its checks.
        let (session, upstreams) = (Arc::downgrade(&self.session), Arc::downgrade(&upstreams));
        tokio::spawn(async move {
            let mut last = shown;
            let mut pause = RECHECK;
            tokio::time::sleep(after(pause, took)).await;
            loop {
                let (Some(session), Some(upstreams)) = (session.upgrade(), upstreams.upgrade())
                else {
                    return;
                };
                if peer.is_transport_closed() {
                    return;
                }
                let tools = upstreams.listed_tools();
                let (asked, took) = {
                    // One re-check at a time in the whole gateway.
                    let _turn = RECHECKING.acquire().await;
                    let started = std::time::Instant::now();
                    let asked = session.visible(&upstreams, &tools).await;
                    (asked, started.elapsed())
                };
                drop((session, upstreams));
                let Ok((visible, _)) = asked else {
                    pause = (pause * 2).min(MAX_RECHECK);
                    tokio::time::sleep(after(pause, took)).await;
                    continue;
                };
                let shown = names(
                    tools
                        .iter()
                        .zip(&visible)
                        .filter(|(_, shown)| **shown)
                        .map(|(tool, _)| tool),
                );
                let changed = last.as_ref().is_some_and(|last| *last != shown);
                if changed {
                    tracing::info!("the tools offered changed; telling the client");
                    if peer.notify_tool_list_changed().await.is_err() {
                        return; // the client is gone
                    }
                }
                last = Some(shown);
                // Sooner after a change, later while nothing changes, and
                // never more than a twentieth of the time in checks.
                pause = if changed {
                    RECHECK
                } else {
                    (pause * 3 / 2).min(MAX_RECHECK)
                };
                tokio::time::sleep(after(pause, took)).await;
            }
        });
    }
}

/// The longest a check's own time can push the next one back: a daemon
/// stalled for a while (a reload, a busy store) must not stop re-checks
/// for ten times as long.
const MAX_BACKOFF: Duration = Duration::from_secs(120);

/// How long to wait before the next re-check: `pause`, and at least 20
/// times what the last check took (up to [`MAX_BACKOFF`]).
fn after(pause: Duration, took: Duration) -> Duration {
    pause.max((took * 20).min(MAX_BACKOFF))
}

/// The names of `tools`, as a set: compared however the upstreams'
/// listings happened to be ordered.
fn names<'t>(tools: impl Iterator<Item = &'t Tool>) -> BTreeSet<Cow<'static, str>> {
    tools.map(|tool| tool.name.clone()).collect()
}

impl Session {
    /// For each of `tools`, whether it may be offered in this session;
    /// and whether any policy filters tools at all. Asked in batches that
    /// each fit the daemon's request limit; a tool whose description alone
    /// does not is not offered.
    pub(super) async fn visible(
        &self,
        upstreams: &Upstreams,
        tools: &[Tool],
    ) -> crate::Result<(Vec<bool>, bool)> {
        let caller = self.request("", "tools/list", serde_json::json!({}), self.turn().await?);
        let (mut visible, mut filtered) = (Vec::with_capacity(tools.len()), false);
        let mut batch: Vec<ToolDescriptor> = Vec::new();
        let mut batch_bytes = 0;
        for tool in tools {
            let descriptor = descriptor(upstreams, tool);
            let bytes = serde_json::to_vec(&descriptor).map_or(usize::MAX, |text| text.len());
            if bytes > BATCH_BYTES {
                tracing::warn!(tool = %tool.name, bytes, "a tool too large to decide on is not offered");
            }
            if batch_bytes + bytes > BATCH_BYTES && !batch.is_empty() {
                filtered |= self
                    .ask_visible(&caller, std::mem::take(&mut batch), &mut visible)
                    .await?;
                batch_bytes = 0;
            }
            if bytes > BATCH_BYTES {
                visible.push(false);
                filtered = true;
            } else {
                batch.push(descriptor);
                batch_bytes += bytes;
            }
        }
        if !batch.is_empty() || tools.is_empty() {
            filtered |= self.ask_visible(&caller, batch, &mut visible).await?;
        }
        Ok((visible, filtered))
    }

    /// Whether each of `tools` may be offered, appended to `visible`; and
    /// whether any policy filters tools.
    async fn ask_visible(
        &self,
        caller: &crate::request::ToolRequest,
        tools: Vec<ToolDescriptor>,
        visible: &mut Vec<bool>,
    ) -> crate::Result<bool> {
        let asked = tools.len();
        let request = DaemonRequest::VisibleTools {
            caller: caller.clone(),
            tools,
        };
        let answer = blocking(self.daemon.clone(), request).await?;
        let answered: Vec<bool> =
            serde_json::from_value(answer["visible"].clone()).map_err(|err| {
                crate::Error::Request(format!("the daemon's answer is malformed: {err}"))
            })?;
        if answered.len() != asked {
            return Err(crate::Error::Request(
                "the daemon answered for another number of tools".into(),
            ));
        }
        visible.extend(answered);
        Ok(answer["filtered"].as_bool().unwrap_or(true))
    }
}

/// The most bytes of tool descriptions sent in one request: half the
/// daemon's limit, leaving room for the caller.
const BATCH_BYTES: usize = toolgate_wire::protocol::MAX_REQUEST_BYTES / 2;

/// `tool` as the policies see it, under the server's own name for it (as
/// calls to it are decided).
fn descriptor(upstreams: &Upstreams, tool: &Tool) -> ToolDescriptor {
    let (server, name) = upstreams
        .route(&tool.name)
        .map(|(upstream, name)| (upstream.server_name().to_string(), name))
        .unwrap_or_else(|| (String::new(), tool.name.to_string()));
    ToolDescriptor {
        name,
        origin: Origin::Mcp(server),
        description: tool.description.as_deref().unwrap_or_default().to_string(),
        input_schema: serde_json::Value::Object(tool.input_schema.as_ref().clone()),
    }
}
