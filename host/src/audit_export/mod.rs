//! The audit trail outside the store: read page by page from the daemon
//! (or this process), verified, and written in the forms operators' tools
//! read. The chain itself is the engine's (`toolgate_engine::audit`).

pub mod cef;
pub mod otlp;
pub mod ship;
pub mod syslog;

use crate::daemon::DaemonRequest;
use serde_json::Value;
use toolgate_engine::audit::SignedHead;
use toolgate_engine::service::AUDIT_PAGE;
use toolgate_engine::store::AuditPage;

/// Read the links after `after` through `to` (inclusive; none: to the
/// newest) through `call`, handing each to `each`; the chain's signed head.
pub fn read_chain<E: From<serde_json::Error>>(
    mut call: impl FnMut(DaemonRequest) -> Result<Value, E>,
    mut after: Option<u64>,
    to: Option<u64>,
    mut each: impl FnMut(u64, &str) -> Result<(), E>,
) -> Result<Option<SignedHead>, E> {
    loop {
        let page: AuditPage = serde_json::from_value(call(DaemonRequest::Audit {
            after,
            limit: AUDIT_PAGE,
        })?)?;
        let full = page.links.len() >= AUDIT_PAGE;
        for (seq, link) in &page.links {
            if to.is_some_and(|to| *seq > to) {
                return Ok(page.head);
            }
            each(*seq, link)?;
            after = Some(*seq);
        }
        if !full {
            return Ok(page.head);
        }
    }
}
