//! AMQP 1.0, driven by a real client (`fe2o3-amqp`) against the broker's
//! AMQP 1.0 adapter on the same listener as 0-9-1: SASL, vhosts and closing
//! (`amqp1/connection.rs`), RabbitMQ 4 "v2" addresses (`amqp1/addresses.rs`),
//! publishing outcomes and settlement (`amqp1/publish.rs`), link credit and
//! the receiver's dispositions (`amqp1/consume.rs`), the mapping of messages
//! between the two protocols (`amqp1/mapping.rs`) and many links and sessions
//! on one connection (`amqp1/links.rs`); the codec against an independent
//! one (`amqp1/codec.rs`). Queues and exchanges are declared
//! through 0-9-1 (lapin) and counted through the HTTP API.

mod addresses;
mod codec;
mod connection;
mod consume;
mod links;
mod mapping;
mod publish;

use std::time::Duration;

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::link::{ReceiverAttachError, SenderAttachError};
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::definitions::{self, AmqpError, ErrorCondition};
use fe2o3_amqp::types::messaging::{Body, Message, Outcome};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Connection, Delivery, Receiver, Sender, Session};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};

use crate::common::api::{Api, enc};
use crate::common::{QUIET, TIMEOUT, TestBroker, uniq, within};

/// What the tests receive: any body section, any AMQP value inside.
pub type Received = Delivery<Body<Value>>;

/// `amqp://guest:guest@127.0.0.1:PORT`: fe2o3 takes PLAIN credentials from
/// the URL, and the URL's host ("127.0.0.1") as open.hostname unless the
/// builder sets another.
pub fn url(b: &TestBroker) -> String {
    url_for(b, "guest", "guest")
}

/// Like [`url`] with other credentials.
pub fn url_for(b: &TestBroker, user: &str, password: &str) -> String {
    format!("amqp://{user}:{password}@127.0.0.1:{}", b.addr().port())
}

/// The v2 address of a queue.
pub fn queue_address(queue: &str) -> String {
    format!("/queues/{}", enc(queue))
}

/// The v2 address of an exchange with a routing key.
pub fn exchange_key_address(exchange: &str, key: &str) -> String {
    format!("/exchanges/{}/{}", enc(exchange), enc(key))
}

/// The v2 address of an exchange (the routing key is the message's subject).
pub fn exchange_address(exchange: &str) -> String {
    format!("/exchanges/{}", enc(exchange))
}

/// Opens an AMQP 1.0 connection as guest with fe2o3's defaults.
pub async fn open(b: &TestBroker) -> ConnectionHandle<()> {
    within("AMQP 1.0 open", Connection::open(uniq("amqp1-client"), url(b).as_str()))
        .await
        .expect("AMQP 1.0 connection opens")
}

/// Opens an AMQP 1.0 connection as guest with `hostname` in the open frame.
pub async fn open_with_hostname(b: &TestBroker, hostname: &str) -> ConnectionHandle<()> {
    let url = url(b);
    let open = Connection::builder()
        .container_id(uniq("amqp1-client"))
        .hostname(hostname)
        .open(url.as_str());
    within("AMQP 1.0 open", open)
        .await
        .unwrap_or_else(|e| panic!("AMQP 1.0 connection with hostname {hostname:?} opens: {e:?}"))
}

/// Begins a session with fe2o3's defaults.
pub async fn begin(conn: &mut ConnectionHandle<()>) -> SessionHandle<()> {
    within("AMQP 1.0 begin", Session::begin(conn))
        .await
        .expect("session begins")
}

/// Attaches a sender (fe2o3 defaults: snd-settle-mode mixed) to `address`.
pub async fn sender(session: &mut SessionHandle<()>, address: &str) -> Sender {
    within("sender attach", Sender::attach(session, uniq("sender"), address))
        .await
        .unwrap_or_else(|e| panic!("sender attach to {address}: {e:?}"))
}

/// Attaches a receiver (fe2o3 defaults: rcv-settle-mode first, credit mode
/// auto with 200 credits) to `address`.
pub async fn receiver(session: &mut SessionHandle<()>, address: &str) -> Receiver {
    within("receiver attach", Receiver::attach(session, uniq("receiver"), address))
        .await
        .unwrap_or_else(|e| panic!("receiver attach to {address}: {e:?}"))
}

/// A connection with one session: what most tests need.
pub struct Client {
    /// The session (declared first so it is dropped before the connection).
    pub session: SessionHandle<()>,
    /// The connection.
    pub conn: ConnectionHandle<()>,
}

impl Client {
    /// Opens a connection to `b` as guest (vhost `/`) and begins a session.
    pub async fn new(b: &TestBroker) -> Client {
        let mut conn = open(b).await;
        let session = begin(&mut conn).await;
        Client { session, conn }
    }

    /// Attaches a sender to `address`.
    pub async fn sender(&mut self, address: &str) -> Sender {
        sender(&mut self.session, address).await
    }

    /// Attaches a receiver to `address`.
    pub async fn receiver(&mut self, address: &str) -> Receiver {
        receiver(&mut self.session, address).await
    }

    /// Ends the session and closes the connection, both of which the broker
    /// must answer.
    pub async fn close(mut self) {
        within("session end", self.session.end())
            .await
            .expect("session ends cleanly");
        within("connection close", self.conn.close())
            .await
            .expect("connection closes cleanly");
    }
}

/// A message with a single Data section.
pub fn data_message(body: &[u8]) -> Message<fe2o3_amqp::types::messaging::Data> {
    Message::builder().data(body.to_vec()).build()
}

/// Sends `message` unsettled and returns the outcome the broker settled it with.
pub async fn send_outcome<T>(sender: &mut Sender, message: Message<T>) -> Outcome
where
    T: fe2o3_amqp::types::messaging::SerializableBody + Send + Sync,
{
    within("the outcome of a transfer", sender.send(message))
        .await
        .unwrap_or_else(|e| panic!("send failed: {e:?}"))
}

/// Sends a Data message unsettled and asserts that the broker accepts it.
pub async fn send_accepted(sender: &mut Sender, body: &[u8]) {
    let outcome = send_outcome(sender, data_message(body)).await;
    assert!(
        matches!(outcome, Outcome::Accepted(_)),
        "expected accepted for {:?}, got {outcome:?}",
        String::from_utf8_lossy(body)
    );
}

/// The next delivery on `receiver`.
pub async fn recv(receiver: &mut Receiver) -> Received {
    within("an AMQP 1.0 delivery", receiver.recv::<Body<Value>>())
        .await
        .unwrap_or_else(|e| panic!("receive failed: {e:?}"))
}

/// The next `n` deliveries on `receiver`.
pub async fn recv_n(receiver: &mut Receiver, n: usize) -> Vec<Received> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(recv(receiver).await);
    }
    out
}

/// Asserts that `receiver` gets nothing for [`QUIET`].
pub async fn assert_no_delivery(receiver: &mut Receiver) {
    if let Ok(r) = tokio::time::timeout(QUIET, receiver.recv::<Body<Value>>()).await {
        match r {
            Ok(d) => panic!("unexpected delivery: {:?}", String::from_utf8_lossy(&body_bytes(&d))),
            Err(e) => panic!("receiver failed while nothing was expected: {e:?}"),
        }
    }
}

/// The bytes of a delivery whose body must be Data sections.
pub fn body_bytes(d: &Received) -> Vec<u8> {
    match d.body() {
        Body::Data(sections) => sections.iter().flat_map(|s| s.0.iter().copied()).collect(),
        other => panic!("expected a Data body section, got {other:?}"),
    }
}

/// The bodies of `deliveries`, as strings.
pub fn bodies(deliveries: &[Received]) -> Vec<String> {
    deliveries
        .iter()
        .map(|d| String::from_utf8_lossy(&body_bytes(d)).into_owned())
        .collect()
}

/// Asserts that `err` is a refused attach: the broker detached the link with
/// amqp:not-found.
#[track_caller]
pub fn assert_not_found(what: &str, err: Option<&definitions::Error>, debug: &dyn std::fmt::Debug) {
    match err {
        Some(e) => assert_eq!(
            e.condition,
            ErrorCondition::AmqpError(AmqpError::NotFound),
            "{what}: expected amqp:not-found, got {e:?}"
        ),
        None => panic!("{what}: expected a detach with amqp:not-found, got {debug:?}"),
    }
}

/// The error a sender attach was refused with, if it was refused with one.
pub fn sender_attach_error(e: &SenderAttachError) -> Option<&definitions::Error> {
    match e {
        SenderAttachError::RemoteClosedWithError(err) => Some(err),
        _ => None,
    }
}

/// The error a receiver attach was refused with, if it was refused with one.
pub fn receiver_attach_error(e: &ReceiverAttachError) -> Option<&definitions::Error> {
    match e {
        ReceiverAttachError::RemoteClosedWithError(err) => Some(err),
        _ => None,
    }
}

/// Ready and unacknowledged messages of queue `queue` in vhost `/`, from the
/// HTTP API.
pub async fn counts(api: &Api, queue: &str) -> (u64, u64) {
    let v = api.get_ok(&format!("/api/queues/%2F/{}", enc(queue))).await;
    let n = |field: &str| {
        v[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in the API's queue {queue}: {v}"))
    };
    (n("messages_ready"), n("messages_unacknowledged"))
}

/// Waits until queue `queue` (vhost `/`) holds `ready` ready and `unacked`
/// unacknowledged messages (counts update asynchronously).
pub async fn wait_counts(api: &Api, queue: &str, ready: u64, unacked: u64) {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let got = counts(api, queue).await;
        if got == (ready, unacked) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("queue {queue}: expected (ready, unacked) = ({ready}, {unacked}), still {got:?} after {TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Declares exchange `name` of `kind` through 0-9-1.
pub async fn declare_exchange(ch: &Channel, name: &str, kind: ExchangeKind) {
    ch.exchange_declare(
        name.into(),
        kind,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange.declare");
}

/// Binds `queue` to `exchange` with `key` through 0-9-1.
pub async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str) {
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
