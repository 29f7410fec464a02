//! `tls_ciphers`: OpenSSL and IANA cipher suite names mapped onto the suites
//! rustls implements.
//!
//! As with OpenSSL, where the cipher list governs TLS 1.2 and TLS 1.3 suites
//! are set apart, a protocol version none of whose suites the list names
//! keeps all of its suites. Names this server does not implement (CBC and
//! RSA key exchange suites, OpenSSL keywords such as `HIGH` or `!aNULL`) are
//! skipped with a warning; a list that names nothing usable is an error.

use rustls::SupportedCipherSuite;
use rustls::crypto::ring::{ALL_CIPHER_SUITES, cipher_suite as cs};

use super::error::TlsError;

/// Every suite with the names it may be given by: OpenSSL's, IANA's and
/// rustls' own where they differ.
const NAMES: &[(SupportedCipherSuite, &[&str])] = &[
    (
        cs::TLS13_AES_256_GCM_SHA384,
        &["TLS_AES_256_GCM_SHA384", "TLS13_AES_256_GCM_SHA384"],
    ),
    (
        cs::TLS13_AES_128_GCM_SHA256,
        &["TLS_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"],
    ),
    (
        cs::TLS13_CHACHA20_POLY1305_SHA256,
        &["TLS_CHACHA20_POLY1305_SHA256", "TLS13_CHACHA20_POLY1305_SHA256"],
    ),
    (
        cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        &[
            "ECDHE-ECDSA-AES256-GCM-SHA384",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ],
    ),
    (
        cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        &[
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ],
    ),
    (
        cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        &[
            "ECDHE-ECDSA-CHACHA20-POLY1305",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        ],
    ),
    (
        cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        &["ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
    ),
    (
        cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        &["ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
    ),
    (
        cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        &[
            "ECDHE-RSA-CHACHA20-POLY1305",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ],
    ),
];

/// The suites a `tls_ciphers` list allows, in the list's order (versions the
/// list says nothing about keep all their suites), and the names skipped.
pub fn select(list: &str) -> Result<(Vec<SupportedCipherSuite>, Vec<String>), TlsError> {
    let mut named: Vec<SupportedCipherSuite> = Vec::new();
    let mut skipped = Vec::new();
    for name in list.split([':', ',', ' ']).map(str::trim).filter(|n| !n.is_empty()) {
        match lookup(name) {
            Some(suite) if !named.contains(&suite) => named.push(suite),
            Some(_) => {}
            None => skipped.push(name.to_owned()),
        }
    }
    if named.is_empty() {
        return Err(TlsError::NoKnownCipher {
            list: list.to_owned(),
            supported: NAMES.iter().map(|(_, names)| names[0]).collect::<Vec<_>>().join(":"),
        });
    }
    for is_tls13 in [true, false] {
        if !named.iter().any(|s| s.tls13().is_some() == is_tls13) {
            named.extend(ALL_CIPHER_SUITES.iter().filter(|s| s.tls13().is_some() == is_tls13));
        }
    }
    Ok((named, skipped))
}

/// The suite called `name` (case-insensitive).
fn lookup(name: &str) -> Option<SupportedCipherSuite> {
    NAMES
        .iter()
        .find(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
        .map(|(suite, _)| *suite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(suites: &[SupportedCipherSuite]) -> Vec<String> {
        suites.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn openssl_and_iana_names_map_to_the_same_suite() {
        let (a, _) = select("ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        let (b, _) = select("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").unwrap();
        assert_eq!(names(&a), names(&b));
        assert_eq!(names(&a)[0], "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256");
    }

    #[test]
    fn an_unnamed_version_keeps_its_suites() {
        let (suites, skipped) = select("ECDHE-RSA-AES256-GCM-SHA384:!aNULL:HIGH").unwrap();
        assert_eq!(skipped, ["!aNULL", "HIGH"]);
        let tls12: Vec<_> = suites.iter().filter(|s| s.tls13().is_none()).collect();
        assert_eq!(tls12.len(), 1);
        assert_eq!(suites.iter().filter(|s| s.tls13().is_some()).count(), 3);

        let (suites, _) = select("TLS_AES_256_GCM_SHA384").unwrap();
        assert_eq!(names(&suites)[0], "TLS13_AES_256_GCM_SHA384");
        assert_eq!(suites.iter().filter(|s| s.tls13().is_some()).count(), 1);
        assert_eq!(suites.iter().filter(|s| s.tls13().is_none()).count(), 6);
    }

    #[test]
    fn a_list_of_unknown_names_is_refused() {
        let err = select("AES128-SHA:DES-CBC3-SHA").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("AES128-SHA:DES-CBC3-SHA"), "{msg}");
        assert!(msg.contains("ECDHE-RSA-AES128-GCM-SHA256"), "{msg}");
    }
}
