//! What the exporter answers over HTTP, apart from the wire: which requests ([`check`]), the
//! scraper's format ([`wants_openmetrics`]), basic credentials, and the responses. hyper reads
//! and writes the protocol ([`super::server`]); these are pure and tested on literal text.
//!
//! Anything unexpected is a 4xx with a short fixed body: a head too long 431 (hyper's), a
//! method other than GET and HEAD 405, any other path 404. No response names a file, a version
//! of anything but cpulab, or what was asked.

use base64::Engine;

/// Largest request head accepted (request line and headers): Go's net/http default is 1 MiB,
/// and a scraper sends a few hundred bytes. Also the smallest read buffer hyper allows.
pub const MAX_HEAD: usize = 8 * 1024;
/// Most header lines accepted.
pub const MAX_HEADERS: usize = 64;

/// What the pages need of an accepted, authorised request.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub head_only: bool,
    pub path: String,
    pub accept: Option<String>,
}

/// The exporter's two pages.
pub const PATHS: [&str; 2] = ["/", "/metrics"];

/// Which requests are answered, before any authentication: a path other than the two pages is
/// 404, another method than GET or HEAD on them 405 (with `Allow`). `Ok(head_only)` otherwise.
pub fn check(method: &str, path: &str) -> Result<bool, Response> {
    if !PATHS.contains(&path) {
        return Err(Response::not_found());
    }
    match method {
        "GET" => Ok(false),
        "HEAD" => Ok(true),
        _ => {
            let mut r = Response::text((405, "Method Not Allowed"), "405 Method Not Allowed\n");
            r.extra_headers.push(("Allow", "GET, HEAD".into()));
            Err(r)
        }
    }
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

    pub fn not_found() -> Self {
        Self::text((404, "Not Found"), "404 Not Found: try /metrics\n")
    }

    pub fn unauthorized() -> Self {
        let mut r = Self::text((401, "Unauthorized"), "401 Unauthorized\n");
        r.extra_headers
            .push(("WWW-Authenticate", "Basic realm=\"cpulab\"".into()));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_and_head_on_the_two_pages() {
        assert!(matches!(check("GET", "/metrics"), Ok(false)));
        assert!(matches!(check("HEAD", "/"), Ok(true)));
        for m in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
            let r = check(m, "/metrics").unwrap_err();
            assert_eq!(r.status.0, 405, "{m}");
            assert!(r.extra_headers.contains(&("Allow", "GET, HEAD".into())));
        }
        for p in [
            "/metrics/",
            "/index.html",
            "/../etc/passwd",
            "",
            "/debug/pprof",
        ] {
            assert_eq!(check("GET", p).unwrap_err().status.0, 404, "{p}");
            assert_eq!(check("POST", p).unwrap_err().status.0, 404, "{p}");
        }
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
}
