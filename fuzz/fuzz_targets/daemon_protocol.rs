//! The daemon's line protocol, both ways: a request decodes or is refused
//! as invalid, an answer decodes or is an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::daemon::protocol::{decode_answer, decode_request};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(err) = decode_request(text) {
        assert_eq!(err.kind(), toolgate::ErrorKind::InvalidRequest);
    }
    let _ = decode_answer(text);
});
