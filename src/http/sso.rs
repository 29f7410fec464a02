//! Single sign-on for the management UI: the OAuth 2.0 authorization-code
//! flow with PKCE (RFC 7636) against the `[oauth]` identity provider, on
//! LavinMQ's paths.
//!
//! 1. The login page asks `GET /oauth/enabled` whether to offer it.
//! 2. `GET /oauth/authorize` draws a state and a PKCE verifier, keeps both
//!    in the short-lived HttpOnly cookie `oauth_state`, and answers the
//!    provider's sign-in URL (`{"authorize_url": ...}`) for the page to open.
//! 3. The provider sends the browser back to `GET /oauth/callback?code&state`.
//!    The state must be the cookie's; the code and the verifier are
//!    exchanged at the provider's token endpoint for an access token, which
//!    must log in as a management user. The token goes in the HttpOnly
//!    cookie `oauth_token` (the API accepts it, see [`super::auth`]), the
//!    user's name in the UI's cookie `m` as `|oauth:<base64 "name:">`, and
//!    the browser to the UI.
//! 4. `GET /oauth/logout` expires both cookies.
//!
//! The session cookies are `SameSite=Lax`: the callback arrives as a
//! navigation from the provider's site, where `Strict` cookies are not sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use serde_json::{Value, json};
use sha2::Digest;
use subtle::ConstantTimeEq;

use super::HttpState;
use super::auth::{cookie, is_management_user};
use crate::auth::oauth::Verifier;
use crate::config::{OAuthConfig, SignOnUrl};

/// Cookie holding the access token of a signed-on UI session.
pub const TOKEN_COOKIE: &str = "oauth_token";

/// Cookie holding the state and PKCE verifier of a sign-on under way.
const STATE_COOKIE: &str = "oauth_state";

/// Marks the UI's cookie `m` as a signed-on session's (no password in it).
const SESSION_PREFIX: &str = "|oauth:";

/// How long a sign-on may take at the provider.
const STATE_TTL: Duration = Duration::from_secs(300);

/// Longest a signed-on session lasts, whatever the token's lifetime.
const MAX_SESSION: Duration = Duration::from_secs(8 * 3600);

/// How long the provider may take to exchange a code, and the largest answer.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
const EXCHANGE_LIMIT: usize = 1 << 20;

/// The routes of the sign-on flow.
pub fn routes(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/oauth/enabled", get(enabled))
        .route("/oauth/authorize", get(authorize))
        .route("/oauth/callback", get(callback))
        .route("/oauth/logout", get(logout))
        .with_state(state)
}

/// The sign-on settings in force: tokens accepted, and `[oauth]` complete
/// for the UI.
pub struct SignOn {
    verifier: Arc<Verifier>,
    url: SignOnUrl,
}

impl SignOn {
    /// The settings, when the UI offers single sign-on.
    pub fn of(s: &HttpState) -> Option<SignOn> {
        let verifier = s.broker.auth.verifier()?;
        let url = verifier.config().ui_sign_on().ok()??;
        Some(SignOn { verifier, url })
    }

    fn config(&self) -> &OAuthConfig {
        self.verifier.config()
    }

    fn client_id(&self) -> &str {
        self.config().client_id.as_deref().unwrap_or_default()
    }

    /// `/api/auth`'s answer, as RabbitMQ's management plugin gives it.
    pub fn api_auth(s: &HttpState) -> Value {
        match SignOn::of(s) {
            Some(so) => json!({
                "oauth_enabled": true,
                "oauth_client_id": so.client_id(),
                "oauth_provider_url": so.config().issuer,
                "oauth_scopes": so.config().mgmt_scopes,
            }),
            None => json!({"oauth_enabled": false}),
        }
    }

    /// A `Set-Cookie` value for `name`, scoped to the UI's path.
    fn cookie(&self, name: &str, value: &str, max_age: Duration, http_only: bool) -> String {
        set_cookie(&self.url.cookie_path, self.url.secure, name, value, max_age, http_only)
    }
}

/// A `Set-Cookie` value; a zero `max_age` expires the cookie.
fn set_cookie(path: &str, secure: bool, name: &str, value: &str, max_age: Duration, http_only: bool) -> String {
    let mut c = format!(
        "{name}={value}; Path={path}; Max-Age={}; SameSite=Lax",
        max_age.as_secs()
    );
    if http_only {
        c.push_str("; HttpOnly");
    }
    if secure {
        c.push_str("; Secure");
    }
    c
}

/// `GET /oauth/enabled`: whether the login page offers single sign-on.
async fn enabled(State(s): State<Arc<HttpState>>) -> Response {
    no_store(axum::Json(json!({"enabled": SignOn::of(&s).is_some()})).into_response())
}

/// `GET /oauth/authorize`: starts a sign-on.
async fn authorize(State(s): State<Arc<HttpState>>) -> Response {
    let Some(so) = SignOn::of(&s) else {
        return json_error(StatusCode::SERVICE_UNAVAILABLE, "OAuth not configured");
    };
    let endpoint = match so.verifier.discovery().await {
        Ok(d) => d.authorization_endpoint.clone(),
        Err(e) => {
            tracing::warn!("single sign-on: {e}");
            return json_error(StatusCode::BAD_GATEWAY, "The identity provider cannot be reached");
        }
    };
    let Some(endpoint) = endpoint else {
        return json_error(
            StatusCode::BAD_GATEWAY,
            "The identity provider has no authorization endpoint",
        );
    };
    let state = random_token();
    let verifier = random_token();
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(&verifier));
    let config = so.config();
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("client_id", so.client_id())
        .append_pair("redirect_uri", &so.url.redirect_uri)
        .append_pair("response_type", "code")
        .append_pair("scope", &config.mgmt_scopes)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .append_pair("state", &state);
    // Some providers (Auth0) issue JWT access tokens only for an audience.
    if let Some(audience) = &config.audience {
        query.append_pair("audience", audience);
    }
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let url = format!("{endpoint}{sep}{}", query.finish());
    let mut resp = axum::Json(json!({ "authorize_url": url })).into_response();
    add_cookie(
        resp.headers_mut(),
        so.cookie(STATE_COOKIE, &format!("{state}:{verifier}"), STATE_TTL, true),
    );
    no_store(resp)
}

/// `GET /oauth/callback`: the provider's answer; on success the session
/// cookies are set and the browser goes to the UI, else to the login page
/// with the reason.
async fn callback(
    State(s): State<Arc<HttpState>>,
    Query(params): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(so) = SignOn::of(&s) else {
        return to_login("OAuth not configured");
    };
    match sign_on(&s, &so, &params, &headers).await {
        Ok((name, token, max_age)) => {
            tracing::info!(user = %name, "signed on to the management UI");
            let session = form_urlencoded::byte_serialize(
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{name}:"))
                    .as_bytes(),
            )
            .collect::<String>();
            let mut resp = redirect("..");
            let h = resp.headers_mut();
            add_cookie(h, so.cookie(TOKEN_COOKIE, &token, max_age, true));
            add_cookie(h, so.cookie("m", &format!("{SESSION_PREFIX}{session}"), max_age, false));
            add_cookie(h, so.cookie(STATE_COOKIE, "", Duration::ZERO, true));
            resp
        }
        Err(reason) => {
            tracing::warn!("single sign-on failed: {reason}");
            let mut resp = to_login(&reason);
            add_cookie(resp.headers_mut(), so.cookie(STATE_COOKIE, "", Duration::ZERO, true));
            resp
        }
    }
}

/// Checks the provider's answer against the sign-on's cookie, exchanges the
/// code and logs the token in: the user's name, the token and how long the
/// session lasts; else the reason for the user.
async fn sign_on(
    s: &HttpState,
    so: &SignOn,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(String, String, Duration), String> {
    if let Some(error) = params.get("error") {
        return Err(params.get("error_description").unwrap_or(error).clone());
    }
    let pending = cookie(headers, STATE_COOKIE).ok_or("Missing OAuth state")?;
    let (expected, verifier) = pending.split_once(':').ok_or("Invalid OAuth state")?;
    let state = params.get("state").ok_or("State mismatch")?;
    if !bool::from(expected.as_bytes().ct_eq(state.as_bytes())) {
        return Err("State mismatch".into());
    }
    let code = params.get("code").ok_or("Missing authorization code")?;
    let discovery = so
        .verifier
        .discovery()
        .await
        .map_err(|e| format!("The identity provider cannot be reached: {e}"))?;
    let endpoint = discovery
        .token_endpoint
        .as_deref()
        .ok_or("The identity provider has no token endpoint")?;
    let fields = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", so.url.redirect_uri.as_str()),
        ("client_id", so.client_id()),
        ("code_verifier", verifier),
    ];
    let answer = crate::client::http::post_form_json(endpoint, &fields, EXCHANGE_TIMEOUT, EXCHANGE_LIMIT)
        .await
        .map_err(|e| format!("Token exchange failed: {e}"))?;
    let token = answer
        .get("access_token")
        .and_then(Value::as_str)
        .ok_or("Token exchange failed: no access_token")?;
    let user = s
        .broker
        .auth
        .login(&s.broker.users, "", token)
        .await
        .map_err(|e| format!("Token validation failed: {e}"))?;
    if !is_management_user(&user) {
        return Err(format!("User '{}' has no management access", user.name()));
    }
    let lifetime = user
        .expires_at()
        .and_then(|at| at.duration_since(SystemTime::now()).ok())
        .unwrap_or(MAX_SESSION);
    Ok((user.name().to_owned(), token.to_owned(), lifetime.min(MAX_SESSION)))
}

/// `GET /oauth/logout`: expires the session cookies, then the login page.
async fn logout(State(s): State<Arc<HttpState>>) -> Response {
    let (path, secure) = SignOn::of(&s).map_or(("/".to_owned(), false), |so| (so.url.cookie_path, so.url.secure));
    let mut resp = redirect("../login");
    for (name, http_only) in [(TOKEN_COOKIE, true), ("m", false)] {
        add_cookie(
            resp.headers_mut(),
            set_cookie(&path, secure, name, "", Duration::ZERO, http_only),
        );
    }
    resp
}

/// 32 random bytes, base64url: a state or a PKCE verifier (43 characters,
/// within RFC 7636's 43 to 128).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn add_cookie(headers: &mut HeaderMap, value: String) {
    if let Ok(v) = HeaderValue::from_str(&value) {
        headers.append(header::SET_COOKIE, v);
    }
}

/// A 302 to `location` (relative, so that a proxy's path prefix is kept).
fn redirect(location: &str) -> Response {
    let mut resp = StatusCode::FOUND.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    no_store(resp)
}

/// Back to the login page, which shows `reason`.
fn to_login(reason: &str) -> Response {
    let reason: String = form_urlencoded::byte_serialize(reason.as_bytes()).collect();
    redirect(&format!("../login?error={reason}"))
}

fn json_error(status: StatusCode, reason: &str) -> Response {
    no_store((status, axum::Json(json!({"error": "oauth", "reason": reason}))).into_response())
}

fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_verifiers_have_the_length_rfc_7636_asks() {
        let v = random_token();
        assert_eq!(v.len(), 43);
        assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_ne!(v, random_token());
    }

    #[test]
    fn cookies_are_scoped_and_flagged() {
        let c = set_cookie("/mq", true, "oauth_token", "t", Duration::from_secs(60), true);
        assert_eq!(c, "oauth_token=t; Path=/mq; Max-Age=60; SameSite=Lax; HttpOnly; Secure");
        let gone = set_cookie("/", false, "m", "", Duration::ZERO, false);
        assert_eq!(gone, "m=; Path=/; Max-Age=0; SameSite=Lax");
    }
}
