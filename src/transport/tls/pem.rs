//! Reading certificates and keys from PEM files.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::error::TlsError;

/// The certificates in the PEM file `path`, in file order (leaf first for a
/// chain); at least one.
pub fn certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in the PEM file `path`.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        what: "private key",
        path: path.to_path_buf(),
        source,
    })
}

/// The CA certificates in `path`: a PEM file, or a directory whose files are
/// read as PEM (files without certificates are skipped).
pub fn ca_roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut certs = Vec::new();
    if path.is_dir() {
        let dir_err = |source| TlsError::CaDir {
            path: path.to_path_buf(),
            source,
        };
        for entry in std::fs::read_dir(path).map_err(dir_err)? {
            let file = entry.map_err(dir_err)?.path();
            if !file.is_file() {
                continue;
            }
            match certificates(&file, "CA certificates") {
                Ok(found) => certs.extend(found),
                Err(TlsError::NoCertificate { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    } else {
        certs = certificates(path, "CA certificates")?;
    }
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}
