//! Logging in: the backends listed in `auth_backends` are asked in order
//! (`local`, the user store; `oauth`, access tokens from an identity
//! provider), and the first that knows the client decides who it is (an
//! [`Identity`]). Every protocol adapter logs in through here, so a token
//! works over AMQP, MQTT and the HTTP API alike.

pub mod identity;
pub mod oauth;

use std::sync::Arc;

use arc_swap::ArcSwap;

pub use identity::{Identity, TokenUser};
use oauth::{TokenError, Verifier};

use crate::config::OAuthConfig;
use crate::core::user::UserStore;

/// Decodes the `%XX` escapes of a credential or scope (and `+` as a space
/// when `plus_is_space`, as in form encoding); `None` when malformed.
pub fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
                continue;
            }
            b'+' if plus_is_space => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The user and password of a SASL PLAIN response (`authzid NUL user NUL
/// password`), as AMQP 0-9-1 and 1.0 send it.
pub fn plain_credentials(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|b| *b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    let pass = std::str::from_utf8(parts.next()?).ok()?;
    Some((user.to_owned(), pass.to_owned()))
}

/// SASL EXTERNAL: the user named by a verified client certificate's common
/// name (`cn`, None without one), which must exist. The error is for the log.
pub fn certificate_user(users: &UserStore, cn: Option<&str>) -> Result<Identity, String> {
    let Some(cn) = cn else {
        return Err("EXTERNAL needs a verified TLS client certificate".to_owned());
    };
    users
        .shared(cn)
        .map(Identity::Local)
        .ok_or_else(|| format!("no user '{cn}' for the client certificate's common name"))
}

/// Why a login was refused; the text is for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoginError {
    /// No backend knows the user with this password.
    #[error("wrong credentials for user '{0}'")]
    WrongCredentials(String),
    /// The password was a token, and the token was refused.
    #[error("token refused for user '{user}': {reason}")]
    Token {
        /// The user name the client gave.
        user: String,
        /// Why the token was refused.
        reason: TokenError,
    },
    /// A refreshed token names another user than the connection's.
    #[error("the new token is for user '{new}', the connection is user '{current}'")]
    OtherUser {
        /// The connection's user.
        current: String,
        /// The user the new token names.
        new: String,
    },
}

/// One way of logging in.
enum Backend {
    /// The user store.
    Local,
    /// Access tokens from one provider.
    OAuth(Arc<Verifier>),
}

/// The configured login backends, in order.
pub struct Authenticator {
    backends: ArcSwap<Vec<Backend>>,
}

impl Default for Authenticator {
    fn default() -> Self {
        Authenticator {
            backends: ArcSwap::from_pointee(vec![Backend::Local]),
        }
    }
}

impl Authenticator {
    /// Sets the backends from `auth_backends` (local only when empty) and
    /// `[oauth]`. An `oauth` backend without an issuer is left out, with an
    /// error in the log, as LavinMQ does.
    pub fn configure(&self, names: &[String], oauth: &OAuthConfig) {
        let mut backends = Vec::new();
        for name in names {
            match name.as_str() {
                "local" => backends.push(Backend::Local),
                "oauth" => match Verifier::new(oauth) {
                    Some(v) => {
                        if let Err(why) = oauth.ui_sign_on() {
                            tracing::warn!("the management UI offers no single sign-on: {why}");
                        }
                        backends.push(Backend::OAuth(Arc::new(v)))
                    }
                    None => tracing::error!("auth_backends lists oauth, but [oauth] sets no issuer: left out"),
                },
                other => tracing::error!("unknown auth backend '{other}' left out"),
            }
        }
        if backends.is_empty() {
            backends.push(Backend::Local);
        }
        self.backends.store(Arc::new(backends));
    }

    /// The token verifier, when tokens are accepted: also the way to the
    /// provider's endpoints for the management UI's single sign-on.
    pub fn verifier(&self) -> Option<Arc<Verifier>> {
        self.backends.load().iter().find_map(|b| match b {
            Backend::OAuth(v) => Some(v.clone()),
            Backend::Local => None,
        })
    }

    /// Logs `user` in with `password` (a password, or an access token).
    /// The first backend that accepts decides; a token refusal is reported
    /// over a plain wrong password, as it says more.
    pub async fn login(&self, users: &UserStore, user: &str, password: &str) -> Result<Identity, LoginError> {
        let backends = self.backends.load_full();
        let mut refusal = LoginError::WrongCredentials(user.to_owned());
        for backend in backends.iter() {
            match backend {
                Backend::Local => {
                    if let Some(u) = users.authenticate(user, password) {
                        return Ok(Identity::Local(u));
                    }
                }
                Backend::OAuth(v) if oauth::looks_like_token(password) => match v.verify(password).await {
                    Ok(t) => return Ok(Identity::Token(Arc::new(t))),
                    Err(reason) => {
                        refusal = LoginError::Token {
                            user: user.to_owned(),
                            reason,
                        }
                    }
                },
                Backend::OAuth(_) => {}
            }
        }
        Err(refusal)
    }

    /// Checks the new secret of a logged-in client (AMQP's
    /// `connection.update-secret`): for a token user a fresh token for the
    /// same user, whose scopes then apply; for a local user its password,
    /// checked again.
    pub async fn refresh(&self, users: &UserStore, current: &Identity, secret: &str) -> Result<Identity, LoginError> {
        let fresh = self.login(users, current.name(), secret).await?;
        if fresh.name() != current.name() {
            return Err(LoginError::OtherUser {
                current: current.name().to_owned(),
                new: fresh.name().to_owned(),
            });
        }
        Ok(fresh)
    }
}
