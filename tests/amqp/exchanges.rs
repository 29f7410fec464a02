//! Exchanges: declaration rules, the four routing algorithms, exchange-to-exchange
//! bindings, alternate exchanges, internal and auto-delete exchanges.

use crate::common;

use common::*;
use lapin::options::{
    BasicPublishOptions, ExchangeBindOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, ExchangeUnbindOptions,
    QueueBindOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

async fn declare(ch: &Channel, name: &str, kind: ExchangeKind) {
    ch.exchange_declare(
        name.into(),
        kind,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
}

async fn try_declare(
    conn: &Connection,
    name: &str,
    kind: ExchangeKind,
    opts: ExchangeDeclareOptions,
    args: FieldTable,
) -> lapin::Result<()> {
    let ch = conn.create_channel().await.expect("channel");
    ch.exchange_declare(name.into(), kind, opts, args).await
}

async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str) {
    bind_args(ch, queue, exchange, key, FieldTable::default()).await;
}

async fn bind_args(ch: &Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        args,
    )
    .await
    .expect("queue.bind");
}

/// Bodies of everything in `queue`, as strings, in order.
async fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    drain(ch, queue)
        .await
        .into_iter()
        .map(|b| String::from_utf8(b).expect("utf-8 body"))
        .collect()
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert((*k).into(), v.clone());
    }
    t
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(v.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_each_type_and_redeclare_identically() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    for (kind, durable) in [
        (ExchangeKind::Direct, false),
        (ExchangeKind::Fanout, true),
        (ExchangeKind::Topic, false),
        (ExchangeKind::Headers, true),
    ] {
        let name = uniq("x");
        let opts = ExchangeDeclareOptions {
            durable,
            ..Default::default()
        };
        ch.exchange_declare(name.as_str().into(), kind.clone(), opts, FieldTable::default())
            .await
            .expect("declare");
        // Identical redeclare is fine, passive declare finds it.
        ch.exchange_declare(name.as_str().into(), kind.clone(), opts, FieldTable::default())
            .await
            .expect("identical redeclare");
        let passive = ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        };
        ch.exchange_declare(name.as_str().into(), kind, passive, FieldTable::default())
            .await
            .expect("passive declare");
    }
    // The predefined exchanges exist.
    for name in ["amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"] {
        assert!(exchange_exists(&conn, name).await, "{name} missing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_exchange_type_closes_connection_503() {
    let broker = start().await;
    let conn = broker.connect().await;
    let r = try_declare(
        &conn,
        &uniq("x"),
        ExchangeKind::Custom("no-such-type".into()),
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await;
    assert_code(r, 503);
    wait_connection_closed(&conn).await;
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_different_properties_fails_406() {
    let broker = start().await;
    let conn = broker.connect().await;
    let name = uniq("x");
    // RabbitMQ compares only the arguments it knows, alternate-exchange among them.
    let args = table(&[("alternate-exchange", s("ae-1"))]);
    let base = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    try_declare(&conn, &name, ExchangeKind::Direct, base, args.clone())
        .await
        .expect("declare");

    let cases: Vec<(&str, ExchangeKind, ExchangeDeclareOptions, FieldTable)> = vec![
        ("type", ExchangeKind::Fanout, base, args.clone()),
        (
            "durable",
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            args.clone(),
        ),
        (
            "auto_delete",
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                auto_delete: true,
                ..base
            },
            args.clone(),
        ),
        (
            "internal",
            ExchangeKind::Direct,
            ExchangeDeclareOptions { internal: true, ..base },
            args.clone(),
        ),
        (
            "arguments",
            ExchangeKind::Direct,
            base,
            table(&[("alternate-exchange", s("ae-2"))]),
        ),
    ];
    for (what, kind, opts, args) in cases {
        let r = try_declare(&conn, &name, kind, opts, args).await;
        match r {
            Err(e) => assert_eq!(reply_code(&e), Some(406), "{what}: {e}"),
            Ok(()) => panic!("redeclare with different {what} succeeded"),
        }
    }
    // The connection survived all those channel errors.
    assert!(conn.status().connected());
    try_declare(&conn, &name, ExchangeKind::Direct, base, args)
        .await
        .expect("matching redeclare still works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_missing_exchange_fails_404() {
    let broker = start().await;
    let conn = broker.connect().await;
    let r = try_declare(
        &conn,
        &uniq("missing"),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await;
    assert_code(r, 404);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_names_are_refused_403() {
    let broker = start().await;
    let conn = broker.connect().await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    // A new exchange may not use the amq. prefix.
    let r = try_declare(
        &conn,
        "amq.custom",
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await;
    assert_code(r, 403);
    // The default exchange cannot be declared.
    let r = try_declare(&conn, "", ExchangeKind::Direct, durable, FieldTable::default()).await;
    assert_code(r, 403);
    // Nothing can be bound to the default exchange.
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let r = ch
        .queue_bind(
            q.as_str().into(),
            "".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, 403);
    // Predefined exchanges cannot be deleted.
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .exchange_delete("amq.direct".into(), ExchangeDeleteOptions::default())
        .await;
    assert_code(r, 403);
    assert!(exchange_exists(&conn, "amq.direct").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclaring_a_predefined_exchange_with_its_own_properties_is_ok() {
    // RabbitMQ only checks the amq. prefix for exchanges that do not exist yet:
    // an equivalent redeclare of amq.direct succeeds, a different one is 406.
    let broker = start().await;
    let conn = broker.connect().await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    try_declare(
        &conn,
        "amq.direct",
        ExchangeKind::Direct,
        durable,
        FieldTable::default(),
    )
    .await
    .expect("equivalent redeclare of amq.direct");
    try_declare(&conn, "amq.topic", ExchangeKind::Topic, durable, FieldTable::default())
        .await
        .expect("equivalent redeclare of amq.topic");
    let r = try_declare(
        &conn,
        "amq.direct",
        ExchangeKind::Fanout,
        durable,
        FieldTable::default(),
    )
    .await;
    assert_code(r, 406);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_fanout_routing() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let direct = uniq("direct");
    let fanout = uniq("fanout");
    declare(&ch, &direct, ExchangeKind::Direct).await;
    declare(&ch, &fanout, ExchangeKind::Fanout).await;
    let (q1, q2, q3) = (uniq("q1"), uniq("q2"), uniq("q3"));
    for q in [&q1, &q2, &q3] {
        declare_queue(&ch, q).await;
    }
    bind(&ch, &q1, &direct, "a").await;
    bind(&ch, &q2, &direct, "b").await;
    bind(&ch, &q3, &direct, "a").await;
    // The same queue bound twice with different keys gets one copy per message.
    bind(&ch, &q2, &direct, "a").await;
    bind(&ch, &q1, &fanout, "").await;
    bind(&ch, &q2, &fanout, "ignored").await;

    publish(&ch, &direct, "a", b"da").await;
    publish(&ch, &direct, "b", b"db").await;
    publish(&ch, &direct, "c", b"dc").await;
    publish(&ch, &direct, "A", b"dA").await;
    publish(&ch, &fanout, "whatever", b"f1").await;
    publish(&ch, &fanout, "", b"f2").await;
    // The default exchange routes by queue name.
    publish(&ch, "", &q3, b"default").await;

    assert_eq!(bodies(&ch, &q1).await, ["da", "f1", "f2"]);
    assert_eq!(bodies(&ch, &q2).await, ["da", "db", "f1", "f2"]);
    assert_eq!(bodies(&ch, &q3).await, ["da", "default"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_routing_edge_cases() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let x = uniq("topic");
    declare(&ch, &x, ExchangeKind::Topic).await;
    let patterns = ["#", "a.#.b", "*", "a.*", "a.#", "#.b", "*.*", "a.b", "a.*.b"];
    let mut queues = Vec::new();
    for p in patterns {
        let q = uniq("tq");
        declare_queue(&ch, &q).await;
        bind(&ch, &q, &x, p).await;
        queues.push((p, q));
    }
    // "a..b" has an empty middle word, which * and # match like any other.
    let keys = ["", "a", "b", "a.b", "a.x.b", "a.x.y.b", "a.b.c", "x.y", "ab", "a..b"];
    for k in keys {
        publish(&ch, &x, k, format!("<{k}>").as_bytes()).await;
    }
    let expected: &[(&str, &[&str])] = &[
        ("#", &keys),
        ("a.#.b", &["a.b", "a.x.b", "a.x.y.b", "a..b"]),
        ("*", &["a", "b", "ab"]),
        ("a.*", &["a.b"]),
        ("a.#", &["a", "a.b", "a.x.b", "a.x.y.b", "a.b.c", "a..b"]),
        ("#.b", &["b", "a.b", "a.x.b", "a.x.y.b", "a..b"]),
        ("*.*", &["a.b", "x.y"]),
        ("a.b", &["a.b"]),
        ("a.*.b", &["a.x.b", "a..b"]),
    ];
    for ((pattern, q), (p2, keys)) in queues.iter().zip(expected) {
        assert_eq!(pattern, p2);
        let want: Vec<String> = keys.iter().map(|k| format!("<{k}>")).collect();
        assert_eq!(bodies(&ch, q).await, want, "binding key {pattern:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_routing_match_modes() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let x = uniq("headers");
    declare(&ch, &x, ExchangeKind::Headers).await;
    let one = AMQPValue::LongInt(1);
    let two = AMQPValue::LongInt(2);
    let bindings = [
        (
            "all",
            table(&[("x-match", s("all")), ("a", one.clone()), ("b", s("x"))]),
        ),
        (
            "any",
            table(&[("x-match", s("any")), ("a", one.clone()), ("b", s("x"))]),
        ),
        (
            "all-ignores-x",
            table(&[("x-match", s("all")), ("x-k", s("v")), ("a", one.clone())]),
        ),
        (
            "all-with-x",
            table(&[("x-match", s("all-with-x")), ("x-k", s("v")), ("a", one.clone())]),
        ),
        (
            "any-with-x",
            table(&[("x-match", s("any-with-x")), ("x-k", s("v")), ("a", two)]),
        ),
        // No x-match means all.
        ("default-all", table(&[("b", s("x"))])),
    ];
    let mut queues = Vec::new();
    for (name, args) in bindings {
        let q = uniq(name);
        declare_queue(&ch, &q).await;
        bind_args(&ch, &q, &x, "", args).await;
        queues.push((name, q));
    }
    let messages = [
        ("m1", Some(table(&[("a", one.clone()), ("b", s("x"))]))),
        ("m2", Some(table(&[("a", one.clone())]))),
        ("m3", Some(table(&[("x-k", s("v")), ("a", one.clone())]))),
        ("m4", Some(table(&[("b", s("y"))]))),
        ("m5", Some(table(&[("x-k", s("v"))]))),
        ("m6", None),
        // Numbers match by value whatever their wire type (RabbitMQ compares
        // with ==).
        ("m7", Some(table(&[("a", AMQPValue::LongLongInt(1))]))),
    ];
    for (body, headers) in messages {
        let props = match headers {
            Some(h) => BasicProperties::default().with_headers(h),
            None => BasicProperties::default(),
        };
        publish_props(&ch, &x, "ignored", body.as_bytes(), props).await;
    }
    let expected: &[(&str, &[&str])] = &[
        ("all", &["m1"]),
        ("any", &["m1", "m2", "m3", "m7"]),
        ("all-ignores-x", &["m1", "m2", "m3", "m7"]),
        ("all-with-x", &["m3"]),
        ("any-with-x", &["m3", "m5"]),
        ("default-all", &["m1"]),
    ];
    for ((name, q), (n2, want)) in queues.iter().zip(expected) {
        assert_eq!(name, n2);
        assert_eq!(bodies(&ch, q).await, *want, "binding {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_binding_with_invalid_x_match_fails_406() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let x = uniq("headers");
    declare(&ch, &x, ExchangeKind::Headers).await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let r = ch
        .queue_bind(
            q.as_str().into(),
            x.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", s("some"))]),
        )
        .await;
    assert_code(r, 406);
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_binding_and_unbind() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let src = uniq("src");
    let dst = uniq("dst");
    declare(&ch, &src, ExchangeKind::Direct).await;
    declare(&ch, &dst, ExchangeKind::Fanout).await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &dst, "").await;
    ch.exchange_bind(
        dst.as_str().into(),
        src.as_str().into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind");
    publish(&ch, &src, "k", b"via-e2e").await;
    publish(&ch, &src, "other", b"not-routed").await;
    assert_eq!(bodies(&ch, &q).await, ["via-e2e"]);

    // A cycle back to the source neither loops nor duplicates.
    ch.exchange_bind(
        src.as_str().into(),
        dst.as_str().into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind back");
    publish(&ch, &src, "k", b"cycle").await;
    assert_eq!(bodies(&ch, &q).await, ["cycle"]);

    ch.exchange_unbind(
        dst.as_str().into(),
        src.as_str().into(),
        "k".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.unbind");
    publish(&ch, &src, "k", b"after-unbind").await;
    assert_eq!(bodies(&ch, &q).await, Vec::<String>::new());
    // Publishing to the former destination still reaches its queue.
    publish(&ch, &dst, "", b"direct-to-dst").await;
    assert_eq!(bodies(&ch, &q).await, ["direct-to-dst"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bindings_to_missing_entities_fail_404() {
    let broker = start().await;
    let conn = broker.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    let r = ch
        .queue_bind(
            q.as_str().into(),
            uniq("no-exchange").as_str().into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, 404);
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .queue_bind(
            uniq("no-queue").as_str().into(),
            "amq.direct".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, 404);
    let ch = conn.create_channel().await.expect("channel");
    let r = ch
        .exchange_bind(
            "amq.fanout".into(),
            uniq("no-source").as_str().into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_code(r, 404);
    // Publishing to a missing exchange closes the channel with 404.
    let ch = conn.create_channel().await.expect("channel");
    let mut ev = events(&conn);
    publish(&ch, &uniq("no-such-exchange"), "k", b"lost").await;
    expect_error(&mut ev, 404).await;
    wait_channel_closed(&ch).await;
    assert!(conn.status().connected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_exchange_receives_unroutable_messages() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let ae = uniq("ae");
    declare(&ch, &ae, ExchangeKind::Fanout).await;
    let x = uniq("main");
    ch.exchange_declare(
        x.as_str().into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        table(&[("alternate-exchange", s(&ae))]),
    )
    .await
    .expect("declare with alternate-exchange");
    let (q_main, q_ae) = (uniq("q-main"), uniq("q-ae"));
    declare_queue(&ch, &q_main).await;
    declare_queue(&ch, &q_ae).await;
    bind(&ch, &q_main, &x, "main").await;
    bind(&ch, &q_ae, &ae, "").await;

    confirm_select(&ch).await;
    publish_confirmed(&ch, &x, "main", b"routed").await;
    // Mandatory and unroutable on the main exchange, but the alternate exchange
    // takes it: no basic.return.
    let confirm = ch
        .basic_publish(
            x.as_str().into(),
            "nowhere".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"to-ae",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    let c = within("confirm", confirm).await.expect("confirm");
    assert!(c.is_ack());
    assert!(c.take_message().is_none(), "message was returned");

    assert_eq!(bodies(&ch, &q_main).await, ["routed"]);
    assert_eq!(bodies(&ch, &q_ae).await, ["to-ae"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_internal_exchange_fails_403() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let internal = uniq("internal");
    ch.exchange_declare(
        internal.as_str().into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare internal");
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &internal, "").await;
    // Reachable through an exchange-to-exchange binding...
    let front = uniq("front");
    declare(&ch, &front, ExchangeKind::Fanout).await;
    ch.exchange_bind(
        internal.as_str().into(),
        front.as_str().into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.bind");
    publish(&ch, &front, "", b"through-front").await;
    assert_eq!(bodies(&ch, &q).await, ["through-front"]);
    // ...but not directly.
    let mut ev = events(&conn);
    publish(&ch, &internal, "", b"direct").await;
    expect_error(&mut ev, 403).await;
    wait_channel_closed(&ch).await;
    assert_eq!(message_count(&conn, &q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_exchange_goes_with_its_last_binding() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let x = uniq("autodel");
    let opts = ExchangeDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    ch.exchange_declare(x.as_str().into(), ExchangeKind::Direct, opts, FieldTable::default())
        .await
        .expect("declare");
    // Never bound: it stays.
    assert!(exchange_exists(&conn, &x).await);
    let (q1, q2) = (uniq("q1"), uniq("q2"));
    declare_queue(&ch, &q1).await;
    declare_queue(&ch, &q2).await;
    bind(&ch, &q1, &x, "a").await;
    bind(&ch, &q2, &x, "b").await;
    ch.queue_unbind(q1.as_str().into(), x.as_str().into(), "a".into(), FieldTable::default())
        .await
        .expect("unbind");
    assert!(exchange_exists(&conn, &x).await, "deleted with a binding left");
    ch.queue_unbind(q2.as_str().into(), x.as_str().into(), "b".into(), FieldTable::default())
        .await
        .expect("unbind");
    assert!(!exchange_exists(&conn, &x).await, "auto-delete exchange kept");

    // Also when the last binding goes because its queue is deleted.
    let x2 = uniq("autodel2");
    ch.exchange_declare(x2.as_str().into(), ExchangeKind::Fanout, opts, FieldTable::default())
        .await
        .expect("declare");
    bind(&ch, &q1, &x2, "").await;
    ch.queue_delete(q1.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    assert!(!exchange_exists(&conn, &x2).await, "auto-delete exchange kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_and_delete_missing() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let x = uniq("x");
    declare(&ch, &x, ExchangeKind::Direct).await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    bind(&ch, &q, &x, "k").await;
    let r = ch
        .exchange_delete(
            x.as_str().into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        )
        .await;
    assert_code(r, 406);
    assert!(exchange_exists(&conn, &x).await);

    let ch = conn.create_channel().await.expect("channel");
    ch.queue_unbind(q.as_str().into(), x.as_str().into(), "k".into(), FieldTable::default())
        .await
        .expect("unbind");
    ch.exchange_delete(
        x.as_str().into(),
        ExchangeDeleteOptions {
            if_unused: true,
            ..Default::default()
        },
    )
    .await
    .expect("delete unused exchange");
    assert!(!exchange_exists(&conn, &x).await);
    // Deleting a missing exchange is not an error (RabbitMQ).
    ch.exchange_delete(uniq("never").as_str().into(), ExchangeDeleteOptions::default())
        .await
        .expect("delete of a missing exchange");
    // Deleting an exchange removes its bindings: a new one of the same name
    // routes nothing to the old queue.
    declare(&ch, &x, ExchangeKind::Direct).await;
    bind(&ch, &q, &x, "k").await;
    ch.exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
        .await
        .expect("delete used exchange");
    declare(&ch, &x, ExchangeKind::Direct).await;
    publish(&ch, &x, "k", b"nobody").await;
    assert_eq!(message_count(&conn, &q).await, 0);
    // Unbinding something that is not bound is fine too.
    ch.queue_unbind(q.as_str().into(), x.as_str().into(), "k".into(), FieldTable::default())
        .await
        .expect("unbind of a missing binding");
}

#[tokio::test]
async fn unbind_removes_only_the_binding_with_the_same_arguments() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("unbind-exact");
    declare_queue(&ch, &q).await;
    let mut with_args = FieldTable::default();
    with_args.insert("tag".into(), AMQPValue::LongString("x".into()));
    for args in [FieldTable::default(), with_args.clone()] {
        ch.queue_bind(
            q.as_str().into(),
            "amq.direct".into(),
            "k".into(),
            Default::default(),
            args,
        )
        .await
        .unwrap();
    }
    ch.queue_unbind(
        q.as_str().into(),
        "amq.direct".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    // As in RabbitMQ, the binding with arguments is a different binding and stays.
    publish(&ch, "amq.direct", "k", b"still routed").await;
    eventually("message routed", || async { message_count(&conn, &q).await == 1 }).await;
}

/// Thousands of bindings on one exchange, removed in an order unlike the
/// order they were made in, with a second queue sharing some of the keys:
/// routing follows exactly the bindings left, also after a restart, and
/// deleting the queue takes its bindings with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_bindings_unbound_out_of_order_route_exactly() {
    let mut broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let (q, q2) = (uniq("many-a"), uniq("many-b"));
    for name in [&q, &q2] {
        ch.queue_declare(name.as_str().into(), durable(), FieldTable::default())
            .await
            .expect("declare");
    }
    const KEYS: usize = 3000;
    for i in 0..KEYS {
        bind(&ch, &q, "amq.direct", &format!("k{i}")).await;
    }
    for i in 0..100 {
        bind(&ch, &q2, "amq.direct", &format!("k{i}")).await;
    }
    // A repeated bind is the same binding: one unbind removes it.
    bind(&ch, &q, "amq.direct", "k1").await;
    bind(&ch, &q, "amq.direct", "k1").await;
    let unbind = |key: String| {
        let (ch, q) = (ch.clone(), q.clone());
        async move {
            ch.queue_unbind(
                q.as_str().into(),
                "amq.direct".into(),
                key.as_str().into(),
                FieldTable::default(),
            )
            .await
            .expect("queue.unbind");
        }
    };
    // Every even key, from the end, then from the middle out.
    for i in (0..KEYS).step_by(2).rev().filter(|i| i % 4 == 0) {
        unbind(format!("k{i}")).await;
    }
    for i in (0..KEYS).step_by(2).filter(|i| i % 4 != 0) {
        unbind(format!("k{i}")).await;
    }
    unbind("k1".into()).await;

    let check = |ch: Channel| {
        let (q, q2) = (q.clone(), q2.clone());
        async move {
            for key in ["k0", "k1", "k2", "k3", "k98", "k99", "k1500", "k2997", "k2998", "k2999"] {
                publish(&ch, "amq.direct", key, key.as_bytes()).await;
            }
            let want_q = ["k3", "k99", "k2997", "k2999"];
            let want_q2 = ["k0", "k1", "k2", "k3", "k98", "k99"];
            eventually("deliveries", || async {
                queue_count(&ch, &q2).await as usize == want_q2.len()
            })
            .await;
            eventually("deliveries", || async {
                queue_count(&ch, &q).await as usize == want_q.len()
            })
            .await;
            assert_eq!(bodies(&ch, &q).await, want_q);
            assert_eq!(bodies(&ch, &q2).await, want_q2);
        }
    };
    check(ch.clone()).await;

    broker.restart().await;
    let (_conn, ch) = broker.channel().await;
    check(ch.clone()).await;

    ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default())
        .await
        .expect("queue.delete");
    publish(&ch, "amq.direct", "k3", b"k3").await;
    eventually("k3 to the other queue", || async { queue_count(&ch, &q2).await == 1 }).await;
    assert_broker_alive(&broker).await;
}
