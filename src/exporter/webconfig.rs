//! `--web.config.file`: the web configuration every Go exporter takes (Prometheus's
//! exporter-toolkit format), so a fleet that already has one for node_exporter reuses it.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: exporter.crt      # relative paths are relative to this file
//!   key_file: exporter.key
//!   min_version: TLS12           # or TLS13
//!   client_ca_file: clients-ca.crt
//!   client_auth_type: RequireAndVerifyClientCert
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hashes (htpasswd -nBC 10 prometheus)
//! ```
//!
//! Parsing ([`parse`]) is pure; [`Generation::load`] also reads the certificates and key and
//! builds the TLS configuration, so a bad file is refused (exit 2) before anything is attached.
//! Keys cpulab does not implement (cipher lists, `client_allowed_sans`, HTTP/2 settings) are
//! refused by name rather than ignored: a file that asks for a restriction must not silently
//! get none.
//!
//! [`WebConfig`] keeps the file live, as exporter-toolkit re-reads it per request: before each
//! connection it compares the file's, the certificate's, the key's and the client CA's inode,
//! size and times with those it loaded, and loads them again when one changed, so a certificate
//! renewed on disk is served on the next connection. A new file that does not load is logged
//! once and the last good configuration stays in use.

use super::auth::Users;
use super::tls::{ClientAuth, TlsFile};
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

/// Parses the YAML text and checks every bcrypt hash's shape. `what` names the file in errors.
pub fn parse(text: &str, what: &str) -> Result<File, String> {
    if text.trim().is_empty() {
        return Ok(File::default());
    }
    let f: File = serde_yaml_ng::from_str(text).map_err(|e| {
        format!(
            "{what}: {e} (cpulab reads tls_server_config.cert_file, key_file, min_version, \
             client_ca_file, client_auth_type and basic_auth_users)"
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
    if let Some(t) = &f.tls_server_config {
        check_tls(t, what)?;
    }
    Ok(f)
}

fn check_tls(t: &TlsFile, what: &str) -> Result<(), String> {
    if let Some(v) = &t.min_version
        && !matches!(v.as_str(), "TLS12" | "TLS13")
    {
        return Err(format!(
            "{what}: tls_server_config.min_version `{v}` is not TLS12 or TLS13"
        ));
    }
    match (&t.client_ca_file, t.client_auth_type) {
        (Some(_), ClientAuth::NoClientCert) => Err(format!(
            "{what}: tls_server_config.client_ca_file is given but client_auth_type is \
             NoClientCert, so no client would be checked; set client_auth_type: \
             RequireAndVerifyClientCert"
        )),
        (None, a) if a.verifies() => Err(format!(
            "{what}: tls_server_config.client_auth_type {a:?} verifies client certificates but \
             no client_ca_file is given; give the CA that signs them as client_ca_file"
        )),
        _ => Ok(()),
    }
}

/// One loaded web configuration: TLS ready to serve, the users, and the files it came from.
#[derive(Debug)]
pub struct Generation {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub users: Users,
    /// The web config file and those it names, whose changes make it reload.
    files: Vec<PathBuf>,
}

impl Generation {
    /// Reads `path`, its certificates and key; every problem is bad input naming the fix.
    pub fn load(path: &Path) -> Result<Self> {
        let what = format!("web config {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| {
            bad_input(format!(
                "cannot read {what}: {e}; give an existing file to --web.config.file"
            ))
        })?;
        let file = parse(&text, &what).map_err(bad_input)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut files = vec![path.to_path_buf()];
        let tls = match &file.tls_server_config {
            Some(t) => {
                files.extend([dir.join(&t.cert_file), dir.join(&t.key_file)]);
                files.extend(t.client_ca_file.as_ref().map(|c| dir.join(c)));
                Some(Arc::new(super::tls::server_config(t, dir, &what)?))
            }
            None => None,
        };
        Ok(Self {
            tls,
            users: Users::new(file.basic_auth_users),
            files,
        })
    }
}

/// What identifies a file's content without reading it: a file replaced (new inode) or
/// rewritten in place (size, modification or change time) differs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp(Option<(u64, u64, u64, i64, i64, i64, i64)>);

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            Stamp(std::fs::metadata(f).ok().map(|m| {
                (
                    m.dev(),
                    m.ino(),
                    m.size(),
                    m.mtime(),
                    m.mtime_nsec(),
                    m.ctime(),
                    m.ctime_nsec(),
                )
            }))
        })
        .collect()
}

/// The web configuration, kept current with its files.
#[derive(Debug)]
pub struct WebConfig {
    path: PathBuf,
    state: Mutex<Live>,
}

#[derive(Debug)]
struct Live {
    current: Arc<Generation>,
    loaded: Vec<Stamp>,
    /// The files as they were when a load last failed, so one broken file is logged once.
    failed: Option<Vec<Stamp>>,
}

impl WebConfig {
    /// Loads `path` for the first time; every problem is bad input (exit 2).
    pub fn load(path: &Path) -> Result<Self> {
        let first = Generation::load(path)?;
        let loaded = stamps(&first.files);
        Ok(Self {
            path: path.to_path_buf(),
            state: Mutex::new(Live {
                current: Arc::new(first),
                loaded,
                failed: None,
            }),
        })
    }

    /// The configuration to serve the next connection with: loaded again first if one of its
    /// files changed; the last good one if that load fails. There is always one: a connection
    /// is never served without the TLS and users the file asked for.
    pub fn current(&self) -> Arc<Generation> {
        let mut live = self.state.lock().unwrap_or_else(|poisoned| {
            // A reload panicked while it held the lock. `current` is only ever replaced whole,
            // by a generation that loaded, so it is still the last good one: keep serving it,
            // and take the files as they are now as failed, so they are not loaded again
            // until they change.
            self.state.clear_poison();
            let mut live = poisoned.into_inner();
            live.failed = Some(stamps(&live.current.files));
            log::error!(
                "web config {}: a reload failed part way, so the last good one stays in use",
                self.path.display()
            );
            live
        });
        let files = live.current.files.clone();
        let now = stamps(&files);
        if now == live.loaded || live.failed.as_ref() == Some(&now) {
            return live.current.clone();
        }
        match Generation::load(&self.path) {
            Ok(g) => {
                // Stamps taken before the load: a change during it is seen next time.
                live.loaded = if g.files == files {
                    now
                } else {
                    stamps(&g.files)
                };
                live.current = Arc::new(g);
                live.failed = None;
                log::info!("web config {} changed: loaded again", self.path.display());
            }
            Err(e) => {
                live.failed = Some(now);
                // An error, not a warning: the operator's new file is not in use, which even
                // --quiet (--log.level error) must show.
                log::error!(
                    "web config {} changed but does not load, so the last good one stays in \
                     use: {e:#}",
                    self.path.display()
                );
            }
        }
        live.current.clone()
    }

    pub fn has_tls(&self) -> bool {
        self.current().tls.is_some()
    }

    pub fn has_users(&self) -> bool {
        !self.current().users.is_empty()
    }

    /// Poisons the lock as a reload that panicked would.
    #[cfg(test)]
    pub(crate) fn poison(&self) {
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _held = self.state.lock();
                panic!("a reload that panics while it holds the lock");
            })
            .join()
        });
        assert!(self.state.is_poisoned());
    }
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
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS13\n  \
             client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n\
             basic_auth_users:\n  prometheus: '{}'\n",
            hash()
        );
        let f = parse(&text, "t").unwrap();
        let t = f.tls_server_config.unwrap();
        assert_eq!(t.cert_file, PathBuf::from("a.crt"));
        assert_eq!(t.min_version.as_deref(), Some("TLS13"));
        assert_eq!(t.client_ca_file, Some(PathBuf::from("ca.crt")));
        assert_eq!(t.client_auth_type, ClientAuth::RequireAndVerifyClientCert);
        assert!(f.basic_auth_users.contains_key("prometheus"));
        assert_eq!(parse("", "t").unwrap(), File::default());
    }

    #[test]
    fn every_client_auth_type_of_exporter_toolkit_reads() {
        for (name, want) in [
            ("NoClientCert", ClientAuth::NoClientCert),
            ("RequestClientCert", ClientAuth::RequestClientCert),
            ("RequireAnyClientCert", ClientAuth::RequireAnyClientCert),
            ("RequireClientCert", ClientAuth::RequireAnyClientCert),
            (
                "VerifyClientCertIfGiven",
                ClientAuth::VerifyClientCertIfGiven,
            ),
            (
                "RequireAndVerifyClientCert",
                ClientAuth::RequireAndVerifyClientCert,
            ),
        ] {
            let ca = if want.verifies() {
                "  client_ca_file: ca\n"
            } else {
                ""
            };
            let text = format!(
                "tls_server_config:\n  cert_file: a\n  key_file: b\n{ca}  client_auth_type: {name}\n"
            );
            let f = parse(&text, "t").unwrap();
            assert_eq!(
                f.tls_server_config.unwrap().client_auth_type,
                want,
                "{name}"
            );
        }
        let bad = "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: Always\n";
        assert!(parse(bad, "t").unwrap_err().contains("Always"));
    }

    #[test]
    fn a_client_ca_without_a_policy_or_a_policy_without_a_ca_is_refused() {
        let no_policy = "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: ca\n";
        let e = parse(no_policy, "t").unwrap_err();
        assert!(
            e.contains("NoClientCert") && e.contains("RequireAndVerifyClientCert"),
            "{e}"
        );
        for mode in ["VerifyClientCertIfGiven", "RequireAndVerifyClientCert"] {
            let text = format!(
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: {mode}\n"
            );
            let e = parse(&text, "t").unwrap_err();
            assert!(e.contains("client_ca_file") && e.contains(mode), "{e}");
        }
    }

    #[test]
    fn refuses_what_it_does_not_implement_and_bad_hashes() {
        let sans =
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [x]\n";
        assert!(
            parse(sans, "t")
                .unwrap_err()
                .contains("client_allowed_sans")
        );
        let plain = "basic_auth_users:\n  prometheus: hunter2\n";
        assert!(parse(plain, "t").unwrap_err().contains("not a bcrypt hash"));
        assert!(parse("tls_server_config: [", "t").is_err());
        let v = "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n";
        assert!(parse(v, "t").unwrap_err().contains("SSL3"));
        assert!(
            parse("http_server_config: {}\n", "t")
                .unwrap_err()
                .contains("http_server_config")
        );
    }

    #[test]
    fn a_changed_file_is_loaded_again_and_a_broken_one_keeps_the_last_good() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("web.yml");
        let users = |n: usize| {
            let mut t = "basic_auth_users:\n".to_string();
            for i in 0..n {
                t.push_str(&format!("  u{i}: '{}'\n", hash()));
            }
            t
        };
        std::fs::write(&path, users(1)).unwrap();
        let w = WebConfig::load(&path).unwrap();
        let first = w.current();
        assert!(
            Arc::ptr_eq(&first, &w.current()),
            "unchanged: same generation"
        );
        std::fs::write(&path, users(2)).unwrap();
        let second = w.current();
        assert!(!Arc::ptr_eq(&first, &second));
        assert!(second.users.remembered("u1", "x").is_none());
        std::fs::write(&path, "basic_auth_users:\n  u0: plaintext\n").unwrap();
        assert!(Arc::ptr_eq(&second, &w.current()), "broken: the last good");
        assert!(Arc::ptr_eq(&second, &w.current()));
        std::fs::write(&path, users(3)).unwrap();
        assert!(!Arc::ptr_eq(&second, &w.current()), "mended: loaded");
    }

    #[test]
    fn a_poisoned_lock_keeps_the_last_good_configuration() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("web.yml");
        std::fs::write(&path, format!("basic_auth_users:\n  u0: '{}'\n", hash())).unwrap();
        let w = WebConfig::load(&path).unwrap();
        let good = w.current();
        w.poison();
        let after = w.current();
        assert!(
            Arc::ptr_eq(&good, &after),
            "the last good generation is served"
        );
        assert!(w.has_users());
        assert!(
            !w.state.is_poisoned(),
            "recovered once, not on every connection"
        );
    }

    #[test]
    fn basic_auth_checks_the_bcrypt_hash() {
        let u = Users::new([("prometheus".to_string(), hash())].into_iter().collect());
        assert!(u.verify("prometheus", "secret"));
        assert!(!u.verify("prometheus", "wrong"));
        assert!(!u.verify("other", "secret"));
    }
}
