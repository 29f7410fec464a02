//! HTTP basic authentication against the broker's users, and the user tags that
//! grant access to parts of the API (RabbitMQ's meaning: `administrator` can do
//! everything, `policymaker` manages policies, `monitoring` sees everything,
//! `management` sees its own vhosts).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine;

use super::HttpState;
use super::error::ApiError;
use crate::auth::Identity;
use crate::core::login_throttle::Admission;
use crate::core::permissions::Access;

/// How a request's user was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Basic auth over the network: the user's tags and permissions apply.
    Credentials,
    /// The control socket: an administrator allowed everything, as file
    /// permissions already decided who may connect.
    ControlSocket,
}

/// The authenticated user of a request.
pub struct Authed(pub Identity, pub Trust);

const MANAGEMENT_TAGS: [&str; 4] = ["administrator", "monitoring", "policymaker", "management"];

impl Authed {
    /// True when the user has `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.0.has_tag(tag)
    }

    /// The user's name.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Fails with 403 unless the user is an administrator.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.has_tag("administrator") {
            return Ok(());
        }
        Err(ApiError::forbidden("Not administrator user"))
    }

    /// Fails with 403 unless the user may manage policies.
    pub fn require_policymaker(&self) -> Result<(), ApiError> {
        if self.has_tag("administrator") || self.has_tag("policymaker") {
            return Ok(());
        }
        Err(ApiError::forbidden("Not policymaker user"))
    }

    /// Fails with 403 unless the user may see node-wide figures.
    pub fn require_monitoring(&self) -> Result<(), ApiError> {
        if self.sees_all() {
            return Ok(());
        }
        Err(ApiError::forbidden("Not monitor user"))
    }

    /// True when the user may see every vhost (administrator or monitoring).
    pub fn sees_all(&self) -> bool {
        self.has_tag("administrator") || self.has_tag("monitoring")
    }

    /// True when the user may see or use vhost `vhost`.
    pub fn can_access(&self, vhost: &str) -> bool {
        self.sees_all() || self.0.may_use_vhost(vhost)
    }

    /// Fails with 403 unless the user's permissions in `vhost` grant `access` to
    /// the queue or exchange `name` (`kind`), as the same operation over AMQP.
    pub fn check(&self, s: &HttpState, vhost: &str, access: Access, kind: &str, name: &str) -> Result<(), ApiError> {
        if self.1 == Trust::ControlSocket {
            return Ok(());
        }
        self.0
            .permissions(&s.broker.users, vhost, None)
            .check(access, kind, name, vhost, self.name())
            .map_err(ApiError::from)
    }

    /// Fails with 403 when the user's topic permissions on the topic exchange
    /// `exchange` of `vhost` do not let `key` be published (`Write`) or bound
    /// (`Read`), as the same operation over AMQP.
    pub fn check_topic(
        &self,
        s: &HttpState,
        vhost: &crate::core::vhost::VHost,
        access: crate::core::topic_permissions::TopicAccess,
        exchange: &str,
        key: &str,
    ) -> Result<(), ApiError> {
        if self.1 == Trust::ControlSocket {
            return Ok(());
        }
        let is_topic = vhost
            .exchange(exchange)
            .is_some_and(|e| e.kind == crate::core::exchange::ExchangeKind::Topic);
        if !is_topic {
            return Ok(());
        }
        self.0
            .permissions(&s.broker.users, &vhost.name, None)
            .check_topic(access, exchange, key, &vhost.name, self.name())
            .map_err(ApiError::from)
    }

    /// Fails with 403 unless the user may use vhost `vhost`.
    pub fn require_vhost(&self, vhost: &str) -> Result<(), ApiError> {
        if self.can_access(vhost) {
            return Ok(());
        }
        Err(ApiError::forbidden(format!("Access refused to vhost '{vhost}'")))
    }
}

/// True when `user` may not log in from `peer` because it is the default user
/// restricted to loopback (`default_user_only_loopback`, RabbitMQ's
/// `loopback_users`), named by `loopback_only`. A request whose peer is unknown
/// (the router served without connection info) is refused too, so that the
/// restriction cannot be lost by serving the API another way.
pub fn loopback_refused(loopback_only: Option<&str>, user: &str, peer: Option<SocketAddr>) -> bool {
    if loopback_only != Some(user) {
        return false;
    }
    !peer.is_some_and(|p| p.ip().to_canonical().is_loopback())
}

/// The user name and password of an `Authorization: Basic` header, or `None`
/// when the header is not one.
pub fn basic_credentials(value: &HeaderValue) -> Option<(String, String)> {
    let encoded = value.to_str().ok()?.strip_prefix("Basic ")?;
    let raw = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let (user, password) = String::from_utf8(raw)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

/// The token of an `Authorization: Bearer` header, or `None` when the
/// header is not one.
pub fn bearer_token(value: &HeaderValue) -> Option<String> {
    let token = value.to_str().ok()?.strip_prefix("Bearer ")?.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The user name and password of the management UI's login cookie `m`, or
/// `None` without one. As LavinMQ's, its value is the URL-encoded base64 of
/// `user:password`, optionally after a prefix ending in `:` (a signed-on
/// session's `|oauth:` has an empty password: its token is in another
/// cookie, see [`super::sso`]).
pub fn cookie_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = cookie(headers, "m")?;
    let encoded = value.rsplit(':').next().unwrap_or(value);
    let raw = base64::engine::general_purpose::STANDARD
        .decode(crate::auth::percent_decode(encoded, false)?.trim())
        .ok()?;
    let (user, password) = String::from_utf8(raw)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

/// True when `user` may use the management API and UI at all: it has one
/// of the management tags.
pub fn is_management_user(user: &Identity) -> bool {
    user.tags().iter().any(|t| MANAGEMENT_TAGS.contains(&t.as_str()))
}

impl FromRequestParts<Arc<HttpState>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<HttpState>) -> Result<Self, Self::Rejection> {
        if let Some(ctl) = parts.extensions.get::<super::control_socket::ControlSocket>() {
            return ctl.authed(&parts.headers, state);
        }
        // The Authorization header (basic, or a bearer token, which names its
        // own user), else the UI's cookies: a signed-on session's token, or
        // the login cookie (so that a plain link, such as a download, is
        // authenticated too).
        let (name, password) = match parts.headers.get(header::AUTHORIZATION) {
            Some(value) => bearer_token(value)
                .map(|token| (String::new(), token))
                .or_else(|| basic_credentials(value)),
            None => {
                let found = match cookie(&parts.headers, super::sso::TOKEN_COOKIE) {
                    Some(token) => Some((String::new(), token.to_owned())),
                    None => cookie_credentials(&parts.headers),
                };
                if found.is_some() && !parts.method.is_safe() && !parts.headers.contains_key("x-requested-with") {
                    // A cookie goes with any request the browser makes, also
                    // one another site's form makes (cross-site request
                    // forgery); the UI's scripts mark theirs, which a form
                    // cannot.
                    return Err(ApiError::forbidden(
                        "Changes authenticated by cookie need the X-Requested-With header",
                    ));
                }
                found
            }
        }
        .ok_or_else(|| ApiError::unauthorized("Login failed"))?;
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
        let logins = &state.broker.logins;
        if let Some(ip) = peer.map(|p| p.ip())
            && let Admission::Refused(left) = logins.admit(ip)
        {
            return Err(ApiError::too_many_requests(Admission::refusal_text(left)));
        }
        let broker = &state.broker;
        let user = match broker.auth.login(&broker.users, &name, &password).await {
            Ok(user) => {
                if let Some(p) = peer {
                    logins.succeeded(p.ip());
                }
                user
            }
            Err(e) => {
                if let Some(p) = peer {
                    tracing::warn!(peer = %p, "HTTP API login failed: {e}");
                    tokio::time::sleep(logins.failed(p.ip())).await;
                }
                return Err(ApiError::unauthorized("Login failed"));
            }
        };
        if loopback_refused(state.loopback_only_user.as_deref(), user.name(), peer) {
            return Err(ApiError::unauthorized("User can only log in via localhost"));
        }
        if !is_management_user(&user) {
            return Err(ApiError::unauthorized("Not management user"));
        }
        Ok(Authed(user, Trust::Credentials))
    }
}

#[cfg(test)]
mod tests {
    use super::{cookie_credentials, loopback_refused};

    #[test]
    fn only_the_restricted_user_from_elsewhere_is_refused() {
        let local4 = Some("127.0.0.1:5000".parse().expect("addr"));
        let local6 = Some("[::1]:5000".parse().expect("addr"));
        let mapped = Some("[::ffff:127.0.0.1]:5000".parse().expect("addr"));
        let remote = Some("192.0.2.7:5000".parse().expect("addr"));
        for peer in [local4, local6, mapped] {
            assert!(!loopback_refused(Some("guest"), "guest", peer), "{peer:?}");
        }
        assert!(loopback_refused(Some("guest"), "guest", remote));
        assert!(loopback_refused(Some("guest"), "guest", None));
        assert!(!loopback_refused(Some("guest"), "alice", remote));
        assert!(!loopback_refused(None, "guest", remote));
    }

    #[test]
    fn the_login_cookie_carries_credentials() {
        let mut h = axum::http::HeaderMap::new();
        // base64("guest:guest") = Z3Vlc3Q6Z3Vlc3Q=, URL-encoded.
        h.insert(
            axum::http::header::COOKIE,
            "a=b; m=Z3Vlc3Q6Z3Vlc3Q%3D".parse().expect("header"),
        );
        assert_eq!(cookie_credentials(&h), Some(("guest".into(), "guest".into())));
        h.insert(
            axum::http::header::COOKIE,
            "m=|:Z3Vlc3Q6Z3Vlc3Q%3D".parse().expect("header"),
        );
        assert_eq!(cookie_credentials(&h), Some(("guest".into(), "guest".into())));
        h.insert(axum::http::header::COOKIE, "m=%%%".parse().expect("header"));
        assert_eq!(cookie_credentials(&h), None);
    }
}
