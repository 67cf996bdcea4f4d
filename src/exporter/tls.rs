//! The web config's `tls_server_config` as a rustls server configuration (ring), client
//! certificates included.
//!
//! `client_auth_type` takes Go's `tls.ClientAuthType` names, as exporter-toolkit does, mapped
//! onto rustls:
//!
//! | `client_auth_type` | rustls |
//! |---|---|
//! | `NoClientCert` (default) | no client auth |
//! | `RequestClientCert` | a certificate asked for, accepted unverified, not required ([`AnyClientCert`]) |
//! | `RequireAnyClientCert` | a certificate required, accepted unverified ([`AnyClientCert`]) |
//! | `VerifyClientCertIfGiven` | `WebPkiClientVerifier` on `client_ca_file`, `allow_unauthenticated` |
//! | `RequireAndVerifyClientCert` | `WebPkiClientVerifier` on `client_ca_file` |
//!
//! The unverified modes still check that the client holds the certificate's key (the
//! handshake's signature), as Go does; cpulab authorises nothing by the certificate itself.

use crate::error::bad_input;
use anyhow::Result;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `tls_server_config` of the web config file.
#[derive(Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFile {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    #[serde(default)]
    pub min_version: Option<String>,
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub client_auth_type: ClientAuth,
}

/// `client_auth_type`, Go's `tls.ClientAuthType` names as exporter-toolkit spells them.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for.
    #[default]
    NoClientCert,
    /// One asked for, not required, not verified.
    RequestClientCert,
    /// One required, not verified (exporter-toolkit's older `RequireClientCert` too).
    #[serde(alias = "RequireClientCert")]
    RequireAnyClientCert,
    /// One verified against `client_ca_file` if given.
    VerifyClientCertIfGiven,
    /// One required and verified against `client_ca_file`.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// True when certificates are verified against a CA.
    pub fn verifies(self) -> bool {
        matches!(
            self,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        )
    }
}

/// Builds the server configuration; every problem is bad input naming the file and the fix.
pub fn server_config(t: &TlsFile, dir: &Path, what: &str) -> Result<ServerConfig> {
    let cert_path = dir.join(&t.cert_file);
    let key_path = dir.join(&t.key_file);
    let certs = certificates(&cert_path, what, "cert_file")?;
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
    let verifier = client_verifier(t, dir, what, &provider)?;
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| bad_input(format!("{what}: {e}")))?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    builder.with_single_cert(certs, key).map_err(|e| {
        bad_input(format!(
            "{what}: the certificate and key do not make a TLS configuration: {e}; check \
             that key_file is the key of cert_file"
        ))
    })
}

fn certificates(path: &Path, what: &str, key: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            bad_input(format!(
                "{what}: cannot read the certificate {}: {e}; give a PEM certificate as {key}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(bad_input(format!(
            "{what}: {} holds no PEM certificate; give a PEM certificate as {key}",
            path.display()
        )));
    }
    Ok(certs)
}

fn client_verifier(
    t: &TlsFile,
    dir: &Path,
    what: &str,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>> {
    let any = |mandatory| {
        Ok(Some(Arc::new(AnyClientCert {
            mandatory,
            algorithms: provider.signature_verification_algorithms,
        }) as Arc<dyn ClientCertVerifier>))
    };
    match t.client_auth_type {
        ClientAuth::NoClientCert => return Ok(None),
        ClientAuth::RequestClientCert => return any(false),
        ClientAuth::RequireAnyClientCert => return any(true),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {}
    }
    // `webconfig::parse` refuses a verifying mode without a CA file.
    let Some(ca) = &t.client_ca_file else {
        return Err(bad_input(format!(
            "{what}: client_auth_type needs client_ca_file"
        )));
    };
    let ca_path = dir.join(ca);
    let mut roots = rustls::RootCertStore::empty();
    for c in certificates(&ca_path, what, "client_ca_file")? {
        roots.add(c).map_err(|e| {
            bad_input(format!(
                "{what}: {} is not a usable CA certificate: {e}; give the PEM certificate of \
                 the CA that signs the clients' certificates as client_ca_file",
                ca_path.display()
            ))
        })?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let builder = if t.client_auth_type == ClientAuth::VerifyClientCertIfGiven {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let v = builder
        .build()
        .map_err(|e| bad_input(format!("{what}: client_ca_file: {e}")))?;
    Ok(Some(v))
}

/// Asks for a client certificate and accepts any, checking only that the client holds its key:
/// Go's `RequestClientCert` and `RequireAnyClientCert`.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
