//! Certificates made at test time (the `tls` feature): a CA, and server and
//! client certificates it signs, as PEM. Nothing is checked in, so nothing
//! expires.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its private key, PEM-encoded.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// A test certificate authority.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    cert: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap().pem();
        TestCa { issuer: Issuer::new(params, key), cert }
    }

    /// The CA's certificate, PEM: what a client or server trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert
    }

    /// A server certificate for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> Pem {
        self.leaf("keyholder test server", ExtendedKeyUsagePurpose::ServerAuth, &["127.0.0.1", "localhost"])
    }

    /// A client certificate, for mutual TLS.
    pub fn client(&self) -> Pem {
        self.leaf("keyholder test client", ExtendedKeyUsagePurpose::ClientAuth, &[])
    }

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose, names: &[&str]) -> Pem {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap().pem();
        Pem { cert, key: key.serialize_pem() }
    }
}
