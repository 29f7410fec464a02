//! Federation between brokers of ours in one process: upstreams defined as
//! `federation-upstream` parameters and applied by policies; exchange
//! federation with bindings propagated and withdrawn, a ring of three
//! exchanges stopped by `max-hops`, queue federation that moves messages
//! only while a consumer is attached downstream, `/api/federation-links`,
//! and bad parameters refused.

use lapin::ExchangeKind;
use lapin::options::{BasicAckOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::api::*;
use crate::common::*;

/// Creates upstream `name` (pointing at `upstream`) in vhost `/` of `api`'s broker.
async fn add_upstream(api: &Api, name: &str, value: Value) {
    let status = api
        .put(
            &format!("/api/parameters/federation-upstream/%2F/{name}"),
            json!({ "value": value }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "creating upstream {name}");
}

/// Creates policy `name` federating what `pattern` matches.
async fn add_policy(api: &Api, name: &str, pattern: &str, apply_to: &str, definition: Value) {
    let status = api
        .put(
            &format!("/api/policies/%2F/{name}"),
            json!({"pattern": pattern, "apply-to": apply_to, "definition": definition}),
        )
        .await;
    assert!(status.is_success(), "creating policy {name}: {status}");
}

/// Waits until the link federating `resource` is running; returns it.
async fn link_running(api: &Api, resource: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        let links = api.get_ok("/api/federation-links/%2F").await;
        if let Some(l) = links
            .as_array()
            .into_iter()
            .flatten()
            .find(|l| l["resource"] == resource && l["status"] == "running")
        {
            return l.clone();
        }
        last = links;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no running link for {resource}: {last}");
}

async fn declare_exchange(ch: &lapin::Channel, name: &str, kind: ExchangeKind) {
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(name.into(), kind, opts, FieldTable::default())
        .await
        .expect("exchange.declare");
}

async fn bind(ch: &lapin::Channel, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue.bind");
}

/// The routing keys bound from `exchange` on `api`'s broker to destinations
/// whose name starts with `federation:`.
async fn federated_keys(api: &Api, exchange: &str) -> Vec<String> {
    let bindings = api
        .get_ok(&format!("/api/exchanges/%2F/{exchange}/bindings/source"))
        .await;
    let mut keys: Vec<String> = bindings
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["destination"].as_str().is_some_and(|d| d.starts_with("federation:")))
        .filter_map(|b| b["routing_key"].as_str().map(String::from))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn exchange_federation_follows_downstream_bindings() {
    let (upstream, downstream) = (start().await, start().await);
    let (up_api, down_api) = (Api::new(&upstream), Api::new(&downstream));
    let (_uc, up_ch) = upstream.channel().await;
    let (down_conn, down_ch) = downstream.channel().await;
    declare_exchange(&up_ch, "fx", ExchangeKind::Topic).await;
    declare_exchange(&down_ch, "fx", ExchangeKind::Topic).await;
    declare_queue(&down_ch, "local-a").await;
    bind(&down_ch, "local-a", "fx", "a.*").await;
    add_upstream(&down_api, "up", json!({"uri": upstream.url()})).await;
    add_policy(
        &down_api,
        "fed",
        "^fx$",
        "exchanges",
        json!({"federation-upstream": "up"}),
    )
    .await;
    let link = link_running(&down_api, "fx").await;
    assert_eq!(link["type"], "exchange");
    assert_eq!(link["upstream"], "up");
    assert_eq!(link["upstream_exchange"], "fx");
    assert!(
        !link["uri"].as_str().unwrap_or_default().contains("guest:guest"),
        "{link}"
    );
    eventually("the binding reaches the upstream", || async {
        federated_keys(&up_api, "fx").await == ["a.*"]
    })
    .await;

    // Messages the downstream binds for cross; others do not.
    publish(&up_ch, "fx", "b.1", b"not bound").await;
    publish(&up_ch, "fx", "a.1", b"bound").await;
    let mut consumer = consume(&down_ch, "local-a").await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"bound");
    assert_eq!(d.routing_key.as_str(), "a.1");
    let headers = d.properties.headers().clone().unwrap_or_default();
    let Some(AMQPValue::FieldArray(from)) = headers.inner().get("x-received-from") else {
        panic!("x-received-from missing: {headers:?}");
    };
    assert_eq!(from.as_slice().len(), 1);
    d.ack(BasicAckOptions::default()).await.expect("ack");
    assert_no_delivery(&mut consumer).await;

    // A new binding is propagated, a removed one withdrawn.
    declare_queue(&down_ch, "local-b").await;
    bind(&down_ch, "local-b", "fx", "b.*").await;
    down_ch
        .queue_unbind("local-a".into(), "fx".into(), "a.*".into(), FieldTable::default())
        .await
        .expect("queue.unbind");
    eventually("bindings follow", || async {
        federated_keys(&up_api, "fx").await == ["b.*"]
    })
    .await;
    publish(&up_ch, "fx", "a.2", b"no longer bound").await;
    publish(&up_ch, "fx", "b.2", b"now bound").await;
    let mut consumer_b = consume(&down_ch, "local-b").await;
    assert_eq!(next_delivery(&mut consumer_b).await.data, b"now bound");
    assert_no_delivery(&mut consumer).await;

    // Removing the policy stops the link and removes its upstream queue.
    assert_eq!(down_api.delete("/api/policies/%2F/fed").await, StatusCode::NO_CONTENT);
    eventually("the link is gone", || async {
        down_api.get_ok("/api/federation-links").await == json!([])
    })
    .await;
    let up_conn = upstream.connect().await;
    eventually("the upstream queue is removed", || async {
        federated_keys(&up_api, "fx").await.is_empty()
            && !queue_exists(&up_conn, &format!("federation: fx -> {}:/:fx", hostname())).await
    })
    .await;
    drop(down_conn);
}

/// This host's name, as links name their upstream queues.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_ring_of_three_exchanges_stops_at_max_hops() {
    let brokers = [start().await, start().await, start().await];
    let mut channels = Vec::new();
    for b in &brokers {
        let (conn, ch) = b.channel().await;
        declare_exchange(&ch, "ring", ExchangeKind::Fanout).await;
        declare_queue(&ch, "seen").await;
        bind(&ch, "seen", "ring", "").await;
        channels.push((conn, ch));
    }
    // Each broker's upstream is the one before it: 0 -> 1 -> 2 -> 0.
    for (i, b) in brokers.iter().enumerate() {
        let api = Api::new(b);
        let before = &brokers[(i + 2) % 3];
        add_upstream(&api, "prev", json!({"uri": before.url(), "max-hops": 2})).await;
        add_policy(
            &api,
            "ring",
            "^ring$",
            "exchanges",
            json!({"federation-upstream": "prev"}),
        )
        .await;
    }
    for (i, b) in brokers.iter().enumerate() {
        link_running(&Api::new(b), "ring").await;
        let next = Api::new(&brokers[(i + 1) % 3]);
        eventually("the ring's bindings are in place", || async {
            !federated_keys(&next, "ring").await.is_empty()
        })
        .await;
    }
    let n = 20;
    for i in 0..n {
        publish(&channels[0].1, "ring", "", format!("m{i}").as_bytes()).await;
    }
    for (i, (conn, _)) in channels.iter().enumerate() {
        eventually(&format!("broker {i} saw every message"), || async {
            message_count(conn, "seen").await >= n
        })
        .await;
    }
    // Nothing keeps circling: after a quiet while each saw each message once.
    tokio::time::sleep(QUIET * 5).await;
    for (i, (conn, _)) in channels.iter().enumerate() {
        assert_eq!(message_count(conn, "seen").await, n, "broker {i}");
    }
    let (_, ch) = &channels[2];
    let got = drain(ch, "seen").await;
    let want: Vec<Vec<u8>> = (0..n).map(|i| format!("m{i}").into_bytes()).collect();
    assert_eq!(got, want, "two hops away, in order");
}

#[tokio::test]
async fn queue_federation_moves_messages_only_while_a_consumer_waits() {
    let (upstream, downstream) = (start().await, start().await);
    let down_api = Api::new(&downstream);
    let (up_conn, up_ch) = upstream.channel().await;
    let (down_conn, down_ch) = downstream.channel().await;
    declare_queue(&up_ch, "work").await;
    confirm_select(&up_ch).await;
    for i in 0..50 {
        publish_confirmed(&up_ch, "", "work", format!("w{i}").as_bytes()).await;
    }
    declare_queue(&down_ch, "work").await;
    add_upstream(&down_api, "up", json!({"uri": upstream.url(), "prefetch-count": 10})).await;
    add_policy(
        &down_api,
        "qfed",
        "^work$",
        "queues",
        json!({"federation-upstream-set": "all"}),
    )
    .await;
    let link = link_running(&down_api, "work").await;
    assert_eq!(link["type"], "queue");
    assert_eq!(link["upstream_queue"], "work");
    tokio::time::sleep(QUIET * 3).await;
    assert_eq!(
        message_count(&up_conn, "work").await,
        50,
        "nothing moves without a consumer"
    );

    let mut consumer = consume(&down_ch, "work").await;
    let mut got = Vec::new();
    for d in deliveries(&mut consumer, 50).await {
        got.push(String::from_utf8_lossy(&d.data).into_owned());
        d.ack(BasicAckOptions::default()).await.expect("ack");
    }
    let want: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
    assert_eq!(got, want, "every message once, in order");
    eventually("the upstream queue is emptied", || async {
        message_count(&up_conn, "work").await == 0
    })
    .await;

    // Without the consumer, new upstream messages stay upstream.
    drop(consumer);
    down_conn.close(200, "bye".into()).await.expect("close");
    tokio::time::sleep(QUIET * 3).await;
    publish_confirmed(&up_ch, "", "work", b"later").await;
    tokio::time::sleep(QUIET * 3).await;
    assert_eq!(message_count(&up_conn, "work").await, 1);
}

#[tokio::test]
async fn bad_federation_parameters_are_refused_with_a_reason() {
    let broker = start().await;
    let api = Api::new(&broker);
    let cases = [
        ("federation-upstream", json!({"uri": "ftp://h"}), "uri"),
        (
            "federation-upstream",
            json!({"uri": "amqp://h", "max-hops": 0}),
            "max-hops",
        ),
        (
            "federation-upstream",
            json!({"url": "amqp://h"}),
            "unknown parameter key",
        ),
        ("federation-upstream-set", json!({"upstream": "a"}), "list"),
        (
            "federation-upstream-set",
            json!([{"upstream": "a", "ack-mode": "later"}]),
            "ack-mode",
        ),
    ];
    for (component, value, reason) in cases {
        let (status, body) = api
            .call(
                reqwest::Method::PUT,
                &format!("/api/parameters/{component}/%2F/bad"),
                GUEST,
                Some(json!({ "value": value })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{value}: {body}");
        assert!(body.to_string().contains(reason), "{value}: {body}");
    }
    add_policy(&api, "p", "^x$", "all", json!({"federation-upstream-set": "all"})).await;
    // A link to an upstream that is down shows its error and keeps retrying.
    add_upstream(&api, "down", json!({"uri": "amqp://127.0.0.1:1", "reconnect-delay": 1})).await;
    let (_c, ch) = broker.channel().await;
    declare_exchange(&ch, "x", ExchangeKind::Direct).await;
    eventually("the failing link shows its error", || async {
        let links = api.get_ok("/api/federation-links").await;
        links[0]["status"] == "error" && links[0]["error"].as_str().is_some_and(|e| !e.is_empty())
    })
    .await;
}
