//! The daemon's wire protocol: the requests and answers live in
//! `toolgate-wire` (plain data, no wasmtime, shared with the thin hook
//! client); this module maps them to and from the host's typed errors.

use serde_json::Value;

pub use toolgate_wire::protocol::{
    ConfigIdentity, DaemonRequest, HookRuntime, MAX_REQUEST_BYTES, OnError,
};

use crate::{Error, Result};

/// Parse a request, as a typed error naming what is wrong.
pub fn decode_request(text: &str) -> Result<DaemonRequest> {
    toolgate_wire::protocol::decode_request(text).map_err(Error::Request)
}

/// The wire form of a handled request's result.
pub fn encode_answer(result: &Result<Value>) -> String {
    toolgate_wire::protocol::encode(match result {
        Ok(value) => Ok(value.clone()),
        Err(err) => Err((err.kind(), err.wire_message())),
    })
}

/// A wire answer back as a result; the daemon's errors become
/// [`Error::Remote`] (or [`Error::Busy`], [`Error::Request`],
/// [`Error::Unauthorized`]) with their kind.
pub fn decode_answer(text: &str) -> Result<Value> {
    Ok(toolgate_wire::client::decode_answer(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn errors_keep_their_kind_across_the_wire() {
        let busy = encode_answer(&Err(Error::Busy("8 requests in flight".into())));
        assert!(matches!(decode_answer(&busy), Err(Error::Busy(m)) if m.contains("8 requests")));
        let missing = encode_answer(&Err(Error::Gate(crate::gates::GateError::NotFound {
            user_id: "u".into(),
            thread_id: "t".into(),
        })));
        let err = decode_answer(&missing).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.to_string().contains("no pending gate"), "{err}");
        // Said once, not "not allowed: not allowed: …".
        let refused = encode_answer(&Err(Error::Unauthorized("no terminal".into())));
        let err = decode_answer(&refused).unwrap_err();
        assert_eq!(err.to_string(), "not allowed: no terminal");
        let busy = decode_answer(&encode_answer(&Err(Error::Busy("full".into())))).unwrap_err();
        assert_eq!(busy.to_string(), "toolgate daemon is busy: full");
        let ok = encode_answer(&Ok(serde_json::json!({"a": 1})));
        assert_eq!(decode_answer(&ok).unwrap(), serde_json::json!({"a": 1}));
    }

    #[test]
    fn unknown_ops_and_fields_are_invalid_requests() {
        for text in [
            r#"{"op":"format_disk"}"#,
            r#"{"op":"gates","usr":"typo"}"#,
            "not json",
        ] {
            assert_eq!(
                decode_request(text).unwrap_err().kind(),
                ErrorKind::InvalidRequest
            );
        }
        assert!(matches!(
            decode_request(r#"{"op":"hook","runtime":"claude-code","event":"{}"}"#),
            Ok(DaemonRequest::Hook {
                on_error: OnError::Deny,
                ..
            })
        ));
    }
}
