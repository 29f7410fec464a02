//! A raw MQTT 3.1.1 client on the crate's codec, over any byte stream.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use lavinmq::mqtt::codec::{
    Ack, Connack, Connect, MqttStr, Packet, ProtocolVersion, Publish, QoS, Subscribe, SubscriptionOptions,
    parse_packet, write_packet,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::common::within;

/// An MQTT connection over `S`.
pub struct Mqtt<S> {
    stream: S,
    buf: BytesMut,
    /// Deliveries that arrived while waiting for something else.
    pending: VecDeque<Publish>,
}

fn mstr(s: &str) -> MqttStr {
    MqttStr::try_from(s).unwrap()
}

impl<S: AsyncRead + AsyncWrite + Unpin> Mqtt<S> {
    /// Sends CONNECT (clean session, `username`/`password` if given) and
    /// returns the CONNACK, or `None` if the server closed the connection.
    pub async fn connect(stream: S, client_id: &str, login: Option<(&str, &str)>) -> (Mqtt<S>, Option<Connack>) {
        let mut c = Mqtt {
            stream,
            buf: BytesMut::new(),
            pending: VecDeque::new(),
        };
        let connect = Connect {
            protocol: ProtocolVersion::V3_1_1,
            clean_session: true,
            keep_alive: 30,
            client_id: mstr(client_id),
            will: None,
            username: login.map(|(u, _)| mstr(u)),
            password: login.map(|(_, p)| Bytes::copy_from_slice(p.as_bytes())),
            properties: None,
        };
        c.send(&Packet::Connect(Box::new(connect))).await;
        let ack = match c.recv().await {
            Some(Packet::Connack(ack)) => Some(ack),
            None => None,
            Some(other) => panic!("expected CONNACK, got {other:?}"),
        };
        (c, ack)
    }

    /// Sends one packet.
    pub async fn send(&mut self, packet: &Packet) {
        let mut out = BytesMut::new();
        write_packet(&mut out, packet, ProtocolVersion::V3_1_1).unwrap();
        within("send", async {
            self.stream.write_all(&out).await.unwrap();
            self.stream.flush().await.unwrap();
        })
        .await;
    }

    /// The next packet, or `None` once the server closed the connection.
    pub async fn recv(&mut self) -> Option<Packet> {
        within("an MQTT packet", async {
            loop {
                if let Some(p) =
                    parse_packet(&mut self.buf, 1 << 20, ProtocolVersion::V3_1_1).expect("packet from the broker")
                {
                    return Some(p);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
    }

    /// Subscribes to `filter` with QoS 1 and waits for the SUBACK.
    pub async fn subscribe(&mut self, filter: &str) {
        let sub = Subscribe {
            packet_id: 1,
            filters: vec![(mstr(filter), SubscriptionOptions::qos(QoS::AtLeastOnce))],
            properties: None,
        };
        self.send(&Packet::Subscribe(sub)).await;
        match self.recv().await {
            Some(Packet::Suback(s)) => assert_eq!(s.packet_id, 1),
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Publishes with QoS 1 and waits for the PUBACK.
    pub async fn publish(&mut self, topic: &str, payload: &[u8]) {
        let publish = Publish {
            dup: false,
            qos: QoS::AtLeastOnce,
            retain: false,
            topic: mstr(topic),
            packet_id: 2,
            payload: Bytes::copy_from_slice(payload),
            properties: None,
        };
        self.send(&Packet::Publish(publish)).await;
        loop {
            match self.recv().await {
                Some(Packet::Puback(Ack { packet_id: 2, .. })) => return,
                // Our own subscription may deliver first.
                Some(Packet::Publish(p)) => {
                    self.ack(&p).await;
                    self.pending.push_back(p);
                }
                other => panic!("expected PUBACK, got {other:?}"),
            }
        }
    }

    /// The next PUBLISH (acknowledged).
    pub async fn next_publish(&mut self) -> Publish {
        if let Some(p) = self.pending.pop_front() {
            return p;
        }
        match self.recv().await {
            Some(Packet::Publish(p)) => {
                self.ack(&p).await;
                p
            }
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    async fn ack(&mut self, p: &Publish) {
        if p.qos == QoS::AtLeastOnce {
            self.send(&Packet::Puback(Ack::ok(p.packet_id))).await;
        }
    }
}
