//! Logins with OAuth 2 access tokens: a small OpenID provider runs in the
//! test (discovery and a JWK set over HTTP, keys it can rotate), tokens are
//! signed here, and real clients log in with them over AMQP (lapin), MQTT
//! (rumqttc) and the HTTP API (reqwest), getting exactly what their scopes
//! grant. Bad tokens are refused with their reason; `update-secret` extends a
//! connection and an expired token closes one. The provider also signs
//! users on through its authorization and token endpoints, for the
//! management UI's single sign-on (`permissions/sso.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Form, Query, State};
use axum::routing::{get, post};
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::{FieldTable, LongString, ShortString};
use lavinmq::auth::oauth::{TokenError, Verifier};
use lavinmq::config::{Config, OAuthConfig};
use parking_lot::Mutex;
use rumqttc::{ConnectReturnCode, QoS};
use serde_json::{Value, json};

use crate::common::api::Api;
use crate::common::*;

/// The broker's name at the provider: scopes carry it as their prefix and
/// tokens as their audience.
pub const RSID: &str = "lavinmq";

/// A signing key of the provider: the private half for signing tokens here,
/// the public half as the JWK it publishes.
#[derive(Clone)]
pub struct Key {
    kid: String,
    alg: Algorithm,
    private: Vec<u8>,
    jwk: Value,
}

impl Key {
    /// One of the committed RSA keys (`rsa1`, `rsa2`).
    pub fn rsa(name: &str, kid: &str) -> Key {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/amqp/permissions/oauth_keys");
        let private = std::fs::read(format!("{dir}/{name}.der")).expect("key fixture");
        let public: Value =
            serde_json::from_slice(&std::fs::read(format!("{dir}/rsa_public.json")).expect("public keys"))
                .expect("public keys JSON");
        let jwk = json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
                         "n": public[name]["n"], "e": public[name]["e"]});
        Key {
            kid: kid.into(),
            alg: Algorithm::RS256,
            private,
            jwk,
        }
    }

    /// A fresh P-256 key.
    fn ec(kid: &str) -> Key {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("EC key");
        let raw = pair.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwk = json!({"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
                         "x": b64(&raw[1..33]), "y": b64(&raw[33..65])});
        Key {
            kid: kid.into(),
            alg: Algorithm::ES256,
            private: pair.serialize_der(),
            jwk,
        }
    }

    /// Signs `claims` with this key.
    pub fn sign(&self, claims: &Value) -> String {
        let key = match self.alg {
            Algorithm::ES256 => EncodingKey::from_ec_der(&self.private),
            _ => EncodingKey::from_rsa_der(&self.private),
        };
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &key).expect("token signed")
    }
}

/// What the provider publishes, and how often its keys were fetched.
#[derive(Default)]
struct Published {
    keys: Mutex<Vec<Value>>,
    fetches: AtomicUsize,
    /// Answer 503 for the keys, as a provider that is down.
    down: AtomicBool,
    issuer: Mutex<String>,
    /// The access token the next sign-in gets.
    grant: Mutex<Option<String>>,
    /// Sign-ins under way, by code: the PKCE challenge, client id and
    /// redirect URI they were started with.
    codes: Mutex<HashMap<String, (String, String, String)>>,
}

/// An OpenID provider serving discovery and its keys on an ephemeral port,
/// and signing users on (authorization code with PKCE).
pub struct Provider {
    pub issuer: String,
    published: Arc<Published>,
}

impl Provider {
    pub async fn start(keys: &[&Key]) -> Provider {
        let published = Arc::new(Published::default());
        let app = axum::Router::new()
            .route(
                "/.well-known/openid-configuration",
                get(|State(p): State<Arc<Published>>| async move {
                    let issuer = p.issuer.lock().clone();
                    Json(json!({"issuer": issuer, "jwks_uri": format!("{issuer}/keys"),
                                "authorization_endpoint": format!("{issuer}/authorize"),
                                "token_endpoint": format!("{issuer}/token")}))
                }),
            )
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route(
                "/keys",
                get(|State(p): State<Arc<Published>>| async move {
                    p.fetches.fetch_add(1, Ordering::SeqCst);
                    if p.down.load(Ordering::SeqCst) {
                        return Err(axum::http::StatusCode::SERVICE_UNAVAILABLE);
                    }
                    Ok(Json(json!({"keys": *p.keys.lock()})))
                }),
            )
            .with_state(published.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        *published.issuer.lock() = issuer.clone();
        let provider = Provider { issuer, published };
        provider.publish(keys);
        provider
    }

    /// Replaces the published keys (a rotation).
    fn publish(&self, keys: &[&Key]) {
        *self.published.keys.lock() = keys.iter().map(|k| k.jwk.clone()).collect();
    }

    /// The access token the next sign-in at the provider gets.
    pub fn grant(&self, token: String) {
        *self.published.grant.lock() = Some(token);
    }

    fn set_down(&self, down: bool) {
        self.published.down.store(down, Ordering::SeqCst);
    }

    fn fetches(&self) -> usize {
        self.published.fetches.load(Ordering::SeqCst)
    }

    /// The `[oauth]` settings for this provider.
    pub fn config(&self) -> OAuthConfig {
        OAuthConfig {
            issuer: Some(self.issuer.clone()),
            resource_server_id: Some(RSID.into()),
            ..OAuthConfig::default()
        }
    }

    /// Claims of a valid token for `sub` with `scope`, expiring in `ttl`.
    pub fn claims(&self, sub: &str, scope: &str, ttl: Duration) -> Value {
        json!({"iss": self.issuer, "aud": RSID, "sub": sub, "scope": scope,
               "iat": now(), "exp": now() + ttl.as_secs()})
    }
}

/// The provider's sign-in page, which signs the user in at once: back to
/// the client's redirect URI with a code for the PKCE challenge.
async fn authorize(
    State(p): State<Arc<Published>>,
    Query(q): Query<HashMap<String, String>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let param = |k: &str| q.get(k).cloned().unwrap_or_default();
    if param("response_type") != "code" || param("code_challenge_method") != "S256" {
        return (axum::http::StatusCode::BAD_REQUEST, "code flow with S256 only").into_response();
    }
    let code = format!("code-{}", p.codes.lock().len() + 1);
    let redirect = param("redirect_uri");
    p.codes.lock().insert(
        code.clone(),
        (param("code_challenge"), param("client_id"), redirect.clone()),
    );
    let state: String = form_urlencoded::byte_serialize(param("state").as_bytes()).collect();
    let location = format!("{redirect}?code={code}&state={state}");
    (
        axum::http::StatusCode::FOUND,
        [(axum::http::header::LOCATION, location)],
    )
        .into_response()
}

/// The provider's token endpoint: a code once, for the verifier of its
/// challenge, the client and the redirect URI it was issued to.
async fn token(
    State(p): State<Arc<Published>>,
    Form(f): Form<HashMap<String, String>>,
) -> Result<Json<Value>, (axum::http::StatusCode, Json<Value>)> {
    use sha2::Digest;
    let refuse = |e: &str| (axum::http::StatusCode::BAD_REQUEST, Json(json!({"error": e})));
    let field = |k: &str| f.get(k).cloned().unwrap_or_default();
    if field("grant_type") != "authorization_code" {
        return Err(refuse("unsupported_grant_type"));
    }
    let (challenge, client, redirect) = p
        .codes
        .lock()
        .remove(&field("code"))
        .ok_or_else(|| refuse("invalid_grant"))?;
    let computed =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(field("code_verifier")));
    if computed != challenge || client != field("client_id") || redirect != field("redirect_uri") {
        return Err(refuse("invalid_grant"));
    }
    let token = p.grant.lock().clone().ok_or_else(|| refuse("access_denied"))?;
    // As Entra ID does: expires_in as a string.
    Ok(Json(
        json!({"access_token": token, "token_type": "Bearer", "expires_in": "3600"}),
    ))
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()
}

pub const HOUR: Duration = Duration::from_secs(3600);

/// A broker that accepts local users and tokens from `provider`.
async fn broker(provider: &Provider) -> TestBroker {
    let oauth = provider.config();
    start_with(move |c: &mut Config| {
        c.main.auth_backends = vec!["local".into(), "oauth".into()];
        c.oauth = oauth;
    })
    .await
}

/// `scope` with each word given the resource server prefix.
pub fn scopes(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("{RSID}.{w}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn an_amqp_token_grants_exactly_its_scopes() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let b = broker(&provider).await;
    let scope = scopes(&[
        "configure:%2F/tok-*",
        "write:%2F/amq.default",
        "read:%2F/tok-*",
        "read:other/*",
    ]);
    let token = key.sign(&provider.claims("svc-1", &scope, HOUR));
    // The user name the client gives is not used: the token names the user.
    let conn = b.connect_url(&b.url_for("anyone", &token, "%2f")).await;
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare("tok-q".into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("declare within the configure scope");
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", "tok-q", b"by token").await;
    let got = ch
        .basic_get("tok-q".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get within the read scope")
        .expect("a message");
    assert_eq!(got.delivery.data, b"by token");
    let listed = Api::new(&b).get_ok("/api/connections").await;
    assert_eq!(listed[0]["user"], "svc-1");
    // Outside its scopes: another queue name cannot be declared.
    let ch2 = conn.create_channel().await.expect("channel");
    assert_code(
        ch2.queue_declare("other-q".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await,
        403,
    );
    // No permission at all in vhost `v2`; the wildcard-free `other` vhost
    // scope does not reach it.
    Api::new(&b).put("/api/vhosts/v2", json!({})).await;
    assert!(try_connect(&b.url_for("anyone", &token, "v2")).await.is_err());
    // A local user still logs in with its password.
    b.connect().await;
    b.stop().await;
}

#[tokio::test]
async fn es256_tokens_and_wildcard_vhosts_work_over_mqtt_and_http() {
    let key = Key::ec("ec1");
    let provider = Provider::start(&[&key]).await;
    let b = broker(&provider).await;
    let all = scopes(&["configure:*/*", "write:*/*", "read:*/*"]);
    let token = key.sign(&provider.claims("device-7", &all, HOUR));

    let mut o = mqtt::options(&b, "dev-7");
    o.set_credentials("ignored", token.clone());
    let mut c = mqtt::connect(o).await;
    c.subscribe_ok("t/1", QoS::AtLeastOnce).await;
    c.publish("t/1", QoS::AtLeastOnce, false, b"hi").await;
    assert_eq!(&c.next_publish().await.payload[..], b"hi");
    let listed = Api::new(&b).get_ok("/api/connections").await;
    assert!(listed.as_array().expect("list").iter().any(|c| c["user"] == "device-7"));
    c.disconnect().await;
    // A token without permissions in the vhost: not authorized.
    let none = key.sign(&provider.claims("device-8", &scopes(&["read:other/*"]), HOUR));
    let mut o = mqtt::options(&b, "dev-8");
    o.set_credentials("ignored", none);
    assert_eq!(mqtt::refusal(o).await, ConnectReturnCode::NotAuthorized);
    // The connection ends when its token expires.
    let brief = key.sign(&provider.claims("device-9", &all, Duration::from_secs(2)));
    let mut o = mqtt::options(&b, "dev-9");
    o.set_credentials("ignored", brief);
    let mut c = mqtt::connect(o).await;
    c.wait_closed().await;

    // HTTP: a bearer token, or the token as the basic-auth password.
    let http = reqwest::Client::new();
    let base = format!("http://{}", b.server().http_addr());
    let manager = key.sign(&provider.claims(
        "ops",
        &scopes(&["tag:management", "read:%2F/*", "configure:%2F/*", "write:%2F/*"]),
        HOUR,
    ));
    let me: Value = http
        .get(format!("{base}/api/whoami"))
        .bearer_auth(&manager)
        .send()
        .await
        .expect("whoami")
        .json()
        .await
        .expect("JSON");
    assert_eq!(me["name"], "ops");
    assert_eq!(me["tags"], json!(["management"]));
    let basic = http
        .get(format!("{base}/api/queues/%2F"))
        .basic_auth("whoever", Some(&manager))
        .send()
        .await
        .expect("queues");
    assert_eq!(basic.status(), 200);
    // Management, not administrator: the user list is out of reach.
    let users = http
        .get(format!("{base}/api/users"))
        .bearer_auth(&manager)
        .send()
        .await
        .expect("users");
    assert_eq!(users.status(), 403);
    // A token without a management tag may not use the API at all.
    let untagged = http
        .get(format!("{base}/api/whoami"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("whoami");
    assert_eq!(untagged.status(), 401);
    let bad = http
        .get(format!("{base}/api/whoami"))
        .bearer_auth("eyJ.bad.token")
        .send()
        .await
        .expect("whoami");
    assert_eq!(bad.status(), 401);
    b.stop().await;
}

/// Tells whether a token was refused for the expected reason.
type ReasonCheck = fn(&TokenError) -> bool;

/// Every kind of bad token is refused, each for its own reason, and over
/// AMQP the login fails.
#[tokio::test]
async fn bad_tokens_are_refused_with_their_reason() {
    let key = Key::rsa("rsa1", "k1");
    let unpublished = Key::rsa("rsa2", "k2");
    let provider = Provider::start(&[&key]).await;
    let verifier = Verifier::new(&provider.config()).expect("issuer set");
    let scope = scopes(&["read:*/*"]);
    let good = provider.claims("svc", &scope, HOUR);
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    assert_eq!(verifier.verify(&key.sign(&good)).await.expect("valid").name, "svc");
    let cases: Vec<(&str, String, ReasonCheck)> = vec![
        ("expired", key.sign(&with("exp", json!(now() - 5))), |e| {
            *e == TokenError::Expired
        }),
        ("not yet valid", key.sign(&with("nbf", json!(now() + 600))), |e| {
            *e == TokenError::NotYetValid
        }),
        (
            "no exp",
            key.sign(&json!({"iss": provider.issuer, "aud": RSID, "sub": "svc"})),
            |e| *e == TokenError::NoExpiry,
        ),
        (
            "wrong issuer",
            key.sign(&with("iss", json!("https://elsewhere.example"))),
            |e| matches!(e, TokenError::Issuer(_)),
        ),
        ("wrong audience", key.sign(&with("aud", json!(["other-api"]))), |e| {
            matches!(e, TokenError::Audience(_))
        }),
        ("unknown kid", unpublished.sign(&good), |e| {
            matches!(e, TokenError::UnknownKey(_))
        }),
        ("alg none", unsigned(&good), |e| matches!(e, TokenError::Algorithm(_))),
        ("HMAC", hmac(&good), |e| matches!(e, TokenError::Algorithm(_))),
        ("tampered", tampered(&key.sign(&good)), |e| *e == TokenError::Signature),
        ("no user", key.sign(&with("sub", Value::Null)), |e| {
            matches!(e, TokenError::NoUsername(_))
        }),
    ];
    let b = broker(&provider).await;
    for (what, token, expected) in cases {
        let err = verifier.verify(&token).await.expect_err(what);
        assert!(expected(&err), "{what}: refused for the wrong reason: {err}");
        assert!(
            try_connect(&b.url_for("svc", &token, "%2f")).await.is_err(),
            "{what}: AMQP login accepted"
        );
    }
    b.stop().await;
}

/// A token with `alg: none` and no signature.
fn unsigned(claims: &Value) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.", b64(&json!({"alg": "none", "typ": "JWT"})), b64(claims))
}

/// A token signed with HS256, as an attacker would with a public key as
/// the secret.
fn hmac(claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(b"public")).expect("signed")
}

/// `token` with its payload changed after signing (a wider scope).
fn tampered(token: &str) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut claims: Value = serde_json::from_slice(&engine.decode(&parts[1]).expect("payload")).expect("JSON");
    claims["scope"] = json!(format!("{RSID}.tag:administrator"));
    parts[1] = engine.encode(claims.to_string());
    parts.join(".")
}

#[tokio::test]
async fn a_rotated_key_is_fetched_and_keys_are_cached() {
    let old = Key::rsa("rsa1", "k1");
    let new = Key::rsa("rsa2", "k2");
    let provider = Provider::start(&[&old]).await;
    let b = broker(&provider).await;
    let scope = scopes(&["read:%2F/*"]);
    for _ in 0..3 {
        b.connect_url(&b.url_for("x", &old.sign(&provider.claims("a", &scope, HOUR)), "%2f"))
            .await;
    }
    assert_eq!(provider.fetches(), 1, "keys are cached between logins");
    provider.publish(&[&new]);
    // A key id not in the cache makes the broker fetch the keys again (at
    // most once a second).
    let token = new.sign(&provider.claims("b", &scope, HOUR));
    eventually("the rotated key to be accepted", || {
        let url = b.url_for("x", &token, "%2f");
        async move { try_connect(&url).await.is_ok() }
    })
    .await;
    assert!(provider.fetches() >= 2);
    b.stop().await;
}

/// Keys already fetched keep verifying while the provider is down; without
/// any, tokens are refused because the keys cannot be had.
#[tokio::test]
async fn cached_keys_outlive_an_unreachable_provider() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let config = OAuthConfig {
        jwks_cache_ttl: Duration::ZERO,
        ..provider.config()
    };
    let verifier = Verifier::new(&config).expect("issuer set");
    let token = key.sign(&provider.claims("svc", &scopes(&["read:*/*"]), HOUR));
    verifier.verify(&token).await.expect("valid");
    provider.set_down(true);
    // Past the pause between fetches, so the expired cache is fetched again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    verifier.verify(&token).await.expect("the cached key still verifies");
    assert_eq!(provider.fetches(), 2, "the keys were asked for again");

    let down = Provider::start(&[&key]).await;
    down.set_down(true);
    let verifier = Verifier::new(&down.config()).expect("issuer set");
    let token = key.sign(&down.claims("svc", &scopes(&["read:*/*"]), HOUR));
    let err = verifier.verify(&token).await.expect_err("no keys");
    assert!(matches!(err, TokenError::Provider(_)), "{err}");
    // Logins right after a failed fetch do not each ask again.
    let _ = verifier.verify(&token).await;
    assert_eq!(down.fetches(), 1);
}

#[tokio::test]
async fn update_secret_extends_a_connection_and_an_expired_token_closes_it() {
    let key = Key::rsa("rsa1", "k1");
    let provider = Provider::start(&[&key]).await;
    let b = broker(&provider).await;
    let scope = scopes(&["configure:%2F/*", "write:%2F/*", "read:%2F/*"]);
    let short = Duration::from_secs(2);

    // Refreshed before it expires: the connection outlives the first token.
    let kept = b
        .connect_url(&b.url_for("x", &key.sign(&provider.claims("svc", &scope, short)), "%2f"))
        .await;
    let fresh = key.sign(&provider.claims("svc", &scope, HOUR));
    kept.update_secret(LongString::from(fresh), ShortString::from("refresh"))
        .await
        .expect("update-secret-ok");
    // Not refreshed: closed with 320 when the token expires.
    let lapsing = b
        .connect_url(&b.url_for("x", &key.sign(&provider.claims("svc", &scope, short)), "%2f"))
        .await;
    let mut lapsing_events = events(&lapsing);
    let text = expect_error(&mut lapsing_events, 320).await;
    assert!(text.contains("token expired"), "{text}");
    let ch = kept.create_channel().await.expect("the refreshed connection is open");
    declare_queue(&ch, "still-here").await;

    // A token for another user, or a broken one, is refused and closes the
    // connection (530).
    let other = key.sign(&provider.claims("intruder", &scope, HOUR));
    let mut events = events(&kept);
    let _ = kept
        .update_secret(LongString::from(other), ShortString::from("swap"))
        .await;
    let text = expect_error(&mut events, 530).await;
    assert!(text.contains("intruder"), "{text}");

    // Narrower scopes apply to the open connection.
    let c = b
        .connect_url(&b.url_for("x", &key.sign(&provider.claims("svc", &scope, HOUR)), "%2f"))
        .await;
    let ch = c.create_channel().await.expect("channel");
    declare_queue(&ch, "wide-1").await;
    let narrow = key.sign(&provider.claims("svc", &scopes(&["configure:%2F/only-*"]), HOUR));
    c.update_secret(LongString::from(narrow), ShortString::from("narrow"))
        .await
        .expect("update-secret-ok");
    assert_code(
        ch.queue_declare("wide-2".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await,
        403,
    );
    b.stop().await;
}

#[tokio::test]
async fn update_secret_checks_a_local_users_password_again() {
    let b = start().await;
    let conn = b.connect().await;
    conn.update_secret(LongString::from("guest"), ShortString::from("same"))
        .await
        .expect("the right password is accepted");
    let mut events = events(&conn);
    let _ = conn
        .update_secret(LongString::from("wrong"), ShortString::from("bad"))
        .await;
    let text = expect_error(&mut events, 530).await;
    assert!(text.contains("refused for user 'guest'"), "{text}");
    b.stop().await;
}
