//! TLS for `rediss://` URLs (the `tls` feature): the settings a builder
//! collects, checked once, and made into what each kind of connection needs.
//!
//! The command and pub/sub connections are keyholder's own (see
//! `net/tls_stream.rs`) and take a rustls configuration built here, once
//! per node, from the PEM bytes. The few redis-rs connections left (`CLUSTER
//! SLOTS` on a cluster node) connect through redis-rs's own rustls support,
//! which takes the same PEM bytes, so all trust the same roots and present
//! the same client certificate.
//!
//! Everything that can be wrong with the settings alone (a PEM that holds no
//! certificate, a key that does not parse or does not match its certificate,
//! TLS settings for a `redis://` URL) is found in `build()` before any I/O,
//! as [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig). A
//! handshake that either side refuses fails `build()` too, on its first
//! connection, as [`ErrorKind::Tls`](crate::ErrorKind::Tls): the handshake
//! is keyholder's own (`net/tls_stream.rs`), which puts rustls's error in
//! words with [`refusal_words`] (which side refused, what to check), as does
//! the setup for a refusal heard after the handshake (a client certificate,
//! TLS 1.3). A `rediss://` URL to a plain port, or a `redis://` one to a
//! TLS port, is `Tls` too, said as such (see `net/probe.rs`).
//!
//! **Crypto provider.** keyholder uses rustls with *ring* (it builds with a C
//! compiler alone). redis-rs builds its configurations with rustls's
//! process-wide default provider; when the program has installed none,
//! `build()` installs ring's, which is what rustls itself would do with only
//! ring compiled in, and which spares a panic when another dependency also
//! compiles in aws-lc-rs. A program that wants another provider installs it
//! before building a client.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Result};

/// The TLS settings of a [`ClientBuilder`](crate::ClientBuilder).
#[derive(Clone, Default)]
pub(crate) struct TlsOptions {
    /// PEM certificates trusted as roots instead of the system's.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// A PEM certificate chain and its PEM private key, for mutual TLS.
    pub(crate) client_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any server certificate (tests only).
    pub(crate) accept_invalid_certs: bool,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the private key.
        f.debug_struct("TlsOptions")
            .field("ca_certificate", &self.ca_pem.is_some())
            .field("client_certificate", &self.client_pem.is_some())
            .field("accept_invalid_certs", &self.accept_invalid_certs)
            .finish()
    }
}

impl TlsOptions {
    pub(crate) fn is_set(&self) -> bool {
        self.ca_pem.is_some() || self.client_pem.is_some() || self.accept_invalid_certs
    }
}

/// Applies the TLS settings to a parsed URL: the redis-rs client (its
/// connection description, and the connections keyholder leaves to
/// redis-rs), and, for a `rediss://` URL, the rustls configuration of
/// keyholder's own command and pub/sub connections.
pub(crate) fn apply(
    info: redis::ConnectionInfo,
    options: &TlsOptions,
) -> Result<(redis::Client, Option<Arc<ClientConfig>>)> {
    let (host, port, insecure) = match info.addr() {
        redis::ConnectionAddr::TcpTls { host, port, insecure, .. } => (host.clone(), *port, *insecure),
        _ if options.is_set() => {
            return Err(Error::invalid_config(
                "TLS settings were given for a URL without TLS: use rediss://".to_owned(),
            ));
        }
        _ => {
            let client = redis::Client::open(info).map_err(bad_url)?;
            return Ok((client, None));
        }
    };
    // redis-rs's `#insecure` URL fragment means the same as the builder's
    // opt-out.
    let insecure = insecure || options.accept_invalid_certs;
    if insecure {
        log::warn!(
            "keyholder: TLS certificate checks are OFF for {host}:{port}; anyone on the path can read \
             and forge this client's traffic. Use this for tests only."
        );
    }
    install_default_provider();
    let config = Arc::new(client_config(options, insecure)?);
    let info = info.set_addr(redis::ConnectionAddr::TcpTls { host, port, insecure, tls_params: None });
    let certificates = redis::TlsCertificates {
        client_tls: options
            .client_pem
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: options.ca_pem.clone(),
    };
    let client = redis::Client::build_with_tls(info, certificates).map_err(bad_url)?;
    Ok((client, Some(config)))
}

fn bad_url(e: redis::RedisError) -> Error {
    Error::invalid_config(format!("bad redis url: {e}"))
}

/// Installs ring as rustls's process-wide provider unless one is installed
/// (see the module docs).
fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        // Losing a race to another installer is fine: a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The rustls configuration of the pub/sub connection, built from the same
/// settings as redis-rs builds the command connections'.
fn client_config(options: &TlsOptions, insecure: bool) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::invalid_config(format!("TLS: {e}")))?;
    let builder = if insecure {
        let verifier = AnyServerCertificate { algorithms: provider.signature_verification_algorithms };
        builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
    } else {
        builder.with_root_certificates(root_store(options.ca_pem.as_deref())?)
    };
    match &options.client_pem {
        Some((cert, key)) => {
            let chain = certificates(cert, "the client certificate PEM")?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                Error::invalid_config(format!("the client key PEM holds no usable private key: {e}"))
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                Error::invalid_config(format!("the client certificate and key cannot be used together: {e}"))
            })
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The given CA certificates, or else the system's (as redis-rs does).
fn root_store(ca_pem: Option<&[u8]>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match ca_pem {
        Some(pem) => {
            for cert in certificates(pem, "the CA certificate PEM")? {
                store.add(cert).map_err(|e| {
                    Error::invalid_config(format!(
                        "the CA certificate PEM holds an unusable certificate: {e}"
                    ))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::invalid_config(format!(
                    "no CA certificate given (tls_ca_certificate) and none found in the system's store{}",
                    found.errors.first().map(|e| format!(": {e}")).unwrap_or_default()
                )));
            }
        }
    }
    Ok(store)
}

/// Every certificate in `pem`; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::invalid_config(format!("{what} does not parse: {e}")))?;
    if certs.is_empty() {
        return Err(Error::invalid_config(format!("{what} holds no certificate")));
    }
    Ok(certs)
}

/// What a TLS error of a handshake means, in words: which side refused, and
/// what to check.
pub(crate) fn refusal_words(tls: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError};
    match tls {
        rustls::Error::InvalidCertificate(
            reason @ (CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }),
        ) => format!("redis's certificate does not name the URL's host ({reason:?})"),
        rustls::Error::InvalidCertificate(reason) => format!(
            "this client does not trust redis's certificate ({reason:?}): is the CA that signed it given \
             with tls_ca_certificate?"
        ),
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            "redis requires a client certificate (tls_client_certificate)".to_owned()
        }
        rustls::Error::AlertReceived(alert) => format!(
            "redis refused the handshake (alert {alert:?}): does it require a client certificate, and \
             does its CA trust the one given?"
        ),
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("redis did not answer in TLS ({tls}): does the URL's port listen for TLS (tls-port)?")
        }
        other => other.to_string(),
    }
}

/// The tests-only verifier: any certificate chain is accepted, but the
/// handshake's signatures are still checked against the certificate given.
#[derive(Debug)]
struct AnyServerCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_private_key() {
        let options = TlsOptions {
            client_pem: Some((b"CERT".to_vec(), b"SECRET KEY".to_vec())),
            ..TlsOptions::default()
        };
        let shown = format!("{options:?}");
        assert!(!shown.contains("SECRET") && !shown.contains("83, 69, 67"), "{shown}");
        assert!(shown.contains("client_certificate: true"), "{shown}");
    }

    fn explained(error: rustls::Error) -> String {
        refusal_words(&error)
    }

    #[test]
    fn refusals_say_which_side_refused_and_what_to_check() {
        use rustls::{AlertDescription, CertificateError};
        let untrusted = explained(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(
            untrusted.contains("does not trust redis's certificate")
                && untrusted.contains("tls_ca_certificate")
        );
        let misnamed = explained(rustls::Error::InvalidCertificate(CertificateError::NotValidForName));
        assert!(misnamed.contains("does not name the URL's host"), "{misnamed}");
        let required = explained(rustls::Error::AlertReceived(AlertDescription::CertificateRequired));
        assert!(required.contains("requires a client certificate"), "{required}");
        let unknown_ca = explained(rustls::Error::AlertReceived(AlertDescription::UnknownCA));
        assert!(unknown_ca.contains("UnknownCA"), "{unknown_ca}");
    }
}
