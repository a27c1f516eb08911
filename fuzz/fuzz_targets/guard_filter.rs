//! A differential check of the guard: the quick filter that spares most
//! words the full path check may only save work, never change an answer.
//! Whatever the full check finds protected, the filter lets through to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::fuzzing::quick_filter_misses;
use toolgate::guard::ControlPlane;

fuzz_target!(|data: &[u8]| {
    let Ok(word) = std::str::from_utf8(data) else {
        return;
    };
    let plane = ControlPlane::new(
        [
            std::path::PathBuf::from("/etc/toolgate/toolgate.toml"),
            std::path::PathBuf::from("/opt/policies"),
        ],
        std::path::Path::new("/home/dev/.local/state/toolgate/toolgate.redb"),
    );
    assert!(!quick_filter_misses(&plane, word), "the filter passed over {word:?}");
});
