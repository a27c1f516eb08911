//! The approvals inbox reads a person's browser: form bodies and query
//! strings, cookies, `Host`, `Origin` and `Sec-Fetch-Site`. Each is read
//! without a panic, and the page's escaping and the form encoding keep
//! their promises on any text:
//! - escaped text has no character that could open a tag or end a quoted
//!   attribute, and unescapes to what it was;
//! - a value encoded into a form decodes back to itself, whatever else the
//!   form holds;
//! - a session cookie is found exactly when it is there, each of them;
//! - only the three loopback names pass the `Host` check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::fuzzing::{cookies, escape, form_value, loopback_host, percent_encode, same_origin};

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

fn headers(pairs: &[(&'static str, &[u8])]) -> hyper::HeaderMap {
    let mut map = hyper::HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(value) = hyper::header::HeaderValue::from_bytes(value) {
            map.append(*name, value);
        }
    }
    map
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);

    let escaped = escape(&text);
    assert!(!escaped.contains(['<', '>', '"', '\'']), "{escaped}");
    assert_eq!(unescape(&escaped), text);

    // Whatever the form holds around it, an encoded value comes back.
    let _ = form_value(&text, "csrf");
    let form = format!("{text}&csrf={}&after=1", percent_encode(&text));
    let first_csrf = text
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .any(|(key, _)| key == "csrf");
    if !first_csrf {
        assert_eq!(form_value(&form, "csrf").as_deref(), Some(&*text));
    }

    // Headers as a browser (or anything else) sends them.
    let map = headers(&[
        ("cookie", data),
        ("host", data),
        ("origin", data),
        ("sec-fetch-site", data),
    ]);
    let _ = cookies(&map, "toolgate_session");
    let _ = same_origin(&map);
    if loopback_host(&map) {
        let host = std::str::from_utf8(data).unwrap();
        let name = host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) { name } else { host }
        });
        assert!(["127.0.0.1", "localhost", "[::1]"].contains(&name), "{host}");
    }
    if !text.contains([';', '\r', '\n', '\0']) && !text.trim().is_empty() {
        let value = text.trim();
        let jar = format!("toolgate_session=other; a=b; toolgate_session={value}");
        let jar = headers(&[("cookie", jar.as_bytes())]);
        if !jar.is_empty() {
            assert_eq!(cookies(&jar, "toolgate_session"), ["other", value]);
        }
        // Absent when only other names (ours as their prefix or suffix) are.
        let others = format!("toolgate_session_x={value}; x_toolgate_session={value}");
        let others = headers(&[("cookie", others.as_bytes())]);
        assert!(cookies(&others, "toolgate_session").is_empty());
    }
});
