//! The query side of the Prometheus HTTP API (`/api/v1/query`, `/api/v1/query_range`,
//! `/api/v1/rules`), over ureq with rustls: one agent, one timeout for every request, TLS and
//! basic auth from a `--web.config.file` ([`super::webconfig`]).
//!
//! Every way the server can be the wrong one becomes one line naming the problem and the fix:
//! no server at the address, no answer in time, an answer that is not the Prometheus API (a
//! wrong URL), a refusal (credentials). Those are bad input (exit 2): the user fixes the flag.
//! A query the server ran and refused (`"status": "error"`) is a failed query (exit 1).

use super::webconfig::Access;
use crate::error::bad_input;
use anyhow::{Result, anyhow};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// A series' labels.
pub type Labels = BTreeMap<String, String>;

/// One sample of an instant query.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: Labels,
    pub value: f64,
}

/// One series of a range query, its points (Unix seconds, value) oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<(f64, f64)>,
}

/// A recording rule group as `/api/v1/rules` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct RuleGroup {
    pub name: String,
    pub interval_s: f64,
    pub records: Vec<String>,
}

/// A Prometheus server, and what each request to it costs (for the report's conditions).
pub struct Prometheus {
    agent: ureq::Agent,
    base: String,
    authorization: Option<String>,
    client_cert: Option<String>,
    timeout: Duration,
    /// Queries sent, and series they returned.
    pub log: std::cell::RefCell<Vec<(String, usize)>>,
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: serde_json::Value,
    #[serde(default, rename = "errorType")]
    error_type: String,
    #[serde(default)]
    error: String,
}

impl Prometheus {
    /// A client of the server at `base` (`http://HOST:9090`, a path prefix allowed).
    pub fn new(base: &str, access: &Access, timeout: Duration) -> Result<Self> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) || base.len() < 10 {
            return Err(bad_input(format!(
                "--prometheus {base}: not an http:// or https:// URL; give the server's base \
                 URL, such as http://prometheus:9090"
            )));
        }
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .tls_config(access.tls.clone())
            .user_agent(concat!("cpulab/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            agent: config.into(),
            base,
            authorization: access.authorization.clone(),
            client_cert: access.client_cert.clone(),
            timeout,
            log: Default::default(),
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn get(&self, path: &str, params: &[(&str, String)]) -> Result<serde_json::Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self.agent.get(&url);
        for (k, v) in params {
            req = req.query(k, v);
        }
        if let Some(a) = &self.authorization {
            req = req.header("Authorization", a);
        }
        let mut resp = req.call().map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| self.unreachable(e))?;
        match status {
            401 | 403 => {
                return Err(bad_input(format!(
                    "--prometheus {}: the server refused the query (HTTP {status}); give its \
                     credentials with --web.config.file (basic_auth, or tls_config with a client \
                     certificate)",
                    self.base
                )));
            }
            _ => {}
        }
        let answer: Answer = serde_json::from_str(&body).map_err(|_| {
            bad_input(format!(
                "--prometheus {}: {url} answered HTTP {status} without the Prometheus API's JSON; \
                 give the Prometheus server's base URL (the one whose /api/v1/query answers), \
                 such as http://prometheus:9090",
                self.base
            ))
        })?;
        if answer.status != "success" {
            let what = params.first().map(|(_, q)| q.as_str()).unwrap_or(path);
            let fix = if answer.error_type == "timeout" {
                "narrow --since or --limit, or raise the server's --query.timeout"
            } else {
                "the server's own words are above"
            };
            return Err(anyhow!(
                "the query failed on {} ({}: {}) for `{what}`; {fix}",
                self.base,
                answer.error_type,
                answer.error.replace('\n', " ")
            ));
        }
        Ok(answer.data)
    }

    /// The one line for a server that did not answer.
    fn unreachable(&self, e: ureq::Error) -> anyhow::Error {
        let base = &self.base;
        match e {
            ureq::Error::Timeout(_) => bad_input(format!(
                "--prometheus {base}: no answer within {} s; raise --timeout, or query a less \
                 loaded Prometheus",
                self.timeout.as_secs_f64()
            )),
            ureq::Error::HostNotFound => bad_input(format!(
                "--prometheus {base}: the host name does not resolve; check the URL"
            )),
            ureq::Error::BadUri(why) => bad_input(format!(
                "--prometheus {base}: not a usable URL ({why}); give one such as \
                 http://prometheus:9090"
            )),
            ureq::Error::Io(io) if io.get_ref().is_some_and(|i| i.is::<rustls::Error>()) => {
                let tls = io.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
                bad_input(tls_line(base, tls, &io, self.client_cert.as_deref()))
            }
            ureq::Error::Rustls(ref tls) => {
                bad_input(tls_line(base, Some(tls), &e, self.client_cert.as_deref()))
            }
            ureq::Error::Tls(_) | ureq::Error::Pem(_) => {
                bad_input(tls_line(base, None, &e, self.client_cert.as_deref()))
            }
            other => bad_input(format!(
                "--prometheus {base}: cannot reach the server ({other}); check the address and \
                 that Prometheus runs there"
            )),
        }
    }

    /// An instant query evaluated at `at` (Unix seconds).
    pub fn instant(&self, query: &str, at: f64) -> Result<Vec<Sample>> {
        let data = self.get(
            "/api/v1/query",
            &[
                ("query", query.to_string()),
                ("time", format!("{at:.3}")),
                ("timeout", format!("{}s", self.timeout.as_secs().max(1))),
            ],
        )?;
        let samples = parse_vector(&data).ok_or_else(|| self.odd(query))?;
        self.log
            .borrow_mut()
            .push((query.to_string(), samples.len()));
        Ok(samples)
    }

    /// A range query from `start` to `end` every `step_s` seconds.
    pub fn range(&self, query: &str, start: f64, end: f64, step_s: f64) -> Result<Vec<Series>> {
        let data = self.get(
            "/api/v1/query_range",
            &[
                ("query", query.to_string()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", format!("{step_s:.3}")),
                ("timeout", format!("{}s", self.timeout.as_secs().max(1))),
            ],
        )?;
        let series = parse_matrix(&data).ok_or_else(|| self.odd(query))?;
        self.log
            .borrow_mut()
            .push((query.to_string(), series.len()));
        Ok(series)
    }

    /// The recording rule groups loaded.
    pub fn rule_groups(&self) -> Result<Vec<RuleGroup>> {
        let data = self.get("/api/v1/rules", &[("type", "record".to_string())])?;
        parse_rules(&data).ok_or_else(|| self.odd("/api/v1/rules"))
    }

    fn odd(&self, what: &str) -> anyhow::Error {
        bad_input(format!(
            "--prometheus {}: the answer to `{what}` is not shaped as the Prometheus HTTP API's; \
             give a Prometheus server's base URL",
            self.base
        ))
    }
}

/// The one line for a TLS failure (pure): a handshake the server ended over the client's
/// certificate (an alert about a certificate, which only the server sends about the client's)
/// names the client certificate and its fix; any other failure is the server's certificate, so
/// its CA is the fix. `sent` is the client certificate given, if any.
pub fn tls_line(
    base: &str,
    tls: Option<&rustls::Error>,
    shown: &dyn std::fmt::Display,
    sent: Option<&str>,
) -> String {
    use rustls::AlertDescription as A;
    let about_client_cert = matches!(
        tls,
        Some(rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnknownCA
                | A::CertificateUnknown
                | A::CertificateExpired
                | A::CertificateRevoked
                | A::UnsupportedCertificate
        ))
    );
    match (about_client_cert, sent) {
        (true, None) => format!(
            "--prometheus {base}: the server requires a client certificate and ended the TLS \
             handshake ({shown}); give one as tls_config.cert_file and key_file in \
             --web.config.file"
        ),
        (true, Some(cert)) => format!(
            "--prometheus {base}: the server refused the client certificate {cert} in the TLS \
             handshake ({shown}); give one signed by a CA the server trusts (its \
             tls_server_config.client_ca_file) and not expired, as tls_config.cert_file"
        ),
        (false, _) => format!(
            "--prometheus {base}: TLS failed ({shown}); give the server's CA as \
             tls_config.ca_file in --web.config.file"
        ),
    }
}

fn labels_of(v: &serde_json::Value) -> Option<Labels> {
    v.get("metric")?
        .as_object()?
        .iter()
        .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

fn number(v: &serde_json::Value) -> Option<(f64, f64)> {
    let pair = v.as_array()?;
    let t = pair.first()?.as_f64()?;
    let x = pair.get(1)?.as_str()?;
    // Prometheus spells them NaN, +Inf and -Inf.
    Some((t, x.parse().ok()?))
}

/// The samples of an instant query's `data` (a vector; a scalar is one unlabelled sample).
pub fn parse_vector(data: &serde_json::Value) -> Option<Vec<Sample>> {
    match data.get("resultType")?.as_str()? {
        "vector" => data
            .get("result")?
            .as_array()?
            .iter()
            .map(|s| {
                Some(Sample {
                    labels: labels_of(s)?,
                    value: number(s.get("value")?)?.1,
                })
            })
            .collect(),
        "scalar" => Some(vec![Sample {
            labels: Labels::new(),
            value: number(data.get("result")?)?.1,
        }]),
        _ => None,
    }
}

/// The series of a range query's `data` (a matrix).
pub fn parse_matrix(data: &serde_json::Value) -> Option<Vec<Series>> {
    if data.get("resultType")?.as_str()? != "matrix" {
        return None;
    }
    data.get("result")?
        .as_array()?
        .iter()
        .map(|s| {
            Some(Series {
                labels: labels_of(s)?,
                points: s
                    .get("values")?
                    .as_array()?
                    .iter()
                    .map(number)
                    .collect::<Option<_>>()?,
            })
        })
        .collect()
}

/// The recording rule groups of `/api/v1/rules`' `data`.
pub fn parse_rules(data: &serde_json::Value) -> Option<Vec<RuleGroup>> {
    data.get("groups")?
        .as_array()?
        .iter()
        .map(|g| {
            Some(RuleGroup {
                name: g.get("name")?.as_str()?.to_string(),
                interval_s: g.get("interval")?.as_f64()?,
                records: g
                    .get("rules")?
                    .as_array()?
                    .iter()
                    .filter(|r| r.get("type").and_then(|t| t.as_str()) == Some("recording"))
                    .filter_map(|r| Some(r.get("name")?.as_str()?.to_string()))
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vectors_matrices_and_rules_read_as_the_api_writes_them() {
        let v = json!({"resultType": "vector", "result": [
            {"metric": {"instance": "a"}, "value": [1700000000.5, "0.25"]},
            {"metric": {}, "value": [1700000000.5, "NaN"]}]});
        let s = parse_vector(&v).unwrap();
        assert_eq!(s[0].labels["instance"], "a");
        assert_eq!(s[0].value, 0.25);
        assert!(s[1].value.is_nan());
        let m = json!({"resultType": "matrix", "result": [
            {"metric": {"x": "1"}, "values": [[10, "1"], [20, "+Inf"]]}]});
        let m = parse_matrix(&m).unwrap();
        assert_eq!(m[0].points, vec![(10.0, 1.0), (20.0, f64::INFINITY)]);
        let r = json!({"groups": [{"name": "cpulab.rules", "interval": 30, "rules": [
            {"type": "recording", "name": "instance:x:rate5m"},
            {"type": "alerting", "name": "A"}]}]});
        let r = parse_rules(&r).unwrap();
        assert_eq!(r[0].interval_s, 30.0);
        assert_eq!(r[0].records, vec!["instance:x:rate5m"]);
        // Not the API's shape: no answer at all, never an empty one.
        assert!(parse_vector(&json!({"resultType": "matrix", "result": []})).is_none());
        assert!(parse_vector(&json!({"result": []})).is_none());
        assert!(parse_matrix(&json!({"resultType": "matrix"})).is_none());
    }

    #[test]
    fn a_refused_client_certificate_is_told_apart_from_an_unknown_server() {
        use rustls::{AlertDescription as A, CertificateError, Error};
        let base = "https://p:9090";
        let line = |e: Error, sent| tls_line(base, Some(&e), &e, sent);
        // Go's server alerts BadCertificate (TLS 1.2) or CertificateRequired (1.3) when none
        // came, BadCertificate when it does not trust the one that came.
        for a in [A::BadCertificate, A::CertificateRequired] {
            let l = line(Error::AlertReceived(a), None);
            assert!(l.contains("requires a client certificate"), "{l}");
            assert!(l.contains("tls_config.cert_file and key_file"), "{l}");
        }
        let l = line(Error::AlertReceived(A::BadCertificate), Some("c.crt"));
        assert!(l.contains("refused the client certificate c.crt"), "{l}");
        assert!(l.contains("client_ca_file"), "{l}");
        // The client's own check of the server's certificate: the CA is the fix.
        let unknown = Error::InvalidCertificate(CertificateError::UnknownIssuer);
        for sent in [None, Some("c.crt")] {
            let l = line(unknown.clone(), sent);
            assert!(
                l.contains("TLS failed") && l.contains("tls_config.ca_file"),
                "{l}"
            );
        }
        let l = line(Error::AlertReceived(A::HandshakeFailure), None);
        assert!(l.contains("TLS failed"), "{l}");
        assert!(!l.contains('\n'));
    }
}
