//! `tls_keylog_file` / `SSLKEYLOGFILE`: TLS secrets appended to a file in the
//! NSS key log format, so that a packet capture can be decrypted while
//! debugging a client. Never enable it in production.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustls::KeyLog;

use super::error::TlsError;

/// Appends each secret as one `LABEL CLIENT_RANDOM SECRET` line (hex).
#[derive(Debug)]
pub struct KeyLogFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl KeyLogFile {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> Result<KeyLogFile, TlsError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| TlsError::KeyLog {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(KeyLogFile {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// The key log file to use: `configured`, else `$SSLKEYLOGFILE`, else none.
    pub fn path_for(configured: Option<&Path>) -> Option<PathBuf> {
        configured.map(Path::to_path_buf).or_else(|| {
            std::env::var_os("SSLKEYLOGFILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
    }
}

impl KeyLog for KeyLogFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let mut line = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
        line.push_str(label);
        line.push(' ');
        for b in client_random {
            let _ = write!(line, "{b:02x}");
        }
        line.push(' ');
        for b in secret {
            let _ = write!(line, "{b:02x}");
        }
        line.push('\n');
        // A poisoned lock only means another writer panicked mid-line.
        let mut file = self.file.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!("cannot write TLS key log {}: {e}", self.path.display());
        }
    }
}
