//! The guard reads any tool call an agent makes — its shell text parsed as
//! the shell would, its paths resolved — and answers, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::ToolRequest;
use toolgate::guard::ControlPlane;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plane = ControlPlane::new(
        [std::path::PathBuf::from("/etc/toolgate/toolgate.toml")],
        std::path::Path::new("/var/lib/toolgate/toolgate.redb"),
    );
    for tool in ["Bash", "Write", "Edit", "Read"] {
        let request = ToolRequest::new(
            tool,
            serde_json::json!({"command": text, "file_path": text}),
        );
        let _ = plane.check(&request);
    }
});
