//! The audit trail to a syslog receiver: RFC 5424 messages (facility 13,
//! "log audit") whose text is the link's CEF line, over UDP (a datagram
//! each) or TCP (octet-counted frames, RFC 6587).

use std::io::Write as _;
use std::net::{TcpStream, ToSocketAddrs as _, UdpSocket};
use std::time::Duration;

use toolgate_engine::audit::LinkHead;

/// RFC 5424's "log audit" facility.
const FACILITY: u8 = 13;

/// How long a TCP connect or write may take before the batch is retried.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A syslog receiver.
#[derive(Debug)]
pub struct Syslog {
    address: String,
    tcp: bool,
    host: String,
    stream: Option<TcpStream>,
}

impl Syslog {
    /// `udp://HOST:PORT` or `tcp://HOST:PORT`; `host` is the HOSTNAME
    /// messages carry.
    pub fn parse(url: &str, host: &str) -> Result<Self, String> {
        let (tcp, address) = match url.split_once("://") {
            Some(("udp", address)) => (false, address),
            Some(("tcp", address)) => (true, address),
            _ => {
                return Err(format!(
                    "[audit] syslog = {url:?}: write udp://HOST:PORT or tcp://HOST:PORT"
                ));
            }
        };
        // Resolved when sending: a name that does not resolve now is
        // retried, not a reason for the daemon not to start.
        if address
            .rsplit_once(':')
            .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            return Err(format!(
                "[audit] syslog = {url:?}: {address} is not HOST:PORT"
            ));
        }
        Ok(Self {
            address: address.to_string(),
            tcp,
            host: host.to_string(),
            stream: None,
        })
    }

    /// The receiver, as the config names it.
    pub fn url(&self) -> String {
        format!(
            "{}://{}",
            if self.tcp { "tcp" } else { "udp" },
            self.address
        )
    }

    /// Send each link; an error leaves the batch to be sent again.
    pub fn send(&mut self, links: &[(u64, String)]) -> Result<(), String> {
        // A link that cannot be read (verify names it) is left out, not a
        // reason to stop sending the rest.
        let messages: Vec<String> = links
            .iter()
            .filter_map(|(seq, link)| match message(link, &self.host) {
                Ok(message) => Some(message),
                Err(err) => {
                    tracing::error!(seq, error = %err, "audit link not sent to syslog");
                    None
                }
            })
            .collect();
        if !self.tcp {
            let socket = UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| e.to_string())?;
            for message in &messages {
                socket
                    .send_to(message.as_bytes(), &self.address)
                    .map_err(|e| format!("syslog {}: {e}", self.address))?;
            }
            return Ok(());
        }
        let sent = self.send_tcp(&messages);
        if sent.is_err() {
            self.stream = None; // connect again next time
        }
        sent
    }

    fn send_tcp(&mut self, messages: &[String]) -> Result<(), String> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            empty => {
                let address = self
                    .address
                    .to_socket_addrs()
                    .map_err(|e| e.to_string())?
                    .next()
                    .ok_or("no address")?;
                let stream = TcpStream::connect_timeout(&address, TIMEOUT)
                    .map_err(|e| format!("syslog {}: {e}", self.address))?;
                stream
                    .set_write_timeout(Some(TIMEOUT))
                    .map_err(|e| e.to_string())?;
                empty.insert(stream)
            }
        };
        let mut frames = Vec::new();
        for message in messages {
            frames.extend_from_slice(format!("{} {message}", message.len()).as_bytes());
        }
        stream
            .write_all(&frames)
            .and_then(|()| stream.flush())
            .map_err(|e| format!("syslog {}: {e}", self.address))
    }
}

/// The RFC 5424 message of a stored link: `<PRI>1 TIMESTAMP HOST toolgate
/// PID KIND - CEF:…`.
pub fn message(link: &str, host: &str) -> Result<String, String> {
    let head: LinkHead =
        serde_json::from_str(link).map_err(|err| format!("not an audit link: {err}"))?;
    let cef = super::cef::line(link)?;
    // Severity from the CEF line: denials warn, pauses and refusals notice.
    let severity = match cef.split('|').nth(6) {
        Some("7") => 4,
        Some("5") => 5,
        _ => 6,
    };
    let at = std::time::UNIX_EPOCH + Duration::from_millis(head.at_ms);
    Ok(format!(
        "<{}>1 {} {} toolgate {} {} - {cef}",
        FACILITY * 8 + severity,
        humantime::format_rfc3339_millis(at),
        header_field(host),
        std::process::id(),
        head.kind.name(),
    ))
}

/// A header field as RFC 5424 allows: printable ASCII without spaces, at
/// most 255 characters, `-` when empty.
fn header_field(text: &str) -> String {
    let field: String = text
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(255)
        .collect();
    if field.is_empty() { "-".into() } else { field }
}
