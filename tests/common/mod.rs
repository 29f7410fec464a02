//! Shared helpers for the integration tests: an in-process broker on an ephemeral
//! port with its own data dir, lapin conveniences that never wait without a timeout,
//! and a raw AMQP 0-9-1 client for protocol-level tests.
#![allow(dead_code)]

pub mod api;
pub mod mqtt;
pub mod mqtt_raw;

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use futures_lite::{Stream, StreamExt};
use lapin::message::{BasicGetMessage, Delivery};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, Consumer, ErrorKind, Event};
use lavinmq::config::Config;
use lavinmq::server::Server;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single wait for the broker may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// How long to watch for something that must *not* happen (a delivery, ...).
pub const QUIET: Duration = Duration::from_millis(300);
/// A test whose broker lives longer than this is considered hung: the watchdog
/// aborts the test binary so that CI never waits forever.
const WATCHDOG: Duration = Duration::from_secs(120);

/// A broker running in-process on an ephemeral port, with its own data dir.
pub struct TestBroker {
    server: Option<Server>,
    /// The configuration the server was started with (and is restarted with).
    pub config: Config,
    dir: TempDir,
    _watchdog: mpsc::Sender<()>,
}

/// Starts a broker with the test defaults.
pub async fn start() -> TestBroker {
    start_with(|_| {}).await
}

/// Starts a broker after letting `tweak` adjust the test defaults.
pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> TestBroker {
    init_logging();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.main.data_dir = dir.path().to_path_buf();
    config.amqp.bind = "127.0.0.1".to_owned();
    config.amqp.port = 0;
    config.mgmt.port = 0;
    config.mqtt.port = 0;
    config.stream.port = Some(0);
    config.main.metrics_http_port = Some(0);
    config.main.control_unix_path = dir.path().join("ctl.sock");
    tweak(&mut config);
    let server = Server::start(&config).await.expect("server starts");
    TestBroker {
        server: Some(server),
        config,
        dir,
        _watchdog: watchdog(),
    }
}

impl TestBroker {
    /// The running server.
    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("server running")
    }

    /// Address of the AMQP listener.
    pub fn addr(&self) -> SocketAddr {
        self.server().amqp_addr()
    }

    /// Address of the stream protocol listener.
    pub fn stream_addr(&self) -> SocketAddr {
        self.server().stream_addr().expect("stream listener bound")
    }

    /// The data dir (shared by restarts).
    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`
    pub fn url(&self) -> String {
        self.url_for("guest", "guest", "%2f")
    }

    /// A URL with explicit credentials and (URL-encoded) vhost.
    pub fn url_for(&self, user: &str, password: &str, vhost: &str) -> String {
        format!("amqp://{user}:{password}@127.0.0.1:{}/{vhost}", self.addr().port())
    }

    /// Opens a lapin connection as guest to vhost `/`.
    pub async fn connect(&self) -> Connection {
        self.connect_url(&self.url()).await
    }

    /// Opens a lapin connection to `url`, panicking on failure.
    pub async fn connect_url(&self, url: &str) -> Connection {
        try_connect(url).await.expect("connect")
    }

    /// Opens a connection and a channel on it.
    pub async fn channel(&self) -> (Connection, Channel) {
        let conn = self.connect().await;
        let ch = within("channel.open", conn.create_channel())
            .await
            .expect("channel.open");
        (conn, ch)
    }

    /// Shuts the server down (closing client connections) and starts a new one on
    /// the same data dir; the port may change.
    pub async fn restart(&mut self) {
        let server = self.server.take().expect("server running");
        tokio::time::timeout(Duration::from_secs(30), server.shutdown())
            .await
            .expect("shutdown finishes");
        let server = Server::start(&self.config).await.expect("server restarts");
        self.server = Some(server);
    }

    /// Like [`TestBroker::restart`], with the broker down for `down` in between
    /// (so that timers fall due while it is stopped).
    #[allow(dead_code)]
    pub async fn restart_after(&mut self, down: Duration) {
        let server = self.server.take().expect("server running");
        tokio::time::timeout(Duration::from_secs(30), server.shutdown())
            .await
            .expect("shutdown finishes");
        tokio::time::sleep(down).await;
        let server = Server::start(&self.config).await.expect("server restarts");
        self.server = Some(server);
    }

    /// Shuts the server down and keeps its data dir, to look at what it
    /// left behind.
    #[allow(dead_code)]
    pub async fn stop_keeping_data(&mut self) {
        let server = self.server.take().expect("server running");
        tokio::time::timeout(Duration::from_secs(30), server.shutdown())
            .await
            .expect("shutdown finishes");
    }

    /// Like [`TestBroker::restart`], calling `change` while the broker is down
    /// (to damage or repair files in its data dir).
    #[allow(dead_code)]
    pub async fn restart_changing(&mut self, change: impl FnOnce()) {
        let server = self.server.take().expect("server running");
        tokio::time::timeout(Duration::from_secs(30), server.shutdown())
            .await
            .expect("shutdown finishes");
        change();
        let server = Server::start(&self.config).await.expect("server restarts");
        self.server = Some(server);
    }

    /// The directory holding a queue's segments in vhost `/`.
    #[allow(dead_code)]
    pub fn queue_dir(&self, queue: &str) -> std::path::PathBuf {
        let vhost = self.server().broker.vhost("/").expect("default vhost");
        let q = vhost.queue(queue).expect("queue exists");
        q.lock().store.dir().to_path_buf()
    }

    /// Shuts the server down for good.
    pub async fn stop(mut self) {
        let server = self.server.take().expect("server running");
        tokio::time::timeout(Duration::from_secs(30), server.shutdown())
            .await
            .expect("shutdown finishes");
    }
}

fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Aborts the process if the returned sender is not dropped within [`WATCHDOG`]:
/// a last resort against a hang that a missing timeout let through.
fn watchdog() -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let name = std::thread::current().name().unwrap_or("<unnamed>").to_owned();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(WATCHDOG) {
            eprintln!("test {name} still running after {WATCHDOG:?}: aborting");
            std::process::abort();
        }
    });
    tx
}

/// A name no other test uses.
pub fn uniq(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Awaits `fut`, failing the test if it takes longer than [`TIMEOUT`].
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what}"),
    }
}

/// Connects with lapin (bounded by [`TIMEOUT`]).
pub async fn try_connect(url: &str) -> lapin::Result<Connection> {
    within("connection", Connection::connect(url, ConnectionProperties::default())).await
}

/// The AMQP reply code carried by a lapin error, if it is a protocol error.
pub fn reply_code(err: &lapin::Error) -> Option<u16> {
    match err.kind() {
        ErrorKind::ProtocolError(e) => Some(e.get_id()),
        _ => None,
    }
}

/// The reply text of a lapin protocol error.
pub fn reply_text(err: &lapin::Error) -> String {
    match err.kind() {
        ErrorKind::ProtocolError(e) => e.get_message().to_string(),
        _ => format!("not a protocol error: {err}"),
    }
}

/// Asserts that `res` failed with AMQP reply code `code`.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(res: lapin::Result<T>, code: u16) {
    match res {
        Ok(v) => panic!("expected reply code {code}, got success: {v:?}"),
        Err(e) => assert_eq!(reply_code(&e), Some(code), "expected reply code {code}, got error: {e}"),
    }
}

/// A connection's event stream, boxed so it can be polled in place.
pub type Events = Pin<Box<dyn Stream<Item = Event> + Send>>;

/// Subscribes to a connection's events. Subscribe *before* the action whose
/// error you want to see: events are not buffered for late listeners.
pub fn events(conn: &Connection) -> Events {
    Box::pin(conn.events_listener())
}

/// Waits for the next error event carrying an AMQP reply code (a channel or
/// connection close by the server) and returns the code and the reply text.
pub async fn next_error(events: &mut Events) -> (u16, String) {
    within("a close from the server", async {
        loop {
            match events.next().await {
                Some(Event::Error(e)) => {
                    if let ErrorKind::ProtocolError(p) = e.kind() {
                        return (p.get_id(), p.get_message().to_string());
                    }
                }
                Some(_) => {}
                None => panic!("event stream ended without a protocol error"),
            }
        }
    })
    .await
}

/// Waits for a server-sent close with reply code `code`.
pub async fn expect_error(events: &mut Events, code: u16) -> String {
    let (got, text) = next_error(events).await;
    assert_eq!(got, code, "expected reply code {code}, got {got}: {text}");
    text
}

/// Waits until the channel is no longer usable (closed by the server).
pub async fn wait_channel_closed(ch: &Channel) {
    within("channel close", async {
        while ch.status().connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Waits until the connection is no longer usable (closed by the server).
pub async fn wait_connection_closed(conn: &Connection) {
    within("connection close", async {
        while conn.status().connected() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Polls `cond` until it holds, failing the test after [`TIMEOUT`].
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !cond().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Next delivery of `consumer`, failing the test on timeout, error or end.
pub async fn next_delivery(consumer: &mut Consumer) -> Delivery {
    match tokio::time::timeout(TIMEOUT, consumer.next()).await {
        Err(_) => panic!("no delivery on consumer {} within {TIMEOUT:?}", consumer.tag()),
        Ok(None) => panic!("consumer {} ended", consumer.tag()),
        Ok(Some(Err(e))) => panic!("consumer {} failed: {e}", consumer.tag()),
        Ok(Some(Ok(d))) => d,
    }
}

/// The next `n` deliveries of `consumer`.
pub async fn deliveries(consumer: &mut Consumer, n: usize) -> Vec<Delivery> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(next_delivery(consumer).await);
    }
    out
}

/// Asserts that `consumer` receives nothing for [`QUIET`].
pub async fn assert_no_delivery(consumer: &mut Consumer) {
    match tokio::time::timeout(QUIET, consumer.next()).await {
        Err(_) => {}
        Ok(Some(Ok(d))) => panic!(
            "unexpected delivery on {}: {:?}",
            consumer.tag(),
            String::from_utf8_lossy(&d.data)
        ),
        Ok(Some(Err(e))) => panic!("consumer {} failed: {e}", consumer.tag()),
        Ok(None) => panic!("consumer {} ended", consumer.tag()),
    }
}

/// Waits until the consumer stream ends (server-sent cancel or channel close).
pub async fn assert_consumer_ends(consumer: &mut Consumer) {
    within("consumer end", async {
        while let Some(item) = consumer.next().await {
            if let Ok(d) = item {
                panic!(
                    "unexpected delivery while waiting for the end of {}: {:?}",
                    consumer.tag(),
                    String::from_utf8_lossy(&d.data)
                );
            }
        }
    })
    .await
}

/// Declares a non-durable, non-exclusive queue with the given name.
pub async fn declare_queue(ch: &Channel, name: &str) -> lapin::Queue {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
        .expect("queue.declare")
}

/// Publishes `body` without confirm (the channel may be in confirm mode; the
/// confirm is not awaited).
pub async fn publish(ch: &Channel, exchange: &str, routing_key: &str, body: &[u8]) {
    publish_props(ch, exchange, routing_key, body, BasicProperties::default()).await;
}

/// Publishes `body` with `props`.
pub async fn publish_props(ch: &Channel, exchange: &str, routing_key: &str, body: &[u8], props: BasicProperties) {
    ch.basic_publish(
        exchange.into(),
        routing_key.into(),
        BasicPublishOptions::default(),
        body,
        props,
    )
    .await
    .expect("basic.publish");
}

/// Puts the channel in confirm mode.
pub async fn confirm_select(ch: &Channel) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
}

/// Publishes and waits for the broker's ack (the channel must be in confirm mode).
pub async fn publish_confirmed(ch: &Channel, exchange: &str, routing_key: &str, body: &[u8]) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            routing_key.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .expect("basic.publish");
    let c = within("publisher confirm", confirm).await.expect("publisher confirm");
    assert!(c.is_ack(), "expected an ack, got {c:?}");
}

/// Starts a consumer with default options.
pub async fn consume(ch: &Channel, queue: &str) -> Consumer {
    consume_with(ch, queue, BasicConsumeOptions::default(), FieldTable::default()).await
}

/// Starts a consumer.
pub async fn consume_with(ch: &Channel, queue: &str, opts: BasicConsumeOptions, args: FieldTable) -> Consumer {
    ch.basic_consume(queue.into(), "".into(), opts, args)
        .await
        .expect("basic.consume")
}

/// basic.get (with ack required unless `no_ack`).
pub async fn get(ch: &Channel, queue: &str, no_ack: bool) -> Option<BasicGetMessage> {
    within("basic.get", ch.basic_get(queue.into(), BasicGetOptions { no_ack }))
        .await
        .expect("basic.get")
}

/// Bodies of the messages a queue holds, drained with basic.get no-ack.
pub async fn drain(ch: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(m) = get(ch, queue, true).await {
        out.push(m.delivery.data);
    }
    out
}

/// An argument or header table from name/value pairs.
pub fn table(pairs: &[(&str, lapin::types::AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in pairs {
        t.insert((*k).into(), v.clone());
    }
    t
}

/// A long-string field value.
pub fn long_str(s: &str) -> lapin::types::AMQPValue {
    lapin::types::AMQPValue::LongString(s.into())
}

/// Options of a durable, non-exclusive queue declaration.
pub fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Ready messages of a queue, from a passive declare on channel `ch`.
pub async fn queue_count(ch: &Channel, queue: &str) -> u32 {
    let opts = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    ch.queue_declare(queue.into(), opts, FieldTable::default())
        .await
        .expect("passive declare")
        .message_count()
}

/// Ready messages of a queue, from a passive declare on a throw-away channel.
pub async fn message_count(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.create_channel().await.expect("channel.open");
    let q = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive queue.declare");
    let _ = ch.close(200, "OK".into()).await;
    q.message_count()
}

/// True when the queue exists (passive declare on a throw-away channel; a 404
/// closes only that channel).
pub async fn queue_exists(conn: &Connection, queue: &str) -> bool {
    let ch = conn.create_channel().await.expect("channel.open");
    let r = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    match r {
        Ok(_) => {
            let _ = ch.close(200, "OK".into()).await;
            true
        }
        Err(e) => {
            assert_eq!(reply_code(&e), Some(404), "passive declare failed: {e}");
            false
        }
    }
}

/// True when the exchange exists (passive declare on a throw-away channel).
pub async fn exchange_exists(conn: &Connection, exchange: &str) -> bool {
    let ch = conn.create_channel().await.expect("channel.open");
    let r = ch
        .exchange_declare(
            exchange.into(),
            lapin::ExchangeKind::Direct,
            lapin::options::ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    match r {
        Ok(()) => {
            let _ = ch.close(200, "OK".into()).await;
            true
        }
        Err(e) => {
            assert_eq!(reply_code(&e), Some(404), "passive declare failed: {e}");
            false
        }
    }
}

/// Checks that the broker still works: a fresh connection declares a queue,
/// publishes with a confirm and consumes the message back.
pub async fn assert_broker_alive(broker: &TestBroker) {
    let (conn, ch) = broker.channel().await;
    let q = uniq("alive");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", &q, b"still alive").await;
    let mut c = consume(&ch, &q).await;
    let d = next_delivery(&mut c).await;
    assert_eq!(d.data, b"still alive");
    d.ack(Default::default()).await.expect("ack");
    within("connection.close", conn.close(200, "OK".into()))
        .await
        .expect("connection.close");
}

// ---------------------------------------------------------------------------
// Raw AMQP 0-9-1 client
// ---------------------------------------------------------------------------

/// The AMQP 0-9-1 protocol header.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
/// Frame type octets.
pub const FRAME_METHOD: u8 = 1;
/// Content header frame type.
pub const FRAME_HEADER: u8 = 2;
/// Content body frame type.
pub const FRAME_BODY: u8 = 3;
/// Heartbeat frame type.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;

/// One frame as read off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// Frame type octet.
    pub kind: u8,
    /// Channel number.
    pub channel: u16,
    /// Payload (without the frame end).
    pub payload: Vec<u8>,
}

impl RawFrame {
    /// Class and method id of a method frame.
    pub fn method_ids(&self) -> Option<(u16, u16)> {
        if self.kind != FRAME_METHOD || self.payload.len() < 4 {
            return None;
        }
        let p = &self.payload;
        Some((u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]])))
    }

    /// Arguments of a method frame (after class and method ids).
    pub fn args(&self) -> &[u8] {
        &self.payload[4..]
    }
}

/// A `connection.close` or `channel.close` as sent by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawClose {
    /// Channel the close arrived on (0 for connection.close).
    pub channel: u16,
    /// Reply code.
    pub code: u16,
    /// Reply text.
    pub text: String,
    /// Class id of the failing method.
    pub class_id: u16,
    /// Method id of the failing method.
    pub method_id: u16,
}

/// Encodes a short string.
pub fn shortstr(s: &str) -> Vec<u8> {
    assert!(s.len() < 256);
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

/// Encodes a long string.
pub fn longstr(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

/// Encodes a whole frame.
pub fn frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(FRAME_END);
    v
}

/// Encodes a method frame from its ids and encoded arguments.
pub fn method_frame(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut p = class.to_be_bytes().to_vec();
    p.extend_from_slice(&method.to_be_bytes());
    p.extend_from_slice(args);
    frame(FRAME_METHOD, channel, &p)
}

/// `channel.open` on `channel`.
pub fn channel_open(channel: u16) -> Vec<u8> {
    method_frame(channel, 20, 10, &shortstr(""))
}

/// `basic.publish` to `exchange` with `routing_key` (no flags).
pub fn basic_publish(channel: u16, exchange: &str, routing_key: &str) -> Vec<u8> {
    let mut a = 0u16.to_be_bytes().to_vec();
    a.extend(shortstr(exchange));
    a.extend(shortstr(routing_key));
    a.push(0);
    method_frame(channel, 60, 40, &a)
}

/// A basic content header with no properties.
pub fn content_header(channel: u16, body_size: u64) -> Vec<u8> {
    let mut p = 60u16.to_be_bytes().to_vec();
    p.extend_from_slice(&0u16.to_be_bytes());
    p.extend_from_slice(&body_size.to_be_bytes());
    p.extend_from_slice(&0u16.to_be_bytes());
    frame(FRAME_HEADER, channel, &p)
}

/// A raw TCP connection to the broker.
pub struct RawConn {
    /// The socket.
    pub stream: TcpStream,
}

impl RawConn {
    /// Opens the TCP connection only.
    pub async fn tcp(addr: SocketAddr) -> RawConn {
        let stream = within("tcp connect", TcpStream::connect(addr))
            .await
            .expect("tcp connect");
        RawConn { stream }
    }

    /// Opens a connection and performs the whole handshake as guest on vhost `/`
    /// with heartbeats off.
    pub async fn open(addr: SocketAddr) -> RawConn {
        let mut c = RawConn::tcp(addr).await;
        c.send(PROTOCOL_HEADER).await;
        let start = c.read_method().await;
        assert_eq!(start.method_ids(), Some((10, 10)), "expected connection.start");
        c.send(&start_ok("guest", "guest")).await;
        let tune = c.read_method().await;
        assert_eq!(tune.method_ids(), Some((10, 30)), "expected connection.tune");
        let a = tune.args();
        let channel_max = u16::from_be_bytes([a[0], a[1]]);
        let frame_max = u32::from_be_bytes([a[2], a[3], a[4], a[5]]);
        c.send(&tune_ok(channel_max, frame_max, 0)).await;
        c.send(&connection_open("/")).await;
        let open_ok = c.read_method().await;
        assert_eq!(open_ok.method_ids(), Some((10, 41)), "expected connection.open-ok");
        c
    }

    /// Writes bytes (a write error is ignored: the server may have closed already).
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = within("socket write", self.stream.write_all(bytes)).await;
        let _ = self.stream.flush().await;
    }

    /// Reads one frame; `None` at EOF or when the connection is reset.
    pub async fn read_frame(&mut self) -> Option<RawFrame> {
        within("a frame from the server", async {
            let mut header = [0u8; 7];
            self.stream.read_exact(&mut header).await.ok()?;
            let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
            let mut payload = vec![0u8; size + 1];
            self.stream.read_exact(&mut payload).await.ok()?;
            assert_eq!(payload.pop(), Some(FRAME_END), "server sent a bad frame end");
            Some(RawFrame {
                kind: header[0],
                channel: u16::from_be_bytes([header[1], header[2]]),
                payload,
            })
        })
        .await
    }

    /// Reads the next method frame, skipping heartbeats.
    pub async fn read_method(&mut self) -> RawFrame {
        loop {
            let f = self
                .read_frame()
                .await
                .expect("server closed the socket while a method was expected");
            if f.kind != FRAME_HEARTBEAT {
                assert_eq!(f.kind, FRAME_METHOD, "expected a method frame, got {f:?}");
                return f;
            }
        }
    }

    /// Reads frames until the server sends `connection.close`, answers it with
    /// close-ok, and returns it. Panics if the socket ends first.
    pub async fn expect_connection_close(&mut self) -> RawClose {
        loop {
            let Some(f) = self.read_frame().await else {
                panic!("server closed the socket without sending connection.close");
            };
            if f.channel == 0 && f.method_ids() == Some((10, 50)) {
                let close = parse_close(&f);
                self.send(&method_frame(0, 10, 51, &[])).await;
                return close;
            }
        }
    }

    /// Reads frames until the server sends `channel.close` on some channel.
    pub async fn expect_channel_close(&mut self) -> RawClose {
        loop {
            let Some(f) = self.read_frame().await else {
                panic!("server closed the socket without sending channel.close");
            };
            match f.method_ids() {
                Some((20, 40)) => return parse_close(&f),
                Some((10, 50)) => panic!("expected channel.close, got connection.close {:?}", parse_close(&f)),
                _ => {}
            }
        }
    }

    /// Waits until the server closes the socket (ignoring anything it still sends).
    pub async fn expect_eof(&mut self) {
        within("the server to close the socket", async {
            let mut buf = [0u8; 4096];
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
    }
}

/// Decodes a connection.close or channel.close frame.
pub fn parse_close(f: &RawFrame) -> RawClose {
    let a = f.args();
    let code = u16::from_be_bytes([a[0], a[1]]);
    let len = a[2] as usize;
    let text = String::from_utf8_lossy(&a[3..3 + len]).into_owned();
    let rest = &a[3 + len..];
    RawClose {
        channel: f.channel,
        code,
        text,
        class_id: u16::from_be_bytes([rest[0], rest[1]]),
        method_id: u16::from_be_bytes([rest[2], rest[3]]),
    }
}

/// `connection.start-ok` with PLAIN credentials and no client properties.
pub fn start_ok(user: &str, password: &str) -> Vec<u8> {
    let mut a = 0u32.to_be_bytes().to_vec(); // empty client-properties table
    a.extend(shortstr("PLAIN"));
    a.extend(longstr(format!("\0{user}\0{password}").as_bytes()));
    a.extend(shortstr("en_US"));
    method_frame(0, 10, 11, &a)
}

/// `connection.tune-ok`.
pub fn tune_ok(channel_max: u16, frame_max: u32, heartbeat: u16) -> Vec<u8> {
    let mut a = channel_max.to_be_bytes().to_vec();
    a.extend_from_slice(&frame_max.to_be_bytes());
    a.extend_from_slice(&heartbeat.to_be_bytes());
    method_frame(0, 10, 31, &a)
}

/// `connection.open` for `vhost`.
pub fn connection_open(vhost: &str) -> Vec<u8> {
    let mut a = shortstr(vhost);
    a.extend(shortstr(""));
    a.push(0);
    method_frame(0, 10, 40, &a)
}

/// A queue's segment files as they were before [`break_segments`] damaged them.
#[allow(dead_code)]
pub struct SavedSegments(Vec<(std::path::PathBuf, Vec<u8>)>);

/// Gives every message segment in `dir` an unknown format version and removes
/// their metadata files, so that opening the queue fails; returns the original
/// bytes for [`SavedSegments::restore`] and the damaged ones for comparison.
#[allow(dead_code)]
pub fn break_segments(dir: &Path) -> (SavedSegments, Vec<(std::path::PathBuf, Vec<u8>)>) {
    let mut saved = Vec::new();
    let mut damaged = Vec::new();
    for entry in std::fs::read_dir(dir).expect("queue dir") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name.starts_with("meta.") {
            saved.push((path.clone(), std::fs::read(&path).expect("read meta")));
            std::fs::remove_file(&path).expect("remove meta");
        } else if name.starts_with("msgs.") {
            let bytes = std::fs::read(&path).expect("read segment");
            let mut bad = bytes.clone();
            bad[0..4].copy_from_slice(&99u32.to_le_bytes());
            std::fs::write(&path, &bad).expect("damage segment");
            saved.push((path.clone(), bytes));
            damaged.push((path, bad));
        }
    }
    assert!(!damaged.is_empty(), "no segment in {}", dir.display());
    (SavedSegments(saved), damaged)
}

impl SavedSegments {
    /// Puts the original files back.
    #[allow(dead_code)]
    pub fn restore(&self) {
        for (path, bytes) in &self.0 {
            std::fs::write(path, bytes).expect("restore file");
        }
    }
}
