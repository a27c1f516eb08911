//! Rows read back from a store file, which anyone able to write it may have
//! changed: a decision-log entry, a pending gate and a resolution each
//! decode or are refused, never a panic; what decodes is used as the host
//! uses it (a replay, a gate's key and expiry) and writes back to the same
//! row.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::decision_log::LogEntry;
use toolgate::gates::{GateResolution, PendingGate};

fn round_trips<T>(value: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let bytes = serde_json::to_vec(value).expect("a decoded row encodes");
    let again: T = serde_json::from_slice(&bytes).expect("an encoded row decodes");
    assert_eq!(&again, value);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = serde_json::from_slice::<LogEntry>(data) {
        round_trips(&entry);
        if let Some(request) = entry.replayable() {
            let _ = request.check_ids();
        }
    }
    if let Ok(gate) = serde_json::from_slice::<PendingGate>(data) {
        round_trips(&gate);
        let _ = gate.key();
        let _ = gate.is_expired(u64::MAX);
    }
    if let Ok(resolution) = serde_json::from_slice::<GateResolution>(data) {
        round_trips(&resolution);
    }
});
