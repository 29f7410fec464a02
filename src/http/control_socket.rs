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

use std::path::Path;
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use tokio_util::sync::CancellationToken;

use super::HttpState;
use super::auth::{Authed, Trust};
use super::error::ApiError;
use crate::auth::Identity;
use crate::core::user::User;
use crate::transport::unix_socket::{self, BoundSocket, UnixSocketError};

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
            return Ok(Authed(
                Identity::Local(Arc::new(synthetic_admin(&self.default_user))),
                Trust::ControlSocket,
            ));
        };
        let login_failed = || ApiError::unauthorized("Login failed");
        let (name, password) = super::auth::basic_credentials(value).ok_or_else(login_failed)?;
        let mut user = state
            .broker
            .users
            .authenticate(&name, &password)
            .ok_or_else(login_failed)?;
        if !user.tags.iter().any(|t| t == "administrator") {
            Arc::make_mut(&mut user).tags.push("administrator".into());
        }
        Ok(Authed(Identity::Local(user), Trust::ControlSocket))
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
        topic_permissions: Default::default(),
        limits: Default::default(),
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
) -> Result<BoundSocket, UnixSocketError> {
    let (listener, handle) = unix_socket::bind("control socket", path, unix_socket::CONTROL_SOCKET_MODE)?;
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
