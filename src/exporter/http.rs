//! The little HTTP the exporter speaks: one GET or HEAD per connection, a head of at most
//! [`MAX_HEAD`] bytes, two paths. Parsing is pure and tested on literal bytes; the server
//! ([`super::server`]) only reads, calls [`route`] and writes.
//!
//! Anything unexpected is a 4xx with a short fixed body: a malformed request line or header
//! 400, a head too long 431, a method other than GET and HEAD 405, any other path 404. No
//! response names a file, a version of anything but cpulab, or what was asked.

use base64::Engine;

/// Largest request head accepted (request line and headers), as Go's net/http default is
/// 1 MiB and a scraper sends a few hundred bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header lines accepted.
pub const MAX_HEADERS: usize = 64;

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub head_only: bool,
    pub path: String,
    pub accept: Option<String>,
    pub authorization: Option<String>,
}

/// Why a request was refused, as its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    BadRequest,
    HeadTooLarge,
    MethodNotAllowed,
    Timeout,
}

impl Refusal {
    pub fn status(self) -> (u16, &'static str) {
        match self {
            Refusal::BadRequest => (400, "Bad Request"),
            Refusal::HeadTooLarge => (431, "Request Header Fields Too Large"),
            Refusal::MethodNotAllowed => (405, "Method Not Allowed"),
            Refusal::Timeout => (408, "Request Timeout"),
        }
    }
}

/// Where the head ends (`\r\n\r\n`, or a bare `\n\n`), if it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses a complete request head.
pub fn parse_head(head: &[u8]) -> Result<Request, Refusal> {
    if head.len() > MAX_HEAD {
        return Err(Refusal::HeadTooLarge);
    }
    let text = std::str::from_utf8(head).map_err(|_| Refusal::BadRequest)?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let line = lines.next().ok_or(Refusal::BadRequest)?;
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::BadRequest);
    };
    if !matches!(version, "HTTP/1.0" | "HTTP/1.1") || !target.starts_with('/') {
        return Err(Refusal::BadRequest);
    }
    if target.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(Refusal::BadRequest);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => {
            return Err(Refusal::MethodNotAllowed);
        }
        _ => return Err(Refusal::BadRequest),
    };
    let path = target.split(['?', '#']).next().unwrap_or("").to_string();
    let mut req = Request {
        head_only,
        path,
        accept: None,
        authorization: None,
    };
    let mut n = 0;
    for l in lines.take_while(|l| !l.is_empty()) {
        n += 1;
        if n > MAX_HEADERS {
            return Err(Refusal::HeadTooLarge);
        }
        let (name, value) = l.split_once(':').ok_or(Refusal::BadRequest)?;
        if name.is_empty() || name.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(Refusal::BadRequest);
        }
        let value = value.trim().to_string();
        if name.eq_ignore_ascii_case("accept") {
            req.accept = Some(value);
        } else if name.eq_ignore_ascii_case("authorization") {
            req.authorization = Some(value);
        }
    }
    Ok(req)
}

/// True when the scraper's `Accept` prefers OpenMetrics to the Prometheus text format (the
/// highest `q` wins; a tie goes to OpenMetrics, as Prometheus lists it first).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else { return false };
    let mut om = 0.0f64;
    let mut text = 0.0f64;
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|v| v.parse::<f64>().ok())
            .unwrap_or(1.0);
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= text
}

/// `user` and `password` of a `Basic` Authorization value.
pub fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, token) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// A response ready to write.
#[derive(Debug)]
pub struct Response {
    pub status: (u16, &'static str),
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub extra_headers: Vec<(&'static str, String)>,
}

impl Response {
    pub fn text(status: (u16, &'static str), body: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
            extra_headers: Vec::new(),
        }
    }

    pub fn refusal(r: Refusal) -> Self {
        let (code, reason) = r.status();
        Self::text((code, reason), &format!("{code} {reason}\n"))
    }

    pub fn not_found() -> Self {
        Self::text((404, "Not Found"), "404 Not Found: try /metrics\n")
    }

    pub fn unauthorized() -> Self {
        let mut r = Self::text((401, "Unauthorized"), "401 Unauthorized\n");
        r.extra_headers
            .push(("WWW-Authenticate", "Basic realm=\"cpulab\"".into()));
        r
    }

    /// The bytes on the wire; the body is left out for a HEAD request.
    pub fn to_bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
             X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n",
            self.status.0,
            self.status.1,
            self.content_type,
            self.body.len()
        );
        for (k, v) in &self.extra_headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scrape_request_parses() {
        let h = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain;version=0.0.4\r\n\
                  Authorization: Basic dTpw\r\n\r\n";
        let r = parse_head(h).unwrap();
        assert_eq!(r.path, "/metrics");
        assert!(!r.head_only);
        assert_eq!(r.accept.as_deref(), Some("text/plain;version=0.0.4"));
        assert_eq!(
            basic_credentials(r.authorization.as_deref().unwrap()),
            Some(("u".to_string(), "p".to_string()))
        );
    }

    #[test]
    fn malformed_heads_are_400() {
        for h in [
            &b"GET /metrics\r\n\r\n"[..],
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/9.9\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nBad Name: x\r\n\r\n",
            b"\xff\xfe / HTTP/1.1\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert_eq!(
                parse_head(h),
                Err(Refusal::BadRequest),
                "{}",
                String::from_utf8_lossy(h)
            );
        }
    }

    #[test]
    fn other_methods_are_405_and_long_heads_431() {
        assert_eq!(
            parse_head(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Err(Refusal::MethodNotAllowed)
        );
        let mut long = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..(MAX_HEADERS + 1) {
            long.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        long.extend_from_slice(b"\r\n");
        assert_eq!(parse_head(&long), Err(Refusal::HeadTooLarge));
        assert_eq!(
            parse_head(&vec![b'a'; MAX_HEAD + 1]),
            Err(Refusal::HeadTooLarge)
        );
    }

    #[test]
    fn head_end_finds_crlf_and_bare_lf() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
    }

    #[test]
    fn accept_negotiation_follows_q() {
        // What Prometheus 2.x sends.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prom)));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some(
            "text/plain,application/openmetrics-text;q=0.5"
        )));
        assert!(!wants_openmetrics(Some("application/openmetrics-text;q=0")));
    }

    #[test]
    fn basic_credentials_refuse_other_schemes_and_garbage() {
        assert_eq!(basic_credentials("Bearer abc"), None);
        assert_eq!(basic_credentials("Basic !!!"), None);
        assert_eq!(basic_credentials("Basic dXNlcg=="), None); // "user", no colon
    }

    #[test]
    fn head_responses_have_no_body_but_the_length() {
        let r = Response::text((200, "OK"), "hello");
        let b = String::from_utf8(r.to_bytes(true)).unwrap();
        assert!(b.contains("Content-Length: 5\r\n"));
        assert!(b.ends_with("\r\n\r\n"));
    }
}
