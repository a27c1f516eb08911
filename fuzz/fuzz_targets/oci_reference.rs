//! `oci://` references from a config or the command line: parsing never
//! panics, and what parses prints back to text that parses to the same
//! reference (so a pin copied from `plugins push` means what it says).
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::oci::Reference;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for candidate in [text.to_string(), format!("oci://{text}")] {
        if let Ok(reference) = Reference::parse(&candidate) {
            let printed = reference.to_string();
            assert_eq!(Reference::parse(&printed).as_ref(), Ok(&reference), "{printed}");
            let _ = reference.is_loopback();
        }
    }
});
