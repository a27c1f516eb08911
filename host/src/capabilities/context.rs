//! `toolgate:policy/context`: the call's transcript tail, the clock, the log.

use std::io::{Read, Seek, SeekFrom};

use crate::bindings::toolgate::policy::context::{Host, Level};
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
    fn transcript_tail(&mut self, max_bytes: u32) -> Option<String> {
        let call = &mut self.call;
        let path = call.transcript.as_ref()?;
        let max = max_bytes.min(call.transcript_cap);
        let tail = read_tail(path, u64::from(max))
            .inspect_err(|err| {
                tracing::debug!(policy = %call.policy, path = %path.display(), error = %err, "transcript unreadable")
            })
            .ok()?;
        call.transcript_bytes += tail.len() as u64;
        Some(tail)
    }

    fn now_ms(&mut self) -> u64 {
        crate::now_ms()
    }

    fn log(&mut self, level: Level, message: String) {
        let message = super::cut(message, super::MAX_LOG_LINE);
        if !self.output.charge(message.len()) {
            return;
        }
        let policy = &*self.call.policy;
        let name = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.call.logs.push(format!("{name}: {message}"));
        match level {
            Level::Trace => tracing::trace!(policy, "{message}"),
            Level::Debug => tracing::debug!(policy, "{message}"),
            Level::Info => tracing::info!(policy, "{message}"),
            Level::Warn => tracing::warn!(policy, "{message}"),
            Level::Error => tracing::error!(policy, "{message}"),
        }
    }
}
