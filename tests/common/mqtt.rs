//! MQTT helpers: a rumqttc client whose event loop runs in its own task and
//! forwards every incoming packet into a channel that tests read with
//! timeouts, and a raw MQTT 3.1.1 client for byte-level tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnAck, ConnectReturnCode, ConnectionError, Event, EventLoop, Incoming, MqttOptions, Publish, QoS,
    SubscribeReasonCode,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{QUIET, TIMEOUT, TestBroker, within};

/// The address of the broker's MQTT listener (it changes with a restart).
pub fn mqtt_addr(broker: &TestBroker) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], broker.server().mqtt_addr().port()))
}

/// Options of a clean-session client `client_id` connecting anonymously to
/// the broker's MQTT listener.
pub fn options(broker: &TestBroker, client_id: &str) -> MqttOptions {
    let addr = mqtt_addr(broker);
    let mut o = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    o.set_keep_alive(Duration::from_secs(30));
    o.set_max_packet_size(1 << 20, 1 << 20);
    o
}

/// Options of a client `client_id` with a persistent session
/// (clean_session = false).
pub fn persistent(broker: &TestBroker, client_id: &str) -> MqttOptions {
    let mut o = options(broker, client_id);
    o.set_clean_session(false);
    o
}

/// An item the event-loop task forwards: a packet, or the error that ended
/// the connection.
type Item = Result<Incoming, ConnectionError>;

/// A connected rumqttc client. Its event loop stops at the first error (it
/// never reconnects), so a closed connection stays closed.
pub struct MqttClient {
    /// The request side of the client.
    pub client: AsyncClient,
    /// The CONNACK the broker answered with.
    pub connack: ConnAck,
    rx: mpsc::UnboundedReceiver<Item>,
    /// Packets read while waiting for something else, in arrival order.
    buffered: VecDeque<Incoming>,
    /// Why the connection ended, once it has.
    ended: Option<String>,
    task: JoinHandle<()>,
}

/// Runs the event loop until its first error, forwarding incoming packets.
fn drive(mut eventloop: EventLoop, tx: mpsc::UnboundedSender<Item>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(packet)) => {
                    if tx.send(Ok(packet)).is_err() {
                        return;
                    }
                }
                Ok(Event::Outgoing(_)) => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    })
}

/// Connects with `opts`; the error is the one that ended the connection
/// before CONNACK (for a refusal, `ConnectionError::ConnectionRefused`).
pub async fn try_connect(opts: MqttOptions) -> Result<MqttClient, ConnectionError> {
    let (client, eventloop) = AsyncClient::new(opts, 100);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = drive(eventloop, tx);
    let first = within("CONNACK", rx.recv()).await;
    match first {
        Some(Ok(Incoming::ConnAck(connack))) => Ok(MqttClient {
            client,
            connack,
            rx,
            buffered: VecDeque::new(),
            ended: None,
            task,
        }),
        Some(Ok(other)) => panic!("expected CONNACK, got {other:?}"),
        Some(Err(e)) => {
            task.abort();
            Err(e)
        }
        None => panic!("event loop ended without CONNACK or error"),
    }
}

/// Connects with `opts`, failing the test unless the broker accepts.
pub async fn connect(opts: MqttOptions) -> MqttClient {
    let id = opts.client_id();
    match try_connect(opts).await {
        Ok(c) => {
            assert_eq!(c.connack.code, ConnectReturnCode::Success, "CONNACK of {id}");
            c
        }
        Err(e) => panic!("MQTT connect of {id} failed: {e}"),
    }
}

/// The return code of a refused connection attempt.
pub async fn refusal(opts: MqttOptions) -> ConnectReturnCode {
    match try_connect(opts).await {
        Ok(c) => panic!("expected a refusal, got {:?}", c.connack),
        Err(ConnectionError::ConnectionRefused(code)) => code,
        Err(e) => panic!("expected a refusal CONNACK, got error {e}"),
    }
}

impl MqttClient {
    /// Whether the broker resumed a stored session.
    pub fn session_present(&self) -> bool {
        self.connack.session_present
    }

    /// The next packet from the broker (buffered ones first), or `None` once
    /// the connection has ended; fails the test after `limit`.
    async fn next_within(&mut self, limit: Duration) -> Option<Option<Incoming>> {
        if let Some(p) = self.buffered.pop_front() {
            return Some(Some(p));
        }
        if self.ended.is_some() {
            return Some(None);
        }
        match tokio::time::timeout(limit, self.rx.recv()).await {
            Err(_) => None,
            Ok(Some(Ok(p))) => Some(Some(p)),
            Ok(Some(Err(e))) => {
                self.ended = Some(e.to_string());
                Some(None)
            }
            Ok(None) => {
                self.ended = Some("event loop gone".into());
                Some(None)
            }
        }
    }

    /// Waits for the first packet `pick` accepts, keeping the others buffered
    /// in order; fails the test on timeout or when the connection ends.
    pub async fn expect<T>(&mut self, what: &str, mut pick: impl FnMut(&Incoming) -> Option<T>) -> T {
        if let Some(i) = self.buffered.iter().position(|p| pick(p).is_some()) {
            let p = self.buffered.remove(i).expect("buffered packet");
            return pick(&p).expect("picked packet");
        }
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(why) = &self.ended {
                panic!("connection ended while waiting for {what}: {why}");
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Err(_) => panic!("timed out after {TIMEOUT:?} waiting for {what}"),
                Ok(Some(Ok(p))) => match pick(&p) {
                    Some(v) => return v,
                    None => self.buffered.push_back(p),
                },
                Ok(Some(Err(e))) => self.ended = Some(e.to_string()),
                Ok(None) => self.ended = Some("event loop gone".into()),
            }
        }
    }

    /// The next PUBLISH from the broker.
    pub async fn next_publish(&mut self) -> Publish {
        self.expect("a PUBLISH", |p| match p {
            Incoming::Publish(p) => Some(p.clone()),
            _ => None,
        })
        .await
    }

    /// Asserts that no PUBLISH arrives for [`QUIET`] (other packets are kept).
    pub async fn assert_no_publish(&mut self) {
        if let Some(p) = self.buffered.iter().find(|p| matches!(p, Incoming::Publish(_))) {
            panic!("unexpected PUBLISH: {p:?}");
        }
        let deadline = tokio::time::Instant::now() + QUIET;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match self.next_within(left).await {
                None | Some(None) => return,
                Some(Some(Incoming::Publish(p))) => panic!(
                    "unexpected PUBLISH on {:?}: {:?}",
                    p.topic,
                    String::from_utf8_lossy(&p.payload)
                ),
                Some(Some(other)) => self.buffered.push_back(other),
            }
        }
    }

    /// Subscribes to `filter` and waits for the SUBACK; returns the granted
    /// QoS (or the failure).
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) -> SubscribeReasonCode {
        within("subscribe request", self.client.subscribe(filter, qos))
            .await
            .expect("subscribe request");
        let codes = self
            .expect("SUBACK", |p| match p {
                Incoming::SubAck(s) => Some(s.return_codes.clone()),
                _ => None,
            })
            .await;
        assert_eq!(codes.len(), 1, "SUBACK return codes: {codes:?}");
        codes[0]
    }

    /// Subscribes and asserts the broker granted `qos`.
    pub async fn subscribe_ok(&mut self, filter: &str, qos: QoS) {
        let code = self.subscribe(filter, qos).await;
        assert_eq!(code, SubscribeReasonCode::Success(qos), "SUBACK for {filter}");
    }

    /// Publishes and, for QoS 1 and 2, waits until the broker has acknowledged
    /// (PUBACK, or PUBREC and PUBCOMP).
    pub async fn publish(&mut self, topic: &str, qos: QoS, retain: bool, payload: &[u8]) {
        within(
            "publish request",
            self.client.publish(topic, qos, retain, payload.to_vec()),
        )
        .await
        .expect("publish request");
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => {
                self.expect("PUBACK", |p| matches!(p, Incoming::PubAck(_)).then_some(()))
                    .await;
            }
            QoS::ExactlyOnce => {
                self.expect("PUBREC", |p| matches!(p, Incoming::PubRec(_)).then_some(()))
                    .await;
                self.expect("PUBCOMP", |p| matches!(p, Incoming::PubComp(_)).then_some(()))
                    .await;
            }
        }
    }

    /// Acknowledges a delivery (with manual acks).
    pub async fn ack(&self, publish: &Publish) {
        within("ack request", self.client.ack(publish))
            .await
            .expect("ack request");
    }

    /// Waits until the connection has ended (closed by the broker); returns
    /// why, as the event loop reported it. Packets still unread are dropped.
    pub async fn wait_closed(&mut self) -> String {
        within("the connection to close", async {
            while self.ended.is_none() {
                match self.rx.recv().await {
                    Some(Ok(p)) => self.buffered.push_back(p),
                    Some(Err(e)) => self.ended = Some(e.to_string()),
                    None => self.ended = Some("event loop gone".into()),
                }
            }
        })
        .await;
        self.ended.clone().unwrap_or_default()
    }

    /// Sends DISCONNECT and waits until the broker has closed the connection.
    pub async fn disconnect(mut self) {
        within("disconnect request", self.client.disconnect())
            .await
            .expect("disconnect request");
        self.wait_closed().await;
        let _ = within("event loop task", &mut self.task).await;
    }

    /// Drops the network connection without DISCONNECT: the event loop (and
    /// with it the socket) is dropped.
    pub async fn kill(self) {
        self.task.abort();
        let _ = within("event loop task", self.task).await;
    }
}

// ---------------------------------------------------------------------------
// Raw MQTT 3.1.1 client
// ---------------------------------------------------------------------------

/// Packet type nibbles (the high four bits of the first byte).
pub const CONNACK: u8 = 2;
/// PUBLISH packet type.
pub const PUBLISH: u8 = 3;
/// PUBREC packet type.
pub const PUBREC: u8 = 5;
/// PUBCOMP packet type.
pub const PUBCOMP: u8 = 7;

/// Appends an MQTT variable byte integer.
fn remaining_length(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let mut b = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            return;
        }
    }
}

/// Appends a length-prefixed string or binary.
fn mqtt_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s);
}

/// A whole packet from its first byte and the bytes after the remaining length.
fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    remaining_length(&mut out, body.len());
    out.extend_from_slice(body);
    out
}

/// A will for [`connect_packet`]: topic, payload, QoS, retain.
pub type RawWill<'a> = (&'a str, &'a [u8], u8, bool);

/// CONNECT (MQTT 3.1.1, anonymous) with `client_id`, `keep_alive` seconds and
/// an optional will.
pub fn connect_packet(client_id: &str, clean_session: bool, keep_alive: u16, will: Option<RawWill<'_>>) -> Vec<u8> {
    let mut body = Vec::new();
    mqtt_str(&mut body, b"MQTT");
    body.push(4);
    let mut flags = 0u8;
    if clean_session {
        flags |= 0x02;
    }
    if let Some((_, _, qos, retain)) = will {
        flags |= 0x04 | (qos << 3);
        if retain {
            flags |= 0x20;
        }
    }
    body.push(flags);
    body.extend_from_slice(&keep_alive.to_be_bytes());
    mqtt_str(&mut body, client_id.as_bytes());
    if let Some((topic, payload, _, _)) = will {
        mqtt_str(&mut body, topic.as_bytes());
        mqtt_str(&mut body, payload);
    }
    packet(0x10, &body)
}

/// PUBLISH to `topic`; `packet_id` is ignored for QoS 0.
pub fn publish_packet(topic: &str, qos: u8, dup: bool, retain: bool, packet_id: u16, payload: &[u8]) -> Vec<u8> {
    let mut first = 0x30 | (qos << 1);
    if dup {
        first |= 0x08;
    }
    if retain {
        first |= 0x01;
    }
    let mut body = Vec::new();
    mqtt_str(&mut body, topic.as_bytes());
    if qos > 0 {
        body.extend_from_slice(&packet_id.to_be_bytes());
    }
    body.extend_from_slice(payload);
    packet(first, &body)
}

/// PUBREL for `packet_id`.
pub fn pubrel_packet(packet_id: u16) -> Vec<u8> {
    packet(0x62, &packet_id.to_be_bytes())
}

/// One packet as read off the socket: its first byte and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPacket {
    /// Type and flags.
    pub first: u8,
    /// Everything after the remaining length.
    pub body: Vec<u8>,
}

impl RawPacket {
    /// The packet type (high nibble).
    pub fn kind(&self) -> u8 {
        self.first >> 4
    }

    /// The packet identifier of a two-byte acknowledgement (PUBACK, PUBREC, ...).
    pub fn packet_id(&self) -> u16 {
        assert!(self.body.len() >= 2, "no packet id in {self:?}");
        u16::from_be_bytes([self.body[0], self.body[1]])
    }
}

/// A raw TCP connection to the MQTT listener.
pub struct RawMqtt {
    /// The socket.
    pub stream: TcpStream,
}

impl RawMqtt {
    /// Opens the TCP connection only.
    pub async fn tcp(broker: &TestBroker) -> RawMqtt {
        let stream = within("tcp connect", TcpStream::connect(mqtt_addr(broker)))
            .await
            .expect("tcp connect");
        RawMqtt { stream }
    }

    /// Connects, sends `connect` and asserts an accepting CONNACK.
    pub async fn open(broker: &TestBroker, connect: &[u8]) -> RawMqtt {
        let mut c = RawMqtt::tcp(broker).await;
        c.send(connect).await;
        let ack = c.read_packet().await.expect("CONNACK");
        assert_eq!(ack.kind(), CONNACK, "expected CONNACK, got {ack:?}");
        assert_eq!(ack.body.get(1), Some(&0), "CONNACK refused: {ack:?}");
        c
    }

    /// Writes bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        within("socket write", self.stream.write_all(bytes))
            .await
            .expect("socket write");
    }

    /// Reads one packet; `None` at EOF or when the connection is reset.
    pub async fn read_packet(&mut self) -> Option<RawPacket> {
        within("a packet from the broker", async {
            let first = self.stream.read_u8().await.ok()?;
            let mut len = 0usize;
            let mut shift = 0;
            loop {
                let b = self.stream.read_u8().await.ok()?;
                len |= usize::from(b & 0x7f) << shift;
                if b & 0x80 == 0 {
                    break;
                }
                shift += 7;
            }
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).await.ok()?;
            Some(RawPacket { first, body })
        })
        .await
    }

    /// Reads one packet and asserts its type and packet identifier.
    pub async fn expect_ack(&mut self, kind: u8, packet_id: u16) {
        let p = self.read_packet().await.expect("an acknowledgement");
        assert_eq!((p.kind(), p.packet_id()), (kind, packet_id), "got {p:?}");
    }

    /// Waits until the broker closes the socket (ignoring anything it sends).
    pub async fn expect_eof(&mut self) {
        within("the broker to close the socket", async {
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
