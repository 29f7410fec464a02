//! Logins with OAuth 2.0 access tokens (JWTs) issued by an OpenID Connect
//! provider: the client sends the token as its password (AMQP PLAIN, MQTT,
//! HTTP basic auth) or as an HTTP bearer token; the broker checks the
//! signature against the provider's published keys and the claims against
//! `[oauth]`, and the token's scopes become the user's rights.

mod discovery;
mod jwks;
mod scopes;
mod verify;

pub use discovery::Discovery;
pub use scopes::token_user;
pub use verify::{Verifier, looks_like_token};

/// Why a token was not accepted. The text is for the log and, where the
/// protocol has room for it, for the client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts of JSON.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// Signed with an algorithm the broker does not accept (`none`, HMAC).
    #[error("token algorithm {0} is not accepted")]
    Algorithm(String),
    /// The `exp` claim is missing.
    #[error("token has no exp claim")]
    NoExpiry,
    /// The token has expired.
    #[error("token has expired")]
    Expired,
    /// The token's `nbf` is in the future.
    #[error("token is not valid yet")]
    NotYetValid,
    /// The `iss` claim is not the configured issuer.
    #[error("token issuer {0:?} is not the configured issuer")]
    Issuer(String),
    /// The `aud` claim lacks the expected audience.
    #[error("token audience does not include {0:?}")]
    Audience(String),
    /// The provider has no key of the token's key id.
    #[error("no signing key {0:?} at the provider")]
    UnknownKey(String),
    /// The signature does not match.
    #[error("token signature is invalid")]
    Signature,
    /// No preferred claim names the user.
    #[error("no user name in the token (claims tried: {0})")]
    NoUsername(String),
    /// The provider's keys could not be fetched.
    #[error("signing keys unavailable: {0}")]
    Provider(String),
}
