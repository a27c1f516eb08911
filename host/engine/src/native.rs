//! Policies built into the host, in Rust: self-protection (the agent may
//! not operate toolgate itself, [`crate::guard::ControlPlane`]) and the
//! stop after a call ran as no policy judged it ([`crate::unjudged`]).
//!
//! They vote first, through the same ballot as the loaded policies
//! ([`crate::compose`]), on every version of the call the policies judge —
//! the call as proposed, and again as a policy rewrote it — and they can
//! only refuse or abstain. A call they refuse reaches no loaded policy, so
//! no policy can outvote them, and a policy that rewrites a call into one
//! that switches toolgate off has it refused as the agent would.

use crate::Result;
use crate::compose::{Ballot, Vote};
use crate::request::ToolRequest;
use crate::store::Store;

/// A policy built into the host (see the module docs).
pub(crate) trait NativePolicy: Sync {
    /// Its name, as a decision's `decided_by` shows it.
    fn name(&self) -> &'static str;

    /// Why it refuses `request`, if it does; an error when what it needs
    /// (the store) cannot answer.
    fn refuses(&self, store: &Store, request: &ToolRequest) -> Result<Option<String>>;
}

/// `native`'s ballot over `request`: a deny with its reason, or an
/// abstention.
pub(crate) fn ballot<P>(
    native: &dyn NativePolicy,
    store: &Store,
    request: &ToolRequest,
) -> Result<Ballot<P>> {
    let vote = match native.refuses(store, request)? {
        Some(reason) => {
            tracing::warn!(tool = %request.tool, policy = native.name(), %reason, "refused by a built-in policy");
            Vote::Deny(reason)
        }
        None => Vote::Skip,
    };
    Ok(Ballot {
        policy: native.name().into(),
        vote,
        notes: Vec::new(),
    })
}

impl NativePolicy for crate::guard::ControlPlane {
    fn name(&self) -> &'static str {
        crate::decision::HOST
    }

    fn refuses(&self, _store: &Store, request: &ToolRequest) -> Result<Option<String>> {
        Ok(self.check(request))
    }
}

impl NativePolicy for crate::unjudged::Unjudged {
    fn name(&self) -> &'static str {
        crate::decision::HOST
    }

    fn refuses(&self, store: &Store, request: &ToolRequest) -> Result<Option<String>> {
        self.stopped(store, request)
    }
}
