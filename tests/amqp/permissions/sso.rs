//! The management UI's single sign-on, driven as a browser would over HTTP
//! (cookies carried by hand, redirects followed by hand): the broker starts
//! the authorization-code flow with PKCE, the test provider signs the user
//! in and issues a token for the code, the broker's callback sets the
//! session cookies, and the API accepts the session until logout. Each way
//! a sign-on can fail sends the browser back to the login page with its
//! reason. The same flow in a real browser is in the UI's end-to-end tests.

use std::collections::HashMap;

use lavinmq::config::Config;
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Response, StatusCode};
use serde_json::Value;

use super::oauth::{HOUR, Key, Provider, scopes};
use crate::common::*;

/// The UI's public URL as configured: the broker listens elsewhere (an
/// ephemeral port), so the test follows the callback to the real address.
const BASE_URL: &str = "http://localhost:15672";

/// A broker that offers single sign-on with `provider`.
async fn broker(provider: &Provider) -> TestBroker {
    let mut oauth = provider.config();
    oauth.client_id = Some("lavinmq-ui".into());
    oauth.mgmt_base_url = Some(BASE_URL.into());
    start_with(move |c: &mut Config| {
        c.main.auth_backends = vec!["local".into(), "oauth".into()];
        c.oauth = oauth;
    })
    .await
}

/// An HTTP client that leaves redirects to the test.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The `Set-Cookie` headers of `resp`, by cookie name.
fn set_cookies(resp: &Response) -> HashMap<String, String> {
    resp.headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split_once('=').map(|(k, rest)| (k.to_owned(), rest.to_owned())))
        .collect()
}

/// The value part of a `Set-Cookie` (before its attributes).
fn value(set_cookie: &str) -> &str {
    set_cookie.split(';').next().unwrap_or_default()
}

/// GETs `url` and its JSON answer.
async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let resp = http.get(url).send().await.expect("GET");
    resp.json().await.expect("JSON")
}

/// GETs `url` with the `Cookie` header `cookies`.
async fn get_with_cookie(http: &reqwest::Client, url: &str, cookies: &str) -> Response {
    http.get(url).header(COOKIE, cookies).send().await.expect("GET")
}

fn location(resp: &Response) -> String {
    resp.headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .expect("a Location")
        .to_owned()
}

/// A sign-on as far as the provider's redirect back: the state cookie the
/// broker set (as a `Cookie` header) and the callback URL (at the broker's
/// real address).
async fn start_sign_on(http: &reqwest::Client, base: &str, provider: &Provider) -> (String, String) {
    let resp = http
        .get(format!("{base}/oauth/authorize"))
        .send()
        .await
        .expect("authorize");
    assert_eq!(resp.status(), StatusCode::OK);
    let cookies = set_cookies(&resp);
    let state_cookie = cookies.get("oauth_state").expect("the state cookie").clone();
    assert!(state_cookie.contains("HttpOnly"), "{state_cookie}");
    assert!(
        !state_cookie.contains("Secure"),
        "plain http on localhost: {state_cookie}"
    );
    let url = resp.json::<Value>().await.expect("JSON")["authorize_url"]
        .as_str()
        .expect("authorize_url")
        .to_owned();
    let parsed = reqwest::Url::parse(&url).expect("URL");
    assert!(url.starts_with(&format!("{}/authorize?", provider.issuer)), "{url}");
    let q: HashMap<_, _> = parsed.query_pairs().into_owned().collect();
    assert_eq!(q["client_id"], "lavinmq-ui");
    assert_eq!(q["redirect_uri"], format!("{BASE_URL}/oauth/callback"));
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert_eq!(q["scope"], "openid profile");
    // The provider signs the user in and sends the browser back.
    let at_provider = http.get(&url).send().await.expect("provider");
    assert_eq!(at_provider.status(), StatusCode::FOUND);
    let back = location(&at_provider);
    assert!(back.starts_with(&format!("{BASE_URL}/oauth/callback?")), "{back}");
    (
        format!("oauth_state={}", value(&state_cookie)),
        back.replace(BASE_URL, base),
    )
}

#[tokio::test]
async fn the_ui_signs_on_through_the_provider_and_logs_out() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let b = broker(&provider).await;
    let base = format!("http://{}", b.server().http_addr());
    let http = client();

    let enabled: Value = get_json(&http, &format!("{base}/oauth/enabled")).await;
    assert_eq!(enabled["enabled"], true);
    let auth: Value = get_json(&http, &format!("{base}/api/auth")).await;
    assert_eq!(auth["oauth_enabled"], true);
    assert_eq!(auth["oauth_client_id"], "lavinmq-ui");
    assert_eq!(auth["oauth_provider_url"], provider.issuer.as_str());

    provider.grant(key.sign(&provider.claims(
        "sso-admin",
        &scopes(&["tag:administrator", "configure:*/*", "read:*/*", "write:*/*"]),
        HOUR,
    )));
    let (state_cookie, callback) = start_sign_on(&http, &base, &provider).await;
    let resp = get_with_cookie(&http, &callback, &state_cookie).await;
    assert_eq!(resp.status(), StatusCode::FOUND);
    assert_eq!(location(&resp), "..");
    let cookies = set_cookies(&resp);
    let token = cookies.get("oauth_token").expect("the token cookie");
    assert!(token.contains("HttpOnly") && token.contains("SameSite=Lax"), "{token}");
    let max_age: u64 = token
        .split("Max-Age=")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|n| n.parse().ok())
        .expect("Max-Age");
    assert!(
        max_age > 3000 && max_age <= 3600,
        "the session lasts as the token: {max_age}"
    );
    let session = cookies.get("m").expect("the UI's cookie");
    assert!(value(session).starts_with("|oauth:"), "{session}");
    assert!(!session.contains("HttpOnly"), "the UI reads the user's name from it");
    assert!(value(&cookies["oauth_state"]).is_empty(), "the state cookie is spent");
    let session_cookies = format!("oauth_token={}; m={}", value(token), value(session));

    // The API and the UI's pages take the session.
    let me = get_with_cookie(&http, &format!("{base}/api/whoami"), &session_cookies).await;
    assert_eq!(me.status(), StatusCode::OK);
    let me: Value = me.json().await.expect("JSON");
    assert_eq!(me["name"], "sso-admin");
    assert_eq!(me["tags"], serde_json::json!(["administrator"]));
    let page = get_with_cookie(&http, &format!("{base}/queues"), &session_cookies).await;
    assert_eq!(page.status(), StatusCode::OK);
    // Changes by cookie need the UI's marker header, which a cross-site form
    // cannot send.
    let change = |marked: bool| {
        let mut req = http
            .put(format!("{base}/api/vhosts/sso-made"))
            .header(COOKIE, &session_cookies)
            .header(CONTENT_TYPE, "application/json")
            .body("{}");
        if marked {
            req = req.header("X-Requested-With", "XMLHttpRequest");
        }
        req.send()
    };
    assert_eq!(change(false).await.expect("put").status(), StatusCode::FORBIDDEN);
    assert_eq!(change(true).await.expect("put").status(), StatusCode::CREATED);
    // The name cookie alone (no token) is no login.
    let name_only = get_with_cookie(&http, &format!("{base}/api/whoami"), &format!("m={}", value(session))).await;
    assert_eq!(name_only.status(), StatusCode::UNAUTHORIZED);

    let out = http.get(format!("{base}/oauth/logout")).send().await.expect("logout");
    assert_eq!(out.status(), StatusCode::FOUND);
    assert_eq!(location(&out), "../login");
    let expired = set_cookies(&out);
    for name in ["oauth_token", "m"] {
        let c = expired.get(name).expect("expired cookie");
        assert!(value(c).is_empty() && c.contains("Max-Age=0"), "{name}: {c}");
    }
    b.stop().await;
}

/// The login page's error for a failed callback.
fn login_error(resp: &Response) -> String {
    assert_eq!(resp.status(), StatusCode::FOUND);
    let to = location(resp);
    let error = to
        .strip_prefix("../login?error=")
        .unwrap_or_else(|| panic!("to the login page: {to}"));
    form_urlencoded::parse(format!("e={error}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn failed_sign_ons_return_to_the_login_page_with_the_reason() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let b = broker(&provider).await;
    let base = format!("http://{}", b.server().http_addr());
    let http = client();
    provider.grant(key.sign(&provider.claims("viewer", &scopes(&["read:*/*"]), HOUR)));

    // No state cookie: a callback the broker did not start.
    let (_, callback) = start_sign_on(&http, &base, &provider).await;
    let resp = http.get(&callback).send().await.expect("callback");
    assert_eq!(login_error(&resp), "Missing OAuth state");

    // Another sign-on's state.
    let (other_state, _) = start_sign_on(&http, &base, &provider).await;
    let (_, callback) = start_sign_on(&http, &base, &provider).await;
    let resp = get_with_cookie(&http, &callback, &other_state).await;
    assert_eq!(login_error(&resp), "State mismatch");

    // The right state with another verifier: the provider refuses the code.
    let (state_cookie, callback) = start_sign_on(&http, &base, &provider).await;
    let (state, _) = state_cookie.split_once(':').expect("state:verifier");
    let forged = format!("{state}:{}", "A".repeat(43));
    let resp = get_with_cookie(&http, &callback, &forged).await;
    assert!(
        login_error(&resp).starts_with("Token exchange failed"),
        "{:?}",
        location(&resp)
    );

    // A valid token without a management tag.
    let (state_cookie, callback) = start_sign_on(&http, &base, &provider).await;
    let resp = get_with_cookie(&http, &callback, &state_cookie).await;
    assert_eq!(login_error(&resp), "User 'viewer' has no management access");
    assert!(!set_cookies(&resp).contains_key("oauth_token"));

    // The provider's own refusal is passed on.
    let resp = http
        .get(format!(
            "{base}/oauth/callback?error=access_denied&error_description=The+user+cancelled"
        ))
        .header(COOKIE, &state_cookie)
        .send()
        .await
        .expect("callback");
    assert_eq!(login_error(&resp), "The user cancelled");

    // A forged token cookie is no session.
    let resp = get_with_cookie(
        &http,
        &format!("{base}/api/whoami"),
        "oauth_token=eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
    )
    .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    b.stop().await;
}

#[tokio::test]
async fn without_a_client_id_the_ui_offers_no_sign_on() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let oauth = provider.config();
    let b = start_with(move |c: &mut Config| {
        c.main.auth_backends = vec!["local".into(), "oauth".into()];
        c.oauth = oauth;
    })
    .await;
    let base = format!("http://{}", b.server().http_addr());
    let http = client();
    let enabled: Value = get_json(&http, &format!("{base}/oauth/enabled")).await;
    assert_eq!(enabled["enabled"], false);
    let auth: Value = get_json(&http, &format!("{base}/api/auth")).await;
    assert_eq!(auth, serde_json::json!({"oauth_enabled": false}));
    let resp = http
        .get(format!("{base}/oauth/authorize"))
        .send()
        .await
        .expect("authorize");
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    b.stop().await;
}
