//! Checking a token: its form and algorithm, its lifetime, its signature
//! against the provider's keys, then its issuer and audience. The claims are
//! checked here rather than by `jsonwebtoken`'s validation so that each
//! refusal has its own reason and a claim of the wrong JSON type is refused
//! rather than skipped. Form and lifetime are checked before any key is
//! fetched, so that garbage cannot make the broker call the provider.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::TokenError;
use super::jwks::Jwks;
use crate::auth::identity::TokenUser;
use crate::config::OAuthConfig;

/// The algorithms accepted: public-key signatures only, so that a token
/// cannot be signed with a published key used as an HMAC secret.
const ACCEPTED: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// True when `password` has the form of a JWT (three base64url parts, the
/// first a JSON object), so that an ordinary password never reaches the
/// token checks.
pub fn looks_like_token(password: &str) -> bool {
    password.starts_with("ey") && password.split('.').count() == 3
}

/// Checks tokens against one provider.
pub struct Verifier {
    config: OAuthConfig,
    issuer: String,
    jwks: Jwks,
}

impl Verifier {
    /// A verifier for the provider `config.issuer` names; `None` without one.
    pub fn new(config: &OAuthConfig) -> Option<Self> {
        let issuer = config.issuer.as_deref()?.trim_end_matches('/').to_owned();
        Some(Verifier {
            jwks: Jwks::new(&issuer, config.jwks_cache_ttl),
            issuer,
            config: config.clone(),
        })
    }

    /// The provider's endpoints, from its discovery document.
    pub async fn discovery(&self) -> Result<std::sync::Arc<super::Discovery>, TokenError> {
        self.jwks.discovery().await
    }

    /// The settings this verifier was made from.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// The user a valid token stands for.
    pub async fn verify(&self, token: &str) -> Result<TokenUser, TokenError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| {
            let alg = header_alg(token);
            match alg {
                Some(a) if !ACCEPTED.iter().any(|x| format!("{x:?}") == a) => TokenError::Algorithm(a),
                _ => TokenError::Malformed(e.to_string()),
            }
        })?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(TokenError::Algorithm(format!("{:?}", header.alg)));
        }
        let unverified = payload(token)?;
        check_lifetime(&unverified, now())?;
        let key = self.jwks.key(header.kid.as_deref()).await?;
        if key.algorithm.is_some_and(|a| a != header.alg) {
            return Err(TokenError::Algorithm(format!(
                "{:?} (the key is for {:?})",
                header.alg, key.algorithm
            )));
        }
        let mut validation = Validation::new(header.alg);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::InvalidSignature => TokenError::Signature,
                _ => TokenError::Malformed(e.to_string()),
            })?
            .claims;
        self.check_issuer(&claims)?;
        if self.config.verify_aud {
            self.check_audience(&claims)?;
        }
        super::token_user(&self.config, &claims)
    }

    fn check_issuer(&self, claims: &Map<String, Value>) -> Result<(), TokenError> {
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or_default();
        if iss.trim_end_matches('/') != self.issuer {
            return Err(TokenError::Issuer(iss.to_owned()));
        }
        Ok(())
    }

    fn check_audience(&self, claims: &Map<String, Value>) -> Result<(), TokenError> {
        let expected = self
            .config
            .audience
            .as_deref()
            .or(self.config.resource_server_id.as_deref())
            .unwrap_or_default();
        let found = match claims.get("aud") {
            Some(Value::String(a)) => a == expected,
            Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(expected)),
            _ => false,
        };
        if expected.is_empty() || !found {
            return Err(TokenError::Audience(expected.to_owned()));
        }
        Ok(())
    }
}

/// Seconds since the epoch.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The `alg` of a header that `jsonwebtoken` could not read (such as
/// `none`), to name it in the refusal.
fn header_alg(token: &str) -> Option<String> {
    let header = token.split('.').next()?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header.trim_end_matches('='))
        .ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    v.get("alg")?.as_str().map(str::to_owned)
}

/// The claims, before the signature is checked.
fn payload(token: &str) -> Result<Map<String, Value>, TokenError> {
    let part = token
        .split('.')
        .nth(1)
        .ok_or_else(|| TokenError::Malformed("no payload".into()))?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|e| TokenError::Malformed(format!("payload: {e}")))?;
    serde_json::from_slice(&raw).map_err(|e| TokenError::Malformed(format!("payload: {e}")))
}

/// `exp` must be a number in the future, `nbf` (when present) a number not
/// in the future.
fn check_lifetime(claims: &Map<String, Value>, now: u64) -> Result<(), TokenError> {
    let exp = match claims.get("exp") {
        None => return Err(TokenError::NoExpiry),
        Some(v) => seconds(v).ok_or_else(|| TokenError::Malformed("exp is not a number".into()))?,
    };
    if exp <= now {
        return Err(TokenError::Expired);
    }
    if let Some(v) = claims.get("nbf") {
        let nbf = seconds(v).ok_or_else(|| TokenError::Malformed("nbf is not a number".into()))?;
        if nbf > now {
            return Err(TokenError::NotYetValid);
        }
    }
    Ok(())
}

/// A NumericDate: whole seconds, fractions allowed.
fn seconds(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn lifetime_claims_must_be_numbers_in_range() {
        let now = 1_000;
        assert_eq!(check_lifetime(&claims(json!({"exp": 2000})), now), Ok(()));
        assert_eq!(
            check_lifetime(&claims(json!({"exp": 999})), now),
            Err(TokenError::Expired)
        );
        assert_eq!(check_lifetime(&claims(json!({})), now), Err(TokenError::NoExpiry));
        assert!(matches!(
            check_lifetime(&claims(json!({"exp": "2000"})), now),
            Err(TokenError::Malformed(_))
        ));
        assert_eq!(
            check_lifetime(&claims(json!({"exp": 2000, "nbf": 1001})), now),
            Err(TokenError::NotYetValid)
        );
        assert!(matches!(
            check_lifetime(&claims(json!({"exp": 2000, "nbf": "0"})), now),
            Err(TokenError::Malformed(_))
        ));
        assert_eq!(check_lifetime(&claims(json!({"exp": 2000.5, "nbf": 10})), now), Ok(()));
    }

    #[test]
    fn only_jwt_shaped_passwords_are_tokens() {
        assert!(looks_like_token("eyJhbGciOiJSUzI1NiJ9.eyJ9.sig"));
        assert!(!looks_like_token("guest"));
        assert!(!looks_like_token("eyJ.only-two"));
    }
}
