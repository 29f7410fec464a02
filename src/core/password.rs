//! Password hashes in the formats RabbitMQ and LavinMQ store in definitions, so
//! that users exported from either broker can log in here unchanged:
//!
//! * `rabbit_password_hashing_sha256` (the default), `_sha512` and `_md5`:
//!   base64(salt ‖ H(salt ‖ password)), with a 4-byte salt when created here;
//! * bcrypt (`$2a$`, `$2b$`, `$2x$`, `$2y$` hashes), which LavinMQ calls
//!   `lavinmq_bcrypt`.
//!
//! Algorithm names are matched the way LavinMQ matches them, by suffix and
//! ignoring case (`SHA256`, `rabbit_password_hashing_sha256`, `Bcrypt` and
//! `lavinmq_bcrypt` all work), and stored under their canonical name. A hash is
//! checked when it is imported or set, so that a typo fails there and then
//! instead of leaving a user who can never log in.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::Digest;
use subtle::ConstantTimeEq;

/// Salt length of the RabbitMQ formats, when a hash is created here.
const SALT_LEN: usize = 4;

/// Cost of bcrypt hashes created here (LavinMQ uses the same low cost for
/// hashes created through its API, to keep logins cheap).
const BCRYPT_COST: u32 = 4;

/// Hash prefixes that older LavinMQ versions put before RabbitMQ-format hashes;
/// they are dropped on import, as LavinMQ does.
const LEGACY_PREFIXES: [(&str, Algorithm); 3] = [
    ("$5$", Algorithm::Sha256),
    ("$6$", Algorithm::Sha512),
    ("$1$", Algorithm::Md5),
];

/// Why a hash or algorithm name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// The `hashing_algorithm` names no algorithm the broker knows.
    #[error("unknown hashing algorithm '{0}'")]
    UnknownAlgorithm(String),
    /// The hash is not in the format of its algorithm.
    #[error("invalid {algorithm} password hash: {reason}")]
    InvalidHash {
        /// Canonical name of the algorithm the hash was checked against.
        algorithm: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// A supported password hashing algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// RabbitMQ's default: SHA-256 over salt and password.
    Sha256,
    /// SHA-512 over salt and password.
    Sha512,
    /// MD5 over salt and password (RabbitMQ before 3.6).
    Md5,
    /// bcrypt, in its modular crypt format.
    Bcrypt,
}

impl Algorithm {
    /// The algorithm a `hashing_algorithm` value names, matched by suffix and
    /// ignoring case, as LavinMQ does.
    pub fn from_name(name: &str) -> Result<Self, PasswordError> {
        let lower = name.trim().to_ascii_lowercase();
        let found = [
            ("sha256", Algorithm::Sha256),
            ("sha512", Algorithm::Sha512),
            ("md5", Algorithm::Md5),
            ("bcrypt", Algorithm::Bcrypt),
        ]
        .into_iter()
        .find(|(suffix, _)| lower.ends_with(suffix));
        found
            .map(|(_, a)| a)
            .ok_or_else(|| PasswordError::UnknownAlgorithm(name.to_string()))
    }

    /// The name stored in `users.json` and written to definitions exports.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "rabbit_password_hashing_sha256",
            Algorithm::Sha512 => "rabbit_password_hashing_sha512",
            Algorithm::Md5 => "rabbit_password_hashing_md5",
            Algorithm::Bcrypt => "lavinmq_bcrypt",
        }
    }

    /// Digest length of the RabbitMQ formats (none for bcrypt).
    fn digest_len(self) -> Option<usize> {
        match self {
            Algorithm::Sha256 => Some(32),
            Algorithm::Sha512 => Some(64),
            Algorithm::Md5 => Some(16),
            Algorithm::Bcrypt => None,
        }
    }

    /// H(salt ‖ password) for the RabbitMQ formats.
    fn salted_digest(self, salt: &[u8], password: &[u8]) -> Vec<u8> {
        match self {
            Algorithm::Sha256 => sha2::Sha256::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            Algorithm::Sha512 => sha2::Sha512::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            Algorithm::Md5 => md5::Md5::new()
                .chain_update(salt)
                .chain_update(password)
                .finalize()
                .to_vec(),
            Algorithm::Bcrypt => Vec::new(),
        }
    }
}

/// True when `hash` is in bcrypt's modular crypt format (`$2a$`, `$2b$`, ...),
/// which no base64 RabbitMQ hash can be.
fn looks_like_bcrypt(hash: &str) -> bool {
    hash.starts_with("$2")
}

/// Checks `hash` against `algorithm` (guessed from the hash when `None`) and
/// returns the hash as it should be stored and its algorithm.
///
/// A bcrypt-format hash is taken as bcrypt whatever the label says, since it
/// cannot be valid in any other format. Without a label, a RabbitMQ-format hash
/// is told apart by its length (as RabbitMQ creates them, with a 4-byte salt);
/// anything else is taken as SHA-256. An empty hash is a user that cannot log
/// in with a password, as in RabbitMQ.
pub fn parse(hash: &str, algorithm: Option<&str>) -> Result<(String, Algorithm), PasswordError> {
    let named = algorithm.map(Algorithm::from_name).transpose()?;
    if hash.is_empty() {
        return Ok((String::new(), named.unwrap_or(Algorithm::Sha256)));
    }
    if looks_like_bcrypt(hash) || named == Some(Algorithm::Bcrypt) {
        hash.parse::<bcrypt::HashParts>()
            .map_err(|e| PasswordError::InvalidHash {
                algorithm: Algorithm::Bcrypt.name(),
                reason: e.to_string(),
            })?;
        return Ok((hash.to_string(), Algorithm::Bcrypt));
    }
    let mut hash = hash;
    let mut from_prefix = None;
    for (prefix, a) in LEGACY_PREFIXES {
        if let Some(rest) = hash.strip_prefix(prefix) {
            hash = rest;
            from_prefix = Some(a);
            break;
        }
    }
    let guessed = named.or(from_prefix);
    let raw = B64.decode(hash).map_err(|e| PasswordError::InvalidHash {
        algorithm: guessed.unwrap_or(Algorithm::Sha256).name(),
        reason: format!("not base64: {e}"),
    })?;
    let algorithm = guessed.unwrap_or(match raw.len() {
        l if l == SALT_LEN + 16 => Algorithm::Md5,
        l if l == SALT_LEN + 64 => Algorithm::Sha512,
        _ => Algorithm::Sha256,
    });
    let digest_len = algorithm.digest_len().unwrap_or_default();
    if raw.len() < digest_len {
        return Err(PasswordError::InvalidHash {
            algorithm: algorithm.name(),
            reason: format!("{} bytes, shorter than its {digest_len}-byte digest", raw.len()),
        });
    }
    Ok((hash.to_string(), algorithm))
}

/// Hashes `password` with `algorithm` and a fresh random salt.
pub fn hash(password: &str, algorithm: Algorithm) -> String {
    if algorithm == Algorithm::Bcrypt {
        let mut salt = [0u8; 16];
        rand::fill(&mut salt);
        // The only failure is a cost outside 4..=31, and BCRYPT_COST is inside.
        if let Ok(parts) = bcrypt::hash_with_salt(password, BCRYPT_COST, salt) {
            return parts.format_for_version(bcrypt::Version::TwoB);
        }
        return hash(password, Algorithm::Sha256);
    }
    let mut salt = [0u8; SALT_LEN];
    rand::fill(&mut salt);
    let mut out = salt.to_vec();
    out.extend_from_slice(&algorithm.salted_digest(&salt, password.as_bytes()));
    B64.encode(out)
}

/// True when `password` matches `hash` of `algorithm`; comparisons take the
/// same time whatever the number of matching bytes. Malformed hashes never
/// match.
pub fn verify(hash: &str, algorithm: Algorithm, password: &str) -> bool {
    if hash.is_empty() {
        return false;
    }
    if algorithm == Algorithm::Bcrypt {
        return bcrypt::verify(password, hash).unwrap_or(false);
    }
    let hash = LEGACY_PREFIXES
        .iter()
        .find_map(|(p, _)| hash.strip_prefix(p))
        .unwrap_or(hash);
    let Ok(raw) = B64.decode(hash) else {
        return false;
    };
    let Some(digest_len) = algorithm.digest_len() else {
        return false;
    };
    let Some(salt_len) = raw.len().checked_sub(digest_len) else {
        return false;
    };
    let (salt, digest) = raw.split_at(salt_len);
    algorithm.salted_digest(salt, password.as_bytes()).ct_eq(digest).into()
}

/// Like [`verify`], with the algorithm given by name; an unknown name never
/// matches.
pub fn verify_named(hash: &str, algorithm: &str, password: &str) -> bool {
    match Algorithm::from_name(algorithm) {
        Ok(a) => verify(hash, a, password),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// base64(salt ‖ H(salt ‖ password)) computed independently of `hash`.
    fn rabbit(salt: [u8; 4], a: Algorithm, password: &str) -> String {
        let mut raw = salt.to_vec();
        raw.extend(a.salted_digest(&salt, password.as_bytes()));
        B64.encode(raw)
    }

    #[test]
    fn names_match_by_suffix_ignoring_case() {
        for (name, a) in [
            ("rabbit_password_hashing_sha256", Algorithm::Sha256),
            ("SHA256", Algorithm::Sha256),
            ("rabbit_password_hashing_sha512", Algorithm::Sha512),
            ("rabbit_password_hashing_md5", Algorithm::Md5),
            ("Bcrypt", Algorithm::Bcrypt),
            ("bcrypt", Algorithm::Bcrypt),
            ("lavinmq_bcrypt", Algorithm::Bcrypt),
        ] {
            assert_eq!(Algorithm::from_name(name), Ok(a), "{name}");
        }
        assert!(matches!(
            Algorithm::from_name("rabbit_password_hashing_sha1"),
            Err(PasswordError::UnknownAlgorithm(_))
        ));
        assert!(Algorithm::from_name("").is_err());
    }

    #[test]
    fn rabbit_guest_hash_verifies() {
        let h = "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+";
        assert!(verify(h, Algorithm::Sha256, "guest"));
        assert!(!verify(h, Algorithm::Sha256, "guesT"));
        assert!(!verify(h, Algorithm::Sha512, "guest"));
    }

    #[test]
    fn md5_matches_the_reference_digest() {
        let h = rabbit([1, 2, 3, 4], Algorithm::Md5, "pw");
        let raw = B64.decode(&h).expect("base64");
        assert_eq!(raw.len(), 20);
        assert!(verify(&h, Algorithm::Md5, "pw"));
        assert!(!verify(&h, Algorithm::Md5, "pW"));
        // Plain md5 of a known string, to pin the crate to real MD5.
        let plain = md5::Md5::new().chain_update(b"abc").finalize();
        assert_eq!(
            plain.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "900150983cd24fb0d6963f7d28e17f72"
        );
    }

    #[test]
    fn every_algorithm_round_trips() {
        for a in [Algorithm::Sha256, Algorithm::Sha512, Algorithm::Md5, Algorithm::Bcrypt] {
            let h = hash("s3cret", a);
            assert!(verify(&h, a, "s3cret"), "{a:?}");
            assert!(!verify(&h, a, "s3creT"), "{a:?}");
            assert_eq!(parse(&h, Some(a.name())), Ok((h.clone(), a)));
            assert_eq!(parse(&h, None), Ok((h.clone(), a)), "guessed {a:?}");
        }
    }

    #[test]
    fn bcrypt_versions_verify() {
        let parts = bcrypt::hash_with_salt("pw", 4, [7; 16]).expect("bcrypt");
        for v in [bcrypt::Version::TwoA, bcrypt::Version::TwoB, bcrypt::Version::TwoY] {
            let h = parts.format_for_version(v);
            assert_eq!(
                parse(&h, Some("rabbit_password_hashing_sha256")),
                Ok((h.clone(), Algorithm::Bcrypt))
            );
            assert!(verify(&h, Algorithm::Bcrypt, "pw"));
            assert!(!verify(&h, Algorithm::Bcrypt, "px"));
        }
    }

    #[test]
    fn malformed_hashes_are_refused() {
        assert!(matches!(
            parse("not base64!", Some("rabbit_password_hashing_sha256")),
            Err(PasswordError::InvalidHash { .. })
        ));
        let short = rabbit([1, 2, 3, 4], Algorithm::Md5, "pw");
        assert!(parse(&short, Some("rabbit_password_hashing_sha512")).is_err());
        assert!(parse("$2b$04$tooshort", None).is_err());
        assert!(parse("abc", Some("bcrypt")).is_err());
        assert!(parse("AAAA", Some("rot13")).is_err());
        assert!(!verify("", Algorithm::Sha256, ""));
        assert!(!verify("$2b$04$tooshort", Algorithm::Bcrypt, "x"));
        assert!(!verify("AAAA", Algorithm::Sha256, "x"));
        assert!(!verify_named(
            "+pHuxkR9fCyrrwXjOD4BP4XbzO3l8LJr8YkThMgJ0yVHFRE+",
            "rot13",
            "guest"
        ));
    }

    #[test]
    fn legacy_prefixes_are_dropped() {
        let h = rabbit([9, 9, 9, 9], Algorithm::Sha512, "pw");
        let (stored, a) = parse(&format!("$6${h}"), None).expect("parses");
        assert_eq!((stored.as_str(), a), (h.as_str(), Algorithm::Sha512));
        assert!(verify(&format!("$6${h}"), Algorithm::Sha512, "pw"));
    }

    #[test]
    fn empty_hash_is_accepted_and_never_matches() {
        assert_eq!(parse("", None), Ok((String::new(), Algorithm::Sha256)));
        assert_eq!(parse("", Some("bcrypt")), Ok((String::new(), Algorithm::Bcrypt)));
        assert!(!verify("", Algorithm::Bcrypt, ""));
    }
}
