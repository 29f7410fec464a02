//! The `[oauth]` settings: which identity provider issues the access tokens
//! clients may log in with, and how a token's claims become a user name,
//! tags and permissions. Named as in LavinMQ, meant as in RabbitMQ's OAuth 2
//! plugin.

use std::time::Duration;

/// `[oauth]` settings. OAuth logins are on when `auth_backends` lists
/// `oauth` and [`OAuthConfig::issuer`] is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// The token issuer's URL: tokens must carry it as `iss`, and its signing
    /// keys are found through `<issuer>/.well-known/openid-configuration`
    /// (`issuer`).
    pub issuer: Option<String>,
    /// The broker's name at the provider: scopes are read with the prefix
    /// `<resource_server_id>.` and roles from `resource_access.<id>.roles`;
    /// also the expected audience when [`OAuthConfig::audience`] is unset
    /// (`resource_server_id`).
    pub resource_server_id: Option<String>,
    /// Claims tried in order for the user name (`preferred_username_claims`).
    pub preferred_username_claims: Vec<String>,
    /// More claims that hold scopes, beside `scope` (`additional_scopes_keys`).
    pub additional_scopes_keys: Vec<String>,
    /// Prefix a scope must have to count; defaults to `<resource_server_id>.`
    /// (`scope_prefix`).
    pub scope_prefix: Option<String>,
    /// Whether a token's `aud` must hold the expected audience (`verify_aud`).
    pub verify_aud: bool,
    /// The expected audience (`audience`).
    pub audience: Option<String>,
    /// How long the provider's signing keys are used before they are fetched
    /// again (`jwks_cache_ttl`, seconds).
    pub jwks_cache_ttl: Duration,
    /// The management UI's client id at the provider (`client_id`).
    pub client_id: Option<String>,
    /// The management UI's public URL, for the single sign-on redirect
    /// (`mgmt_base_url`).
    pub mgmt_base_url: Option<String>,
    /// Scopes the management UI asks for at sign-on (`mgmt_scopes`).
    pub mgmt_scopes: String,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: None,
            resource_server_id: None,
            preferred_username_claims: vec!["sub".into(), "client_id".into()],
            additional_scopes_keys: Vec::new(),
            scope_prefix: None,
            verify_aud: true,
            audience: None,
            jwks_cache_ttl: Duration::from_secs(3600),
            client_id: None,
            mgmt_base_url: None,
            mgmt_scopes: "openid profile".into(),
        }
    }
}

/// A comma- or space-separated list, as LavinMQ reads list values.
pub(crate) fn list(value: &str) -> Vec<String> {
    value
        .split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Where the management UI's single sign-on sends the browser back to, and
/// how its cookies are scoped: derived from `mgmt_base_url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignOnUrl {
    /// The redirect URI registered at the provider:
    /// `<mgmt_base_url>/oauth/callback`.
    pub redirect_uri: String,
    /// The path the UI is served under (`/` unless behind a proxy's prefix),
    /// which the session cookies are scoped to.
    pub cookie_path: String,
    /// Whether the cookies are marked `Secure` (always, except for a UI
    /// served over plain HTTP on loopback).
    pub secure: bool,
}

impl OAuthConfig {
    /// The management UI's single sign-on, as LavinMQ enables it: `issuer`,
    /// `client_id` and `mgmt_base_url` set, the URL `https` (or `http` on a
    /// loopback host, for trying it out). `Ok(None)` when it is not asked
    /// for; an error saying why when it is asked for but cannot work.
    pub fn ui_sign_on(&self) -> Result<Option<SignOnUrl>, String> {
        let base = match (self.mgmt_base_url.as_deref(), self.client_id.as_deref()) {
            (None, None) => return Ok(None),
            (Some(b), Some(c)) if !b.is_empty() && !c.is_empty() => b,
            _ => return Err("single sign-on needs both [oauth] client_id and mgmt_base_url".into()),
        };
        if self.issuer.is_none() {
            return Err("single sign-on needs [oauth] issuer".into());
        }
        let uri: axum::http::Uri = base
            .parse()
            .map_err(|_| format!("mgmt_base_url {base:?} is not a URL"))?;
        let host = uri.host().unwrap_or_default().to_ascii_lowercase();
        let secure = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]" | "::1") => false,
            _ => return Err(format!("mgmt_base_url {base:?} must be https (http only on localhost)")),
        };
        let path = uri.path().trim_end_matches('/');
        Ok(Some(SignOnUrl {
            redirect_uri: format!("{}/oauth/callback", base.trim_end_matches('/')),
            cookie_path: if path.is_empty() { "/".into() } else { path.into() },
            secure,
        }))
    }
}
