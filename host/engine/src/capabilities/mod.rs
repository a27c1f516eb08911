//! The host capabilities policies import, one module per WIT interface
//! (toolgate's own and the WASI ones the contract uses).
//!
//! Every capability is scoped by [`CallContext::policy`]: a policy names keys
//! and streams, the host decides whose they are. There is no way in the WIT
//! to name another policy.

mod config;
mod context;
mod events;
mod flows;
mod logging;
mod state;

use crate::sandbox::SandboxState;

/// The most items any list read returns, whatever `limit` the policy asks.
pub(crate) const MAX_LIST: usize = 1000;
/// The longest short field (session id, kind, tool, excluded kind) the
/// host keeps from a policy, bytes.
pub(crate) const MAX_FIELD: usize = 256;
/// The most entries of a list argument (`exclude-kinds`) the host reads.
pub(crate) const MAX_LIST_ARGUMENT: usize = 32;
/// The longest log line kept, bytes.
pub(crate) const MAX_LOG_LINE: usize = 4096;

/// `text` cut to at most `max` bytes, on a character boundary.
pub(crate) fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

impl crate::bindings::toolgate::policy::types::Host for SandboxState {}
