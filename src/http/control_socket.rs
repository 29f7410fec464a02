//! The control socket: the management API served over a Unix socket
//! (`control_unix_path`, default `/tmp/lavinmqctl.sock`), which `lavinmqctl`
//! talks HTTP/1.1 to. Whoever can open the socket (mode 0660, so its owner and
//! group) is trusted as an administrator without credentials, as in LavinMQ:
//! the file permissions are the access control.
//!
//! Requests arriving here carry a [`ControlSocket`] extension;
//! [`super::auth::Authed`] sees it and resolves to an administrator: the user
//! named by a Basic `Authorization` header when one is sent (its password must
//! be right), otherwise the configured default user's name.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use super::HttpState;
use super::auth::{Authed, Trust};
use super::error::ApiError;
use crate::core::user::User;

/// Longest path a Unix socket address can hold (`sun_path` is 108 bytes on
/// Linux, one of which is the terminating NUL).
pub const MAX_PATH_LEN: usize = 107;

/// File mode of the socket: owner and group may connect, nobody else.
pub const SOCKET_MODE: u32 = 0o660;

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ControlSocketError {
    /// The path does not fit in a Unix socket address.
    #[error("control socket path {path} is {len} bytes long, the limit is {MAX_PATH_LEN}")]
    PathTooLong {
        /// The configured path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// Something that is not a socket is in the way; it is left alone rather
    /// than deleted, since a misconfigured path must not destroy a file.
    #[error("control socket path {0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// A file-system operation on the socket path failed.
    #[error("control socket {path}: cannot {action}: {source}")]
    Io {
        /// The socket path.
        path: PathBuf,
        /// What was attempted.
        action: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Marks a request as having come in over the control socket; inserted by the
/// socket's router only, so a TCP client can never carry it.
#[derive(Clone, Debug)]
pub struct ControlSocket {
    default_user: Arc<str>,
}

impl ControlSocket {
    /// The administrator a request on the control socket acts as (see the
    /// module documentation). Fails with 401 only when the request sends
    /// credentials that are wrong.
    pub fn authed(&self, headers: &HeaderMap, state: &HttpState) -> Result<Authed, ApiError> {
        let Some(value) = headers.get(header::AUTHORIZATION) else {
            return Ok(Authed(synthetic_admin(&self.default_user), Trust::ControlSocket));
        };
        let login_failed = || ApiError::unauthorized("Login failed");
        let (name, password) = super::auth::basic_credentials(value).ok_or_else(login_failed)?;
        let mut user = state
            .broker
            .users
            .authenticate(&name, &password)
            .ok_or_else(login_failed)?;
        if !user.tags.iter().any(|t| t == "administrator") {
            user.tags.push("administrator".into());
        }
        Ok(Authed(user, Trust::ControlSocket))
    }
}

/// A user that exists only for the duration of a control-socket request: it has
/// no password and no stored permissions, and the `administrator` tag, which
/// grants everything the API offers.
fn synthetic_admin(name: &str) -> User {
    User {
        name: name.to_string(),
        password_hash: String::new(),
        hashing_algorithm: String::new(),
        tags: vec!["administrator".into()],
        permissions: Default::default(),
    }
}

/// A bound control socket. Its file is removed by [`ControlSocketHandle::remove`]
/// or on drop, but only while it is still the socket this broker created (not a
/// file another process has put there since).
#[derive(Debug)]
pub struct ControlSocketHandle {
    path: PathBuf,
    /// Device and inode of the socket file as bound, to recognise it later.
    identity: (u64, u64),
    removed: bool,
}

impl ControlSocketHandle {
    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file (at shutdown), so that no client connects to a
    /// broker that is gone.
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
                    tracing::warn!("cannot remove control socket {}: {e}", self.path.display());
                }
            }
            Ok(_) => tracing::debug!(
                "control socket {} was replaced by another file; leaving it",
                self.path.display()
            ),
            Err(_) => {}
        }
    }
}

impl Drop for ControlSocketHandle {
    fn drop(&mut self) {
        self.remove_file();
    }
}

/// Binds the control socket at `path` and serves the management API on it until
/// `shutdown`, with every request acting as an administrator (named
/// `default_user` unless it sends credentials). Must be called inside a Tokio
/// runtime. A stale socket file at `path` (left by a broker that did not shut
/// down cleanly) is replaced; the parent directory is created if missing.
pub fn serve_unix(
    path: &Path,
    state: Arc<HttpState>,
    default_user: &str,
    shutdown: CancellationToken,
) -> Result<ControlSocketHandle, ControlSocketError> {
    let (listener, handle) = bind(path)?;
    let app = super::router(state).layer(axum::Extension(ControlSocket {
        default_user: Arc::from(default_user),
    }));
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!("control socket server failed: {e}");
        }
    });
    tracing::info!("control socket listening on {}", path.display());
    Ok(handle)
}

/// Prepares `path` and binds a listener there with mode [`SOCKET_MODE`].
fn bind(path: &Path) -> Result<(UnixListener, ControlSocketHandle), ControlSocketError> {
    let io = |action: &'static str| {
        move |source| ControlSocketError::Io {
            path: path.to_path_buf(),
            action,
            source,
        }
    };
    let len = path.as_os_str().len();
    if len > MAX_PATH_LEN {
        return Err(ControlSocketError::PathTooLong {
            path: path.to_path_buf(),
            len,
        });
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io("create its directory"))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            tracing::info!("removing stale control socket {}", path.display());
            std::fs::remove_file(path).map_err(io("remove the stale socket"))?;
        }
        Ok(_) => return Err(ControlSocketError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("inspect the path")(e)),
    }
    let listener = UnixListener::bind(path).map_err(io("bind"))?;
    // From here on the handle owns the file and removes it if a later step fails.
    let mut handle = ControlSocketHandle {
        path: path.to_path_buf(),
        identity: (0, 0),
        removed: false,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io("inspect the bound socket"))?;
    handle.identity = (meta.dev(), meta.ino());
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE)).map_err(io("set its permissions"))?;
    Ok((listener, handle))
}
