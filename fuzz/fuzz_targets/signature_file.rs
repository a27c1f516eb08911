//! A plugin's signature file (`PATH.sig`): it parses or is refused with a
//! message, and a parsed one verifies or refuses any bytes, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match toolgate::signing::parse(text) {
        Ok(signature) => {
            let _ = signature.verify(data);
        }
        Err(message) => assert!(!message.is_empty()),
    }
});
