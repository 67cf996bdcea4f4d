//! `cpulab fleet --web.config.file`: how to reach a Prometheus that asks for TLS or basic auth,
//! in the keys of Prometheus's own HTTP client configuration (the `tls_config` and `basic_auth`
//! of a scrape job), so a file written for a scrape job or for promtool reads here too:
//!
//! ```yaml
//! tls_config:
//!   ca_file: ca.crt              # relative paths are relative to this file
//!   cert_file: client.crt        # a client certificate, for servers that require one
//!   key_file: client.key
//!   insecure_skip_verify: false
//! basic_auth:
//!   username: ops
//!   password_file: ops.password  # or password: ...
//! ```
//!
//! The exporter's parser (`crate::exporter::webconfig`) reads the *server* side of the same
//! family (`tls_server_config`, bcrypt hashes in `basic_auth_users`), whose keys and checks
//! differ, so it is not reused; the rule is shared: keys cpulab does not implement (`server_name`,
//! `min_version`, `authorization`, `oauth2`...) are refused by name, never ignored.

use crate::error::bad_input;
use anyhow::Result;
use base64::Engine;
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default)]
    pub tls_config: Option<TlsFile>,
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// What a request carries: the TLS settings and the `Authorization` header.
#[derive(Clone, Debug, Default)]
pub struct Access {
    pub tls: ureq::tls::TlsConfig,
    pub authorization: Option<String>,
    /// The client certificate sent (`tls_config.cert_file` as written), to name it when the
    /// server refuses it.
    pub client_cert: Option<String>,
}

/// Parses the YAML text (pure). `what` names the file in errors.
pub fn parse(text: &str, what: &str) -> Result<File, String> {
    if text.trim().is_empty() {
        return Ok(File::default());
    }
    let f: File = serde_yaml_ng::from_str(text).map_err(|e| {
        format!(
            "{what}: {e} (cpulab fleet reads tls_config.ca_file, cert_file, key_file, \
             insecure_skip_verify and basic_auth.username, password, password_file)"
        )
    })?;
    if let Some(t) = &f.tls_config
        && t.cert_file.is_some() != t.key_file.is_some()
    {
        return Err(format!(
            "{what}: tls_config needs cert_file and key_file together (a client certificate \
             and its key)"
        ));
    }
    if let Some(b) = &f.basic_auth
        && b.password.is_some() == b.password_file.is_some()
    {
        return Err(format!(
            "{what}: basic_auth needs exactly one of password and password_file"
        ));
    }
    Ok(f)
}

fn read(dir: &Path, p: &Path, key: &str, what: &str) -> Result<Vec<u8>> {
    let path = dir.join(p);
    std::fs::read(&path).map_err(|e| {
        bad_input(format!(
            "{what}: {key} {}: {e}; give a readable file (relative paths are relative to {what})",
            path.display()
        ))
    })
}

/// The PEM certificates of the file `key` names; none is bad input.
fn certificates(
    dir: &Path,
    p: &Path,
    key: &str,
    what: &str,
) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    use ureq::tls::PemItem;
    let pem = read(dir, p, key, what)?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|i| match i {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(bad_input(format!("{what}: {key} holds no PEM certificate")));
    }
    Ok(certs)
}

fn tls(t: &TlsFile, dir: &Path, what: &str) -> Result<ureq::tls::TlsConfig> {
    use ureq::tls::{ClientCert, PrivateKey, RootCerts, TlsConfig};
    let mut b = TlsConfig::builder().disable_verification(t.insecure_skip_verify);
    if let Some(ca) = &t.ca_file {
        let certs = certificates(dir, ca, "tls_config.ca_file", what)?;
        b = b.root_certs(RootCerts::new_with_certs(&certs));
    }
    if let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) {
        let chain = certificates(dir, cert, "tls_config.cert_file", what)?;
        let key_pem = read(dir, key, "tls_config.key_file", what)?;
        let key = PrivateKey::from_pem(&key_pem).map_err(|e| {
            bad_input(format!(
                "{what}: tls_config.key_file is no PEM private key ({e})"
            ))
        })?;
        b = b.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
    }
    Ok(b.build())
}

/// Reads the file at `path` and what it names: the TLS settings and the credentials.
pub fn load(path: &Path) -> Result<Access> {
    let what = format!("--web.config.file {}", path.display());
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad_input(format!("{what}: {e}; give a readable YAML file")))?;
    let f = parse(&text, &what).map_err(bad_input)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tls = match &f.tls_config {
        Some(t) => tls(t, dir, &what)?,
        None => ureq::tls::TlsConfig::default(),
    };
    let authorization = match &f.basic_auth {
        Some(b) => {
            let password = match (&b.password, &b.password_file) {
                (Some(p), _) => p.clone(),
                (None, Some(file)) => {
                    let bytes = read(dir, file, "basic_auth.password_file", &what)?;
                    String::from_utf8_lossy(&bytes).trim_end().to_string()
                }
                (None, None) => String::new(),
            };
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{password}", b.username));
            Some(format!("Basic {token}"))
        }
        None => None,
    };
    let client_cert = f
        .tls_config
        .as_ref()
        .and_then(|t| t.cert_file.as_ref())
        .map(|c| c.display().to_string());
    Ok(Access {
        tls,
        authorization,
        client_cert,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_keys_parse_and_unknown_or_half_ones_are_refused() {
        let f = parse(
            "tls_config:\n  ca_file: ca.crt\n  insecure_skip_verify: true\nbasic_auth:\n  \
             username: ops\n  password: pw\n",
            "w",
        )
        .unwrap();
        let t = f.tls_config.unwrap();
        assert_eq!(t.ca_file, Some(PathBuf::from("ca.crt")));
        assert!(t.insecure_skip_verify);
        assert_eq!(f.basic_auth.unwrap().username, "ops");
        assert_eq!(parse("", "w").unwrap(), File::default());
        for bad in [
            "tls_config:\n  server_name: x\n",
            "authorization:\n  credentials: x\n",
            "tls_config:\n  cert_file: c.crt\n",
            "basic_auth:\n  username: u\n",
            "basic_auth:\n  username: u\n  password: a\n  password_file: b\n",
        ] {
            let e = parse(bad, "w").unwrap_err();
            assert!(e.starts_with("w: "), "{bad}: {e}");
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn basic_auth_becomes_one_header_from_a_password_file_beside_the_config() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("pw"), "s3cret\n").unwrap();
        let cfg = d.path().join("web.yml");
        std::fs::write(&cfg, "basic_auth:\n  username: ops\n  password_file: pw\n").unwrap();
        let a = load(&cfg).unwrap();
        // base64("ops:s3cret"): the file's trailing newline is not part of the password.
        assert_eq!(a.authorization.as_deref(), Some("Basic b3BzOnMzY3JldA=="));
        std::fs::write(&cfg, "tls_config:\n  ca_file: missing.crt\n").unwrap();
        let e = load(&cfg).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(format!("{e:#}").contains("missing.crt"), "{e:#}");
    }
}
