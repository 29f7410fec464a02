//! Exchange extensions: consistent hashing, delayed messages and deduplication.

use crate::common;

use common::api::Api;
use common::*;
use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

async fn declare_exchange(ch: &Channel, name: &str, kind: &str, durable: bool, args: FieldTable) -> lapin::Result<()> {
    let opts = ExchangeDeclareOptions {
        durable,
        ..Default::default()
    };
    ch.exchange_declare(name.into(), ExchangeKind::Custom(kind.into()), opts, args)
        .await
}

async fn bind(ch: &Channel, q: &str, ex: &str, key: &str) -> lapin::Result<()> {
    ch.queue_bind(
        q.into(),
        ex.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
}

fn headers(pairs: &[(&str, AMQPValue)]) -> BasicProperties {
    BasicProperties::default().with_headers(table(pairs))
}

#[tokio::test]
async fn consistent_hash_sends_each_message_to_one_weighted_queue() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ex = uniq("chx");
    declare_exchange(&ch, &ex, "x-consistent-hash", false, FieldTable::default())
        .await
        .unwrap();
    let queues: Vec<String> = (0..3).map(|i| uniq(&format!("ch{i}"))).collect();
    for (q, weight) in queues.iter().zip(["100", "100", "200"]) {
        declare_queue(&ch, q).await;
        bind(&ch, q, &ex, weight).await.unwrap();
    }
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..600 {
        publish(&ch, &ex, &format!("key-{i}"), b"x").await;
    }
    // The same key always lands in the same queue.
    for _ in 0..10 {
        publish(&ch, &ex, "sticky", b"s").await;
    }
    ch.wait_for_confirms().await.unwrap();
    let mut counts = Vec::new();
    for q in &queues {
        counts.push(queue_count(&ch, q).await);
    }
    assert_eq!(counts.iter().sum::<u32>(), 610, "{counts:?}");
    // Placement depends on the (random) queue names; every queue gets a share.
    assert!(counts.iter().all(|&c| c > 0), "{counts:?}");
}

#[tokio::test]
async fn consistent_hash_refuses_a_non_numeric_weight() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let ex = uniq("chx");
    declare_exchange(&ch, &ex, "x-consistent-hash", false, FieldTable::default())
        .await
        .unwrap();
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let mut ev = events(&conn);
    let _ = bind(&ch, &q, &ex, "heavy").await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("The binding key must be an integer"), "{msg}");
    // LavinMQ's ring keeps LavinMQ's text, and its weight 0.
    let ch = conn.create_channel().await.unwrap();
    let ring = uniq("chx");
    let args = table(&[("x-algorithm", long_str("ring"))]);
    declare_exchange(&ch, &ring, "x-consistent-hash", false, args)
        .await
        .unwrap();
    bind(&ch, &q, &ring, "0").await.unwrap();
    let _ = bind(&ch, &q, &ring, "heavy").await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("Routing key must to be a number"), "{msg}");
    // RabbitMQ refuses a weight below 1.
    let ch = conn.create_channel().await.unwrap();
    let _ = bind(&ch, &q, &ex, "0").await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("The binding key must be greater than 0"), "{msg}");
}

/// Publishes `count` messages whose body is their index, each with what
/// `props_for(i)` gives and routing key `key_for(i)`, then reads back which
/// of `queues` each index landed in.
async fn placements(
    ch: &Channel,
    exchange: &str,
    queues: &[String],
    count: usize,
    key_for: impl Fn(usize) -> String,
    props_for: impl Fn(usize) -> BasicProperties,
) -> Vec<usize> {
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..count {
        publish_props(ch, exchange, &key_for(i), i.to_string().as_bytes(), props_for(i)).await;
    }
    ch.wait_for_confirms().await.unwrap();
    let mut placed = vec![usize::MAX; count];
    for (index, q) in queues.iter().enumerate() {
        while let Some(m) = get(ch, q, true).await {
            let i: usize = std::str::from_utf8(&m.delivery.data).unwrap().parse().unwrap();
            placed[i] = index;
        }
    }
    placed
}

/// Queues bound with weights 1, 3 and 2, in that order: RabbitMQ's buckets
/// 0, 1 to 3 and 4 to 5.
async fn six_buckets(ch: &Channel, args: FieldTable) -> (String, Vec<String>) {
    let ex = uniq("chr");
    declare_exchange(ch, &ex, "x-consistent-hash", false, args)
        .await
        .unwrap();
    let queues: Vec<String> = (0..3).map(|i| uniq(&format!("chr{i}"))).collect();
    for (q, weight) in queues.iter().zip(["1", "3", "2"]) {
        declare_queue(ch, q).await;
        bind(ch, q, &ex, weight).await.unwrap();
    }
    (ex, queues)
}

/// The queue index of each of RabbitMQ's six buckets in [`six_buckets`].
const BUCKET_OWNER: [usize; 6] = [0, 1, 1, 1, 2, 2];

fn owners(buckets: &[usize]) -> Vec<usize> {
    buckets.iter().map(|&b| BUCKET_OWNER[b]).collect()
}

/// Under the default settings a key goes to the queue RabbitMQ's plugin
/// picks (the buckets come from RabbitMQ's own code on Erlang/OTP), and a
/// weight is a proportion: weights 1 and 3 split 10,000 keys 1 : 3.
#[tokio::test]
async fn consistent_hash_places_keys_as_rabbitmq_does() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let (ex, queues) = six_buckets(&ch, FieldTable::default()).await;
    let placed = placements(
        &ch,
        &ex,
        &queues,
        40,
        |i| format!("k{i}"),
        |_| BasicProperties::default(),
    )
    .await;
    let rabbitmq = [
        1, 3, 5, 1, 2, 4, 1, 3, 5, 2, 4, 4, 2, 2, 1, 0, 0, 5, 0, 1, 4, 3, 4, 1, 3, 0, 5, 3, 4, 2, 2, 3, 2, 4, 5, 2, 0,
        5, 1, 0,
    ];
    assert_eq!(placed, owners(&rabbitmq));

    let ex = uniq("chw");
    declare_exchange(&ch, &ex, "x-consistent-hash", false, FieldTable::default())
        .await
        .unwrap();
    let (light, heavy) = (uniq("w1"), uniq("w3"));
    for (q, weight) in [(&light, "1"), (&heavy, "3")] {
        declare_queue(&ch, q).await;
        bind(&ch, q, &ex, weight).await.unwrap();
    }
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..10_000 {
        publish(&ch, &ex, &format!("key-{i}"), b"x").await;
    }
    ch.wait_for_confirms().await.unwrap();
    let (l, h) = (queue_count(&ch, &light).await, queue_count(&ch, &heavy).await);
    assert_eq!(l + h, 10_000);
    assert!((2_200..=2_800).contains(&l), "weight 1 got {l} of 10,000");
    // RabbitMQ puts exactly these counts in buckets 0 and 1 to 3.
    assert_eq!((l, h), (2_449, 7_551));
}

/// RabbitMQ's `hash-header` and `hash-property` arguments: the header's value
/// (a string or an integer), the message id, the correlation id or the
/// timestamp decides the queue, as in RabbitMQ; a declaration naming both, or
/// a property RabbitMQ cannot hash, is refused.
#[tokio::test]
async fn consistent_hash_on_rabbitmq_header_and_property() {
    use lapin::types::ShortString;
    let b = start().await;
    let (conn, ch) = b.channel().await;
    // RabbitMQ's buckets for the binaries "0" to "19", and for the integers
    // 0 to 19, over six buckets.
    let as_text = [3, 2, 5, 2, 0, 0, 3, 2, 1, 0, 2, 3, 1, 3, 3, 5, 0, 2, 2, 2];
    let as_integer = [4, 3, 0, 1, 3, 4, 4, 3, 1, 5, 3, 5, 2, 3, 5, 0, 0, 2, 2, 0];
    let fixed_key = |_| "same-routing-key".to_string();

    let args = table(&[("hash-header", long_str("user"))]);
    let (ex, queues) = six_buckets(&ch, args.clone()).await;
    let placed = placements(&ch, &ex, &queues, 20, fixed_key, |i| {
        headers(&[("user", long_str(&i.to_string()))])
    })
    .await;
    assert_eq!(placed, owners(&as_text), "string header");
    let (ex, queues) = six_buckets(&ch, args).await;
    let placed = placements(&ch, &ex, &queues, 20, fixed_key, |i| {
        headers(&[("user", AMQPValue::LongLongInt(i as i64))])
    })
    .await;
    assert_eq!(placed, owners(&as_integer), "integer header");

    for property in ["message_id", "correlation_id", "timestamp"] {
        let args = table(&[("hash-property", long_str(property))]);
        let (ex, queues) = six_buckets(&ch, args).await;
        let placed = placements(&ch, &ex, &queues, 20, fixed_key, |i| {
            let id = ShortString::from(i.to_string());
            match property {
                "message_id" => BasicProperties::default().with_message_id(id),
                "correlation_id" => BasicProperties::default().with_correlation_id(id),
                _ => BasicProperties::default().with_timestamp(i as u64),
            }
        })
        .await;
        assert_eq!(placed, owners(&as_text), "{property}");
    }

    let mut ev = events(&conn);
    let both = table(&[
        ("hash-header", long_str("a")),
        ("hash-property", long_str("message_id")),
    ]);
    let _ = declare_exchange(&ch, &uniq("chbad"), "x-consistent-hash", false, both).await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(
        msg.contains("hash-header and hash-property are mutually exclusive"),
        "{msg}"
    );
    let ch = conn.create_channel().await.unwrap();
    let unknown = table(&[("hash-property", long_str("app_id"))]);
    let _ = declare_exchange(&ch, &uniq("chbad"), "x-consistent-hash", false, unknown).await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("Unsupported property: app_id"), "{msg}");
}

#[tokio::test]
async fn consistent_hash_on_a_header() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ex = uniq("chh");
    let args = table(&[("x-hash-on", long_str("user"))]);
    declare_exchange(&ch, &ex, "x-consistent-hash", false, args)
        .await
        .unwrap();
    let (q1, q2) = (uniq("h1"), uniq("h2"));
    for q in [&q1, &q2] {
        declare_queue(&ch, q).await;
        bind(&ch, q, &ex, "10").await.unwrap();
    }
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for i in 0..20 {
        // Different routing keys, one header value: one queue gets them all.
        publish_props(
            &ch,
            &ex,
            &format!("rk{i}"),
            b"x",
            headers(&[("user", long_str("alice"))]),
        )
        .await;
    }
    ch.wait_for_confirms().await.unwrap();
    let (a, b2) = (queue_count(&ch, &q1).await, queue_count(&ch, &q2).await);
    assert_eq!(a + b2, 20);
    assert!(a == 20 || b2 == 20, "{a} + {b2}");
}

#[tokio::test]
async fn delayed_message_exchange_holds_messages_until_due() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ex = uniq("delay");
    let args = table(&[("x-delayed-type", long_str("direct"))]);
    declare_exchange(&ch, &ex, "x-delayed-message", false, args.clone())
        .await
        .unwrap();
    // Redeclaring with the same type and arguments is fine.
    declare_exchange(&ch, &ex, "x-delayed-message", false, args)
        .await
        .unwrap();
    let q = uniq("delayed-q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &ex, "k").await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    publish_props(
        &ch,
        &ex,
        "k",
        b"later",
        headers(&[("x-delay", AMQPValue::LongInt(400))]),
    )
    .await;
    publish(&ch, &ex, "k", b"now").await;
    ch.wait_for_confirms().await.unwrap();
    assert_eq!(
        queue_count(&ch, &q).await,
        1,
        "only the undelayed message is there at once"
    );
    eventually("delayed message released", || async { queue_count(&ch, &q).await == 2 }).await;
}

#[tokio::test]
async fn delayed_messages_survive_a_restart() {
    let mut b = start().await;
    let ex = uniq("delay-durable");
    let q = uniq("delay-durable-q");
    {
        let (_c, ch) = b.channel().await;
        // LavinMQ's way of declaring a delayed exchange.
        let args = table(&[("x-delayed-exchange", AMQPValue::Boolean(true))]);
        declare_exchange(&ch, &ex, "fanout", true, args).await.unwrap();
        let opts = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.as_str().into(), opts, FieldTable::default())
            .await
            .unwrap();
        bind(&ch, &q, &ex, "").await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let props = headers(&[("x-delay", AMQPValue::LongInt(700))]).with_delivery_mode(2);
        publish_props(&ch, &ex, "", b"after restart", props).await;
        ch.wait_for_confirms().await.unwrap();
        assert_eq!(queue_count(&ch, &q).await, 0);
    }
    b.restart().await;
    let v = b.server().broker.vhost("/").unwrap();
    let held = v
        .exchange(&ex)
        .expect("exchange restored")
        .delayed
        .as_ref()
        .map(|d| d.len());
    assert_eq!(held, Some(1), "the delayed message is held again");
    let (_c, ch) = b.channel().await;
    eventually("delayed message released after restart", || async {
        queue_count(&ch, &q).await == 1
    })
    .await;
}

#[tokio::test]
async fn delayed_message_needs_a_valid_delayed_type() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let mut ev = events(&conn);
    let _ = declare_exchange(&ch, &uniq("bad"), "x-delayed-message", false, FieldTable::default()).await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("x-delayed-type"), "{msg}");
}

#[tokio::test]
async fn deduplicating_exchange_routes_a_message_id_once() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let ex = uniq("dedup-ex");
    let args = table(&[("x-message-deduplication", AMQPValue::Boolean(true))]);
    declare_exchange(&ch, &ex, "fanout", false, args).await.unwrap();
    let q = uniq("dedup-ex-q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &ex, "").await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for id in ["a", "a", "b", "a"] {
        publish_props(&ch, &ex, "", b"m", headers(&[("x-deduplication-header", long_str(id))])).await;
    }
    publish(&ch, &ex, "", b"no id").await;
    ch.wait_for_confirms().await.unwrap();
    assert_eq!(queue_count(&ch, &q).await, 3);
}

#[tokio::test]
async fn deduplicating_queue_with_custom_header_and_cache_size() {
    let b = start().await;
    let (_c, ch) = b.channel().await;
    let q = uniq("dedup-q");
    let args = table(&[
        ("x-message-deduplication", AMQPValue::Boolean(true)),
        ("x-deduplication-header", long_str("msg-id")),
        ("x-cache-size", AMQPValue::LongInt(1)),
    ]);
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    // With room for one id, "a" is forgotten once "b" is seen.
    for id in ["a", "a", "b", "a"] {
        publish_props(&ch, "", &q, b"m", headers(&[("msg-id", long_str(id))])).await;
    }
    ch.wait_for_confirms().await.unwrap();
    assert_eq!(queue_count(&ch, &q).await, 3);
}

#[tokio::test]
async fn consistent_hash_algorithm_from_config_or_argument() {
    use lavinmq::core::consistent_hash::HashAlgorithm;
    let b = start_with(|c| c.main.default_consistent_hash_algorithm = "jump".into()).await;
    let (_c, ch) = b.channel().await;
    let (plain, ring) = (uniq("chx"), uniq("chx"));
    declare_exchange(&ch, &plain, "x-consistent-hash", false, FieldTable::default())
        .await
        .unwrap();
    let args = table(&[("x-algorithm", long_str("ring"))]);
    declare_exchange(&ch, &ring, "x-consistent-hash", false, args)
        .await
        .unwrap();
    let v = b.server().broker.vhost("/").unwrap();
    assert_eq!(v.exchange(&plain).unwrap().hash_algorithm(), Some(HashAlgorithm::Jump));
    assert_eq!(v.exchange(&ring).unwrap().hash_algorithm(), Some(HashAlgorithm::Ring));
}

#[tokio::test]
async fn consistent_hash_refuses_a_non_string_hash_header() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let ex = uniq("chh");
    let args = table(&[("x-hash-on", long_str("user"))]);
    declare_exchange(&ch, &ex, "x-consistent-hash", false, args)
        .await
        .unwrap();
    let mut ev = events(&conn);
    publish_props(&ch, &ex, "rk", b"x", headers(&[("user", AMQPValue::LongInt(7))])).await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("Routing header must be string"), "{msg}");
}

#[tokio::test]
async fn delayed_messages_due_while_the_broker_was_down_are_delivered_at_start() {
    let mut b = start().await;
    let ex = uniq("delay-overdue");
    let q = uniq("delay-overdue-q");
    {
        let (_c, ch) = b.channel().await;
        let args = table(&[("x-delayed-type", long_str("fanout"))]);
        declare_exchange(&ch, &ex, "x-delayed-message", true, args)
            .await
            .unwrap();
        let opts = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.as_str().into(), opts, FieldTable::default())
            .await
            .unwrap();
        bind(&ch, &q, &ex, "").await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        for i in 0..5 {
            let props = headers(&[("x-delay", AMQPValue::LongInt(300))]).with_delivery_mode(2);
            publish_props(&ch, &ex, "", format!("m{i}").as_bytes(), props).await;
        }
        ch.wait_for_confirms().await.unwrap();
    }
    b.restart_after(std::time::Duration::from_millis(600)).await;
    let (_c, ch) = b.channel().await;
    eventually("overdue delayed messages delivered", || async {
        queue_count(&ch, &q).await == 5
    })
    .await;
}

#[tokio::test]
async fn consistent_hash_weight_is_bounded() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let ex = uniq("chx");
    declare_exchange(&ch, &ex, "x-consistent-hash", false, FieldTable::default())
        .await
        .unwrap();
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &ex, "10000").await.unwrap();
    let mut ev = events(&conn);
    let _ = bind(&ch, &q, &ex, "10001").await;
    let msg = expect_error(&mut ev, 406).await;
    assert!(msg.contains("The binding key must not exceed 10000"), "{msg}");
}

/// LavinMQ's `delayed-message: true` policy key makes a matching exchange
/// delayed, as the `x-delayed-exchange` argument does: `/api/exchanges` shows
/// the exchange's own type and arguments with the policy in force, held
/// messages survive a restart, and once the policy is removed new messages
/// are routed at once while those already held are still released.
#[tokio::test]
async fn delayed_message_policy_makes_an_exchange_delayed() {
    let mut b = start().await;
    let api = Api::new(&b);
    let (ex, q) = (uniq("dpol-x"), uniq("dpol-q"));
    {
        let (_c, ch) = b.channel().await;
        declare_exchange(&ch, &ex, "direct", true, FieldTable::default())
            .await
            .unwrap();
        let opts = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.as_str().into(), opts, FieldTable::default())
            .await
            .unwrap();
        bind(&ch, &q, &ex, "k").await.unwrap();
    }
    let policy = serde_json::json!({"pattern": "^dpol-x", "apply-to": "exchanges",
                                    "definition": {"delayed-message": true}});
    assert_eq!(
        api.put("/api/policies/%2F/delay", policy).await,
        reqwest::StatusCode::CREATED
    );
    let shown = api.get_ok(&format!("/api/exchanges/%2F/{ex}")).await;
    assert_eq!(shown["type"], "direct", "{shown}");
    assert_eq!(shown["arguments"], serde_json::json!({}), "{shown}");
    assert_eq!(shown["policy"], "delay", "{shown}");
    assert_eq!(shown["effective_policy_definition"]["delayed-message"], true, "{shown}");
    assert_eq!(shown["delayed"], true, "{shown}");
    {
        let (_c, ch) = b.channel().await;
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        let held = headers(&[("x-delay", AMQPValue::LongInt(300))]).with_delivery_mode(2);
        publish_props(&ch, &ex, "k", b"held", held).await;
        publish(&ch, &ex, "k", b"now").await;
        ch.wait_for_confirms().await.unwrap();
        assert_eq!(
            queue_count(&ch, &q).await,
            1,
            "only the undelayed message is there at once"
        );
    }
    b.restart().await;
    let api = Api::new(&b);
    let (_c, ch) = b.channel().await;
    eventually("message held by the policy released after a restart", || async {
        queue_count(&ch, &q).await == 2
    })
    .await;

    assert_eq!(
        api.delete("/api/policies/%2F/delay").await,
        reqwest::StatusCode::NO_CONTENT
    );
    let shown = api.get_ok(&format!("/api/exchanges/%2F/{ex}")).await;
    assert_eq!(shown["policy"], serde_json::Value::Null, "{shown}");
    assert_eq!(shown["delayed"], false, "{shown}");
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    publish_props(
        &ch,
        &ex,
        "k",
        b"no longer held",
        headers(&[("x-delay", AMQPValue::LongInt(3_600_000))]),
    )
    .await;
    ch.wait_for_confirms().await.unwrap();
    assert_eq!(queue_count(&ch, &q).await, 3, "routed at once without the policy");
}
