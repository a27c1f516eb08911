//! `toolgate:policy/context`: the call's transcript tail.

use std::io::{Read, Seek, SeekFrom};

use crate::bindings::toolgate::policy::context::{Host, TranscriptError};
use crate::sandbox::SandboxState;

/// Read at most `max` bytes from the end of `path`: constant cost whatever
/// the file's size.
fn read_tail(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Host for SandboxState {
    fn transcript_tail(&mut self, max_bytes: u32) -> Result<Option<String>, TranscriptError> {
        let call = &mut self.call;
        let Some(path) = call.transcript.as_ref() else {
            return Ok(None);
        };
        let max = max_bytes.min(call.transcript_cap);
        let tail = read_tail(path, u64::from(max)).map_err(|err| {
            tracing::debug!(policy = %call.policy, path = %path.display(), error = %err, "transcript unreadable");
            // The path is the runtime's, not the policy's business.
            TranscriptError::Unreadable(err.kind().to_string())
        })?;
        call.transcript_bytes += tail.len() as u64;
        Ok(Some(tail))
    }
}
