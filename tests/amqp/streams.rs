//! Stream queues: append-only, read by offset by any number of consumers, with
//! offset tracking per consumer tag, filters and retention.

use crate::common;

use common::api::Api;
use common::*;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicGetOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Consumer};

async fn declare_stream(ch: &Channel, name: &str, extra: &[(&str, AMQPValue)]) {
    let mut args = table(extra);
    args.insert("x-queue-type".into(), long_str("stream"));
    ch.queue_declare(name.into(), durable(), args)
        .await
        .expect("declare stream");
}

async fn fill(ch: &Channel, q: &str, bodies: impl IntoIterator<Item = String>) {
    ch.confirm_select(ConfirmSelectOptions::default()).await.ok();
    for b in bodies {
        publish(ch, "", q, b.as_bytes()).await;
    }
    ch.wait_for_confirms().await.expect("confirms");
}

async fn consume(ch: &Channel, q: &str, tag: &str, args: FieldTable) -> Consumer {
    ch.basic_qos(100, BasicQosOptions::default()).await.unwrap();
    ch.basic_consume(q.into(), tag.into(), BasicConsumeOptions::default(), args)
        .await
        .expect("consume")
}

fn offset_of(d: &lapin::message::Delivery) -> i64 {
    let h = d.properties.headers().as_ref().expect("headers");
    match h.inner().get("x-stream-offset") {
        Some(AMQPValue::LongLongInt(n)) => *n,
        other => panic!("no x-stream-offset: {other:?}"),
    }
}

async fn offsets(c: &mut Consumer, n: usize) -> Vec<i64> {
    deliveries(c, n).await.iter().map(offset_of).collect()
}

#[tokio::test]
async fn consumers_read_the_same_messages_from_their_own_offsets() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream");
    declare_stream(&ch, &q, &[]).await;
    fill(&ch, &q, (0..10).map(|i| format!("m{i}"))).await;
    let ch2 = conn.create_channel().await.unwrap();
    let ch3 = conn.create_channel().await.unwrap();
    let mut first = consume(&ch2, &q, "", table(&[("x-stream-offset", long_str("first"))])).await;
    let mut from5 = consume(&ch3, &q, "", table(&[("x-stream-offset", AMQPValue::LongInt(5))])).await;
    let all = deliveries(&mut first, 10).await;
    assert_eq!(
        all.iter().map(offset_of).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(all[3].data, b"m3");
    assert_eq!(offsets(&mut from5, 5).await, [5, 6, 7, 8, 9]);
    // The stream keeps its messages: both consumers read them, nothing is removed.
    let ok = ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..durable()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.message_count(), 10);
    // New messages reach both.
    fill(&ch, &q, ["m10".to_string()]).await;
    assert_eq!(offsets(&mut first, 1).await, [10]);
    assert_eq!(offsets(&mut from5, 1).await, [10]);
}

/// Readers unmap the segments they pass; readers still in them (or starting
/// there later, or after a restart, when records are checked on first read)
/// map them again.
#[tokio::test]
async fn readers_at_different_offsets_share_segments_the_others_passed() {
    let mut b = start_with(|c| c.main.segment_size = 4096).await;
    let q = uniq("stream-segments");
    let body = |i: i64| format!("message {i} {}", "x".repeat(i as usize % 200));
    {
        let (_conn, ch) = b.channel().await;
        declare_stream(&ch, &q, &[]).await;
        fill(&ch, &q, (0..600).map(body)).await;
    }
    for round in 0..2 {
        let conn = b.connect().await;
        let mut readers = Vec::new();
        for (i, from) in [0i64, 1, 290, 599].into_iter().enumerate() {
            let ch = conn.create_channel().await.unwrap();
            let args = table(&[("x-stream-offset", AMQPValue::LongLongInt(from))]);
            readers.push((from, ch.clone(), consume(&ch, &q, &format!("r{round}-{i}"), args).await));
        }
        // In turns, so that the readers pass one another's segments.
        while readers.iter().any(|(next, _, _)| *next < 600) {
            for (next, ch, c) in readers.iter_mut().filter(|(next, _, _)| *next < 600) {
                let d = next_delivery(c).await;
                assert_eq!(offset_of(&d), *next, "round {round}");
                assert_eq!(d.data, body(*next).as_bytes(), "round {round}");
                *next += 1;
                ch.basic_ack(d.delivery_tag, BasicAckOptions::default()).await.unwrap();
            }
        }
        drop(conn);
        b.restart().await;
    }
}

#[tokio::test]
async fn next_is_the_default_and_last_starts_at_the_newest() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-next");
    declare_stream(&ch, &q, &[]).await;
    fill(&ch, &q, (0..3).map(|i| format!("old{i}"))).await;
    let c1 = conn.create_channel().await.unwrap();
    let c2 = conn.create_channel().await.unwrap();
    let mut next = consume(&c1, &q, "", FieldTable::default()).await;
    let mut last = consume(&c2, &q, "", table(&[("x-stream-offset", long_str("last"))])).await;
    assert_eq!(offsets(&mut last, 1).await, [2]);
    assert_no_delivery(&mut next).await;
    fill(&ch, &q, ["new".to_string()]).await;
    let d = next_delivery(&mut next).await;
    assert_eq!((offset_of(&d), d.data.as_slice()), (3, b"new".as_slice()));
}

#[tokio::test]
async fn offset_by_timestamp() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-time");
    declare_stream(&ch, &q, &[]).await;
    fill(&ch, &q, ["before".to_string()]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    fill(&ch, &q, ["after".to_string()]).await;
    let c = conn.create_channel().await.unwrap();
    let mut consumer = consume(&c, &q, "", table(&[("x-stream-offset", AMQPValue::Timestamp(since))])).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, b"after");
}

#[tokio::test]
async fn declare_and_consume_rules() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-rules");
    // Must be durable.
    let mut ev = events(&conn);
    let _ = ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions::default(),
            table(&[("x-queue-type", long_str("stream"))]),
        )
        .await;
    assert!(expect_error(&mut ev, 406).await.contains("non-durable"));
    let ch = conn.create_channel().await.unwrap();
    let _ = ch
        .queue_declare(
            q.as_str().into(),
            durable(),
            table(&[
                ("x-queue-type", long_str("stream")),
                ("x-max-priority", AMQPValue::LongInt(5)),
            ]),
        )
        .await;
    assert!(expect_error(&mut ev, 406).await.contains("x-max-priority"));
    let ch = conn.create_channel().await.unwrap();
    declare_stream(&ch, &q, &[]).await;
    // A consumer needs a prefetch set with basic.qos, as in RabbitMQ (the
    // broker's default prefetch does not count; an explicit 0 means none).
    for qos in [None, Some(0)] {
        let ch = conn.create_channel().await.unwrap();
        if let Some(n) = qos {
            ch.basic_qos(n, BasicQosOptions::default()).await.unwrap();
        }
        let _ = ch
            .basic_consume(
                q.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await;
        assert!(expect_error(&mut ev, 406).await.contains("prefetch"), "qos {qos:?}");
    }
    // A stream cannot be purged (406, as in RabbitMQ).
    let ch = conn.create_channel().await.unwrap();
    fill(&ch, &q, ["kept".to_string()]).await;
    let _ = ch.queue_purge(q.as_str().into(), QueuePurgeOptions::default()).await;
    assert!(expect_error(&mut ev, 406).await.contains("purge"));
    // basic.get is not supported (540 closes the connection, as in RabbitMQ).
    let ch = conn.create_channel().await.unwrap();
    let _ = ch.basic_get(q.as_str().into(), BasicGetOptions::default()).await;
    assert!(expect_error(&mut ev, 540).await.contains("basic.get"));
}

#[tokio::test]
async fn tracked_offset_resumes_after_the_last_contiguous_ack() {
    let mut b = start().await;
    let q = uniq("stream-track");
    {
        let (conn, ch) = b.channel().await;
        declare_stream(&ch, &q, &[]).await;
        fill(&ch, &q, (0..6).map(|i| format!("m{i}"))).await;
        let c = conn.create_channel().await.unwrap();
        let mut consumer = consume(&c, &q, "reader-1", table(&[("x-stream-offset", long_str("first"))])).await;
        let got = deliveries(&mut consumer, 6).await;
        // Ack 0, 1, 2 and 4; 3 stays unacked, so the tracked offset stops at 2.
        for d in got.iter().filter(|d| offset_of(d) != 3 && offset_of(d) != 5) {
            d.acker.ack(BasicAckOptions::default()).await.unwrap();
        }
        c.basic_cancel("reader-1".into(), BasicCancelOptions::default())
            .await
            .unwrap();
        conn.close(200, "bye".into()).await.ok();
    }
    b.restart().await;
    let (conn, _ch) = b.channel().await;
    let c = conn.create_channel().await.unwrap();
    // Same tag, no x-stream-offset: resume after the tracked offset.
    let mut consumer = consume(&c, &q, "reader-1", FieldTable::default()).await;
    assert_eq!(offsets(&mut consumer, 3).await, [3, 4, 5]);
}

/// On a stream declared with `x-single-active-consumer`, consumers sharing
/// a tag take turns: one reads, the others wait (shown as waiting by the
/// API), and when it leaves the oldest waiting one resumes after the
/// offsets it acknowledged. Other tags read on their own.
#[tokio::test]
async fn single_active_consumers_of_one_tag_take_turns() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("stream-sac");
    declare_stream(&ch, &q, &[("x-single-active-consumer", AMQPValue::Boolean(true))]).await;
    fill(&ch, &q, (0..6).map(|i| format!("m{i}"))).await;
    let first = || table(&[("x-stream-offset", long_str("first"))]);
    let (conn_a, ch_a) = b.channel().await;
    let mut a = consume(&ch_a, &q, "worker", first()).await;
    let got = deliveries(&mut a, 6).await;
    assert_eq!(got.iter().map(offset_of).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    let (_conn_b, ch_b) = b.channel().await;
    let mut waiting = consume(&ch_b, &q, "worker", first()).await;
    let (_conn_c, ch_c) = b.channel().await;
    let mut other = consume(&ch_c, &q, "other", first()).await;
    assert_eq!(
        offsets(&mut other, 6).await,
        [0, 1, 2, 3, 4, 5],
        "another tag reads on its own"
    );
    assert_no_delivery(&mut waiting).await;

    let api = Api::new(&b);
    let consumers = api.get_ok("/api/consumers").await;
    let status = |tag: &str| -> Vec<(bool, String)> {
        let mut v: Vec<_> = consumers
            .as_array()
            .expect("consumer list")
            .iter()
            .filter(|c| c["queue"]["name"] == q.as_str() && c["consumer_tag"] == tag)
            .map(|c| (c["active"].as_bool().unwrap_or(false), c["activity_status"].to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        status("worker"),
        [(false, "\"waiting\"".to_string()), (true, "\"up\"".to_string())],
        "{consumers}"
    );

    // Offsets 0-3 acknowledged, 4 and 5 not: the next member starts at 4.
    for d in got.iter().filter(|d| offset_of(d) < 4) {
        d.acker.ack(BasicAckOptions::default()).await.unwrap();
    }
    conn_a.close(200, "bye".into()).await.ok();
    assert_eq!(offsets(&mut waiting, 2).await, [4, 5]);
    fill(&ch, &q, ["m6".to_string()]).await;
    assert_eq!(offsets(&mut waiting, 1).await, [6]);
}

/// A consumer that goes quiet after its acknowledgements, still attached,
/// has its tracked offset written within a bounded time (not only when it
/// leaves), so that a crash does not take it back further.
#[tokio::test]
async fn a_quiet_consumers_tracked_offset_reaches_the_disk() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("stream-offsets-file");
    declare_stream(&ch, &q, &[]).await;
    fill(&ch, &q, (0..3).map(|i| format!("m{i}"))).await;
    let mut c = consume(&ch, &q, "quiet", table(&[("x-stream-offset", long_str("first"))])).await;
    for d in deliveries(&mut c, 3).await {
        d.acker.ack(BasicAckOptions::default()).await.unwrap();
    }
    let file = b.queue_dir(&q).join("consumer_offsets.json");
    eventually("the tracked offset written", || {
        let file = file.clone();
        async move {
            std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v["quiet"] == 2)
        }
    })
    .await;
}

#[tokio::test]
async fn filters_select_messages_by_their_filter_value() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-filter");
    declare_stream(&ch, &q, &[]).await;
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for (body, value) in [
        ("r1", Some("red")),
        ("b1", Some("blue")),
        ("n1", None),
        ("r2", Some("red,big")),
    ] {
        let props = match value {
            Some(v) => BasicProperties::default().with_headers(table(&[("x-stream-filter-value", long_str(v))])),
            None => BasicProperties::default(),
        };
        publish_props(&ch, "", &q, body.as_bytes(), props).await;
    }
    ch.wait_for_confirms().await.unwrap();
    let c1 = conn.create_channel().await.unwrap();
    let mut red = consume(
        &c1,
        &q,
        "",
        table(&[
            ("x-stream-offset", long_str("first")),
            ("x-stream-filter", long_str("red")),
        ]),
    )
    .await;
    let got: Vec<Vec<u8>> = deliveries(&mut red, 2).await.into_iter().map(|d| d.data).collect();
    assert_eq!(got, [b"r1".to_vec(), b"r2".to_vec()]);
    assert_no_delivery(&mut red).await;
    let c2 = conn.create_channel().await.unwrap();
    let mut blue_or_none = consume(
        &c2,
        &q,
        "",
        table(&[
            ("x-stream-offset", long_str("first")),
            ("x-stream-filter", long_str("blue")),
            ("x-stream-match-unfiltered", AMQPValue::Boolean(true)),
        ]),
    )
    .await;
    let got: Vec<Vec<u8>> = deliveries(&mut blue_or_none, 2)
        .await
        .into_iter()
        .map(|d| d.data)
        .collect();
    assert_eq!(got, [b"b1".to_vec(), b"n1".to_vec()]);
}

#[tokio::test]
async fn retention_by_length_drops_old_segments_and_keeps_offsets() {
    let mut b = start_with(|c| c.main.segment_size = 4096).await;
    let q = uniq("stream-retain");
    {
        let (_conn, ch) = b.channel().await;
        declare_stream(&ch, &q, &[("x-max-length", AMQPValue::LongInt(50))]).await;
        fill(&ch, &q, (0..500).map(|i| format!("message number {i}"))).await;
    }
    b.restart().await;
    let (conn, ch) = b.channel().await;
    let ok = ch
        .queue_declare(
            q.as_str().into(),
            QueueDeclareOptions {
                passive: true,
                ..durable()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert!(
        ok.message_count() >= 50 && ok.message_count() < 200,
        "{}",
        ok.message_count()
    );
    let c = conn.create_channel().await.unwrap();
    let mut consumer = consume(&c, &q, "", table(&[("x-stream-offset", long_str("first"))])).await;
    let d = next_delivery(&mut consumer).await;
    let first = offset_of(&d);
    assert!(first > 0, "old segments removed");
    assert_eq!(d.data, format!("message number {first}").as_bytes());
}

#[tokio::test]
async fn retention_by_age_removes_old_segments_without_new_publishes() {
    let b = start_with(|c| c.main.segment_size = 4096).await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-age");
    declare_stream(&ch, &q, &[("x-max-age", long_str("1s"))]).await;
    fill(&ch, &q, (0..300).map(|i| format!("aged message {i}"))).await;
    let count = || async {
        let opts = QueueDeclareOptions {
            passive: true,
            ..durable()
        };
        ch.queue_declare(q.as_str().into(), opts, FieldTable::default())
            .await
            .unwrap()
            .message_count()
    };
    assert_eq!(count().await, 300);
    // Only the segment being written is kept once everything is older than 1 s.
    eventually("old segments removed", || async { count().await < 100 }).await;
    let c = conn.create_channel().await.unwrap();
    let mut consumer = consume(&c, &q, "", table(&[("x-stream-offset", long_str("first"))])).await;
    assert!(offset_of(&next_delivery(&mut consumer).await) > 200);
}

#[tokio::test]
async fn an_offset_past_the_end_waits_for_that_offset() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-past");
    declare_stream(&ch, &q, &[]).await;
    fill(&ch, &q, (0..3).map(|i| format!("m{i}"))).await;
    let c = conn.create_channel().await.unwrap();
    let mut consumer = consume(&c, &q, "", table(&[("x-stream-offset", AMQPValue::LongInt(5))])).await;
    assert_no_delivery(&mut consumer).await;
    // As in RabbitMQ: offsets 3 and 4 are skipped, delivery starts at 5.
    fill(&ch, &q, (3..7).map(|i| format!("m{i}"))).await;
    assert_eq!(offsets(&mut consumer, 2).await, [5, 6]);
}

/// Publishes `(body, headers)` pairs into stream `q`, confirmed.
async fn fill_with_headers(ch: &Channel, q: &str, messages: &[(&str, FieldTable)]) {
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    for (body, headers) in messages {
        let props = BasicProperties::default().with_headers(headers.clone());
        publish_props(ch, "", q, body.as_bytes(), props).await;
    }
    ch.wait_for_confirms().await.unwrap();
}

/// The bodies of the messages a consumer with filter arguments `filter`
/// reads from the start of `q` (it must read `n` and then nothing more).
async fn filtered(conn: &lapin::Connection, q: &str, filter: &[(&str, AMQPValue)], n: usize) -> Vec<String> {
    let ch = conn.create_channel().await.unwrap();
    let mut args = table(filter);
    args.insert("x-stream-offset".into(), long_str("first"));
    let mut c = consume(&ch, q, "", args).await;
    let got = deliveries(&mut c, n).await;
    assert_no_delivery(&mut c).await;
    ch.close(200, "done".into()).await.ok();
    got.into_iter()
        .map(|d| String::from_utf8_lossy(&d.data).into_owned())
        .collect()
}

#[tokio::test]
async fn a_table_filter_matches_header_values_all_or_any() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-kv-filter");
    declare_stream(&ch, &q, &[]).await;
    fill_with_headers(
        &ch,
        &q,
        &[
            (
                "eu-1",
                table(&[("region", long_str("eu")), ("level", AMQPValue::LongInt(1))]),
            ),
            (
                "eu-2",
                table(&[("region", long_str("eu")), ("level", AMQPValue::LongInt(2))]),
            ),
            (
                "us-1",
                table(&[("region", long_str("us")), ("level", AMQPValue::LongInt(1))]),
            ),
            ("tagged", table(&[("x-stream-filter-value", long_str("red,big"))])),
            ("none", FieldTable::default()),
        ],
    )
    .await;
    let kv = || AMQPValue::FieldTable(table(&[("region", long_str("eu")), ("level", AMQPValue::LongInt(1))]));
    // All keys must match (the default)...
    assert_eq!(filtered(&conn, &q, &[("x-stream-filter", kv())], 1).await, ["eu-1"]);
    // ... or any of them.
    assert_eq!(
        filtered(
            &conn,
            &q,
            &[("x-stream-filter", kv()), ("x-filter-match-type", long_str("any"))],
            3
        )
        .await,
        ["eu-1", "eu-2", "us-1"]
    );
    // The key x-stream-filter in a table is the value filter; an array mixes kinds.
    let mixed = AMQPValue::FieldArray(
        vec![
            long_str("big"),
            AMQPValue::FieldTable(table(&[("region", long_str("us"))])),
        ]
        .into(),
    );
    assert_eq!(
        filtered(
            &conn,
            &q,
            &[("x-stream-filter", mixed), ("x-filter-match-type", long_str("any"))],
            2
        )
        .await,
        ["us-1", "tagged"]
    );
    let in_table = AMQPValue::FieldTable(table(&[("x-stream-filter", long_str("red"))]));
    assert_eq!(
        filtered(&conn, &q, &[("x-stream-filter", in_table)], 1).await,
        ["tagged"]
    );
    // Messages without a filter value pass too when asked for.
    assert_eq!(
        filtered(
            &conn,
            &q,
            &[
                ("x-stream-filter", long_str("red")),
                ("x-stream-match-unfiltered", AMQPValue::Boolean(true)),
            ],
            5
        )
        .await,
        ["eu-1", "eu-2", "us-1", "tagged", "none"]
    );
}

#[tokio::test]
async fn geo_filters_match_message_positions() {
    let b = start().await;
    let (conn, ch) = b.channel().await;
    let q = uniq("stream-geo-filter");
    declare_stream(&ch, &q, &[]).await;
    let at = |lat: f64, lon: f64| {
        table(&[
            ("x-geo-lat", AMQPValue::Double(lat)),
            ("x-geo-lon", AMQPValue::Double(lon)),
        ])
    };
    fill_with_headers(
        &ch,
        &q,
        &[
            ("stockholm", at(59.3293, 18.0686)),
            ("sodertalje", at(59.1955, 17.6253)),
            ("uppsala", at(59.8586, 17.6389)),
            ("gothenburg", at(57.7089, 11.9746)),
            ("nowhere", FieldTable::default()),
        ],
    )
    .await;
    let geo = |key: &str, area: FieldTable| AMQPValue::FieldTable(table(&[(key, AMQPValue::FieldTable(area))]));
    let radius = geo(
        "geo-within-radius",
        table(&[
            ("lat", AMQPValue::Double(59.3293)),
            ("lon", AMQPValue::Double(18.0686)),
            ("radius_km", AMQPValue::LongInt(50)),
        ]),
    );
    assert_eq!(
        filtered(&conn, &q, &[("x-stream-filter", radius)], 2).await,
        ["stockholm", "sodertalje"]
    );
    let bbox = geo(
        "geo-bbox",
        table(&[
            ("min_lat", AMQPValue::LongInt(59)),
            ("max_lat", AMQPValue::LongInt(60)),
            ("min_lon", AMQPValue::LongInt(17)),
            ("max_lon", AMQPValue::Double(17.7)),
        ]),
    );
    assert_eq!(
        filtered(&conn, &q, &[("x-stream-filter", bbox)], 2).await,
        ["sodertalje", "uppsala"]
    );
    let point = |lat: f64, lon: f64| AMQPValue::FieldArray(vec![AMQPValue::Double(lat), AMQPValue::Double(lon)].into());
    let west_coast = geo(
        "geo-polygon",
        table(&[(
            "points",
            AMQPValue::FieldArray(
                vec![
                    point(57.0, 11.0),
                    point(58.5, 11.0),
                    point(58.5, 13.0),
                    point(57.0, 13.0),
                ]
                .into(),
            ),
        )]),
    );
    assert_eq!(
        filtered(&conn, &q, &[("x-stream-filter", west_coast)], 1).await,
        ["gothenburg"]
    );
    // A malformed area is refused when consuming (406, with the reason).
    let mut ev = events(&conn);
    let c = conn.create_channel().await.unwrap();
    c.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let two_points = geo(
        "geo-polygon",
        table(&[(
            "points",
            AMQPValue::FieldArray(vec![point(1.0, 1.0), point(2.0, 2.0)].into()),
        )]),
    );
    let _ = c
        .basic_consume(
            q.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            table(&[("x-stream-filter", two_points)]),
        )
        .await;
    assert!(expect_error(&mut ev, 406).await.contains("at least 3 points"));
}

/// Reads stream `q` from `from` until the message at offset `last`: the
/// offset and body of each message delivered.
async fn read_until(conn: &lapin::Connection, q: &str, from: AMQPValue, last: i64) -> Vec<(i64, String)> {
    let ch = conn.create_channel().await.unwrap();
    let mut c = consume(&ch, q, "", table(&[("x-stream-offset", from)])).await;
    let mut out = Vec::new();
    loop {
        let d = next_delivery(&mut c).await;
        d.ack(BasicAckOptions::default()).await.unwrap();
        let o = offset_of(&d);
        out.push((o, String::from_utf8_lossy(&d.data).into_owned()));
        if o >= last {
            break;
        }
    }
    ch.close(200, "done".into()).await.ok();
    out
}

/// Checks what compaction may leave of messages `m0..m{n-1}` (message `i` at
/// offset `i`, with key `key(i)`): rising offsets, each with its own message,
/// every message without a key, and for each key an unbroken run of its
/// newest messages (older ones go, the newest stays).
fn assert_compacted(read: &[(i64, String)], n: i64, key: impl Fn(i64) -> Option<String>) {
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "{read:?}");
    for (o, body) in read {
        assert_eq!(body, &format!("m{o}"));
    }
    let kept: std::collections::HashSet<i64> = read.iter().map(|r| r.0).collect();
    for i in 0..n {
        match key(i) {
            None => assert!(kept.contains(&i), "message {i} without a key was removed"),
            Some(k) if kept.contains(&i) => {
                if let Some(j) = (i + 1..n).find(|&j| key(j).as_ref() == Some(&k) && !kept.contains(&j)) {
                    panic!("message {i} of key {k} kept but the newer {j} removed");
                }
            }
            Some(_) => {}
        }
    }
}

/// `x-stream-compaction: routing-key` keeps, in the segments no longer
/// written, only the newest message of each routing key; offsets do not
/// move, and a consumer sent to a removed offset gets the next message kept.
#[tokio::test]
async fn compaction_by_routing_key_keeps_the_newest_per_key() {
    let mut b = start_with(|c| c.main.segment_size = 4096).await;
    let (q, ex) = (uniq("compact-rk"), uniq("compact-rk-x"));
    let n = 400;
    {
        let (_conn, ch) = b.channel().await;
        ch.exchange_declare(
            ex.as_str().into(),
            lapin::ExchangeKind::Fanout,
            lapin::options::ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
        declare_stream(&ch, &q, &[("x-stream-compaction", long_str("routing-key"))]).await;
        ch.queue_bind(
            q.as_str().into(),
            ex.as_str().into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
        for i in 0..n {
            publish(&ch, &ex, &format!("sensor.{}", i % 4), format!("m{i}").as_bytes()).await;
        }
        ch.wait_for_confirms().await.unwrap();
    }
    let key = |i: i64| Some(format!("sensor.{}", i % 4));
    let (conn, _ch) = b.channel().await;
    eventually("sealed segments compacted", || async {
        read_until(&conn, &q, long_str("first"), n - 1).await.len() < 200
    })
    .await;
    let read = read_until(&conn, &q, long_str("first"), n - 1).await;
    assert_compacted(&read, n, key);
    assert!(read[0].0 > 0, "the oldest messages were superseded");
    let from_5 = read_until(&conn, &q, AMQPValue::LongInt(5), n - 1).await;
    assert_eq!(from_5[0].0, read.iter().find(|r| r.0 >= 5).unwrap().0);
    drop(conn);
    // Reopened, the segment that was being written is sealed too: only the
    // newest message of each key is left.
    b.restart().await;
    let (conn, _ch) = b.channel().await;
    let newest: Vec<(i64, String)> = (n - 4..n).map(|i| (i, format!("m{i}"))).collect();
    eventually("the last segment compacted", || async {
        read_until(&conn, &q, long_str("first"), n - 1).await == newest
    })
    .await;
}

/// The `stream-compaction` policy key with `header:<name>` compacts by a
/// header's value; messages without the header all stay. A bad value is
/// refused.
#[tokio::test]
async fn compaction_policy_by_header_keeps_messages_without_the_header() {
    let b = start_with(|c| c.main.segment_size = 4096).await;
    let api = Api::new(&b);
    let bad = serde_json::json!({"pattern": "^compact-h", "apply-to": "queues",
                                 "definition": {"stream-compaction": "header:"}});
    assert_eq!(
        api.put("/api/policies/%2F/compact", bad).await,
        reqwest::StatusCode::BAD_REQUEST
    );
    let policy = serde_json::json!({"pattern": "^compact-h", "apply-to": "queues",
                                    "definition": {"stream-compaction": "header:id"}});
    assert_eq!(
        api.put("/api/policies/%2F/compact", policy).await,
        reqwest::StatusCode::CREATED
    );
    let q = uniq("compact-h");
    let (conn, ch) = b.channel().await;
    declare_stream(&ch, &q, &[]).await;
    let n = 400;
    let key = |i: i64| (i % 3 != 0).then(|| if i % 2 == 0 { "a" } else { "b" }.to_string());
    let messages: Vec<(String, FieldTable)> = (0..n)
        .map(|i| {
            let headers = match key(i) {
                Some(k) => table(&[("id", long_str(&k))]),
                None => table(&[("other", long_str("x"))]),
            };
            (format!("m{i}"), headers)
        })
        .collect();
    let messages: Vec<(&str, FieldTable)> = messages.iter().map(|(b, h)| (b.as_str(), h.clone())).collect();
    fill_with_headers(&ch, &q, &messages).await;
    eventually("sealed segments compacted", || async {
        read_until(&conn, &q, long_str("first"), n - 1).await.len() < 250
    })
    .await;
    let read = read_until(&conn, &q, long_str("first"), n - 1).await;
    assert_compacted(&read, n, key);
}
