//! Every runtime's hook event parser, on any bytes: an event parses into
//! what the engine needs or fails with a typed request error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::hooks::{HookRuntime, adapter};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for runtime in HookRuntime::ALL {
        match adapter(runtime).parse(text) {
            Ok(event) => {
                let _ = event.needs();
            }
            Err(err) => assert_eq!(err.kind(), toolgate::ErrorKind::InvalidRequest),
        }
    }
});
