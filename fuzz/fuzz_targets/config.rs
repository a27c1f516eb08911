//! The config file: it parses or is refused with a message, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(err) = toolgate::Config::parse(text, "fuzz.toml", std::path::PathBuf::from("/tmp")) {
        assert!(!err.to_string().is_empty());
    }
});
