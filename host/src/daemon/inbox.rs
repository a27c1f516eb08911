//! The approvals inbox: a small web page on the daemon's loopback HTTP
//! address (`/approvals`) where a person sees the paused calls and answers
//! them.
//!
//! It is a channel adapter like any other, never a way around the trust
//! boundary:
//! - **Sign-in** takes a one-time code that only a person at a terminal of
//!   their own obtains (`toolgate approvals open`, checked like `gates
//!   resolve`), valid for [`CODE_TTL`] and once; it becomes a session
//!   cookie (`HttpOnly`, `SameSite=Strict`, [`SESSION_TTL`]) for the
//!   session's own pages, `/approvals/s/SECRET/`. Cookies belong to the
//!   host whatever the port, so a browser would send one scoped to a
//!   guessable path to any other server on `127.0.0.1` (an agent's dev
//!   server): the path's secret keeps it from them.
//! - **Every answer** is a POST carrying the session's CSRF token, from the
//!   page's own origin (`Origin` and `Sec-Fetch-Site` checked when sent).
//! - **The page** is served with a strict `Content-Security-Policy` (no
//!   inline script or style), is never framed or cached, and only under a
//!   loopback `Host` (DNS rebinding).
//!
//! Resolutions from the inbox use the `web` channel; the history shows who
//! (the signed-in terminal user) resolved what, when and from where. The
//! page works without JavaScript; `app.js` adds live updates (server-sent
//! events) and countdowns.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::Daemon;
use super::peer::constant_time_eq;
use crate::gates::{GateResolution, PauseKind, PendingGate};

/// How long a login code is valid.
pub const CODE_TTL: Duration = Duration::from_secs(300);
/// How long a signed-in session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(3600);
/// Resolutions kept for the history.
const HISTORY: usize = 50;
/// The channel inbox resolutions use.
pub const CHANNEL: &str = "web";
const COOKIE: &str = "toolgate_session";
/// Under which the signed-in sessions' pages are.
const SESSIONS_AT: &str = "/approvals/s/";
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The HTTP body type of the daemon's responses.
pub type Body = BoxBody<Bytes, Infallible>;

/// Sign-in codes, sessions and the recent resolutions.
#[derive(Default)]
pub struct Inbox {
    codes: Mutex<HashMap<String, (String, u64)>>,
    sessions: Mutex<HashMap<String, Session>>,
    history: Mutex<VecDeque<Resolved>>,
}

#[derive(Clone)]
struct Session {
    identity: String,
    csrf: String,
    /// The secret in the session's path (`/approvals/s/PATH/`), the only
    /// path its cookie is sent to.
    path: String,
    expires_ms: u64,
}

impl Session {
    /// Where the session's pages are.
    fn home(&self) -> String {
        format!("{SESSIONS_AT}{}/", self.path)
    }
}

/// One resolution, for the history.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// The paused tool.
    pub tool: String,
    /// The gate's request id.
    pub request_id: String,
    /// What was decided.
    pub decision: String,
    /// Who: `web (uid 1000)`, `terminal (uid 1000)`, a channel's name.
    pub by: String,
}

fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer).expect("the OS has randomness");
    hex::encode(buffer)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Inbox {
    /// A one-time sign-in code for `identity` (a person the daemon has
    /// checked).
    pub fn issue_code(&self, identity: &str) -> String {
        let code = random_hex(16);
        let now = crate::now_ms();
        let mut codes = lock(&self.codes);
        codes.retain(|_, (_, expires)| *expires > now);
        let expires = now + CODE_TTL.as_millis() as u64;
        codes.insert(code.clone(), (identity.to_string(), expires));
        code
    }

    /// Remember a resolution for the history.
    pub fn record(&self, resolved: Resolved) {
        let mut history = lock(&self.history);
        history.push_front(resolved);
        history.truncate(HISTORY);
    }

    /// Trade a code (once, before it expires) for a session id.
    fn sign_in(&self, code: &str) -> Option<(String, Session)> {
        let now = crate::now_ms();
        let (identity, expires) = lock(&self.codes).remove(code)?;
        if expires <= now {
            return None;
        }
        let session = Session {
            identity,
            csrf: random_hex(16),
            path: random_hex(16),
            expires_ms: now + SESSION_TTL.as_millis() as u64,
        };
        let id = random_hex(32);
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.expires_ms > now);
        sessions.insert(id.clone(), session.clone());
        Some((id, session))
    }

    /// The live session whose cookie `headers` carry and whose pages are
    /// at `path`'s secret.
    fn session(&self, headers: &HeaderMap, path: &str) -> Option<Session> {
        let now = crate::now_ms();
        let sessions = lock(&self.sessions);
        cookies(headers, COOKIE).iter().find_map(|id| {
            sessions
                .get(id)
                .filter(|s| {
                    s.expires_ms > now && constant_time_eq(s.path.as_bytes(), path.as_bytes())
                })
                .cloned()
        })
    }
}

/// The values of cookie `name`, in the order sent. Read as bytes: browsers
/// send every cookie of the host in one header (all ports of `127.0.0.1`
/// share them), and another local site's cookie that is not ASCII must not
/// hide ours; nor may another site's cookie of the same name.
pub(crate) fn cookies(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .filter_map(|pair| {
            let pair = pair.trim_ascii();
            let equals = pair.iter().position(|&b| b == b'=')?;
            (&pair[..equals] == name.as_bytes())
                .then(|| String::from_utf8(pair[equals + 1..].to_vec()).ok())
                .flatten()
        })
        .collect()
}

/// Whether the `Host` header names a loopback host: a page on some other
/// name that resolves to 127.0.0.1 (DNS rebinding) gets nothing.
pub(crate) fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

/// Whether a state-changing request comes from the page itself.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site")
        && site != "same-origin"
    {
        return false;
    }
    match (header("origin"), header("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin == format!("http://{host}"),
        (Some(_), None) => false,
    }
}

fn with_page_headers(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CSP);
    set(headers, "x-frame-options", "DENY");
    set(headers, "x-content-type-options", "nosniff");
    // Not `no-referrer`: with it, browsers send `Origin: null` on form posts.
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cache-control", "no-store");
    response
}

fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    with_page_headers(response)
}

fn redirect(to: &str) -> Response<Body> {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(location) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

impl Daemon {
    /// Answer a request under `/approvals`.
    pub(super) async fn inbox(self: &Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        self.touch();
        if !loopback_host(request.headers()) {
            return respond(
                StatusCode::MISDIRECTED_REQUEST,
                "text/plain; charset=utf-8",
                "the approvals inbox answers only at 127.0.0.1, localhost or [::1]\n",
            );
        }
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        if let Some(rest) = path.strip_prefix(SESSIONS_AT) {
            let (secret, page) = rest.split_once('/').unwrap_or((rest, ""));
            return self.session_page(request, secret, page, &query).await;
        }
        match (request.method().clone(), path.as_str()) {
            (Method::GET, "/approvals/app.js") => respond(
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                include_str!("inbox/app.js"),
            ),
            (Method::GET, "/approvals/app.css") => respond(
                StatusCode::OK,
                "text/css; charset=utf-8",
                include_str!("inbox/app.css"),
            ),
            (Method::GET, "/approvals/login") => {
                let code = form_value(&query, "code").unwrap_or_default();
                match self.shared.inbox.sign_in(code.trim()) {
                    Some((id, session)) => {
                        let home = session.home();
                        let mut response = redirect(&home);
                        let cookie = format!(
                            "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path={home}; Max-Age={}",
                            SESSION_TTL.as_secs()
                        );
                        if let Ok(value) = HeaderValue::from_str(&cookie) {
                            response.headers_mut().insert(header::SET_COOKIE, value);
                        }
                        response
                    }
                    None => {
                        let page = sign_in_page(Some(
                            "That code is wrong, used or expired. Run `toolgate approvals open` \
                             in your terminal for a new one.",
                        ));
                        respond(StatusCode::FORBIDDEN, "text/html; charset=utf-8", page)
                    }
                }
            }
            (Method::GET, "/approvals" | "/approvals/") => respond(
                StatusCode::OK,
                "text/html; charset=utf-8",
                sign_in_page(None),
            ),
            _ => respond(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found\n",
            ),
        }
    }

    /// A signed-in session's `page` (the inbox, its live updates, or an
    /// answer), at its path's `secret`.
    async fn session_page(
        self: &Arc<Self>,
        request: Request<Incoming>,
        secret: &str,
        page: &str,
        query: &str,
    ) -> Response<Body> {
        let Some(session) = self.shared.inbox.session(request.headers(), secret) else {
            return match (request.method(), page) {
                (&Method::GET, "") => respond(
                    StatusCode::OK,
                    "text/html; charset=utf-8",
                    sign_in_page(None),
                ),
                _ => respond(
                    StatusCode::FORBIDDEN,
                    "text/plain; charset=utf-8",
                    "sign in first\n",
                ),
            };
        };
        match (request.method().clone(), page) {
            (Method::GET, "") => {
                let page = self.inbox_page(&session, query);
                respond(StatusCode::OK, "text/html; charset=utf-8", page)
            }
            (Method::GET, "events") => self.changes(),
            (Method::POST, "resolve") => self.resolve_from_inbox(request, session).await,
            _ => respond(
                StatusCode::NOT_FOUND,
                "text/plain; charset=utf-8",
                "not found\n",
            ),
        }
    }

    async fn resolve_from_inbox(
        &self,
        request: Request<Incoming>,
        session: Session,
    ) -> Response<Body> {
        let forbidden =
            |why: &'static str| respond(StatusCode::FORBIDDEN, "text/plain; charset=utf-8", why);
        if !same_origin(request.headers()) {
            return forbidden("cross-site requests are refused\n");
        }
        let body = Limited::new(request.into_body(), 16 * 1024).collect();
        let body = match tokio::time::timeout(Duration::from_secs(10), body).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            _ => return forbidden("unreadable form\n"),
        };
        let form = String::from_utf8_lossy(&body).into_owned();
        let csrf = form_value(&form, "csrf").unwrap_or_default();
        if !constant_time_eq(csrf.as_bytes(), session.csrf.as_bytes()) {
            return forbidden("the form is stale or forged; reload the page\n");
        }
        let request_id = form_value(&form, "request_id").unwrap_or_default();
        let decision = form_value(&form, "decision").unwrap_or_default();
        let outcome = match self.resolve_gate(&request_id, &decision, &session) {
            Ok(done) => format!("done={}", percent_encode(&done)),
            Err(err) => format!("error={}", percent_encode(&err)),
        };
        redirect(&format!("{}?{outcome}", session.home()))
    }

    /// Resolve a gate for the signed-in person; what was done, or why not.
    fn resolve_gate(
        &self,
        request_id: &str,
        decision: &str,
        session: &Session,
    ) -> Result<String, String> {
        let gates = self.service().gates(None).map_err(|e| e.report())?;
        let gate = gates
            .into_iter()
            .find(|g| g.request_id == request_id)
            .ok_or("that call is no longer waiting (resolved or expired)")?;
        let resolution = GateResolution::from_answer(decision, &gate.pause)
            .ok_or_else(|| format!("`{decision}` is not an answer to this pause"))?;
        self.service
            .resolve(
                &gate.key(),
                request_id,
                CHANNEL,
                resolution,
                true,
                format!("{CHANNEL} ({})", session.identity),
            )
            .map_err(|e| e.report())?;
        Ok(format!("{decision}: {}", gate.tool))
    }

    /// Server-sent events: `changed` whenever the pending gates change.
    fn changes(self: &Arc<Self>) -> Response<Body> {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(4);
        let daemon = Arc::clone(self);
        tokio::spawn(async move {
            let host = daemon.service();
            let mut last = None;
            let mut quiet = 0u32;
            loop {
                let ids: Vec<String> = host
                    .gates(None)
                    .map(|gates| gates.into_iter().map(|g| g.request_id).collect())
                    .unwrap_or_default();
                let message = if last.as_ref() != Some(&ids) {
                    last = Some(ids);
                    quiet = 0;
                    Some(Bytes::from_static(b"event: changed\ndata: gates\n\n"))
                } else {
                    quiet += 1;
                    quiet
                        .is_multiple_of(15)
                        .then(|| Bytes::from_static(b": still here\n\n"))
                };
                if let Some(message) = message
                    && sender.send(message).await.is_err()
                {
                    return; // the page went away
                }
                // An open page is activity: the daemon stays for it.
                daemon.touch();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let mut response = Response::new(BoxBody::new(Events(receiver)));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        with_page_headers(response)
    }

    fn inbox_page(&self, session: &Session, query: &str) -> String {
        let gates = self.service().gates(None);
        let notice = match (form_value(query, "done"), form_value(query, "error")) {
            (Some(done), _) => format!(
                r#"<p class="notice ok" role="status">Done — {}</p>"#,
                escape(&done)
            ),
            (_, Some(error)) => format!(
                r#"<p class="notice error" role="alert">Not done: {}</p>"#,
                escape(&error)
            ),
            _ => String::new(),
        };
        let pending = match gates {
            Ok(mut gates) if !gates.is_empty() => {
                gates.sort_by_key(|g| std::cmp::Reverse(g.created_at_ms));
                gates
                    .iter()
                    .map(|g| gate_card(g, &session.csrf))
                    .collect::<String>()
            }
            Ok(_) => r#"<p class="empty">Nothing is waiting for you.</p>"#.to_string(),
            Err(err) => format!(
                r#"<p class="notice error" role="alert">The store cannot be read: {}</p>"#,
                escape(&err.report())
            ),
        };
        let history: String = {
            let history = lock(&self.shared.inbox.history);
            if history.is_empty() {
                r#"<p class="empty">Nothing resolved yet.</p>"#.to_string()
            } else {
                let rows: String = history
                    .iter()
                    .map(|r| {
                        format!(
                            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                            escape(&clock(r.at_ms)),
                            escape(&r.tool),
                            escape(&r.decision),
                            escape(&r.by)
                        )
                    })
                    .collect();
                format!(
                    "<table><thead><tr><th scope=\"col\">When</th><th scope=\"col\">Tool</th>\
                     <th scope=\"col\">Decision</th><th scope=\"col\">By</th></tr></thead>\
                     <tbody>{rows}</tbody></table>"
                )
            }
        };
        page(&format!(
            r#"<header><h1>toolgate approvals</h1><p class="who">Signed in as {who}</p></header>
<main>{notice}
<section aria-labelledby="pending-title"><h2 id="pending-title">Waiting for you</h2>
<div id="pending">{pending}</div></section>
<section aria-labelledby="history-title"><h2 id="history-title">Recently resolved</h2>{history}</section>
</main>"#,
            who = escape(&session.identity),
        ))
    }
}

fn gate_card(gate: &PendingGate, csrf: &str) -> String {
    let (asks, buttons) = match &gate.pause {
        PauseKind::Approval {
            description,
            allow_always,
        } => {
            let always = if *allow_always {
                r#"<button name="decision" value="approve-always">Approve always</button>"#
            } else {
                ""
            };
            (
                escape(description),
                format!(
                    r#"<button name="decision" value="approve" class="approve">Approve</button>{always}<button name="decision" value="deny" class="deny">Deny</button>"#
                ),
            )
        }
        PauseKind::Authentication {
            credential,
            instructions,
            ..
        } => (
            format!(
                "Needs the credential <code>{}</code>: {}",
                escape(credential),
                escape(instructions)
            ),
            format!(
                r#"<button name="decision" value="credential" class="approve">Credential `{}` is available</button><button name="decision" value="deny" class="deny">Deny</button>"#,
                escape(credential)
            ),
        ),
    };
    format!(
        r#"<article class="gate" id="gate-{id}" aria-labelledby="tool-{id}">
<h3 id="tool-{id}">{tool} <span class="policy">paused by {policy}</span></h3>
<p class="asks">{asks}</p>
<pre class="arguments">{arguments}</pre>
<dl><dt>Risk</dt><dd>{risk}</dd><dt>User</dt><dd>{user}</dd><dt>Thread</dt><dd>{thread}</dd><dt>Session</dt><dd>{session}</dd><dt>From</dt><dd>{channel}</dd><dt>Time left</dt><dd data-expires="{expires}">{left}</dd></dl>
<form method="post" action="resolve"><input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="request_id" value="{id}">{buttons}</form>
</article>"#,
        id = escape(&gate.request_id),
        risk = escape(&risk_text(gate)),
        tool = escape(&gate.tool),
        policy = escape(&gate.policy),
        arguments = escape(&gate.arguments),
        user = escape(&gate.user_id),
        thread = escape(&gate.thread_id),
        session = escape(&gate.session_id),
        channel = escape(&gate.source_channel),
        expires = gate.expires_at_ms,
        left = time_left(gate.expires_at_ms),
        csrf = escape(csrf),
    )
}

/// The risk a gate was judged at: category, signals and who said so.
fn risk_text(gate: &PendingGate) -> String {
    let Some(risk) = &gate.risk else {
        return "not recorded".into();
    };
    let level = serde_json::to_value(risk.level)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut text = format!("{} ({level})", risk.category);
    if !risk.signals.is_empty() {
        text.push_str(&format!(": {}", risk.signals.join(", ")));
    }
    if let Some(by) = &risk.by {
        text.push_str(&format!(", by {by}"));
    }
    text
}

fn sign_in_page(problem: Option<&str>) -> String {
    let problem = problem.map_or(String::new(), |p| {
        format!(r#"<p class="notice error" role="alert">{}</p>"#, escape(p))
    });
    page(&format!(
        r#"<header><h1>toolgate approvals</h1></header>
<main>{problem}<p>Sign in with the one-time code that <code>toolgate approvals open</code> printed in your terminal.</p>
<form method="get" action="/approvals/login" class="sign-in"><label for="code">Code</label>
<input id="code" name="code" autocomplete="one-time-code" required spellcheck="false">
<button>Sign in</button></form></main>"#
    ))
}

fn page(body: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>toolgate approvals</title><link rel="stylesheet" href="/approvals/app.css"><script src="/approvals/app.js" defer></script></head>
<body>{body}</body></html>
"#
    )
}

fn time_left(expires_ms: u64) -> String {
    let left = expires_ms.saturating_sub(crate::now_ms()) / 1000;
    if left == 0 {
        "expired".into()
    } else {
        format!("{} min {} s", left / 60, left % 60)
    }
}

fn clock(at_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(at_ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// HTML-escape text for element content and quoted attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value of an `application/x-www-form-urlencoded` string (a form, or
/// a URL's query).
pub(crate) fn form_value(form: &str, name: &str) -> Option<String> {
    form.split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| percent_decode(value))
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| Some(hex(bytes[i + 1])? * 16 + hex(bytes[i + 2])?))
            .flatten();
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 2;
            }
            (b'+', None) => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(crate) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A streaming body fed by a channel (the server-sent events).
struct Events(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_forms_are_decoded() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(
            form_value("a=1&csrf=ab%2Fc+d&x", "csrf").as_deref(),
            Some("ab/c d")
        );
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode(&percent_encode("a b/ü")), "a b/ü");
    }

    #[test]
    fn a_session_cookie_is_found_beside_another_sites_non_ascii_cookie() {
        // Found by `fuzz/` (inbox_form): the whole header was skipped.
        let mut headers = HeaderMap::new();
        let jar = "theme=gr\u{fc}n; toolgate_session=abc123".as_bytes();
        headers.insert(header::COOKIE, HeaderValue::from_bytes(jar).unwrap());
        assert_eq!(cookies(&headers, COOKIE), ["abc123"]);
    }

    #[test]
    fn another_sites_cookie_of_the_same_name_does_not_hide_the_session() {
        let inbox = Inbox::default();
        let (id, session) = inbox.sign_in(&inbox.issue_code("uid 1000")).unwrap();
        let mut headers = HeaderMap::new();
        let jar = format!("{COOKIE}=planted; {COOKIE}={id}");
        headers.insert(header::COOKIE, HeaderValue::from_str(&jar).unwrap());
        let found = inbox.session(&headers, &session.path).unwrap();
        assert_eq!(found.identity, "uid 1000");
        assert!(inbox.session(&headers, "another-path").is_none());
    }

    #[test]
    fn a_code_signs_in_once() {
        let inbox = Inbox::default();
        let code = inbox.issue_code("uid 1000");
        assert!(inbox.sign_in("wrong").is_none());
        let (_, session) = inbox.sign_in(&code).unwrap();
        assert_eq!(session.identity, "uid 1000");
        assert!(inbox.sign_in(&code).is_none(), "used once");
    }

    #[test]
    fn only_loopback_hosts_and_the_pages_own_origin_pass() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (k, v) in pairs {
                map.insert(*k, HeaderValue::from_static(v));
            }
            map
        };
        assert!(loopback_host(&headers(&[("host", "127.0.0.1:7878")])));
        assert!(loopback_host(&headers(&[("host", "localhost:7878")])));
        assert!(!loopback_host(&headers(&[("host", "evil.example:7878")])));
        assert!(!loopback_host(&headers(&[])));
        let host = ("host", "127.0.0.1:7878");
        assert!(same_origin(&headers(&[host])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:7878")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
    }
}
