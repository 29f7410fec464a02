//! Unix socket listeners: binding one safely and removing its file again.
//! The control socket and the optional AMQP, MQTT and HTTP sockets
//! (`unix_path` in their sections) are all bound here.
//!
//! A stale socket left by a broker that did not shut down cleanly is
//! replaced; anything else at the path is left alone and reported, since a
//! misconfigured path must not destroy a file. The file is removed at
//! shutdown only while it is still the socket this broker created.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Longest path a Unix socket address can hold (`sun_path` is 108 bytes on
/// Linux, one of which is the terminating NUL).
/// File mode of the control socket (`lavinmqctl`'s, on a leader or a
/// follower): owner and group may connect, nobody else.
pub const CONTROL_SOCKET_MODE: u32 = 0o660;

pub const MAX_PATH_LEN: usize = 107;

/// Why a Unix socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum UnixSocketError {
    /// The path does not fit in a Unix socket address.
    #[error("{what} path {path} is {len} bytes long, the limit is {MAX_PATH_LEN}")]
    PathTooLong {
        /// Which socket ("control socket", "AMQP unix socket", ...).
        what: &'static str,
        /// The configured path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Something that is not a socket is in the way.
    #[error("{what} path {path} exists and is not a socket")]
    NotASocket {
        /// Which socket.
        what: &'static str,
        /// The configured path.
        path: PathBuf,
    },
    /// A file-system operation on the socket path failed.
    #[error("{what} {path}: cannot {action}: {source}")]
    Io {
        /// Which socket.
        what: &'static str,
        /// The socket path.
        path: PathBuf,
        /// What was attempted.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A bound socket's file. It is removed by [`BoundSocket::remove`] or on
/// drop, but only while it is still the socket this broker created (not a
/// file another process has put there since).
#[derive(Debug)]
pub struct BoundSocket {
    path: PathBuf,
    /// Device and inode of the socket file as bound, to recognise it later.
    identity: (u64, u64),
    removed: bool,
}

impl BoundSocket {
    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file (at shutdown), so that no client connects to
    /// a broker that is gone.
    pub fn remove(mut self) {
        self.remove_file();
    }

    fn remove_file(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.identity => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!("cannot remove socket {}: {e}", self.path.display());
                }
            }
            Ok(_) => tracing::debug!(
                "socket {} was replaced by another file; leaving it",
                self.path.display()
            ),
            Err(_) => {}
        }
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        self.remove_file();
    }
}

/// Prepares `path` (creating its directory, replacing a stale socket) and
/// binds a listener there with file mode `mode`; `what` names the socket in
/// errors and logs. Must be called inside a Tokio runtime.
pub fn bind(what: &'static str, path: &Path, mode: u32) -> Result<(UnixListener, BoundSocket), UnixSocketError> {
    let io = |action: &'static str| {
        move |source| UnixSocketError::Io {
            what,
            path: path.to_path_buf(),
            action,
            source,
        }
    };
    let len = path.as_os_str().len();
    if len > MAX_PATH_LEN {
        return Err(UnixSocketError::PathTooLong {
            what,
            path: path.to_path_buf(),
            len,
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("create its directory"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            tracing::info!("removing stale {what} {}", path.display());
            std::fs::remove_file(path).map_err(io("remove the stale socket"))?;
        }
        Ok(_) => {
            return Err(UnixSocketError::NotASocket {
                what,
                path: path.to_path_buf(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("inspect the path")(e)),
    }
    let listener = UnixListener::bind(path).map_err(io("bind"))?;
    // From here on the handle owns the file and removes it if a later step fails.
    let mut handle = BoundSocket {
        path: path.to_path_buf(),
        identity: (0, 0),
        removed: false,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io("inspect the bound socket"))?;
    handle.identity = (meta.dev(), meta.ino());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("set its permissions"))?;
    Ok((listener, handle))
}
