//! HTTP basic authentication against the broker's users, and the user tags that
//! grant access to parts of the API (RabbitMQ's meaning: `administrator` can do
//! everything, `policymaker` manages policies, `monitoring` sees everything,
//! `management` sees its own vhosts).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use base64::Engine;

use super::HttpState;
use super::error::ApiError;
use crate::core::user::User;

/// The authenticated user of a request.
pub struct Authed(pub User);

const MANAGEMENT_TAGS: [&str; 4] = ["administrator", "monitoring", "policymaker", "management"];

impl Authed {
    /// True when the user has `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.0.tags.iter().any(|t| t == tag)
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

    /// True when the user may see every vhost (administrator or monitoring).
    pub fn sees_all(&self) -> bool {
        self.has_tag("administrator") || self.has_tag("monitoring")
    }

    /// True when the user may see or use vhost `vhost`.
    pub fn can_access(&self, vhost: &str) -> bool {
        self.sees_all() || self.0.permissions.contains_key(vhost)
    }

    /// Fails with 403 unless the user may use vhost `vhost`.
    pub fn require_vhost(&self, vhost: &str) -> Result<(), ApiError> {
        if self.can_access(vhost) {
            return Ok(());
        }
        Err(ApiError::forbidden(format!("Access refused to vhost '{vhost}'")))
    }
}

impl FromRequestParts<Arc<HttpState>> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<HttpState>) -> Result<Self, Self::Rejection> {
        let (name, password) = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim()).ok())
            .and_then(|raw| String::from_utf8(raw).ok())
            .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_string(), p.to_string())))
            .ok_or_else(|| ApiError::unauthorized("Login failed"))?;
        let user = state
            .broker
            .users
            .authenticate(&name, &password)
            .ok_or_else(|| ApiError::unauthorized("Login failed"))?;
        if !user.tags.iter().any(|t| MANAGEMENT_TAGS.contains(&t.as_str())) {
            return Err(ApiError::unauthorized("Not management user"));
        }
        Ok(Authed(user))
    }
}
