//! OpenID discovery: the provider's `/.well-known/openid-configuration`
//! names where its signing keys are published (`jwks_uri`) and, for the
//! management UI's single sign-on, where a user signs in
//! (`authorization_endpoint`) and where a sign-in code is exchanged for a
//! token (`token_endpoint`).

use std::time::Duration;

use serde_json::Value;

use super::TokenError;

/// How long a request to the provider may take.
pub(super) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest discovery document or key set accepted.
pub(super) const FETCH_LIMIT: usize = 1 << 20;

/// The endpoints a provider's discovery document names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Where the signing keys are published.
    pub jwks_uri: String,
    /// Where a browser is sent to sign in, if the provider has one.
    pub authorization_endpoint: Option<String>,
    /// Where a sign-in code is exchanged for tokens, if the provider has one.
    pub token_endpoint: Option<String>,
}

impl Discovery {
    /// Fetches the discovery document of the provider at `issuer` (no
    /// trailing slash).
    pub async fn fetch(issuer: &str) -> Result<Discovery, TokenError> {
        let url = format!("{issuer}/.well-known/openid-configuration");
        let doc = crate::client::http::get_json(&url, FETCH_TIMEOUT, FETCH_LIMIT)
            .await
            .map_err(|e| TokenError::Provider(format!("{url}: {e}")))?;
        Discovery::parse(&doc).ok_or_else(|| TokenError::Provider(format!("{url} names no jwks_uri")))
    }

    /// The endpoints of a discovery document; `None` without a `jwks_uri`.
    fn parse(doc: &Value) -> Option<Discovery> {
        let text = |key: &str| doc.get(key).and_then(Value::as_str).map(str::to_owned);
        Some(Discovery {
            jwks_uri: text("jwks_uri")?,
            authorization_endpoint: text("authorization_endpoint"),
            token_endpoint: text("token_endpoint"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_without_a_key_set_is_refused() {
        assert_eq!(Discovery::parse(&json!({"issuer": "x"})), None);
        let d = Discovery::parse(&json!({"jwks_uri": "https://p/keys", "token_endpoint": "https://p/token"}));
        assert_eq!(
            d,
            Some(Discovery {
                jwks_uri: "https://p/keys".into(),
                authorization_endpoint: None,
                token_endpoint: Some("https://p/token".into()),
            })
        );
    }
}
