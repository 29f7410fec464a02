//! What survives a restart: durable definitions and their messages (in order,
//! with properties), and nothing that was transient, exclusive or acked.

use crate::common;

use common::*;
use lapin::options::{
    BasicAckOptions, ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use lavinmq::server::{Server, StartError};

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn max_length(n: i64) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert("x-max-length".into(), AMQPValue::LongLongInt(n));
    t
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

async fn declare_durable_exchange(ch: &Channel, name: &str, kind: ExchangeKind, args: FieldTable) {
    ch.exchange_declare(
        name.into(),
        kind,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .expect("exchange.declare");
}

/// Publishes on a confirm-mode channel and waits for every confirm.
async fn publish_all(conn: &Connection, exchange: &str, key: &str, msgs: &[(Vec<u8>, BasicProperties)]) {
    let ch = conn.create_channel().await.expect("channel");
    confirm_select(&ch).await;
    for (body, props) in msgs {
        publish_props(&ch, exchange, key, body, props.clone()).await;
    }
    let returned = within("confirms", ch.wait_for_confirms()).await.expect("confirms");
    assert!(returned.is_empty());
    ch.close(200, "OK".into()).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_definitions_and_persistent_messages_survive_restart() {
    let mut broker = start().await;
    let (x, x2, ae, q) = (uniq("x"), uniq("x2"), uniq("ae"), uniq("q"));
    let headers = {
        let mut h = FieldTable::default();
        h.insert("str".into(), AMQPValue::LongString("value".into()));
        h.insert("num".into(), AMQPValue::LongLongInt(-42));
        h.insert(
            "list".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::Boolean(true),
                AMQPValue::LongString("x".into()),
            ])),
        );
        let mut inner = FieldTable::default();
        inner.insert("deep".into(), AMQPValue::Double(0.5));
        h.insert("table".into(), AMQPValue::FieldTable(inner));
        h
    };
    let msgs: Vec<(Vec<u8>, BasicProperties)> = (0..20)
        .map(|i| {
            let props = persistent()
                .with_content_type("text/plain".into())
                .with_message_id(format!("id-{i}").as_str().into())
                .with_correlation_id("corr".into())
                .with_priority(3)
                .with_timestamp(1_700_000_000 + i as u64)
                .with_headers(headers.clone());
            (format!("message {i}").into_bytes(), props)
        })
        .collect();
    {
        let (conn, ch) = broker.channel().await;
        declare_durable_exchange(&ch, &ae, ExchangeKind::Fanout, FieldTable::default()).await;
        let mut args = FieldTable::default();
        args.insert("alternate-exchange".into(), AMQPValue::LongString(ae.as_str().into()));
        declare_durable_exchange(&ch, &x, ExchangeKind::Topic, args).await;
        declare_durable_exchange(&ch, &x2, ExchangeKind::Direct, FieldTable::default()).await;
        ch.queue_declare(q.as_str().into(), durable(), max_length(1_000_000))
            .await
            .expect("queue.declare");
        ch.queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "k.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
        ch.exchange_bind(
            x.as_str().into(),
            x2.as_str().into(),
            "k.e2e".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("exchange.bind");
        publish_all(&conn, &x, "k.msg", &msgs).await;
        assert_eq!(message_count(&conn, &q).await, 20);
        conn.close(200, "OK".into()).await.expect("close");
    }

    broker.restart().await;

    let (conn, ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, 20, "messages after restart");
    // Definitions came back with their properties and arguments.
    ch.queue_declare(q.as_str().into(), durable(), max_length(1_000_000))
        .await
        .expect("equivalent redeclare after restart");
    let r = conn
        .create_channel()
        .await
        .expect("channel")
        .queue_declare(q.as_str().into(), durable(), max_length(5))
        .await;
    assert_code(r, 406);
    let mut ae_args = FieldTable::default();
    ae_args.insert("alternate-exchange".into(), AMQPValue::LongString(ae.as_str().into()));
    declare_durable_exchange(&ch, &x, ExchangeKind::Topic, ae_args).await;
    let r = conn
        .create_channel()
        .await
        .expect("channel")
        .exchange_declare(
            x.as_str().into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    assert_code(r, 406);
    // The messages, in order, byte- and property-exact.
    for (i, (body, props)) in msgs.iter().enumerate() {
        let m = get(&ch, &q, false).await.unwrap_or_else(|| panic!("message {i} lost"));
        assert_eq!(&m.delivery.data, body, "body of message {i}");
        assert_eq!(&m.delivery.properties, props, "properties of message {i}");
        assert_eq!(m.delivery.exchange.as_str(), x);
        assert_eq!(m.delivery.routing_key.as_str(), "k.msg");
        ch.basic_ack(m.delivery.delivery_tag, BasicAckOptions::default())
            .await
            .expect("ack");
    }
    assert!(get(&ch, &q, true).await.is_none());
    // Bindings came back: queue binding, exchange-to-exchange binding and the
    // alternate exchange (which has no queue, so the message is dropped).
    publish(&ch, &x, "k.after", b"direct").await;
    publish(&ch, &x2, "k.e2e", b"through-e2e").await;
    publish(&ch, &x2, "other", b"unrouted").await;
    assert_eq!(drain(&ch, &q).await, vec![b"direct".to_vec(), b"through-e2e".to_vec()]);
    // The alternate exchange still applies.
    let aeq = uniq("ae-q");
    declare_queue(&ch, &aeq).await;
    ch.queue_bind(
        aeq.as_str().into(),
        ae.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    publish(&ch, &x, "nomatch", b"to-ae").await;
    assert_eq!(drain(&ch, &aeq).await, vec![b"to-ae".to_vec()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_and_exclusive_entities_do_not_survive_restart() {
    let mut broker = start().await;
    let (tq, eq, dq, tx) = (uniq("transient"), uniq("exclusive"), uniq("durable"), uniq("tx"));
    {
        let (conn, ch) = broker.channel().await;
        declare_queue(&ch, &tq).await;
        ch.queue_declare(
            eq.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exclusive declare");
        ch.queue_declare(dq.as_str().into(), durable(), FieldTable::default())
            .await
            .expect("durable declare");
        ch.exchange_declare(
            tx.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("transient exchange");
        ch.queue_bind(
            dq.as_str().into(),
            "amq.fanout".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
        let m = vec![(b"p".to_vec(), persistent())];
        publish_all(&conn, "", &tq, &m).await;
        publish_all(&conn, "", &eq, &m).await;
        // The connection stays open: shutdown closes it.
        broker.restart().await;
        let _ = conn;
    }
    let conn = broker.connect().await;
    assert!(!queue_exists(&conn, &tq).await, "transient queue survived");
    assert!(!queue_exists(&conn, &eq).await, "exclusive queue survived");
    assert!(!exchange_exists(&conn, &tx).await, "transient exchange survived");
    assert!(queue_exists(&conn, &dq).await, "durable queue lost");
    // A binding from a predefined exchange to a durable queue survives too.
    let ch = conn.create_channel().await.expect("channel");
    publish(&ch, "amq.fanout", "", b"fanned").await;
    assert_eq!(drain(&ch, &dq).await, vec![b"fanned".to_vec()]);
    // The transient queue's name is free and the new queue is empty.
    let d = declare_queue(&ch, &tq).await;
    assert_eq!(d.message_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_purged_and_deleted_messages_do_not_come_back() {
    let mut broker = start().await;
    let (q, purged, deleted) = (uniq("q"), uniq("purged"), uniq("deleted"));
    {
        let (conn, ch) = broker.channel().await;
        for name in [&q, &purged, &deleted] {
            ch.queue_declare(name.as_str().into(), durable(), FieldTable::default())
                .await
                .expect("declare");
        }
        let msgs: Vec<_> = (0..10).map(|i| (i.to_string().into_bytes(), persistent())).collect();
        publish_all(&conn, "", &q, &msgs).await;
        publish_all(&conn, "", &purged, &msgs[..5]).await;
        publish_all(&conn, "", &deleted, &msgs[..5]).await;

        let mut c = consume(&ch, &q).await;
        for i in 0..6 {
            let d = next_delivery(&mut c).await;
            assert_eq!(d.data, i.to_string().as_bytes());
            d.ack(BasicAckOptions::default()).await.expect("ack");
        }
        ch.basic_cancel(c.tag(), Default::default()).await.expect("cancel");
        // The consumer also received 6..9 without acking them; they stay unacked
        // after the cancel until the channel closes and requeues them.
        ch.close(200, "OK".into()).await.expect("close");
        let ch = conn.create_channel().await.expect("channel");
        let six = get(&ch, &q, true).await.expect("message 6");
        assert_eq!(six.delivery.data, b"6");
        let seven = get(&ch, &q, false).await.expect("message 7");
        assert_eq!(seven.delivery.data, b"7");
        // 7 stays unacked across the restart.
        ch.queue_purge(purged.as_str().into(), QueuePurgeOptions::default())
            .await
            .expect("purge");
        ch.queue_delete(deleted.as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("delete");
        broker.restart().await;
        let _ = conn;
    }
    let (conn, ch) = broker.channel().await;
    assert_eq!(
        drain(&ch, &q).await,
        vec![b"7".to_vec(), b"8".to_vec(), b"9".to_vec()],
        "exactly the unacked and unconsumed messages, in order"
    );
    assert_eq!(message_count(&conn, &purged).await, 0);
    assert!(!queue_exists(&conn, &deleted).await, "deleted queue came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_spanning_many_segments_survives_restart_in_order() {
    const N: usize = 5_000;
    let mut broker = start_with(|c| c.main.segment_size = 64 * 1024).await;
    let q = uniq("segments");
    let body = |i: usize| {
        let mut b = format!("{i:08}-").into_bytes();
        b.resize(100, b'a' + (i % 26) as u8);
        b
    };
    {
        let (conn, ch) = broker.channel().await;
        ch.queue_declare(q.as_str().into(), durable(), FieldTable::default())
            .await
            .expect("declare");
        confirm_select(&ch).await;
        for i in 0..N {
            publish_props(&ch, "", &q, &body(i), persistent()).await;
        }
        within("confirms", ch.wait_for_confirms()).await.expect("confirms");
        assert_eq!(message_count(&conn, &q).await, N as u32);
        // Consume the first 1000 so that whole segments are fully acked.
        let cch = conn.create_channel().await.expect("channel");
        cch.basic_qos(200, Default::default()).await.expect("qos");
        let mut c = consume(&cch, &q).await;
        for i in 0..1000 {
            let d = next_delivery(&mut c).await;
            assert_eq!(d.data, body(i));
            if i % 50 == 49 {
                cch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
                    .await
                    .expect("ack");
            }
        }
        cch.basic_cancel(c.tag(), Default::default()).await.expect("cancel");
        cch.close(200, "OK".into()).await.expect("close");
        conn.close(200, "OK".into()).await.expect("close");
    }
    broker.restart().await;
    {
        let (conn, ch) = broker.channel().await;
        assert_eq!(message_count(&conn, &q).await, (N - 1000) as u32);
        // Take another 2000, then restart again mid-queue.
        for i in 1000..3000 {
            let m = get(&ch, &q, true).await.expect("message");
            assert_eq!(m.delivery.data, body(i), "message {i}");
        }
        // New messages go after the recovered ones.
        publish_all(&conn, "", &q, &[(body(N), persistent())]).await;
        conn.close(200, "OK".into()).await.expect("close");
    }
    broker.restart().await;
    let (conn, ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, (N + 1 - 3000) as u32);
    ch.basic_qos(500, Default::default()).await.expect("qos");
    let mut c = consume(&ch, &q).await;
    for i in 3000..=N {
        let d = next_delivery(&mut c).await;
        assert_eq!(d.data, body(i), "message {i} after the second restart");
        if i % 100 == 0 || i == N {
            ch.basic_ack(d.delivery_tag, BasicAckOptions { multiple: true })
                .await
                .expect("ack");
        }
    }
    assert_no_delivery(&mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_server_on_the_same_data_dir_is_refused() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("transient");
    declare_queue(&ch, &q).await;
    publish_all(&conn, "", &q, &[(b"kept".to_vec(), BasicProperties::default())]).await;

    let mut config = broker.config.clone();
    config.amqp.port = 0;
    config.mgmt.port = 0;
    config.mqtt.port = 0;
    config.stream.port = Some(0);
    match Server::start(&config).await {
        Ok(second) => {
            second.shutdown().await;
            panic!("a second server started on a locked data dir");
        }
        Err(StartError::Locked(msg)) => {
            assert!(!msg.is_empty());
        }
        Err(e) => panic!("expected a lock error, got: {e}"),
    }
    // The failed attempt disturbed nothing, not even transient state.
    assert_eq!(message_count(&conn, &q).await, 1);
    assert_eq!(drain(&ch, &q).await, vec![b"kept".to_vec()]);
    assert_broker_alive(&broker).await;
    // Once the first server is gone the lock is released and the dir usable again.
    let mut broker = broker;
    broker.restart().await;
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_acks_survive_restart() {
    let mut broker = start().await;
    let q = uniq("holes");
    {
        let (conn, ch) = broker.channel().await;
        ch.queue_declare(q.as_str().into(), durable(), FieldTable::default())
            .await
            .expect("declare");
        let msgs: Vec<_> = (0..6).map(|i| (i.to_string().into_bytes(), persistent())).collect();
        publish_all(&conn, "", &q, &msgs).await;
        let mut tags = Vec::new();
        for _ in 0..6 {
            tags.push(get(&ch, &q, false).await.expect("message").delivery.delivery_tag);
        }
        // Ack 1 and 3 only; 0, 2, 4 and 5 are unacked at shutdown.
        for i in [1, 3] {
            ch.basic_ack(tags[i], BasicAckOptions::default()).await.expect("ack");
        }
        // Make sure the acks were processed before the restart.
        declare_queue(&ch, &uniq("sync")).await;
        broker.restart().await;
        let _ = conn;
    }
    let (_conn, ch) = broker.channel().await;
    assert_eq!(
        drain(&ch, &q).await,
        vec![b"0".to_vec(), b"2".to_vec(), b"4".to_vec(), b"5".to_vec()]
    );
}
