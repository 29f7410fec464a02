//! Password hash formats (RabbitMQ's SHA-256, SHA-512 and MD5, and bcrypt),
//! the default user's loopback restriction on the management API, that no
//! password hash is shown to anyone but an administrator, and login
//! throttling across AMQP, MQTT and the API.

use crate::common::api::*;
use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::Digest;

/// base64(salt ‖ H(salt ‖ password)), the RabbitMQ format, computed here so the
/// broker is checked against an independent construction.
fn rabbit_hash<D: Digest>(salt: [u8; 4], password: &str) -> String {
    let mut raw = salt.to_vec();
    raw.extend_from_slice(&D::new().chain_update(salt).chain_update(password).finalize());
    B64.encode(raw)
}

/// A bcrypt hash of `password` with a fixed salt, in the given version.
fn bcrypt_hash(password: &str, version: bcrypt::Version) -> String {
    bcrypt::hash_with_salt(password, 4, [42; 16])
        .expect("bcrypt")
        .format_for_version(version)
}

/// True when `key` appears in any object nested anywhere in `v`.
fn has_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|x| has_key(x, key)),
        Value::Array(a) => a.iter().any(|x| has_key(x, key)),
        _ => false,
    }
}

/// Users of every format, as `(name, password, password_hash, hashing_algorithm,
/// algorithm the broker stores)`.
fn hashed_users() -> Vec<(&'static str, &'static str, String, Option<&'static str>, &'static str)> {
    vec![
        (
            "u-sha512",
            "pw512",
            rabbit_hash::<sha2::Sha512>([1, 2, 3, 4], "pw512"),
            Some("rabbit_password_hashing_sha512"),
            "rabbit_password_hashing_sha512",
        ),
        (
            "u-md5",
            "pw-md5",
            rabbit_hash::<md5::Md5>([5, 6, 7, 8], "pw-md5"),
            Some("rabbit_password_hashing_md5"),
            "rabbit_password_hashing_md5",
        ),
        (
            "u-sha256",
            "pw256",
            rabbit_hash::<sha2::Sha256>([9, 9, 9, 9], "pw256"),
            Some("rabbit_password_hashing_sha256"),
            "rabbit_password_hashing_sha256",
        ),
        (
            "u-bcrypt",
            "pw-bc",
            bcrypt_hash("pw-bc", bcrypt::Version::TwoB),
            Some("Bcrypt"),
            "lavinmq_bcrypt",
        ),
        (
            "u-bcrypt-2a",
            "pw-2a",
            bcrypt_hash("pw-2a", bcrypt::Version::TwoA),
            Some("lavinmq_bcrypt"),
            "lavinmq_bcrypt",
        ),
        // No algorithm given: told from the hash itself.
        (
            "u-bcrypt-2y",
            "pw-2y",
            bcrypt_hash("pw-2y", bcrypt::Version::TwoY),
            None,
            "lavinmq_bcrypt",
        ),
        (
            "u-md5-guessed",
            "pw-g",
            rabbit_hash::<md5::Md5>([3, 1, 4, 1], "pw-g"),
            None,
            "rabbit_password_hashing_md5",
        ),
    ]
}

/// Definitions holding [`hashed_users`], each a management user with full
/// permissions on `/`.
fn definitions_with_users() -> Value {
    let users: Vec<Value> = hashed_users()
        .into_iter()
        .map(|(name, _, hash, algo, _)| {
            let mut u = json!({"name": name, "password_hash": hash, "tags": ["management"]});
            if let Some(a) = algo {
                u["hashing_algorithm"] = json!(a);
            }
            u
        })
        .collect();
    let permissions: Vec<Value> = hashed_users()
        .into_iter()
        .map(|(name, ..)| json!({"user": name, "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}))
        .collect();
    json!({"users": users, "permissions": permissions})
}

async fn import(api: &Api, defs: &Value) -> (StatusCode, Value) {
    api.call(Method::POST, "/api/definitions", GUEST, Some(defs.clone()))
        .await
}

/// Every user logs in over AMQP and HTTP with its password, and not with a
/// wrong one.
async fn assert_users_log_in(b: &TestBroker, api: &Api) {
    for (name, pw, ..) in hashed_users() {
        let conn = try_connect(&b.url_for(name, pw, "%2f"))
            .await
            .unwrap_or_else(|e| panic!("{name} logs in over AMQP: {e}"));
        within("connection.close", conn.close(200, "bye".into()))
            .await
            .expect("close");
        assert!(
            try_connect(&b.url_for(name, "wrong", "%2f")).await.is_err(),
            "{name} with a wrong password over AMQP"
        );
        let (status, me) = api.call(Method::GET, "/api/whoami", Some((name, pw)), None).await;
        assert_eq!(status, StatusCode::OK, "{name} over HTTP: {me}");
        assert_eq!(me["name"], name);
        let (status, _) = api.call(Method::GET, "/api/whoami", Some((name, "wrong")), None).await;
        assert_eq!(
            status,
            StatusCode::UNAUTHORIZED,
            "{name} with a wrong password over HTTP"
        );
    }
}

#[tokio::test]
async fn imported_hashes_of_every_format_log_in() {
    let b = start().await;
    let api = Api::new(&b);
    let (status, body) = import(&api, &definitions_with_users()).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_users_log_in(&b, &api).await;
    // The hashes survive a restart (users.json keeps the algorithm).
    let mut b = b;
    b.restart().await;
    let api = Api::new(&b);
    assert_users_log_in(&b, &api).await;
}

#[tokio::test]
async fn definitions_export_keeps_the_algorithm() {
    let b = start().await;
    let api = Api::new(&b);
    let (status, body) = import(&api, &definitions_with_users()).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let export = api.get_ok("/api/definitions").await;
    let users = export["users"].as_array().expect("users");
    for (name, _, hash, _, stored) in hashed_users() {
        let u = users
            .iter()
            .find(|u| u["name"] == name)
            .unwrap_or_else(|| panic!("{name} exported"));
        assert_eq!(u["password_hash"], json!(hash), "{name}");
        assert_eq!(u["hashing_algorithm"], stored, "{name}");
        let shown = api.get_ok(&format!("/api/users/{name}")).await;
        assert_eq!(shown["hashing_algorithm"], stored, "{name}");
        assert_eq!(shown["password_hash"], json!(hash), "{name}");
    }
    // The export loads into a fresh broker, where the users log in as before.
    let b2 = start().await;
    let api2 = Api::new(&b2);
    let (status, body) = import(&api2, &export).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_users_log_in(&b2, &api2).await;
    let again = api2.get_ok("/api/definitions").await;
    for (name, ..) in hashed_users() {
        let find = |d: &Value| {
            d["users"]
                .as_array()
                .and_then(|a| a.iter().find(|u| u["name"] == name).cloned())
        };
        let (before, after) = (find(&export), find(&again));
        assert_eq!(
            before.as_ref().map(|u| &u["hashing_algorithm"]),
            after.as_ref().map(|u| &u["hashing_algorithm"])
        );
        assert_eq!(
            before.as_ref().map(|u| &u["password_hash"]),
            after.as_ref().map(|u| &u["password_hash"])
        );
    }
}

#[tokio::test]
async fn put_user_takes_a_hash_with_its_algorithm() {
    let b = start().await;
    let api = Api::new(&b);
    let hash = rabbit_hash::<sha2::Sha512>([4, 3, 2, 1], "via-put");
    let body = json!({"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha512",
                      "tags": "management"});
    assert_eq!(api.put("/api/users/put512", body).await, StatusCode::CREATED);
    let shown = api.get_ok("/api/users/put512").await;
    assert_eq!(shown["hashing_algorithm"], "rabbit_password_hashing_sha512");
    assert_eq!(
        api.call(Method::GET, "/api/whoami", Some(("put512", "via-put")), None)
            .await
            .0,
        StatusCode::OK
    );
    // A bcrypt hash labelled with LavinMQ's name, replacing the password.
    let bc = bcrypt_hash("second", bcrypt::Version::TwoB);
    let body = json!({"password_hash": bc, "hashing_algorithm": "lavinmq_bcrypt", "tags": "management"});
    assert_eq!(api.put("/api/users/put512", body).await, StatusCode::NO_CONTENT);
    assert_eq!(
        api.get_ok("/api/users/put512").await["hashing_algorithm"],
        "lavinmq_bcrypt"
    );
    let login = |pw: &'static str| {
        let api = &api;
        async move { api.call(Method::GET, "/api/whoami", Some(("put512", pw)), None).await.0 }
    };
    assert_eq!(login("second").await, StatusCode::OK);
    assert_eq!(login("via-put").await, StatusCode::UNAUTHORIZED);
    // A clear-text password is stored as SHA-256.
    let body = json!({"password": "plain", "tags": "management"});
    assert_eq!(api.put("/api/users/plainpw", body).await, StatusCode::CREATED);
    assert_eq!(
        api.get_ok("/api/users/plainpw").await["hashing_algorithm"],
        "rabbit_password_hashing_sha256"
    );
}

#[tokio::test]
async fn unknown_algorithms_and_malformed_hashes_are_refused() {
    let b = start().await;
    let api = Api::new(&b);
    let hash = rabbit_hash::<sha2::Sha256>([1, 1, 1, 1], "pw");
    for (what, body) in [
        (
            "unknown algorithm",
            json!({"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha1", "tags": ""}),
        ),
        (
            "unknown algorithm with a password",
            json!({"password": "pw", "hashing_algorithm": "rot13", "tags": ""}),
        ),
        (
            "not base64",
            json!({"password_hash": "%%%", "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""}),
        ),
        (
            "too short for sha512",
            json!({"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha512", "tags": ""}),
        ),
        (
            "not a bcrypt hash",
            json!({"password_hash": "$2b$04$short", "tags": ""}),
        ),
    ] {
        let (status, resp) = api.call(Method::PUT, "/api/users/bad", GUEST, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {resp}");
        assert!(resp["reason"].is_string(), "{what}: {resp}");
    }
    assert_eq!(api.get("/api/users/bad").await.0, StatusCode::NOT_FOUND);
    let defs = json!({"users": [{"name": "bad", "password_hash": hash,
                                 "hashing_algorithm": "scrypt", "tags": ""}]});
    let (status, resp) = import(&api, &defs).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
    assert!(resp["reason"].as_str().is_some_and(|r| r.contains("scrypt")), "{resp}");
    assert_eq!(api.get("/api/users/bad").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn password_hashes_are_shown_to_administrators_only() {
    let b = start().await;
    let api = Api::new(&b);
    for (name, tags) in [("mgmt", "management"), ("mon", "monitoring"), ("pol", "policymaker")] {
        let body = json!({"password": "pw", "tags": tags});
        assert_eq!(api.put(&format!("/api/users/{name}"), body).await, StatusCode::CREATED);
        let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
        assert_eq!(
            api.put(&format!("/api/permissions/%2F/{name}"), perms).await,
            StatusCode::CREATED
        );
    }
    let paths = [
        "/api/users",
        "/api/users/guest",
        "/api/users/mgmt",
        "/api/users/without-permissions",
        "/api/whoami",
        "/api/definitions",
        "/api/definitions/%2F",
        "/api/overview",
        "/api/permissions",
    ];
    for name in ["mgmt", "mon", "pol"] {
        for path in paths {
            let (status, body) = api.call(Method::GET, path, Some((name, "pw")), None).await;
            assert!(
                status == StatusCode::FORBIDDEN || (status.is_success() && !has_key(&body, "password_hash")),
                "{name} GET {path}: {status} {body}"
            );
        }
    }
    // An administrator sees the hashes, as in RabbitMQ.
    let users = api.get_ok("/api/users").await;
    let guest = users
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == "guest"))
        .expect("guest listed");
    assert!(guest["password_hash"].is_string(), "{guest}");
    assert_eq!(guest["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert!(has_key(&api.get_ok("/api/definitions").await["users"], "password_hash"));
}

/// An address of this machine other than loopback, found from the route to a
/// documentation address (no packet is sent); `None` when there is none.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.connect("203.0.113.1:9").ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[tokio::test]
async fn default_user_is_refused_over_http_from_other_than_loopback() {
    let Some(ip) = non_loopback_ip() else {
        eprintln!("skipped: this machine has no address other than loopback");
        return;
    };
    let b = start_with(|c| c.mgmt.bind = "0.0.0.0".into()).await;
    let port = b.server().http_addr().port();
    let mut remote = Api::new(&b);
    remote.base = format!("http://{ip}:{port}");
    let local = Api::new(&b);
    assert_eq!(
        local
            .put("/api/users/admin2", json!({"password": "pw", "tags": "administrator"}))
            .await,
        StatusCode::CREATED
    );
    let (status, body) = remote.get("/api/whoami").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("localhost")),
        "{body}"
    );
    // From loopback the default user is fine, and so is another user from afar.
    assert_eq!(local.get("/api/whoami").await.0, StatusCode::OK);
    let (status, body) = remote
        .call(Method::GET, "/api/whoami", Some(("admin2", "pw")), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A wrong password is still just a failed login.
    let (status, body) = remote
        .call(Method::GET, "/api/whoami", Some(("guest", "nope")), None)
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("Login failed"))
    );
}

#[tokio::test]
async fn default_user_from_afar_when_the_restriction_is_off() {
    let Some(ip) = non_loopback_ip() else {
        eprintln!("skipped: this machine has no address other than loopback");
        return;
    };
    let b = start_with(|c| {
        c.mgmt.bind = "0.0.0.0".into();
        c.main.default_user_only_loopback = false;
    })
    .await;
    let mut remote = Api::new(&b);
    remote.base = format!("http://{ip}:{}", b.server().http_addr().port());
    let (status, body) = remote.get("/api/whoami").await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// The value of the metric sample `name` in a Prometheus text document.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failed_logins_block_their_address_only() {
    let b = start_with(|c| {
        c.main.login_throttle_trusted_networks = String::new();
        c.main.login_throttle_max_failures = 4;
    })
    .await;
    // A client that knows its password, connected before the guessing starts.
    let (_good_conn, good) = b.channel().await;
    let bad_url = b.url_for("guest", "not-the-password", "%2f");
    for attempt in 1..=4 {
        let err = try_connect(&bad_url).await.err();
        assert!(err.is_some(), "wrong password accepted at attempt {attempt}");
    }
    // Blocked now: even the right password is refused, on every protocol.
    let Err(refused) = try_connect(&b.url()).await else {
        panic!("the right password was checked while the address is blocked");
    };
    assert_eq!(reply_code(&refused), Some(403), "{refused:?}");
    let mut mqtt = crate::common::mqtt_raw::MqttRaw::tcp(b.server().mqtt_addr()).await;
    mqtt.send(&crate::common::mqtt_raw::connect_packet("throttled", true, 0, None))
        .await;
    assert_eq!(mqtt.expect_connack().await.1, 5, "MQTT CONNACK: not authorized");
    let (status, body) = Api::new(&b).get("/api/overview").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("failed logins")),
        "{body}"
    );
    // The connection that was open keeps working.
    good.queue_declare("throttle-q".into(), Default::default(), Default::default())
        .await
        .expect("the open connection still works");
    // Another address logs in as usual and sees the counts.
    let other = Api::from_source(&b, "127.0.0.2".parse().expect("address"));
    let (status, _) = other.get("/api/overview").await;
    assert_eq!(status, StatusCode::OK, "another address is not blocked");
    let text = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().expect("address"))
        .build()
        .expect("client")
        .get(format!("http://{}/metrics", b.server().http_addr()))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    assert_eq!(metric(&text, "lavinmq_login_failures_total"), Some(4.0), "{text}");
    assert!(
        metric(&text, "lavinmq_login_refusals_total").is_some_and(|n| n >= 3.0),
        "{text}"
    );
    assert_eq!(metric(&text, "lavinmq_login_blocked_sources"), Some(1.0), "{text}");
}
