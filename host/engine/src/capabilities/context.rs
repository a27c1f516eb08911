//! `toolgate:policy/context`: the call's transcript tail.

use crate::bindings::toolgate::policy::context::{Host, TranscriptError};
use crate::hooks::transcript::read_tail;
use crate::sandbox::SandboxState;

impl Host for SandboxState {
    fn transcript_tail(&mut self, max_bytes: u32) -> Result<Option<String>, TranscriptError> {
        let call = &mut self.call;
        let Some((path, owner)) = call.transcript.as_ref() else {
            return Ok(None);
        };
        let max = max_bytes.min(call.transcript_cap);
        let tail = read_tail(path, u64::from(max), *owner).map_err(|err| {
            tracing::debug!(policy = %call.policy, path = %path.display(), error = %err, "transcript unreadable");
            // The path is the runtime's, not the policy's business.
            TranscriptError::Unreadable(err.kind().to_string())
        })?;
        call.transcript_bytes += tail.len() as u64;
        Ok(Some(tail))
    }
}
