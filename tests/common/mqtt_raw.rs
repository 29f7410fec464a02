//! A raw MQTT 3.1.1 client for protocol-level tests: packets are encoded and
//! decoded here by hand, independently of the broker's codec, so that tests
//! can send exactly the bytes they mean to (malformed ones included) and see
//! exactly what the broker answers.

use std::collections::VecDeque;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{QUIET, within};

/// Packet types (the high nibble of the first byte).
pub const CONNECT: u8 = 1;
/// CONNACK packet type.
pub const CONNACK: u8 = 2;
/// PUBLISH packet type.
pub const PUBLISH: u8 = 3;
/// PUBACK packet type.
pub const PUBACK: u8 = 4;
/// PUBREC packet type.
pub const PUBREC: u8 = 5;
/// PUBREL packet type.
pub const PUBREL: u8 = 6;
/// PUBCOMP packet type.
pub const PUBCOMP: u8 = 7;
/// SUBSCRIBE packet type.
pub const SUBSCRIBE: u8 = 8;
/// SUBACK packet type.
pub const SUBACK: u8 = 9;
/// UNSUBSCRIBE packet type.
pub const UNSUBSCRIBE: u8 = 10;
/// UNSUBACK packet type.
pub const UNSUBACK: u8 = 11;
/// PINGREQ packet type.
pub const PINGREQ: u8 = 12;
/// PINGRESP packet type.
pub const PINGRESP: u8 = 13;
/// DISCONNECT packet type.
pub const DISCONNECT: u8 = 14;

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// The variable-length "remaining length" encoding of `n`.
pub fn remaining_length(mut n: usize) -> Vec<u8> {
    assert!(n <= 268_435_455, "remaining length {n} cannot be encoded");
    let mut out = Vec::with_capacity(4);
    loop {
        let mut byte = (n % 128) as u8;
        n /= 128;
        if n > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if n == 0 {
            return out;
        }
    }
}

/// A whole packet: first byte, remaining length, body.
pub fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    out.extend(remaining_length(body.len()));
    out.extend_from_slice(body);
    out
}

/// A length-prefixed string (or binary) field; the bytes are not checked.
pub fn mqtt_str(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

/// A will for [`connect_packet`].
#[derive(Debug, Clone, Copy)]
pub struct RawWill<'a> {
    /// Will topic.
    pub topic: &'a str,
    /// Will message.
    pub payload: &'a [u8],
    /// Will QoS.
    pub qos: u8,
    /// Will retain flag.
    pub retain: bool,
}

/// CONNECT with explicit protocol name, level and connect flags, followed by
/// `payload` as given (client id and whatever the flags announce).
pub fn connect_raw(protocol: &[u8], level: u8, flags: u8, keep_alive: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = mqtt_str(protocol);
    body.push(level);
    body.push(flags);
    body.extend_from_slice(&keep_alive.to_be_bytes());
    body.extend_from_slice(payload);
    packet(CONNECT << 4, &body)
}

/// A well-formed MQTT 3.1.1 CONNECT without credentials.
pub fn connect_packet(client_id: &str, clean: bool, keep_alive: u16, will: Option<RawWill<'_>>) -> Vec<u8> {
    let mut flags = if clean { 0b0000_0010 } else { 0 };
    let mut payload = mqtt_str(client_id.as_bytes());
    if let Some(w) = will {
        flags |= 0b0000_0100 | (w.qos << 3);
        if w.retain {
            flags |= 0b0010_0000;
        }
        payload.extend(mqtt_str(w.topic.as_bytes()));
        payload.extend(mqtt_str(w.payload));
    }
    connect_raw(b"MQTT", 4, flags, keep_alive, &payload)
}

/// PUBLISH with raw topic bytes; `packet_id` is written only for QoS > 0.
pub fn publish_packet(topic: &[u8], qos: u8, retain: bool, packet_id: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = mqtt_str(topic);
    if qos > 0 {
        body.extend_from_slice(&packet_id.to_be_bytes());
    }
    body.extend_from_slice(payload);
    packet((PUBLISH << 4) | (qos << 1) | u8::from(retain), &body)
}

/// SUBSCRIBE with the given first byte (normally 0x82) and raw filters.
pub fn subscribe_packet(first: u8, packet_id: u16, filters: &[(&[u8], u8)]) -> Vec<u8> {
    let mut body = packet_id.to_be_bytes().to_vec();
    for (filter, qos) in filters {
        body.extend(mqtt_str(filter));
        body.push(*qos);
    }
    packet(first, &body)
}

/// UNSUBSCRIBE of raw filters.
pub fn unsubscribe_packet(packet_id: u16, filters: &[&[u8]]) -> Vec<u8> {
    let mut body = packet_id.to_be_bytes().to_vec();
    for filter in filters {
        body.extend(mqtt_str(filter));
    }
    packet((UNSUBSCRIBE << 4) | 0b0010, &body)
}

/// A packet whose body is just a packet identifier (PUBACK, PUBREC, ...).
pub fn id_packet(first: u8, packet_id: u16) -> Vec<u8> {
    packet(first, &packet_id.to_be_bytes())
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// One packet as read off the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPacket {
    /// The first byte: type and flags.
    pub first: u8,
    /// Everything after the remaining length.
    pub body: Vec<u8>,
}

impl RawPacket {
    /// The packet type.
    pub fn kind(&self) -> u8 {
        self.first >> 4
    }

    /// The packet identifier of an acknowledgement-like packet.
    pub fn packet_id(&self) -> u16 {
        assert!(self.body.len() >= 2, "packet without identifier: {self:?}");
        u16::from_be_bytes([self.body[0], self.body[1]])
    }
}

/// A PUBLISH received from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPublish {
    /// Topic name.
    pub topic: String,
    /// QoS of the delivery.
    pub qos: u8,
    /// RETAIN flag.
    pub retain: bool,
    /// DUP flag.
    pub dup: bool,
    /// Packet identifier (0 for QoS 0).
    pub packet_id: u16,
    /// Application message.
    pub payload: Vec<u8>,
}

impl RawPublish {
    /// Decodes the PUBLISH `p`.
    pub fn parse(p: &RawPacket) -> RawPublish {
        assert_eq!(p.kind(), PUBLISH, "not a PUBLISH: {p:?}");
        let qos = (p.first >> 1) & 0b11;
        assert!(qos < 3, "broker sent a PUBLISH with QoS 3");
        let b = &p.body;
        let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
        let topic = String::from_utf8(b[2..2 + len].to_vec()).expect("topic is UTF-8");
        let mut rest = &b[2 + len..];
        let packet_id = if qos > 0 {
            let id = u16::from_be_bytes([rest[0], rest[1]]);
            rest = &rest[2..];
            assert_ne!(id, 0, "QoS {qos} PUBLISH with packet id 0");
            id
        } else {
            0
        };
        RawPublish {
            topic,
            qos,
            retain: p.first & 1 == 1,
            dup: p.first & 0b1000 != 0,
            packet_id,
            payload: rest.to_vec(),
        }
    }
}

/// Splits one whole packet off the front of `buf`, if it holds one.
fn split_packet(buf: &mut Vec<u8>) -> Option<RawPacket> {
    let mut len = 0usize;
    let mut shift = 0;
    let mut i = 1;
    loop {
        let byte = *buf.get(i)?;
        len |= usize::from(byte & 0x7F) << shift;
        i += 1;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        assert!(i <= 4, "broker sent a malformed remaining length");
    }
    if buf.len() < i + len {
        return None;
    }
    let first = buf[0];
    let body = buf[i..i + len].to_vec();
    buf.drain(..i + len);
    Some(RawPacket { first, body })
}

// ---------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------

/// A raw MQTT connection. Incoming QoS 1 and 2 PUBLISHes are acknowledged as
/// they are read; PUBLISHes read while waiting for something else are kept
/// for [`MqttRaw::next_publish`].
pub struct MqttRaw {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
    stash: VecDeque<RawPublish>,
    next_id: u16,
}

impl MqttRaw {
    /// Opens the TCP connection only.
    pub async fn tcp(addr: SocketAddr) -> MqttRaw {
        let stream = within("tcp connect", TcpStream::connect(addr))
            .await
            .expect("tcp connect");
        MqttRaw {
            stream,
            buf: Vec::new(),
            stash: VecDeque::new(),
            next_id: 0,
        }
    }

    /// Connects with a 3.1.1 CONNECT (no keep alive), asserting that the
    /// broker accepts; returns the connection and CONNACK's session present.
    pub async fn connect(addr: SocketAddr, client_id: &str, clean: bool) -> (MqttRaw, bool) {
        let mut c = MqttRaw::tcp(addr).await;
        c.send(&connect_packet(client_id, clean, 0, None)).await;
        let (present, rc) = c.expect_connack().await;
        assert_eq!(rc, 0, "CONNACK return code for client {client_id:?}");
        (c, present)
    }

    /// Writes bytes (a write error is ignored: the broker may have closed already).
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = within("socket write", self.stream.write_all(bytes)).await;
        let _ = self.stream.flush().await;
    }

    /// Reads one packet; `None` at EOF or when the connection is reset.
    pub async fn read_packet(&mut self) -> Option<RawPacket> {
        within("a packet from the broker", self.read_packet_unbounded()).await
    }

    async fn read_packet_unbounded(&mut self) -> Option<RawPacket> {
        loop {
            if let Some(p) = split_packet(&mut self.buf) {
                return Some(p);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Reads the CONNACK; returns session present and the return code.
    pub async fn expect_connack(&mut self) -> (bool, u8) {
        let p = self
            .read_packet()
            .await
            .expect("broker closed the connection instead of sending CONNACK");
        assert_eq!(p.first, CONNACK << 4, "expected CONNACK, got {p:?}");
        assert_eq!(p.body.len(), 2, "CONNACK remaining length");
        assert_eq!(p.body[0] & 0xFE, 0, "reserved CONNACK flags set");
        (p.body[0] & 1 == 1, p.body[1])
    }

    /// Acknowledges an incoming PUBLISH as the protocol wants.
    async fn ack_incoming(&mut self, p: &RawPublish) {
        match p.qos {
            1 => self.send(&id_packet(PUBACK << 4, p.packet_id)).await,
            2 => self.send(&id_packet(PUBREC << 4, p.packet_id)).await,
            _ => {}
        }
    }

    /// The next packet that is not a PUBLISH or a PUBREL: PUBLISHes are
    /// acknowledged and kept, PUBRELs answered with PUBCOMP.
    pub async fn next_control(&mut self) -> RawPacket {
        loop {
            let p = self
                .read_packet()
                .await
                .expect("broker closed the connection while a packet was expected");
            match p.kind() {
                PUBLISH => {
                    let publish = RawPublish::parse(&p);
                    self.ack_incoming(&publish).await;
                    self.stash.push_back(publish);
                }
                PUBREL => self.send(&id_packet(PUBCOMP << 4, p.packet_id())).await,
                _ => return p,
            }
        }
    }

    /// The next PUBLISH from the broker (acknowledged).
    pub async fn next_publish(&mut self) -> RawPublish {
        if let Some(p) = self.stash.pop_front() {
            return p;
        }
        loop {
            let p = self
                .read_packet()
                .await
                .expect("broker closed the connection while a PUBLISH was expected");
            match p.kind() {
                PUBLISH => {
                    let publish = RawPublish::parse(&p);
                    self.ack_incoming(&publish).await;
                    return publish;
                }
                PUBREL => self.send(&id_packet(PUBCOMP << 4, p.packet_id())).await,
                _ => panic!("expected PUBLISH, got {p:?}"),
            }
        }
    }

    /// Asserts that no PUBLISH arrives for [`QUIET`].
    pub async fn assert_no_publish(&mut self) {
        if let Some(p) = self.stash.pop_front() {
            panic!("unexpected PUBLISH {p:?}");
        }
        if let Ok(p) = tokio::time::timeout(QUIET, self.read_packet_unbounded()).await {
            panic!("expected nothing from the broker, got {p:?}");
        }
    }

    fn packet_id(&mut self) -> u16 {
        self.next_id = self.next_id.checked_add(1).unwrap_or(1);
        self.next_id
    }

    /// Subscribes to one filter; returns the SUBACK return code.
    pub async fn subscribe(&mut self, filter: &str, qos: u8) -> u8 {
        let id = self.packet_id();
        self.send(&subscribe_packet(0x82, id, &[(filter.as_bytes(), qos)]))
            .await;
        let p = self.next_control().await;
        assert_eq!(p.first, SUBACK << 4, "expected SUBACK, got {p:?}");
        assert_eq!(p.packet_id(), id, "SUBACK packet id");
        assert_eq!(p.body.len(), 3, "SUBACK with one return code");
        p.body[2]
    }

    /// Unsubscribes from one filter and waits for UNSUBACK.
    pub async fn unsubscribe(&mut self, filter: &str) {
        let id = self.packet_id();
        self.send(&unsubscribe_packet(id, &[filter.as_bytes()])).await;
        let p = self.next_control().await;
        assert_eq!(p.first, UNSUBACK << 4, "expected UNSUBACK, got {p:?}");
        assert_eq!(p.packet_id(), id, "UNSUBACK packet id");
    }

    /// Publishes and, for QoS 1 and 2, waits until the broker has taken the
    /// message (PUBACK, or PUBREC-PUBREL-PUBCOMP).
    pub async fn publish(&mut self, topic: &str, qos: u8, retain: bool, payload: &[u8]) {
        let id = if qos > 0 { self.packet_id() } else { 0 };
        self.send(&publish_packet(topic.as_bytes(), qos, retain, id, payload))
            .await;
        match qos {
            0 => {}
            1 => {
                let p = self.next_control().await;
                assert_eq!(p.first, PUBACK << 4, "expected PUBACK, got {p:?}");
                assert_eq!(p.packet_id(), id, "PUBACK packet id");
            }
            _ => {
                let p = self.next_control().await;
                assert_eq!(p.first, PUBREC << 4, "expected PUBREC, got {p:?}");
                assert_eq!(p.packet_id(), id, "PUBREC packet id");
                self.send(&id_packet((PUBREL << 4) | 0b0010, id)).await;
                let p = self.next_control().await;
                assert_eq!(p.first, PUBCOMP << 4, "expected PUBCOMP, got {p:?}");
                assert_eq!(p.packet_id(), id, "PUBCOMP packet id");
            }
        }
    }

    /// PINGREQ, expecting PINGRESP.
    pub async fn ping(&mut self) {
        self.send(&[PINGREQ << 4, 0]).await;
        let p = self.next_control().await;
        assert_eq!(
            p,
            RawPacket {
                first: PINGRESP << 4,
                body: vec![]
            },
            "expected PINGRESP"
        );
    }

    /// Sends DISCONNECT and waits until the broker has closed the socket
    /// (so that it is done with the session).
    pub async fn disconnect(mut self) {
        self.send(&[DISCONNECT << 4, 0]).await;
        let rest = self.expect_eof().await;
        assert!(rest.is_empty(), "broker sent {rest:?} after DISCONNECT");
    }

    /// Waits until the broker closes the socket; returns the bytes it sent
    /// before (not yet read as packets).
    pub async fn expect_eof(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.buf);
        within("the broker to close the connection", async {
            let mut chunk = [0u8; 4096];
            loop {
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => rest.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        rest
    }

    /// Waits until the broker closes the socket without sending anything more.
    pub async fn expect_silent_close(&mut self) {
        let rest = self.expect_eof().await;
        assert!(
            rest.is_empty(),
            "broker sent {rest:02x?} before closing the connection (expected nothing)"
        );
    }
}
