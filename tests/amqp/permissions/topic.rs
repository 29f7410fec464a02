//! Topic permissions (RabbitMQ's): per user, vhost and topic exchange, a
//! write regex for the routing keys published with and a read regex for the
//! keys bound with, over AMQP, MQTT and the management API; the API itself,
//! definitions, and changes reaching open connections.

use lapin::options::{ConfirmSelectOptions, QueueBindOptions};
use lapin::types::FieldTable;
use reqwest::{Method, StatusCode};
use rumqttc::{QoS, SubscribeReasonCode};
use serde_json::json;

use super::{add_user, connect_as, publish_and_confirm, refused};
use crate::common::api::Api;
use crate::common::mqtt;
use crate::common::*;

/// Gives `user` topic permissions on `exchange` in vhost `/` through the API.
async fn set_topic(api: &Api, user: &str, exchange: &str, write: &str, read: &str) {
    let body = json!({"exchange": exchange, "write": write, "read": read});
    let status = api.put(&format!("/api/topic-permissions/%2F/{user}"), body).await;
    assert!(status.is_success(), "PUT topic permission: {status}");
}

/// Publishes with confirms and returns the error text the broker closed the
/// channel with, or `None` when the publish was confirmed.
async fn try_publish(conn: &lapin::Connection, exchange: &str, key: &str) -> Option<String> {
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let mut ev = events(conn);
    match publish_and_confirm(&ch, exchange, key, b"m").await {
        Ok(_) => None,
        Err(_) => Some(expect_error(&mut ev, 403).await),
    }
}

#[tokio::test]
async fn amqp_publish_and_bind_are_checked_against_the_routing_key() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&b, "tp", ".*", ".*", ".*");
    set_topic(&api, "tp", "amq.topic", "^{username}\\.", "^public\\.").await;
    let conn = connect_as(&b, "tp").await;

    assert_eq!(try_publish(&conn, "amq.topic", "tp.reading").await, None);
    let text = try_publish(&conn, "amq.topic", "other.reading").await;
    assert_eq!(
        text.as_deref(),
        Some(
            "ACCESS_REFUSED - access to topic 'other.reading' in exchange 'amq.topic' in vhost '/' refused for user 'tp'"
        )
    );
    // Other exchanges are not restricted: another topic exchange, and a
    // direct one even though the user names it (only topic exchanges are).
    assert_eq!(try_publish(&conn, "amq.direct", "other.reading").await, None);
    set_topic(&api, "tp", "amq.direct", "^$", "^$").await;
    assert_eq!(try_publish(&conn, "amq.direct", "other.reading").await, None);
    let (_admin_conn, admin) = b.channel().await;
    admin
        .exchange_declare(
            "tp-other".into(),
            lapin::ExchangeKind::Topic,
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    assert_eq!(try_publish(&conn, "tp-other", "other.reading").await, None);

    // Binding from the exchange needs the binding key to match `read`.
    let ch = conn.create_channel().await.expect("channel");
    declare_queue(&ch, "tp-q").await;
    let bind = |key: &'static str| {
        let ch = ch.clone();
        async move {
            ch.queue_bind(
                "tp-q".into(),
                "amq.topic".into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        }
    };
    bind("public.#").await.expect("allowed bind");
    let text = refused(&conn, bind("secret.#")).await;
    assert!(
        text.contains("access to topic 'secret.#' in exchange 'amq.topic'"),
        "{text}"
    );
    // Unbinding is checked as binding is.
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_unbind(
        "tp-q".into(),
        "amq.topic".into(),
        "public.#".into(),
        FieldTable::default(),
    )
    .await
    .expect("allowed unbind");
}

#[tokio::test]
async fn a_changed_topic_permission_applies_to_an_open_channel() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&b, "tp-live", ".*", ".*", ".*");
    let conn = connect_as(&b, "tp-live").await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    publish_confirmed(&ch, "amq.topic", "a.b", b"before").await;
    set_topic(&api, "tp-live", "amq.topic", "^x\\.", ".*").await;
    let text = refused(&conn, publish_and_confirm(&ch, "amq.topic", "a.b", b"after")).await;
    assert!(text.contains("access to topic 'a.b'"), "{text}");
    // Cleared: allowed again on a new channel of the same connection.
    assert_eq!(
        api.delete("/api/topic-permissions/%2F/tp-live").await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(try_publish(&conn, "amq.topic", "a.b").await, None);
}

#[tokio::test]
async fn mqtt_publish_and_subscribe_are_checked_in_their_amqp_form() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&b, "tp-mqtt", ".*", ".*", ".*");
    // MQTT topics map to routing keys: `devices/dev-1/t` is `devices.dev-1.t`.
    set_topic(
        &api,
        "tp-mqtt",
        "amq.topic",
        "^devices\\.{client_id}\\.",
        "^devices\\.{client_id}\\.",
    )
    .await;
    let login = |id: &str| {
        let mut o = mqtt::options(&b, id);
        o.set_credentials("tp-mqtt", "pw");
        o
    };
    let mut c = mqtt::connect(login("dev-1")).await;
    c.subscribe_ok("devices/dev-1/#", QoS::AtLeastOnce).await;
    assert_eq!(
        c.subscribe("devices/dev-2/#", QoS::AtLeastOnce).await,
        SubscribeReasonCode::Failure
    );
    // A wildcard reaching other devices' topics is refused too.
    assert_eq!(
        c.subscribe("devices/+/t", QoS::AtLeastOnce).await,
        SubscribeReasonCode::Failure
    );
    c.publish("devices/dev-1/t", QoS::AtLeastOnce, false, b"21.5").await;
    let p = c.next_publish().await;
    assert_eq!((p.topic.as_str(), &p.payload[..]), ("devices/dev-1/t", &b"21.5"[..]));
    // MQTT 3.1.1 has no negative PUBACK: a refused publish closes the connection.
    within(
        "publish request",
        c.client
            .publish("devices/dev-2/t", QoS::AtLeastOnce, false, b"x".to_vec()),
    )
    .await
    .expect("publish request");
    c.wait_closed().await;
    // Another client id has its own topics.
    let mut c2 = mqtt::connect(login("dev-2")).await;
    c2.subscribe_ok("devices/dev-2/#", QoS::AtMostOnce).await;
    c2.disconnect().await;
}

#[tokio::test]
async fn api_crud_validation_and_definitions() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&b, "tp-api", ".*", ".*", ".*");
    let path = "/api/topic-permissions/%2F/tp-api";
    assert_eq!(api.get(path).await.0, StatusCode::NOT_FOUND);
    let body = json!({"exchange": "amq.topic", "write": "^a", "read": "^b"});
    assert_eq!(api.put(path, body.clone()).await, StatusCode::CREATED);
    assert_eq!(api.put(path, body).await, StatusCode::NO_CONTENT);
    // A second exchange updates the user's topic permissions in the vhost.
    let body = json!({"exchange": "logs", "write": "^{username}\\.", "read": ".*"});
    assert_eq!(api.put(path, body).await, StatusCode::NO_CONTENT);
    let expected = json!([
        {"user": "tp-api", "vhost": "/", "exchange": "amq.topic", "write": "^a", "read": "^b"},
        {"user": "tp-api", "vhost": "/", "exchange": "logs", "write": "^{username}\\.", "read": ".*"},
    ]);
    assert_eq!(api.get_ok(path).await, expected);
    assert_eq!(api.get_ok("/api/users/tp-api/topic-permissions").await, expected);
    assert_eq!(api.get_ok("/api/vhosts/%2F/topic-permissions").await, expected);
    assert_eq!(api.get_ok("/api/topic-permissions").await, expected);

    // Refusals: an invalid pattern, a missing field, an unknown user or vhost.
    for (at, body) in [
        (path, json!({"exchange": "x", "write": "(", "read": ".*"})),
        (path, json!({"exchange": "x", "write": ".*"})),
        (
            "/api/topic-permissions/%2F/nobody",
            json!({"exchange": "x", "write": ".*", "read": ".*"}),
        ),
        (
            "/api/topic-permissions/no-vhost/tp-api",
            json!({"exchange": "x", "write": ".*", "read": ".*"}),
        ),
    ] {
        assert_eq!(api.put(at, body.clone()).await, StatusCode::BAD_REQUEST, "{at} {body}");
    }

    // Exported with the definitions, and imported back after being cleared.
    let defs = api.get_ok("/api/definitions").await;
    assert_eq!(defs["topic_permissions"], expected);
    assert_eq!(
        api.delete(&format!("{path}?exchange=logs")).await,
        StatusCode::NO_CONTENT
    );
    assert_eq!(api.get_ok(path).await.as_array().map(Vec::len), Some(1));
    assert_eq!(api.delete(path).await, StatusCode::NO_CONTENT);
    assert_eq!(api.delete(path).await, StatusCode::NOT_FOUND);
    let (status, _) = api.post("/api/definitions", defs).await;
    assert!(status.is_success(), "import: {status}");
    assert_eq!(api.get_ok(path).await, expected);

    // They survive a restart, and go with their vhost.
    let mut b = b;
    b.restart().await;
    let api = Api::new(&b);
    assert_eq!(api.get_ok(path).await, expected);
    assert_eq!(api.put("/api/vhosts/tp-vhost", json!({})).await, StatusCode::CREATED);
    let in_vhost = "/api/topic-permissions/tp-vhost/tp-api";
    let body = json!({"exchange": "amq.topic", "write": ".*", "read": ".*"});
    assert_eq!(api.put(in_vhost, body).await, StatusCode::CREATED);
    assert_eq!(api.delete("/api/vhosts/tp-vhost").await, StatusCode::NO_CONTENT);
    assert_eq!(api.get_ok("/api/users/tp-api/topic-permissions").await, expected);
}

#[tokio::test]
async fn http_publish_and_binding_are_checked_too() {
    let b = start().await;
    let api = Api::new(&b);
    add_user(&b, "tp-http", ".*", ".*", ".*");
    b.server()
        .broker
        .users
        .update("tp-http", |u| u.tags = vec!["management".into()])
        .expect("tags");
    set_topic(&api, "tp-http", "amq.topic", "^ok\\.", "^ok\\.").await;
    let as_user = |path: &'static str, body: serde_json::Value| {
        let api = &api;
        async move {
            api.call(Method::POST, path, Some(("tp-http", "pw")), Some(body))
                .await
                .0
        }
    };
    let publish =
        |key: &str| json!({"routing_key": key, "payload": "p", "payload_encoding": "string", "properties": {}});
    let to_exchange = "/api/exchanges/%2F/amq.topic/publish";
    assert_eq!(as_user(to_exchange, publish("ok.1")).await, StatusCode::OK);
    assert_eq!(as_user(to_exchange, publish("no.1")).await, StatusCode::FORBIDDEN);
    assert_eq!(
        api.put("/api/queues/%2F/tp-http-q", json!({})).await,
        StatusCode::CREATED
    );
    let binding = "/api/bindings/%2F/e/amq.topic/q/tp-http-q";
    assert_eq!(
        as_user(binding, json!({"routing_key": "ok.#"})).await,
        StatusCode::CREATED
    );
    let status = as_user(binding, json!({"routing_key": "no.#"})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}
