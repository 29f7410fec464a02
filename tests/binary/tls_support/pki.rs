//! Certificates made at test time: a CA, server certificates for names, client
//! certificates with a common name, and a second CA nobody trusts.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate authority that signs server and client certificates.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate with its key, in memory.
pub struct Issued {
    /// The certificate chain, leaf first (the CA is not included).
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
    /// PEM of the leaf.
    pub cert_pem: String,
    /// PEM (PKCS#8) of the key.
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA called `name`.
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// The CA certificate.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The CA certificate as PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA certificate to `dir/name` and returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.pem()).unwrap();
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses) with the
    /// subject CN `cn`.
    pub fn server(&self, cn: &str, names: &[&str]) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        self.issue(cn, names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with the subject CN `cn`.
    pub fn client(&self, cn: &str) -> Issued {
        self.issue(cn, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// A client certificate with the subject CN `cn` that expired in 2020.
    pub fn expired_client(&self, cn: &str) -> Issued {
        self.issue_with(cn, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth, |p| {
            p.not_before = rcgen::date_time_ymd(2019, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 1, 1);
        })
    }

    fn issue(&self, cn: &str, names: Vec<String>, usage: ExtendedKeyUsagePurpose) -> Issued {
        self.issue_with(cn, names, usage, |_| {})
    }

    fn issue_with(
        &self,
        cn: &str,
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
        tweak: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let mut params = CertificateParams::new(names).unwrap();
        tweak(&mut params);
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

impl Issued {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns both paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).unwrap();
        std::fs::write(&key, &self.key_pem).unwrap();
        (cert, key)
    }

    /// Writes certificate and key into one file `dir/NAME.pem` (as LavinMQ
    /// accepts when `tls_key` is unset) and returns its path.
    pub fn write_combined(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, format!("{}{}", self.cert_pem, self.key_pem)).unwrap();
        path
    }
}

/// The subject CN and the DNS names of a DER certificate.
pub fn subject(cert: &CertificateDer<'_>) -> (String, Vec<String>) {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).unwrap();
    let cn = parsed
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut names = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(n) = name {
                names.push(n.to_string());
            }
        }
    }
    (cn, names)
}
