//! `--web.config.file`: the web configuration every Go exporter takes (Prometheus's
//! exporter-toolkit format), so a fleet that already has one for node_exporter reuses it.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: exporter.crt      # relative paths are relative to this file
//!   key_file: exporter.key
//!   min_version: TLS12           # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes (htpasswd -nBC 10 prometheus)
//! ```
//!
//! Parsing ([`parse`]) is pure; [`WebConfig::load`] also reads the certificate and key and
//! builds the TLS configuration, so a bad file is refused before anything is attached. Keys
//! cpulab does not implement (client certificates, cipher lists, HTTP/2 settings) are refused
//! by name rather than ignored: a file that asks for client authentication must not silently
//! get none.

use crate::error::bad_input;
use anyhow::Result;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub tls_server_config: Option<TlsFile>,
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    #[serde(default)]
    pub min_version: Option<String>,
}

/// Parses the YAML text and checks every bcrypt hash's shape. `what` names the file in errors.
pub fn parse(text: &str, what: &str) -> Result<File, String> {
    if text.trim().is_empty() {
        return Ok(File::default());
    }
    let f: File = serde_yaml_ng::from_str(text).map_err(|e| {
        format!(
            "{what}: {e} (cpulab reads tls_server_config.cert_file, key_file, min_version and \
             basic_auth_users)"
        )
    })?;
    for (user, hash) in &f.basic_auth_users {
        if hash.parse::<bcrypt::HashParts>().is_err() {
            return Err(format!(
                "{what}: the password of user `{user}` is not a bcrypt hash; make one with \
                 `htpasswd -nBC 10 {user}`"
            ));
        }
    }
    if let Some(t) = &f.tls_server_config
        && let Some(v) = &t.min_version
        && !matches!(v.as_str(), "TLS12" | "TLS13")
    {
        return Err(format!(
            "{what}: tls_server_config.min_version `{v}` is not TLS12 or TLS13"
        ));
    }
    Ok(f)
}

/// A loaded web configuration: TLS ready to serve, and the users.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    users: BTreeMap<String, String>,
    /// The last Authorization value each user passed with: a bcrypt check costs tens of
    /// milliseconds by design, so a scraper's repeated header is verified once.
    verified: Mutex<BTreeMap<String, String>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl WebConfig {
    /// Reads `path`, its certificate and key; every problem is bad input naming the fix.
    pub fn load(path: &Path) -> Result<Self> {
        let what = format!("web config {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad_input(format!(
                "cannot read {what}: {e}; give an existing file to --web.config.file"
            ))
        })?;
        let file = parse(&text, &what).map_err(bad_input)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = match &file.tls_server_config {
            Some(t) => Some(Arc::new(tls_config(t, dir, &what)?)),
            None => None,
        };
        Ok(Self {
            tls,
            users: file.basic_auth_users,
            verified: Mutex::new(BTreeMap::new()),
        })
    }

    /// True when a request with this Authorization value may be served.
    pub fn authorized(&self, authorization: Option<&str>) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some(value) = authorization else {
            return false;
        };
        let Some((user, password)) = super::http::basic_credentials(value) else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else {
            return false;
        };
        if let Ok(v) = self.verified.lock()
            && v.get(&user).is_some_and(|ok| ok == value)
        {
            return true;
        }
        let ok = bcrypt::verify(password, hash).unwrap_or(false);
        if ok && let Ok(mut v) = self.verified.lock() {
            v.insert(user, value.to_string());
        }
        ok
    }

    pub fn has_users(&self) -> bool {
        !self.users.is_empty()
    }
}

fn tls_config(t: &TlsFile, dir: &Path, what: &str) -> Result<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let cert_path = dir.join(&t.cert_file);
    let key_path = dir.join(&t.key_file);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad_input(format!(
                "{what}: cannot read the certificate {}: {e}; give a PEM certificate as cert_file",
                cert_path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(bad_input(format!(
            "{what}: {} holds no PEM certificate; give a PEM certificate as cert_file",
            cert_path.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| {
        bad_input(format!(
            "{what}: cannot read the private key {}: {e}; give a PEM private key as key_file",
            key_path.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match t.min_version.as_deref() {
        Some("TLS13") => &[&rustls::version::TLS13],
        _ => rustls::DEFAULT_VERSIONS,
    };
    rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| bad_input(format!("{what}: {e}")))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            bad_input(format!(
                "{what}: the certificate and key do not make a TLS configuration: {e}; check \
                 that key_file is the key of cert_file"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    // `htpasswd -nbBC 4 prometheus secret` style hash, cost 4 to keep the test quick.
    fn hash() -> String {
        bcrypt::hash("secret", 4).unwrap()
    }

    #[test]
    fn parses_the_exporter_toolkit_format() {
        let text = format!(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS13\n\
             basic_auth_users:\n  prometheus: '{}'\n",
            hash()
        );
        let f = parse(&text, "t").unwrap();
        let t = f.tls_server_config.unwrap();
        assert_eq!(t.cert_file, PathBuf::from("a.crt"));
        assert_eq!(t.min_version.as_deref(), Some("TLS13"));
        assert!(f.basic_auth_users.contains_key("prometheus"));
        assert_eq!(parse("", "t").unwrap(), File::default());
    }

    #[test]
    fn refuses_what_it_does_not_implement_and_bad_hashes() {
        let client = "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: \
                      RequireAndVerifyClientCert\n";
        assert!(parse(client, "t").unwrap_err().contains("client_auth_type"));
        let plain = "basic_auth_users:\n  prometheus: hunter2\n";
        assert!(parse(plain, "t").unwrap_err().contains("not a bcrypt hash"));
        assert!(parse("tls_server_config: [", "t").is_err());
        let v = "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n";
        assert!(parse(v, "t").unwrap_err().contains("SSL3"));
    }

    #[test]
    fn basic_auth_checks_the_bcrypt_hash() {
        use base64::Engine;
        let w = WebConfig {
            tls: None,
            users: [("prometheus".to_string(), hash())].into_iter().collect(),
            verified: Mutex::new(BTreeMap::new()),
        };
        let header = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(w.authorized(Some(&header("prometheus:secret"))));
        // The cached value is only the exact header that passed.
        assert!(w.authorized(Some(&header("prometheus:secret"))));
        assert!(!w.authorized(Some(&header("prometheus:wrong"))));
        assert!(!w.authorized(Some(&header("other:secret"))));
        assert!(!w.authorized(None));
    }
}
