//! What the MCP gateway reads from both sides: JSON-RPC messages from a
//! client and from a server decode or are refused, never a panic; a tool
//! call or resource read that decodes becomes the request the gateway asks
//! the daemon about, which crosses the daemon's line protocol unchanged and
//! which the guard judges without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, ServerJsonRpcMessage};
use toolgate::ToolRequest;
use toolgate::daemon::DaemonRequest;
use toolgate::daemon::protocol::decode_request;
use toolgate::guard::ControlPlane;
use toolgate::request::Origin;

fn asked(server: &str, tool: &str, arguments: serde_json::Value) {
    let mut request = ToolRequest::new(tool.to_string(), arguments);
    request.origin = Origin::Mcp(server.into());
    request.channel = "mcp".into();
    let line = serde_json::to_string(&DaemonRequest::Evaluate {
        request: request.clone(),
    })
    .expect("a request encodes");
    match decode_request(&line) {
        Ok(DaemonRequest::Evaluate { request: again }) => assert_eq!(again, request),
        other => panic!("the daemon read {line} as {other:?}"),
    }
    let plane = ControlPlane::new(
        [std::path::PathBuf::from("/etc/toolgate/toolgate.toml")],
        std::path::Path::new("/var/lib/toolgate/toolgate.redb"),
    );
    let _ = plane.check(&request);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(JsonRpcMessage::Request(request)) = serde_json::from_slice::<ClientJsonRpcMessage>(data) {
        match request.request {
            ClientRequest::CallToolRequest(call) => {
                let arguments = call
                    .params
                    .arguments
                    .map_or(serde_json::json!({}), serde_json::Value::Object);
                asked("server", &call.params.name, arguments);
            }
            ClientRequest::ReadResourceRequest(read) => {
                asked("server", "resources/read", serde_json::json!({"uri": read.params.uri}));
            }
            _ => {}
        }
    }
    let _ = serde_json::from_slice::<ServerJsonRpcMessage>(data);
});
