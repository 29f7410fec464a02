//! Micro-benchmarks of the publish hot path, per message.
//!
//! * `publish_path/*`: "parse + route + append". A pre-encoded buffer of
//!   [`MESSAGES`] basic.publish + content header + body frames (16-byte bodies) is
//!   taken apart with the publish fast path's `peek_publish`, each publish is
//!   turned into a [`Message`] the way the connection's fast path does, routed
//!   with `VHost::route_cached` (the channel's route cache) and appended with
//!   `Queue::publish` to the queue's memory-mapped segments.
//!   Variants: default exchange -> 1 queue, topic exchange with 100 bindings ->
//!   1 queue, fanout -> 3 queues.
//! * `frame_codec/parse_publish`: `parse_frame` alone over the same buffer.
//! * `delivery_encode/deliver_header_body`: the consumer side's encoding of one
//!   delivery (`write_basic_deliver` + `write_header_raw` + `write_body`) into a
//!   reused buffer.
//!
//! Throughput is reported in elements = messages, so criterion's `thrpt` is
//! messages per second and `time / MESSAGES` is the per-message cost.

use std::hint::black_box;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use lavinmq::amqp::codec::publish_frames::{WholePublish, peek_publish};
use lavinmq::amqp::codec::{
    BasicProperties, Method, ShortStr, parse_frame, write_basic_deliver, write_body, write_header, write_header_raw,
    write_method,
};
use lavinmq::core::FieldTable;
use lavinmq::core::message::Message;
use lavinmq::core::queue::{ConnectionId, Queue};
use lavinmq::core::route_cache::RouteCache;
use lavinmq::core::vhost::{ExchangeOptions, QueueOptions, StoreSettings, VHost};

/// Messages per measured iteration.
const MESSAGES: usize = 1000;
/// Body size of every message.
const BODY_SIZE: usize = 16;
/// The broker's default negotiated frame_max.
const FRAME_MAX: u32 = 131_072;
/// AMQP channel the frames travel on.
const CHANNEL: u16 = 1;
/// Connection id used for declarations.
const CONN: ConnectionId = 1;
/// Purge the queues (outside the measurement) once one holds this many messages,
/// so that the segment files stay bounded (~70 bytes on disk per message).
const PURGE_AT: u64 = 200_000;

/// Properties of every published message: just `delivery_mode = 1` (transient).
fn properties() -> BasicProperties {
    BasicProperties {
        delivery_mode: Some(1),
        ..BasicProperties::default()
    }
}

/// `MESSAGES` complete publishes (method + header + one body frame each), encoded
/// with the crate's own encoders.
fn encode_publishes(exchange: &str, routing_key: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let method = Method::BasicPublish {
        exchange: ShortStr::from(exchange),
        routing_key: ShortStr::from(routing_key),
        mandatory: false,
        immediate: false,
    };
    let props = properties();
    let body = [b'x'; BODY_SIZE];
    for _ in 0..MESSAGES {
        write_method(&mut buf, CHANNEL, &method).expect("encode basic.publish");
        write_header(&mut buf, CHANNEL, BODY_SIZE as u64, &props).expect("encode header");
        write_body(&mut buf, CHANNEL, &body, FRAME_MAX);
    }
    buf.freeze()
}

/// A vhost in a temporary directory with its queues and the exchange to publish to.
struct Fixture {
    _dir: tempfile::TempDir,
    vhost: Arc<VHost>,
    queues: Vec<Arc<Queue>>,
    frames: Bytes,
}

impl Fixture {
    fn new(queue_names: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let vhost = VHost::open(
            "bench",
            dir.path(),
            StoreSettings {
                sync: false,
                ..Default::default()
            },
        )
        .expect("open vhost");
        let mut queues = Vec::new();
        for name in queue_names {
            vhost
                .declare_queue(name, &QueueOptions::default(), FieldTable::default(), CONN)
                .expect("declare queue");
            queues.push(vhost.get_queue(name).expect("queue"));
        }
        Fixture {
            _dir: dir,
            vhost,
            queues,
            frames: Bytes::new(),
        }
    }

    fn declare_exchange(&self, name: &str, kind: &str) {
        self.vhost
            .declare_exchange(name, kind, &ExchangeOptions::default(), FieldTable::default())
            .expect("declare exchange");
    }

    fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.vhost
            .bind_queue(queue, exchange, key, FieldTable::default(), Some(CONN))
            .expect("bind");
    }

    /// Default exchange, routing key = queue name.
    fn default_exchange() -> Fixture {
        let mut f = Fixture::new(&["bench-q"]);
        f.frames = encode_publishes("", "bench-q");
        f
    }

    /// Topic exchange with 100 bindings (`sensor.<i>.*`) to one queue; the routing
    /// key matches exactly one of them.
    fn topic_100_bindings() -> Fixture {
        let mut f = Fixture::new(&["bench-q"]);
        f.declare_exchange("bench.topic", "topic");
        for i in 0..100 {
            f.bind("bench-q", "bench.topic", &format!("sensor.{i}.*"));
        }
        f.frames = encode_publishes("bench.topic", "sensor.42.temperature");
        f
    }

    /// Fanout exchange bound to three queues.
    fn fanout_3_queues() -> Fixture {
        let names = ["bench-q1", "bench-q2", "bench-q3"];
        let mut f = Fixture::new(&names);
        f.declare_exchange("bench.fanout", "fanout");
        for q in names {
            f.bind(q, "bench.fanout", "");
        }
        f.frames = encode_publishes("bench.fanout", "");
        f
    }

    /// A fresh receive buffer holding every frame, after purging the queues if they
    /// grew too large. Runs outside the measurement.
    fn setup(&self) -> BytesMut {
        for q in &self.queues {
            if q.counts().0 >= PURGE_AT {
                q.purge().expect("purge");
            }
        }
        BytesMut::from(&self.frames[..])
    }

    fn total_messages(&self) -> u64 {
        self.queues.iter().map(|q| q.counts().0).sum()
    }
}

/// Builds one variant's fixture.
type MakeFixture = fn() -> Fixture;

/// What the connection and channel do per message on the publish fast path
/// (`Connection::whole_publish`): recognise the three frames in place, split
/// them off, build the message, look up the exchange, route through the
/// channel's route cache, and store in every queue reached; then, once per
/// buffer (a read batch), wake the queues that were empty.
/// Returns the number of messages published.
fn parse_route_append(
    vhost: &VHost,
    mut buf: BytesMut,
    route_buf: &mut Vec<Arc<Queue>>,
    cache: &mut RouteCache,
    scratch: &mut BytesMut,
) -> usize {
    let mut wakes: Vec<Arc<Queue>> = Vec::new();
    let mut published = 0;
    while let Some(p) = peek_publish(&buf, FRAME_MAX) {
        let whole = WholePublish::split_off(&mut buf, &p).expect("well-formed");
        let msg = Message {
            timestamp: Message::now_ms(),
            exchange: whole.exchange,
            routing_key: whole.routing_key,
            properties: whole.properties,
            raw_properties: Some(whole.raw_properties),
            body: whole.body,
        };
        // As Channel::publish_message: exchange lookup, route, store.
        let exchange = vhost.exchange(&msg.exchange).expect("exchange exists");
        vhost.route_cached(&exchange, &msg, &[], route_buf, Some(&mut *cache));
        for q in route_buf.iter() {
            // `true`: the queue was empty, its consumers are woken at the end of
            // the read batch (as `ConnInfo::defer_wake` does).
            if q.publish(&msg, scratch).expect("publish").woke && !wakes.iter().any(|w| Arc::ptr_eq(w, q)) {
                wakes.push(q.clone());
            }
        }
        route_buf.clear();
        published += 1;
    }
    assert!(buf.is_empty(), "every publish took the fast path");
    for q in wakes.drain(..) {
        q.wake_consumers();
    }
    published
}

fn bench_publish_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("publish_path");
    group.throughput(Throughput::Elements(MESSAGES as u64));
    let variants: [(&str, MakeFixture); 3] = [
        ("default_exchange_1_queue", Fixture::default_exchange),
        ("topic_100_bindings_1_queue", Fixture::topic_100_bindings),
        ("fanout_3_queues", Fixture::fanout_3_queues),
    ];
    for (name, make) in variants {
        let fixture = make();
        // Sanity check (outside the measurement): every message reaches every queue.
        let before = fixture.total_messages();
        let mut route_buf = Vec::new();
        let mut cache = RouteCache::default();
        let mut scratch = BytesMut::new();
        let n = parse_route_append(
            &fixture.vhost,
            fixture.setup(),
            &mut route_buf,
            &mut cache,
            &mut scratch,
        );
        assert_eq!(n, MESSAGES);
        assert_eq!(
            fixture.total_messages() - before,
            (MESSAGES * fixture.queues.len()) as u64,
            "{name}: every message must reach every queue"
        );
        group.bench_function(name, |b| {
            b.iter_batched(
                || fixture.setup(),
                |buf| parse_route_append(&fixture.vhost, buf, &mut route_buf, &mut cache, &mut scratch),
                // One 1000-message buffer per timed call: the purge in setup then
                // bounds the store, and the timer overhead is negligible.
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

fn bench_frame_codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("frame_codec");
    group.throughput(Throughput::Elements(MESSAGES as u64));
    let frames = encode_publishes("", "bench-q");
    group.bench_function("parse_publish", |b| {
        b.iter_batched(
            || BytesMut::from(&frames[..]),
            |mut buf| {
                let mut n = 0;
                while let Some(frame) = parse_frame(&mut buf, FRAME_MAX).expect("parse") {
                    black_box(&frame);
                    n += 1;
                }
                assert_eq!(n, MESSAGES * 3);
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn bench_delivery_encode(c: &mut Criterion) {
    let mut group = c.benchmark_group("delivery_encode");
    group.throughput(Throughput::Elements(MESSAGES as u64));
    // What a consumer reads from the segment: the properties as received.
    let mut raw_props = BytesMut::new();
    properties().encode(&mut raw_props).expect("encode properties");
    let body = [b'x'; BODY_SIZE];
    // A consumer tag as RabbitMQ/LavinMQ generate them for clients.
    let tag = "amq.ctag-hxVQ8tGtGy4VcyYXdpV1iA";
    let mut out = BytesMut::with_capacity(128 * 1024);
    let mut delivery_tag = 0u64;
    group.bench_function("deliver_header_body", |b| {
        b.iter(|| {
            out.clear();
            for _ in 0..MESSAGES {
                delivery_tag += 1;
                write_basic_deliver(&mut out, CHANNEL, tag, delivery_tag, false, "", "bench-q").expect("deliver");
                write_header_raw(&mut out, CHANNEL, BODY_SIZE as u64, &raw_props).expect("header");
                write_body(&mut out, CHANNEL, &body, FRAME_MAX);
            }
            black_box(&out);
        })
    });
    group.finish();
}

criterion_group!(benches, bench_publish_path, bench_frame_codec, bench_delivery_encode);
criterion_main!(benches);
