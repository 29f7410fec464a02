//! Publishing: confirms, returns (mandatory and immediate), transactions, CC/BCC,
//! property validation and round-trip, direct reply-to and the size limit; the
//! resource alarms that block publishers are in `publish/disk_alarm.rs` and
//! `publish/memory_alarm.rs`.

use crate::common;
mod disk_alarm;
mod memory_alarm;
mod pacing;

use common::*;
use lapin::message::BasicReturnMessage;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
};
use lapin::types::{AMQPValue, ByteArray, DecimalValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

fn table(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    t
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

fn strings(items: &[&str]) -> AMQPValue {
    AMQPValue::FieldArray(FieldArray::from(items.iter().map(|i| s(i)).collect::<Vec<_>>()))
}

/// Publishes in confirm mode and returns the returned message, if any, after
/// checking that the publish was acked.
async fn publish_for_return(
    ch: &Channel,
    exchange: &str,
    key: &str,
    opts: BasicPublishOptions,
    body: &[u8],
    props: BasicProperties,
) -> Option<BasicReturnMessage> {
    let confirm = ch
        .basic_publish(exchange.into(), key.into(), opts, body, props)
        .await
        .expect("publish");
    let c = within("publisher confirm", confirm).await.expect("publisher confirm");
    assert!(c.is_ack(), "expected an ack, got {c:?}");
    c.take_message()
}

async fn try_publish(conn: &Connection, props: BasicProperties) -> Option<u16> {
    // Publishes to a fresh queue on a fresh confirm-mode channel; returns the
    // reply code if the broker closes the channel, None when the confirm comes.
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    let mut ev = events(conn);
    let confirm = ch
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            b"body",
            props,
        )
        .await
        .expect("publish");
    match within("confirm or close", confirm).await {
        Ok(c) => {
            assert!(c.is_ack());
            None
        }
        Err(e) => Some(match reply_code(&e) {
            Some(code) => code,
            None => next_error(&mut ev).await.0,
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_ack_every_publish() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    for i in 0..5u8 {
        publish_confirmed(&ch, "", &q, &[i]).await;
    }
    // Unroutable (not mandatory) messages are acked too.
    publish_confirmed(&ch, "amq.direct", "nowhere", b"dropped").await;
    // Many in flight at once.
    let mut pending = Vec::new();
    for i in 0..2000u32 {
        let c = ch
            .basic_publish(
                "".into(),
                q.as_str().into(),
                BasicPublishOptions::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        pending.push(c);
    }
    let returned = within("all confirms", ch.wait_for_confirms())
        .await
        .expect("wait_for_confirms");
    assert!(returned.is_empty());
    for c in pending {
        let c = within("confirm", c).await.expect("confirm");
        assert!(c.is_ack(), "{c:?}");
    }
    assert_eq!(message_count(&conn, &q).await, 2005);
}

/// A channel publishing to one routing key on the default exchange while
/// another deletes the queue of that name and declares it again: each message
/// reaches the queue of that name at the time, or nothing while there is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_exchange_follows_its_queue_deleted_and_declared_again() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let (_admin_conn, admin) = broker.channel().await;
    let q = uniq("again");
    confirm_select(&ch).await;
    // No queue yet: unroutable.
    publish_confirmed(&ch, "", &q, b"before").await;
    declare_queue(&admin, &q).await;
    publish_confirmed(&ch, "", &q, b"one").await;
    publish_confirmed(&ch, "", &q, b"two").await;
    assert_eq!(drain(&admin, &q).await, [b"one".to_vec(), b"two".to_vec()]);
    within(
        "queue.delete",
        admin.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    publish_confirmed(&ch, "", &q, b"gone").await;
    declare_queue(&admin, &q).await;
    publish_confirmed(&ch, "", &q, b"three").await;
    assert_eq!(drain(&admin, &q).await, [b"three".to_vec()]);
    // Replaced between two publishes.
    within(
        "queue.delete",
        admin.queue_delete(q.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    declare_queue(&admin, &q).await;
    publish_confirmed(&ch, "", &q, b"four").await;
    assert_eq!(drain(&admin, &q).await, [b"four".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_topic_publish_follows_binds_unbinds_and_queue_deletion() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let (_admin_conn, admin) = broker.channel().await;
    let (a, b) = (uniq("route-a"), uniq("route-b"));
    declare_queue(&admin, &a).await;
    declare_queue(&admin, &b).await;
    let bind = |q: String, key: &'static str| {
        let admin = admin.clone();
        async move {
            within(
                "queue.bind",
                admin.queue_bind(
                    q.as_str().into(),
                    "amq.topic".into(),
                    key.into(),
                    Default::default(),
                    Default::default(),
                ),
            )
            .await
            .expect("queue.bind");
        }
    };
    confirm_select(&ch).await;
    bind(a.clone(), "sensor.*").await;
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"one").await;
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"two").await;
    // A second queue bound: the same key now reaches both.
    bind(b.clone(), "#").await;
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"three").await;
    assert_eq!(
        drain(&admin, &a).await,
        [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
    );
    assert_eq!(drain(&admin, &b).await, [b"three".to_vec()]);
    // Unbound: only the other queue.
    within(
        "queue.unbind",
        admin.queue_unbind(
            a.as_str().into(),
            "amq.topic".into(),
            "sensor.*".into(),
            Default::default(),
        ),
    )
    .await
    .expect("queue.unbind");
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"four").await;
    assert_eq!(drain(&admin, &b).await, [b"four".to_vec()]);
    assert_eq!(queue_count(&admin, &a).await, 0);
    // The other queue deleted: the key reaches nothing.
    within(
        "queue.delete",
        admin.queue_delete(b.as_str().into(), Default::default()),
    )
    .await
    .expect("queue.delete");
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"five").await;
    bind(a.clone(), "sensor.1").await;
    publish_confirmed(&ch, "amq.topic", "sensor.1", b"six").await;
    assert_eq!(drain(&admin, &a).await, [b"six".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mandatory_unroutable_is_returned_312() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    confirm_select(&ch).await;
    let props = BasicProperties::default()
        .with_message_id("m-1".into())
        .with_headers(table(vec![("k", s("v"))]));
    let mandatory = BasicPublishOptions {
        mandatory: true,
        ..Default::default()
    };
    let ret = publish_for_return(&ch, "amq.direct", "no-binding", mandatory, b"unroutable", props.clone())
        .await
        .expect("basic.return");
    assert_eq!(ret.reply_code, 312);
    assert_eq!(ret.reply_text.as_str(), "NO_ROUTE");
    assert_eq!(ret.delivery.exchange.as_str(), "amq.direct");
    assert_eq!(ret.delivery.routing_key.as_str(), "no-binding");
    assert_eq!(ret.delivery.data, b"unroutable");
    assert_eq!(ret.delivery.properties, props);

    // Default exchange, no such queue.
    let ret = publish_for_return(&ch, "", &uniq("no-queue"), mandatory, b"x", BasicProperties::default())
        .await
        .expect("basic.return");
    assert_eq!(ret.reply_code, 312);

    // Routable mandatory messages are not returned.
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let ret = publish_for_return(&ch, "", &q, mandatory, b"ok", BasicProperties::default()).await;
    assert!(ret.is_none());
    assert_eq!(message_count(&conn, &q).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_without_ready_consumer_is_returned_313() {
    // LavinMQ behaviour (RabbitMQ 3+ refuses immediate=true with 540).
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    let immediate = BasicPublishOptions {
        immediate: true,
        ..Default::default()
    };
    let ret = publish_for_return(&ch, "", &q, immediate, b"now", BasicProperties::default())
        .await
        .expect("basic.return");
    assert_eq!(ret.reply_code, 313);
    assert_eq!(ret.reply_text.as_str(), "NO_CONSUMERS");
    assert_eq!(ret.delivery.data, b"now");
    assert_eq!(message_count(&conn, &q).await, 0, "returned message was queued");

    // With a consumer ready it is delivered, not returned.
    let cch = conn.create_channel().await.expect("channel");
    let mut c = consume(&cch, &q).await;
    let ret = publish_for_return(&ch, "", &q, immediate, b"now2", BasicProperties::default()).await;
    assert!(ret.is_none(), "returned although a consumer was ready");
    let d = next_delivery(&mut c).await;
    assert_eq!(d.data, b"now2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_commit_and_rollback_publishes() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let cch = conn.create_channel().await.expect("channel");
    let mut c = consume(&cch, &q).await;

    ch.tx_select().await.expect("tx.select");
    publish(&ch, "", &q, b"rolled-back-1").await;
    publish(&ch, "", &q, b"rolled-back-2").await;
    assert_no_delivery(&mut c).await;
    ch.tx_rollback().await.expect("tx.rollback");
    assert_no_delivery(&mut c).await;

    publish(&ch, "", &q, b"committed-1").await;
    publish(&ch, "", &q, b"committed-2").await;
    assert_no_delivery(&mut c).await;
    ch.tx_commit().await.expect("tx.commit");
    let ds = deliveries(&mut c, 2).await;
    assert_eq!(ds[0].data, b"committed-1");
    assert_eq!(ds[1].data, b"committed-2");
    assert_no_delivery(&mut c).await;
    // The channel stays transactional: the next commit is a new transaction.
    publish(&ch, "", &q, b"committed-3").await;
    ch.tx_commit().await.expect("tx.commit");
    assert_eq!(next_delivery(&mut c).await.data, b"committed-3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_acks_apply_at_commit() {
    let broker = start().await;
    let conn = broker.connect().await;
    let setup = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&setup, &q).await;
    publish(&setup, "", &q, b"m").await;

    let ch = conn.create_channel().await.expect("channel");
    ch.tx_select().await.expect("tx.select");
    let m = get(&ch, &q, false).await.expect("message");
    ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .expect("ack");
    ch.tx_rollback().await.expect("tx.rollback");
    // The rolled-back ack never happened: closing the channel requeues it.
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 1);

    let ch = conn.create_channel().await.expect("channel");
    ch.tx_select().await.expect("tx.select");
    let m = get(&ch, &q, false).await.expect("message");
    assert!(m.delivery.redelivered);
    ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .expect("ack");
    ch.tx_commit().await.expect("tx.commit");
    ch.close(200, "OK".into()).await.expect("close");
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_or_rollback_without_select_fails_406() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    assert_code(ch.tx_commit().await, 406);
    let ch = conn.create_channel().await.expect("channel");
    assert_code(ch.tx_rollback().await, 406);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_and_tx_modes_exclude_each_other_406() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    confirm_select(&ch).await;
    assert_code(ch.tx_select().await, 406);
    let ch = conn.create_channel().await.expect("channel");
    ch.tx_select().await.expect("tx.select");
    assert_code(ch.confirm_select(Default::default()).await, 406);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cc_and_bcc_headers_add_routing_keys_and_bcc_is_removed() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let x = uniq("direct");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare");
    let (qa, qb, qc, qd) = (uniq("qa"), uniq("qb"), uniq("qc"), uniq("qd"));
    for (q, key) in [(&qa, "a"), (&qb, "b"), (&qc, "c"), (&qd, "d")] {
        declare_queue(&ch, q).await;
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    }
    let headers = table(vec![
        ("CC", strings(&["b", "a"])),
        ("BCC", strings(&["c"])),
        ("other", s("kept")),
    ]);
    publish_props(&ch, &x, "a", b"cc", BasicProperties::default().with_headers(headers)).await;
    for q in [&qa, &qb, &qc] {
        let m = get(&ch, q, true).await.expect("message");
        assert_eq!(m.delivery.data, b"cc");
        let h = m.delivery.properties.headers().clone().expect("headers kept");
        assert_eq!(h.inner().get("CC"), Some(&strings(&["b", "a"])), "CC in {q}");
        assert_eq!(h.inner().get("other"), Some(&s("kept")));
        assert!(!h.contains_key("BCC"), "BCC visible to consumers of {q}");
        assert!(get(&ch, q, true).await.is_none(), "{q} got a duplicate");
    }
    assert!(get(&ch, &qd, true).await.is_none());

    // CC works on the default exchange too.
    publish_props(
        &ch,
        "",
        &qa,
        b"cc-default",
        BasicProperties::default().with_headers(table(vec![("CC", strings(&[qd.as_str()]))])),
    )
    .await;
    assert_eq!(drain(&ch, &qa).await, vec![b"cc-default".to_vec()]);
    assert_eq!(drain(&ch, &qd).await, vec![b"cc-default".to_vec()]);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_id_must_match_the_authenticated_user() {
    let broker = start().await;
    let conn = broker.connect().await;
    assert_eq!(
        try_publish(&conn, BasicProperties::default().with_user_id("guest".into())).await,
        None
    );
    assert_eq!(
        try_publish(&conn, BasicProperties::default().with_user_id("mallory".into())).await,
        Some(406)
    );
    assert!(conn.status().connected());
    // With LavinMQ's `impersonator` tag a user may publish as anyone (a relay
    // forwarding other users' messages); the tag applies to an open connection.
    let users = &broker.server().broker.users;
    users
        .update("guest", |u| u.tags.push("impersonator".into()))
        .expect("tag added");
    assert_eq!(
        try_publish(&conn, BasicProperties::default().with_user_id("mallory".into())).await,
        None
    );
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("impersonated");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    ch.basic_publish(
        "".into(),
        q.as_str().into(),
        BasicPublishOptions::default(),
        b"as mallory",
        BasicProperties::default().with_user_id("mallory".into()),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let got = get(&ch, &q, true).await.expect("the message");
    assert_eq!(got.properties.user_id().as_ref().map(|u| u.as_str()), Some("mallory"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiration_must_be_a_non_negative_integer() {
    let broker = start().await;
    let conn = broker.connect().await;
    assert_eq!(
        try_publish(&conn, BasicProperties::default().with_expiration("60000".into())).await,
        None
    );
    assert_eq!(
        try_publish(&conn, BasicProperties::default().with_expiration("0".into())).await,
        None
    );
    for bad in ["abc", "-1", "10s", ""] {
        assert_eq!(
            try_publish(&conn, BasicProperties::default().with_expiration(bad.into())).await,
            Some(406),
            "expiration {bad:?}"
        );
    }
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_properties_and_nested_headers_round_trip() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let nested = table(vec![
        ("inner-str", s("deep")),
        (
            "inner-table",
            AMQPValue::FieldTable(table(vec![("x", AMQPValue::Boolean(false))])),
        ),
        (
            "inner-array",
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::LongInt(1),
                s("two"),
                AMQPValue::FieldTable(table(vec![("three", AMQPValue::Double(3.0))])),
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Void])),
            ])),
        ),
    ]);
    let headers = table(vec![
        ("bool", AMQPValue::Boolean(true)),
        ("i8", AMQPValue::ShortShortInt(-8)),
        ("u8", AMQPValue::ShortShortUInt(200)),
        ("i16", AMQPValue::ShortInt(-1600)),
        ("u16", AMQPValue::ShortUInt(60_000)),
        ("i32", AMQPValue::LongInt(-3_200_000)),
        ("u32", AMQPValue::LongUInt(4_000_000_000)),
        ("i64", AMQPValue::LongLongInt(-6_400_000_000_000)),
        ("f32", AMQPValue::Float(1.5)),
        ("f64", AMQPValue::Double(-2.25e100)),
        (
            "decimal",
            AMQPValue::DecimalValue(DecimalValue {
                scale: 2,
                value: 12_345,
            }),
        ),
        ("string", s("héllo wörld")),
        ("empty-string", s("")),
        ("timestamp", AMQPValue::Timestamp(1_700_000_000)),
        ("void", AMQPValue::Void),
        ("bytes", AMQPValue::ByteArray(ByteArray::from(vec![0u8, 1, 254, 255]))),
        ("array", strings(&["a", "b"])),
        ("empty-array", AMQPValue::FieldArray(FieldArray::default())),
        ("table", AMQPValue::FieldTable(nested)),
        ("empty-table", AMQPValue::FieldTable(FieldTable::default())),
    ]);
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("gzip".into())
        .with_headers(headers)
        .with_delivery_mode(2)
        .with_priority(7)
        .with_correlation_id("corr-1".into())
        .with_reply_to("reply-queue".into())
        .with_expiration("3600000".into())
        .with_message_id("msg-1".into())
        .with_timestamp(1_600_000_000)
        .with_type("order.created".into())
        .with_user_id("guest".into())
        .with_app_id("tests".into())
        .with_cluster_id("cluster-x".into());
    confirm_select(&ch).await;
    let confirm = ch
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            b"{\"json\":true}",
            props.clone(),
        )
        .await
        .expect("publish");
    assert!(within("confirm", confirm).await.expect("confirm").is_ack());
    // No properties at all also round-trip (as none).
    publish_confirmed(&ch, "", &q, b"bare").await;

    let m = get(&ch, &q, true).await.expect("message");
    assert_eq!(m.delivery.properties, props);
    assert_eq!(m.delivery.data, b"{\"json\":true}");
    let bare = get(&ch, &q, true).await.expect("message");
    assert_eq!(bare.delivery.properties, BasicProperties::default());

    // And through a consumer.
    publish_props(&ch, "", &q, b"again", props.clone()).await;
    let mut c = consume_with(
        &ch,
        &q,
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    let d = next_delivery(&mut c).await;
    assert_eq!(d.properties, props);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_round_trip() {
    let broker = start().await;
    let requester = broker.connect().await;
    let responder = broker.connect().await;
    let rq = uniq("rpc");
    let rch = responder.create_channel().await.expect("channel");
    declare_queue(&rch, &rq).await;
    let mut requests = consume(&rch, &rq).await;

    let ch = requester.create_channel().await.expect("channel");
    let mut replies = consume_with(
        &ch,
        "amq.rabbitmq.reply-to",
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    publish_props(
        &ch,
        "",
        &rq,
        b"ping",
        BasicProperties::default()
            .with_reply_to("amq.rabbitmq.reply-to".into())
            .with_correlation_id("c-1".into()),
    )
    .await;

    let req = next_delivery(&mut requests).await;
    assert_eq!(req.data, b"ping");
    let reply_to = req.properties.reply_to().clone().expect("reply_to set").to_string();
    assert!(
        reply_to.starts_with("amq.rabbitmq.reply-to.") && reply_to.len() > 22,
        "reply_to was not rewritten: {reply_to:?}"
    );
    req.ack(BasicAckOptions::default()).await.expect("ack");
    publish_props(
        &rch,
        "",
        &reply_to,
        b"pong",
        BasicProperties::default().with_correlation_id("c-1".into()),
    )
    .await;

    let reply = next_delivery(&mut replies).await;
    assert_eq!(reply.data, b"pong");
    assert_eq!(reply.routing_key.as_str(), reply_to);
    assert_eq!(
        reply.properties.correlation_id().as_ref().map(|c| c.as_str()),
        Some("c-1")
    );
    assert_no_delivery(&mut replies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_reply_to_preconditions_406() {
    let broker = start().await;
    let conn = broker.connect().await;
    // reply_to=amq.rabbitmq.reply-to without consuming from it first.
    assert_eq!(
        try_publish(
            &conn,
            BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into())
        )
        .await,
        Some(406)
    );
    // The reply consumer must be no-ack.
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .basic_consume(
            "amq.rabbitmq.reply-to".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r.map(|_| ()), 406);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_above_max_message_size_fails_406() {
    let broker = start_with(|c| c.amqp.max_message_size = 1024).await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", &q, &[7u8; 1024]).await;
    let mut ev = events(&conn);
    let confirm = ch
        .basic_publish(
            "".into(),
            q.as_str().into(),
            BasicPublishOptions::default(),
            &[7u8; 1025],
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    let r = within("confirm or close", confirm).await;
    assert!(r.is_err(), "oversized message confirmed: {r:?}");
    expect_error(&mut ev, 406).await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
    assert_eq!(message_count(&conn, &q).await, 1);
    // The connection is still in sync: a new channel publishes fine.
    let ch = conn.create_channel().await.expect("channel");
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", &q, b"small").await;
    assert_eq!(message_count(&conn, &q).await, 2);
}
