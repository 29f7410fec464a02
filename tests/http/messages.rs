//! Messages over the management API: publishing to an exchange and getting
//! from a queue with every ackmode and encoding, with RabbitMQ's JSON shapes
//! and status codes.

use crate::common::api::*;
use crate::common::*;
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// POSTs `body` to `path` as `auth`; returns status and JSON answer.
async fn post_as(api: &Api, path: &str, auth: (&str, &str), body: Value) -> (StatusCode, Value) {
    api.call(Method::POST, path, Some(auth), Some(body)).await
}

/// POSTs `body` to `path` as guest; returns status and JSON answer.
async fn post(api: &Api, path: &str, body: Value) -> (StatusCode, Value) {
    post_as(api, path, ("guest", "guest"), body).await
}

/// Publishes a string payload to `exchange` of `/` through the API.
async fn api_publish(api: &Api, exchange: &str, routing_key: &str, payload: &str) -> Value {
    let (status, body) = post(
        api,
        &format!("/api/exchanges/%2F/{exchange}/publish"),
        json!({"properties": {}, "routing_key": routing_key, "payload": payload, "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Gets messages from queue `q` of `/` through the API.
async fn api_get(api: &Api, q: &str, body: Value) -> Vec<Value> {
    let (status, out) = post(api, &format!("/api/queues/%2F/{q}/get"), body).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    out.as_array().expect("an array").clone()
}

/// The `messages` figure of a queue, once the API reports `want`.
async fn wait_messages(api: &Api, q: &str, want: u64) {
    eventually(&format!("{q} holds {want} messages"), || async {
        api.get_ok(&format!("/api/queues/%2F/{q}")).await["messages"] == want
    })
    .await;
}

async fn add_user(api: &Api, name: &str, tags: &str, write: &str, read: &str) {
    let status = api
        .put(&format!("/api/users/{name}"), json!({"password": "pw", "tags": tags}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let status = api
        .put(
            &format!("/api/permissions/%2F/{name}"),
            json!({"configure": ".*", "write": write, "read": read}),
        )
        .await;
    assert!(status.is_success(), "{status}");
}

async fn declare(ch: &Channel, q: &str) {
    declare_queue(ch, q).await;
}

#[tokio::test]
async fn publish_reaches_an_amqp_consumer_with_its_properties() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("pub");
    declare(&ch, &q).await;
    let mut consumer = consume(&ch, &q).await;
    let body = json!({
        "properties": {
            "content_type": "text/plain", "content_encoding": "utf-8", "delivery_mode": 2,
            "priority": 3, "correlation_id": "corr-1", "reply_to": "replies", "expiration": "60000",
            "message_id": "mid-1", "timestamp": 1_700_000_000u64, "type": "greeting", "user_id": "guest",
            "app_id": "api-test", "headers": {"h": "v", "n": 5, "nested": {"x": true}}
        },
        "routing_key": q, "payload": "hello", "payload_encoding": "string"
    });
    let (status, out) = post(&api, "/api/exchanges/%2F/amq.default/publish", body).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out, json!({"routed": true}));
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"hello");
    assert_eq!(d.routing_key.as_str(), q);
    let p = &d.properties;
    let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.as_str().to_string());
    assert_eq!(s(p.content_type()).as_deref(), Some("text/plain"));
    assert_eq!(s(p.content_encoding()).as_deref(), Some("utf-8"));
    assert_eq!(p.delivery_mode(), &Some(2));
    assert_eq!(p.priority(), &Some(3));
    assert_eq!(s(p.correlation_id()).as_deref(), Some("corr-1"));
    assert_eq!(s(p.reply_to()).as_deref(), Some("replies"));
    assert_eq!(s(p.expiration()).as_deref(), Some("60000"));
    assert_eq!(s(p.message_id()).as_deref(), Some("mid-1"));
    assert_eq!(p.timestamp(), &Some(1_700_000_000));
    assert_eq!(s(p.kind()).as_deref(), Some("greeting"));
    assert_eq!(s(p.user_id()).as_deref(), Some("guest"));
    assert_eq!(s(p.app_id()).as_deref(), Some("api-test"));
    let h = p.headers().clone().expect("headers");
    assert_eq!(h.inner().get("h"), Some(&long_str("v")));
    assert_eq!(h.inner().get("n"), Some(&AMQPValue::LongLongInt(5)));
    assert!(matches!(h.inner().get("nested"), Some(AMQPValue::FieldTable(_))));

    // A base64 payload arrives as the bytes it encodes.
    let (status, out) = post(
        &api,
        "/api/exchanges/%2F/amq.default/publish",
        json!({"properties": {}, "routing_key": q, "payload": "AP8BAg==", "payload_encoding": "base64"}),
    )
    .await;
    assert_eq!((status, out), (StatusCode::OK, json!({"routed": true})));
    assert_eq!(next_delivery(&mut consumer).await.data, [0u8, 255, 1, 2]);

    // Delivery mode given as a string, as RabbitMQ's UI sends it.
    let (status, _) = post(
        &api,
        "/api/exchanges/%2F/amq.default/publish",
        json!({"properties": {"delivery_mode": "2"}, "routing_key": q, "payload": "s", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(next_delivery(&mut consumer).await.properties.delivery_mode(), &Some(2));

    // Nothing bound: not routed, and no error.
    assert_eq!(
        api_publish(&api, "amq.direct", "nowhere", "x").await,
        json!({"routed": false})
    );
}

#[tokio::test]
async fn publish_follows_bindings_and_alternate_exchanges() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let (x, ae, q, aq) = (uniq("x"), uniq("ae"), uniq("bound"), uniq("alt"));
    declare(&ch, &q).await;
    declare(&ch, &aq).await;
    assert_eq!(
        api.put(&format!("/api/exchanges/%2F/{ae}"), json!({"type": "fanout"}))
            .await,
        StatusCode::CREATED
    );
    assert_eq!(
        api.put(
            &format!("/api/exchanges/%2F/{x}"),
            json!({"type": "direct", "arguments": {"alternate-exchange": ae}})
        )
        .await,
        StatusCode::CREATED
    );
    for (src, dst, key) in [(&x, &q, "k"), (&ae, &aq, "")] {
        let (status, _) = api
            .post(
                &format!("/api/bindings/%2F/e/{src}/q/{dst}"),
                json!({"routing_key": key}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    assert_eq!(api_publish(&api, &x, "k", "to-q").await, json!({"routed": true}));
    assert_eq!(api_publish(&api, &x, "other", "to-ae").await, json!({"routed": true}));
    assert_eq!(drain(&ch, &q).await, [b"to-q".to_vec()]);
    assert_eq!(drain(&ch, &aq).await, [b"to-ae".to_vec()]);

    // CC adds routing keys; BCC too, and consumers never see it.
    let (status, _) = post(
        &api,
        &format!("/api/exchanges/%2F/{x}/publish"),
        json!({"properties": {"headers": {"BCC": ["k"]}}, "routing_key": "none",
               "payload": "bcc", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let m = get(&ch, &q, true).await.expect("BCC copy");
    assert_eq!(m.delivery.data, b"bcc");
    let h = m.delivery.properties.headers().clone().unwrap_or_default();
    assert!(!h.contains_key("BCC"));
}

#[tokio::test]
async fn publish_errors() {
    let b = start().await;
    let api = Api::new(&b);
    let path = "/api/exchanges/%2F/amq.default/publish";
    let ok = |enc: &str, payload: &str| json!({"properties": {}, "routing_key": "r", "payload": payload, "payload_encoding": enc});
    for (body, what) in [
        (ok("hex", "00"), "unknown encoding"),
        (ok("base64", "not base64!"), "bad base64"),
        (json!({"routing_key": "r"}), "no payload"),
        (
            json!({"properties": {"user_id": "someone"}, "routing_key": "r", "payload": "", "payload_encoding": "string"}),
            "user_id of another user",
        ),
        (
            json!({"properties": {"expiration": "soon"}, "routing_key": "r", "payload": "", "payload_encoding": "string"}),
            "bad expiration",
        ),
        (
            json!({"properties": {"delivery_mode": "two"}, "routing_key": "r", "payload": "", "payload_encoding": "string"}),
            "bad delivery_mode",
        ),
        (
            json!({"properties": {"headers": "h"}, "routing_key": "r", "payload": "", "payload_encoding": "string"}),
            "headers not an object",
        ),
        (
            json!({"properties": {}, "routing_key": "r".repeat(256), "payload": "", "payload_encoding": "string"}),
            "routing key too long",
        ),
    ] {
        let (status, out) = post(&api, path, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {out}");
        assert_eq!(out["error"], "bad_request", "{what}");
    }
    let (status, _, _) = api.raw(Method::POST, path, GUEST, Some("{not json".to_string())).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // As RabbitMQ: 400 carrying the AMQP error.
    let (status, out) = post(&api, "/api/exchanges/%2F/no-such-exchange/publish", ok("string", "x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        out["reason"].as_str().is_some_and(|r| r.contains("404 NOT_FOUND")),
        "{out}"
    );
    let (status, _) = post(
        &api,
        "/api/exchanges/no-such-vhost/amq.direct/publish",
        ok("string", "x"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.call(Method::POST, path, None, Some(ok("string", "x"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Internal exchanges take no messages from clients.
    let internal = uniq("internal");
    assert_eq!(
        api.put(
            &format!("/api/exchanges/%2F/{internal}"),
            json!({"type": "fanout", "internal": true})
        )
        .await,
        StatusCode::CREATED
    );
    let (status, _) = post(
        &api,
        &format!("/api/exchanges/%2F/{internal}/publish"),
        ok("string", "x"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn publish_and_get_need_write_and_read_permission() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("perm");
    declare(&ch, &q).await;
    publish(&ch, "", &q, b"m").await;
    wait_messages(&api, &q, 1).await;
    add_user(&api, "reader", "management", "^$", ".*").await;
    add_user(&api, "writer", "management", ".*", "^$").await;
    let msg = json!({"properties": {}, "routing_key": q, "payload": "w", "payload_encoding": "string"});
    let get_body = json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"});
    let publish_path = "/api/exchanges/%2F/amq.default/publish";
    let get_path = format!("/api/queues/%2F/{q}/get");

    let (status, out) = post_as(&api, publish_path, ("reader", "pw"), msg.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{out}");
    assert_eq!(
        out["reason"],
        "access to exchange 'amq.default' in vhost '/' refused for user 'reader'"
    );
    let (status, out) = post_as(&api, &get_path, ("writer", "pw"), get_body.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{out}");
    assert_eq!(
        out["reason"],
        format!("access to queue '{q}' in vhost '/' refused for user 'writer'")
    );

    let (status, out) = post_as(&api, publish_path, ("writer", "pw"), msg).await;
    assert_eq!((status, out), (StatusCode::OK, json!({"routed": true})));
    let (status, out) = post_as(&api, &get_path, ("reader", "pw"), get_body).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out[0]["payload"], "m");

    // An administrator without permissions in the vhost may not publish either.
    assert_eq!(
        api.put("/api/users/boss", json!({"password": "pw", "tags": "administrator"}))
            .await,
        StatusCode::CREATED
    );
    let (status, _) = post_as(
        &api,
        publish_path,
        ("boss", "pw"),
        json!({"routing_key": q, "payload": "b"}),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn get_with_each_ackmode() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("get");
    declare(&ch, &q).await;
    for body in [b"m1".as_slice(), b"m2", b"m3"] {
        publish(&ch, "", &q, body).await;
    }
    wait_messages(&api, &q, 3).await;

    // ack_requeue_true: the messages stay, and come back redelivered.
    let got = api_get(
        &api,
        &q,
        json!({"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0],
        json!({"payload_bytes": 2, "redelivered": false, "exchange": "", "routing_key": q,
               "message_count": 2, "properties": {}, "payload": "m1", "payload_encoding": "string"})
    );
    assert_eq!(got[1]["payload"], "m2");
    assert_eq!(got[1]["message_count"], 1);
    wait_messages(&api, &q, 3).await;
    let got = api_get(
        &api,
        &q,
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    )
    .await;
    assert_eq!(
        (got[0]["payload"].clone(), got[0]["redelivered"].clone()),
        (json!("m1"), json!(true))
    );

    // reject_requeue_true: the same.
    let got = api_get(
        &api,
        &q,
        json!({"count": 5, "ackmode": "reject_requeue_true", "encoding": "auto"}),
    )
    .await;
    let payloads: Vec<&Value> = got.iter().map(|m| &m["payload"]).collect();
    assert_eq!(payloads, [&json!("m1"), &json!("m2"), &json!("m3")]);
    wait_messages(&api, &q, 3).await;

    // ack_requeue_false: taken for good.
    let got = api_get(
        &api,
        &q,
        json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got[0]["payload"], "m1");
    wait_messages(&api, &q, 2).await;

    // reject_requeue_false: dropped (dead-lettered when there is a DLX, below).
    let got = api_get(
        &api,
        &q,
        json!({"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got[0]["payload"], "m2");
    wait_messages(&api, &q, 1).await;
    assert_eq!(drain(&ch, &q).await, [b"m3".to_vec()]);

    // An empty queue gives an empty list.
    let got = api_get(
        &api,
        &q,
        json!({"count": 3, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    )
    .await;
    assert!(got.is_empty());
}

#[tokio::test]
async fn reject_without_requeue_dead_letters() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let (q, dlq) = (uniq("src"), uniq("dlq"));
    declare(&ch, &dlq).await;
    let status = api
        .put(
            &format!("/api/queues/%2F/{q}"),
            json!({"durable": false, "arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    api_publish(&api, "amq.default", &q, "doomed").await;
    wait_messages(&api, &q, 1).await;
    let got = api_get(
        &api,
        &q,
        json!({"count": 1, "ackmode": "reject_requeue_false", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got[0]["payload"], "doomed");
    wait_messages(&api, &dlq, 1).await;
    let m = get(&ch, &dlq, true).await.expect("dead letter");
    assert_eq!(m.delivery.data, b"doomed");
    let h = m.delivery.properties.headers().clone().expect("x-death");
    assert!(h.contains_key("x-death"));
    wait_messages(&api, &q, 0).await;
}

#[tokio::test]
async fn get_encodings_and_truncate() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("enc");
    declare(&ch, &q).await;
    publish(&ch, "", &q, b"hello world").await;
    publish(&ch, "", &q, &[0xff, 0xfe, 0x00]).await;
    publish_props(
        &ch,
        "",
        &q,
        b"{}",
        BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_headers(table(&[("k", long_str("v"))])),
    )
    .await;
    wait_messages(&api, &q, 3).await;
    let requeue = |encoding: &str, truncate: Option<u64>| {
        let mut body = json!({"count": 3, "ackmode": "ack_requeue_true", "encoding": encoding});
        if let Some(t) = truncate {
            body["truncate"] = json!(t);
        }
        body
    };
    let got = api_get(&api, &q, requeue("auto", None)).await;
    assert_eq!(
        (&got[0]["payload"], &got[0]["payload_encoding"]),
        (&json!("hello world"), &json!("string"))
    );
    assert_eq!(
        (&got[1]["payload"], &got[1]["payload_encoding"]),
        (&json!("//4A"), &json!("base64"))
    );
    assert_eq!(
        got[2]["properties"],
        json!({"content_type": "application/json", "delivery_mode": 2, "headers": {"k": "v"}})
    );
    let got = api_get(&api, &q, requeue("base64", None)).await;
    assert_eq!(
        (&got[0]["payload"], &got[0]["payload_encoding"]),
        (&json!("aGVsbG8gd29ybGQ="), &json!("base64"))
    );
    let got = api_get(&api, &q, requeue("auto", Some(5))).await;
    assert_eq!(got[0]["payload"], "hello");
    assert_eq!(got[0]["payload_bytes"], 11);
    assert_eq!(got[1]["payload"], "//4A");
    // Count and truncate as strings, as RabbitMQ's UI sends them.
    let got = api_get(
        &api,
        &q,
        json!({"count": "1", "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": "2"}),
    )
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["payload"], "he");
    wait_messages(&api, &q, 3).await;
}

#[tokio::test]
async fn get_errors() {
    let b = start().await;
    let api = Api::new(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("geterr");
    declare(&ch, &q).await;
    let path = format!("/api/queues/%2F/{q}/get");
    for body in [
        json!({"count": 1, "ackmode": "sometimes", "encoding": "auto"}),
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "hex"}),
        json!({"count": "many", "ackmode": "ack_requeue_true", "encoding": "auto"}),
        json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": -1}),
    ] {
        let (status, out) = post(&api, &path, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {out}");
    }
    let body = json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"});
    let (status, _) = post(&api, "/api/queues/%2F/no-such-queue/get", body.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = post(&api, &format!("/api/queues/no-such-vhost/{q}/get"), body.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.call(Method::POST, &path, None, Some(body)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn persistent_messages_published_over_the_api_survive_a_restart() {
    let mut b = start().await;
    let api = Api::new(&b);
    let q = uniq("durable");
    assert_eq!(
        api.put(&format!("/api/queues/%2F/{q}"), json!({"durable": true})).await,
        StatusCode::CREATED
    );
    let (status, _) = post(
        &api,
        "/api/exchanges/%2F/amq.default/publish",
        json!({"properties": {"delivery_mode": 2, "message_id": "keep"}, "routing_key": q,
               "payload": "kept", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    b.restart().await;
    let api = Api::new(&b);
    let got = api_get(
        &api,
        &q,
        json!({"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["payload"], "kept");
    assert_eq!(got[0]["properties"], json!({"delivery_mode": 2, "message_id": "keep"}));
}
