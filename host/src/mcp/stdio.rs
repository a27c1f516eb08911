//! The client's side of the gateway over stdio: one JSON-RPC message per
//! line, each at most [`MAX_LINE_BYTES`]. A longer line is never buffered
//! whole and never dropped in silence: its request is answered with an
//! error naming the limit (rmcp's own stdio transport drops it, and the
//! client waits out its timeout).

use std::sync::Arc;

use rmcp::model::{ErrorData, RequestId};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};

/// The longest request line the gateway takes from its client: rmcp's
/// own bound, and 4 times what the daemon takes for a call's arguments.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much of an oversized line's start and end is kept, to find the id
/// of the request it held (one SDK writes `id` first, another last).
const KEPT_ENDS: usize = 1024;

/// The gateway's transport on its own stdin and stdout.
pub fn stdio() -> LineTransport<tokio::io::Stdin, tokio::io::Stdout> {
    LineTransport::new(tokio::io::stdin(), tokio::io::stdout())
}

/// Newline-delimited JSON-RPC on a reader and a writer, lines bounded.
pub struct LineTransport<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// While a line past the limit is skipped: its first and last bytes.
    skipping: Option<Skipped>,
    write: Arc<tokio::sync::Mutex<W>>,
}

/// What is kept of an oversized line.
#[derive(Default)]
struct Skipped {
    head: Vec<u8>,
    tail: Vec<u8>,
    bytes: usize,
}

impl Skipped {
    fn keep(&mut self, bytes: &[u8]) {
        self.bytes += bytes.len();
        let room = KEPT_ENDS.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.tail.extend_from_slice(bytes);
        let excess = self.tail.len().saturating_sub(KEPT_ENDS);
        self.tail.drain(..excess);
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin + Send + 'static> LineTransport<R, W> {
    /// Read from `read`, write to `write`.
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            skipping: None,
            write: Arc::new(tokio::sync::Mutex::new(write)),
        }
    }

    /// The next whole line within the limit (without its newline); an
    /// oversized one answered on the way. `None` at the end of input.
    /// Cancel-safe: what was read stays in `line` or `skipping`.
    async fn next_line(&mut self) -> Option<Vec<u8>> {
        loop {
            let available = self.read.fill_buf().await.ok()?;
            if available.is_empty() {
                return None;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let chunk = &available[..newline.unwrap_or(take)];
            if let Some(skipped) = self.skipping.as_mut() {
                skipped.keep(chunk);
            } else if self.line.len() + chunk.len() > MAX_LINE_BYTES {
                let mut skipped = Skipped::default();
                skipped.keep(&std::mem::take(&mut self.line));
                skipped.keep(chunk);
                self.skipping = Some(skipped);
            } else {
                self.line.extend_from_slice(chunk);
            }
            self.read.consume(take);
            if newline.is_none() {
                continue;
            }
            match self.skipping.take() {
                Some(skipped) => refuse(&self.write, &skipped),
                None => return Some(std::mem::take(&mut self.line)),
            }
        }
    }
}

/// Answer the request an oversized line held, if its id can be found.
/// Answered on a task of its own: `receive` may be dropped at any await
/// (rmcp polls it in a `select!`), and a refusal half-written, or lost,
/// would corrupt the next line or leave the client waiting.
fn refuse<W: AsyncWrite + Unpin + Send + 'static>(
    write: &Arc<tokio::sync::Mutex<W>>,
    skipped: &Skipped,
) {
    tracing::warn!(
        bytes = skipped.bytes,
        "a client's message is longer than the gateway takes"
    );
    let Some(id) = request_id(skipped) else {
        return;
    };
    let error = ErrorData::invalid_request(
        format!(
            "the request is larger than {MAX_LINE_BYTES} bytes, the most the toolgate \
             gateway takes; it was not run. Send smaller arguments."
        ),
        None,
    );
    let answer = TxJsonRpcMessage::<RoleServer>::error(error, Some(id));
    let write = Arc::clone(write);
    tokio::spawn(async move {
        let _ = write_message(&write, &answer).await;
    });
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        async move { write_message(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = self.next_line().await?;
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice(line) {
                Ok(message) => return Some(message),
                // Not JSON-RPC at all: ignored, as the official SDKs do
                // (answering could start an error storm with an echoing
                // peer).
                Err(err) => tracing::debug!(error = %err, "ignored a line that is not a message"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.write.lock().await.shutdown().await
    }
}

async fn write_message<W: AsyncWrite + Unpin>(
    write: &tokio::sync::Mutex<W>,
    message: &TxJsonRpcMessage<RoleServer>,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut write = write.lock().await;
    write.write_all(&line).await?;
    write.flush().await
}

/// What the start of a message (`head`) shows at its top level: the
/// keys it names, and its `id` (when the value is whole there).
fn top_level(head: &[u8]) -> (Vec<String>, Option<RequestId>) {
    let (mut keys, mut id) = (Vec::new(), None);
    let mut depth = 0;
    let mut at = 0;
    while at < head.len() {
        match head[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                let Some(end) = string_end(head, at) else {
                    break;
                };
                let rest = skip_space(head, end);
                if depth == 1 && head.get(rest) == Some(&b':') {
                    let key = String::from_utf8_lossy(&head[at + 1..end - 1]).into_owned();
                    if key == "id" {
                        id = whole_id(&head[skip_space(head, rest + 1)..]);
                    }
                    keys.push(key);
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    (keys, id)
}

/// The id at the start of `text`, if its value ends there (followed by
/// `,`, `}` or the end of what was kept cut mid-value is no id).
fn whole_id(text: &[u8]) -> Option<RequestId> {
    let id = id_value(text)?;
    let written = serde_json::to_string(&id).ok()?;
    let after = skip_space(text, written.len());
    (text.starts_with(written.as_bytes()) && matches!(text.get(after), Some(b',' | b'}')))
        .then_some(id)
}

/// The id of the request an oversized line held, if it is a request: a
/// top-level `method` at its start and no `result` or `error` (a response
/// to the gateway's own request must not be answered as if it were one).
fn request_id(skipped: &Skipped) -> Option<RequestId> {
    let (keys, id) = top_level(&skipped.head);
    let named = |key: &str| keys.iter().any(|k| k == key);
    if !named("method") || named("result") || named("error") {
        return None;
    }
    id.or_else(|| id_at_end(&skipped.tail))
}

/// The `id` of a message whose end is `tail`, when it is the last member
/// (`…,"id":5}`) or followed only by `"jsonrpc":"2.0"`.
fn id_at_end(tail: &[u8]) -> Option<RequestId> {
    let text = String::from_utf8_lossy(tail);
    let rest = text.trim_end().strip_suffix('}')?.trim_end();
    let rest = rest
        .strip_suffix("\"2.0\"")
        .and_then(|r| r.trim_end().strip_suffix(':'))
        .and_then(|r| r.trim_end().strip_suffix("\"jsonrpc\""))
        .and_then(|r| r.trim_end().strip_suffix(','))
        .unwrap_or(rest);
    let key = rest.rfind("\"id\"")?;
    let value = rest[key + 4..].trim_start().strip_prefix(':')?.trim();
    let id = id_value(value.as_bytes())?;
    // The whole remainder must be the value: nothing of it cut off.
    (serde_json::to_string(&id).ok()? == value).then_some(id)
}

/// A JSON-RPC id (a number or a string) at the start of `text`.
fn id_value(text: &[u8]) -> Option<RequestId> {
    let end = match text.first()? {
        b'"' => string_end(text, 0)?,
        _ => text
            .iter()
            .position(|b| !(b.is_ascii_digit() || *b == b'-'))
            .unwrap_or(text.len()),
    };
    serde_json::from_slice(&text[..end]).ok()
}

/// Where the JSON string starting at `start` ends (after its quote).
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < text.len() {
        match text[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

fn skip_space(text: &[u8], mut at: usize) -> usize {
    while text.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_of_an_oversized_request_is_found_at_either_end() {
        let number = |n: i64| Some(RequestId::Number(n));
        let at_start = |head: &[u8]| top_level(head).1;
        assert_eq!(
            at_start(br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"#),
            number(12)
        );
        assert_eq!(
            at_start(br#"{"method":"x","params":{"id":3,"a":"#),
            None,
            "an id inside the params is not the request's"
        );
        assert_eq!(
            at_start(br#"{ "id" : "a\"b", "#),
            Some(RequestId::String("a\"b".into()))
        );
        assert_eq!(at_start(br#"{"id":1.5,"#), None, "not an id");
        assert_eq!(at_start(br#"{"id":12"#), None, "cut mid-value");
        // A response (to the gateway's own request) is never answered.
        let response = Skipped {
            head: br#"{"jsonrpc":"2.0","id":3,"result":{"content":"#.to_vec(),
            tail: b"xxxx\"}}".to_vec(),
            bytes: 1,
        };
        assert_eq!(request_id(&response), None);
        assert_eq!(id_at_end(br#"xxxx"},"jsonrpc":"2.0","id":7}"#), number(7));
        assert_eq!(id_at_end(br#"xxxx"},"id":7,"jsonrpc":"2.0"}"#), number(7));
        assert_eq!(id_at_end(br#"xxxx"}}}"#), None);
        assert_eq!(id_at_end(br#"x","id":7,"more":1}"#), None);
    }

    #[tokio::test]
    async fn a_line_past_the_limit_is_answered_and_the_next_one_read() {
        let big = format!(
            "{{\"method\":\"tools/call\",\"params\":{{\"name\":\"t\",\"arguments\":{{\"pad\":\"{}\"}}}},\"jsonrpc\":\"2.0\",\"id\":41}}\n",
            "x".repeat(MAX_LINE_BYTES)
        );
        let next = "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\"}\n";
        let input = format!("{big}{next}").into_bytes();
        let (output, mut written) = tokio::io::duplex(1 << 16);
        let mut transport = LineTransport::new(std::io::Cursor::new(input), output);
        let message = transport.receive().await.expect("the next message");
        assert!(format!("{message:?}").contains("42"), "{message:?}");
        drop(transport);
        let mut answer = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut written, &mut answer)
            .await
            .unwrap();
        let answer: serde_json::Value = serde_json::from_str(answer.trim()).unwrap();
        assert_eq!(answer["id"], 41, "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("larger than"),
            "{answer}"
        );
    }
}
