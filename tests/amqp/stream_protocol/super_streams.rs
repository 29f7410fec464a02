//! Super streams: created and deleted over the protocol as an exchange and
//! its partition streams, answered by the partitions and route queries, and
//! used by the client's super stream producer (hash and key routing) and
//! consumer.

use std::collections::BTreeMap;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{
    HashRoutingMurmurStrategy, Message, OffsetSpecification, RoutingKeyRoutingStrategy, RoutingStrategy,
};

use super::{body, client_at, env, take};
use crate::common::{start, uniq, within};

/// The routing key of a test message: its body up to the first colon.
fn key_of(m: &Message) -> String {
    let body = String::from_utf8_lossy(m.data().unwrap_or_default()).into_owned();
    body.split(':').next().unwrap_or_default().to_owned()
}

/// The partition the clients' murmur3 hash picks for `key` among `n`.
fn hashed_partition(key: &str, n: u32) -> u32 {
    murmur3::murmur3_32(&mut std::io::Cursor::new(key), 104_729).unwrap() % n
}

#[tokio::test]
async fn a_super_stream_is_an_exchange_bound_to_its_partitions() {
    let b = start().await;
    let env = env(&b).await;
    let name = uniq("orders");
    env.stream_creator()
        .create_super_stream(&name, 3, None)
        .await
        .expect("super stream created");
    let vhost = b.server().broker.vhost("/").unwrap();
    assert!(vhost.exchange(&name).is_some(), "the super stream's exchange");
    for i in 0..3 {
        assert!(vhost.queue(&format!("{name}-{i}")).is_some_and(|q| q.is_stream()));
    }
    let client = client_at(b.stream_addr().port()).await;
    let partitions = client.partitions(name.clone()).await.unwrap();
    assert_eq!(
        partitions.streams,
        [format!("{name}-0"), format!("{name}-1"), format!("{name}-2")]
    );
    let routed = client.route("2".into(), name.clone()).await.unwrap();
    assert_eq!(routed.streams, [format!("{name}-2")]);
    let missing = client.partitions("no-such-super-stream".into()).await.unwrap();
    assert!(missing.streams.is_empty());
    // A second creation of the same name is refused.
    assert!(env.stream_creator().create_super_stream(&name, 3, None).await.is_err());
    env.delete_super_stream(&name).await.expect("super stream deleted");
    assert!(vhost.exchange(&name).is_none());
    assert!((0..3).all(|i| vhost.queue(&format!("{name}-{i}")).is_none()));
    assert!(env.delete_super_stream(&name).await.is_err(), "gone");
    client.close().await.unwrap();
}

#[tokio::test]
async fn hash_routing_spreads_keys_as_the_clients_compute_them() {
    let b = start().await;
    let env = env(&b).await;
    let name = uniq("hashed");
    env.stream_creator().create_super_stream(&name, 3, None).await.unwrap();
    let mut producer = env
        .super_stream_producer(RoutingStrategy::HashRoutingStrategy(HashRoutingMurmurStrategy {
            routing_extractor: &key_of,
        }))
        .build(&name)
        .await
        .expect("super stream producer");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..60 {
        let m = Message::builder().body(format!("key{i}:{i}").into_bytes()).build();
        let tx = tx.clone();
        producer
            .send(m, move |r| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(r.map(|c| c.confirmed()).unwrap_or(false));
                }
            })
            .await
            .expect("sent");
    }
    for _ in 0..60 {
        assert!(within("confirm", rx.recv()).await.unwrap(), "confirmed");
    }
    producer.close().await.unwrap();
    // Each partition holds exactly the keys the hash picks for it.
    let mut seen = 0;
    for p in 0..3u32 {
        let stream = format!("{name}-{p}");
        let expected: Vec<String> = (0..60)
            .filter(|i| hashed_partition(&format!("key{i}"), 3) == p)
            .map(|i| format!("key{i}:{i}"))
            .collect();
        if expected.is_empty() {
            continue;
        }
        let mut c = env
            .consumer()
            .offset(OffsetSpecification::First)
            .build(&stream)
            .await
            .unwrap();
        let got: Vec<String> = take(&mut c, expected.len()).await.iter().map(body).collect();
        assert_eq!(got, expected, "partition {p}");
        seen += got.len();
    }
    assert_eq!(seen, 60);
}

#[tokio::test]
async fn key_routing_and_the_super_stream_consumer_cover_every_partition() {
    let b = start().await;
    let env = env(&b).await;
    let name = uniq("keyed");
    let keys = vec!["eu".to_owned(), "us".to_owned(), "asia".to_owned()];
    env.stream_creator()
        .create_super_stream(&name, 3, Some(keys.clone()))
        .await
        .unwrap();
    let mut producer = env
        .super_stream_producer(RoutingStrategy::RoutingKeyStrategy(RoutingKeyRoutingStrategy {
            routing_extractor: &key_of,
        }))
        .build(&name)
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..30 {
        let key = &keys[i % 3];
        let tx = tx.clone();
        producer
            .send(
                Message::builder().body(format!("{key}:{i}").into_bytes()).build(),
                move |r| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(r.map(|c| c.confirmed()).unwrap_or(false));
                    }
                },
            )
            .await
            .unwrap();
    }
    for _ in 0..30 {
        assert!(within("confirm", rx.recv()).await.unwrap());
    }
    producer.close().await.unwrap();
    let vhost = b.server().broker.vhost("/").unwrap();
    for key in &keys {
        let q = vhost.queue(&format!("{name}-{key}")).expect("partition");
        assert_eq!(q.counts().0, 10, "ten messages routed by key {key}");
    }
    let mut consumer = env
        .super_stream_consumer()
        .offset(OffsetSpecification::First)
        .build(&name)
        .await
        .expect("super stream consumer");
    let mut by_key: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..30 {
        let d = within("delivery", consumer.next()).await.unwrap().unwrap();
        *by_key
            .entry(body(&d).split(':').next().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(by_key.values().copied().collect::<Vec<_>>(), [10, 10, 10]);
    consumer.handle().close().await.unwrap();
}

#[tokio::test]
async fn the_management_api_creates_super_streams_as_rabbitmq_does() {
    let b = start().await;
    let api = crate::common::api::Api::new(&b);
    let name = uniq("http-orders");
    let path = format!("/api/stream/super-streams/%2F/{name}");
    let body = serde_json::json!({
        "partitions": 3,
        "arguments": {"max-length-bytes": 1_000_000, "max-age": "1h"},
    });
    assert_eq!(api.put(&path, body.clone()).await, 201);
    let client = client_at(b.stream_addr().port()).await;
    let partitions = client.partitions(name.clone()).await.unwrap();
    assert_eq!(
        partitions.streams,
        [format!("{name}-0"), format!("{name}-1"), format!("{name}-2")]
    );
    let routed = client.route("1".into(), name.clone()).await.unwrap();
    assert_eq!(routed.streams, [format!("{name}-1")]);
    let vhost = b.server().broker.vhost("/").unwrap();
    let q = vhost.queue(&format!("{name}-0")).expect("partition");
    assert!(q.is_stream());
    assert_eq!(
        q.arguments().get("x-max-length-bytes").and_then(|v| v.as_i64()),
        Some(1_000_000)
    );
    // It exists now: RabbitMQ answers 400.
    assert_eq!(api.put(&path, body).await, 400);

    // Binding keys name the partitions.
    let keyed = uniq("http-regions");
    let keyed_path = format!("/api/stream/super-streams/%2F/{keyed}");
    let status = api
        .put(&keyed_path, serde_json::json!({"binding-keys": "eu, us"}))
        .await;
    assert_eq!(status, 201);
    let routed = client.route("us".into(), keyed.clone()).await.unwrap();
    assert_eq!(routed.streams, [format!("{keyed}-us")]);

    // Refused as RabbitMQ refuses them.
    for bad in [
        serde_json::json!({}),
        serde_json::json!({"partitions": 2, "binding-keys": "a,b"}),
        serde_json::json!({"partitions": 0}),
        serde_json::json!({"partitions": "not a number"}),
        serde_json::json!({"partitions": 1001}),
        serde_json::json!({"partitions": 2, "arguments": {"max-length-bytes": "lots"}}),
    ] {
        let other = format!("/api/stream/super-streams/%2F/{}", uniq("refused"));
        assert_eq!(api.put(&other, bad.clone()).await, 400, "{bad}");
    }
    assert!(vhost.exchanges().iter().all(|x| !x.name.starts_with("refused")));
    client.close().await.unwrap();
}
