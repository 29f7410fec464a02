//! A raw AMQP 0-9-1 client on the crate's codec, over any byte stream (here:
//! TLS), with just what the tests need.

use bytes::{Bytes, BytesMut};
use lavinmq::amqp::codec::{
    BasicProperties, FieldTable, Frame, Method, ShortStr, parse_frame, write_body, write_header, write_method,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::common::within;

/// An AMQP connection over `S`.
pub struct Amqp<S> {
    /// The byte stream.
    pub stream: S,
    buf: BytesMut,
}

/// How a login ended when the server refused it: reply code and text, or 0
/// when it just closed the socket.
pub type Refused = (u16, String);

impl<S: AsyncRead + AsyncWrite + Unpin> Amqp<S> {
    /// Sends the protocol header and reads connection.start; returns the
    /// client and the mechanisms the server offered.
    pub async fn start(stream: S) -> (Amqp<S>, Vec<String>) {
        let mut c = Amqp {
            stream,
            buf: BytesMut::new(),
        };
        c.send_raw(b"AMQP\x00\x00\x09\x01").await;
        match c.method(0).await {
            Method::ConnectionStart { mechanisms, .. } => {
                let mechanisms = String::from_utf8_lossy(&mechanisms)
                    .split(' ')
                    .map(str::to_string)
                    .collect();
                (c, mechanisms)
            }
            other => panic!("expected connection.start, got {other:?}"),
        }
    }

    /// start-ok with `mechanism` and `response`, tune-ok, open `/` and
    /// channel 1.
    pub async fn login(&mut self, mechanism: &str, response: &[u8]) -> Result<(), Refused> {
        let mut caps = FieldTable::default();
        caps.insert(
            "authentication_failure_close",
            lavinmq::amqp::codec::FieldValue::Bool(true),
        );
        let mut props = FieldTable::default();
        props.insert("capabilities", lavinmq::amqp::codec::FieldValue::Table(caps));
        self.send(
            0,
            &Method::ConnectionStartOk {
                client_properties: props,
                mechanism: ShortStr::from(mechanism),
                response: Bytes::copy_from_slice(response),
                locale: ShortStr::from("en_US"),
            },
        )
        .await;
        let (channel_max, frame_max) = match self.next_frame().await {
            Some(Frame::Method {
                method: Method::ConnectionTune {
                    channel_max, frame_max, ..
                },
                ..
            }) => (channel_max, frame_max),
            Some(Frame::Method {
                method: Method::ConnectionClose {
                    reply_code, reply_text, ..
                },
                ..
            }) => return Err((reply_code, reply_text.to_string())),
            None => return Err((0, "socket closed".into())),
            other => panic!("expected connection.tune, got {other:?}"),
        };
        let tune_ok = Method::ConnectionTuneOk {
            channel_max,
            frame_max,
            heartbeat: 0,
        };
        self.send(0, &tune_ok).await;
        let open = Method::ConnectionOpen {
            virtual_host: ShortStr::from("/"),
        };
        self.send(0, &open).await;
        match self.method(0).await {
            Method::ConnectionOpenOk => {}
            other => panic!("expected connection.open-ok, got {other:?}"),
        }
        self.send(1, &Method::ChannelOpen).await;
        match self.method(1).await {
            Method::ChannelOpenOk => Ok(()),
            other => panic!("expected channel.open-ok, got {other:?}"),
        }
    }

    /// A full PLAIN login as guest.
    pub async fn open_as_guest(stream: S) -> Amqp<S> {
        let (mut c, _) = Amqp::start(stream).await;
        c.login("PLAIN", b"\0guest\0guest").await.expect("guest login");
        c
    }

    /// Writes bytes and flushes (TLS sends on flush).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        within("send", async {
            self.stream.write_all(bytes).await.unwrap();
            self.stream.flush().await.unwrap();
        })
        .await;
    }

    /// Sends one method.
    pub async fn send(&mut self, channel: u16, method: &Method) {
        let mut out = BytesMut::new();
        write_method(&mut out, channel, method).unwrap();
        self.send_raw(&out).await;
    }

    /// The next frame, or `None` once the server closed the connection.
    pub async fn next_frame(&mut self) -> Option<Frame> {
        within("an AMQP frame", async {
            loop {
                if let Some(f) = parse_frame(&mut self.buf, 0).expect("frame from the broker") {
                    return Some(f);
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return None,
                    Ok(_) => {}
                }
            }
        })
        .await
    }

    /// The next method, which must be on `channel`.
    pub async fn method(&mut self, channel: u16) -> Method {
        match self.next_frame().await {
            Some(Frame::Method { channel: ch, method }) => {
                assert_eq!(ch, channel, "channel of {method:?}");
                method
            }
            other => panic!("expected a method on channel {channel}, got {other:?}"),
        }
    }

    /// Declares a non-durable queue on channel 1.
    pub async fn declare(&mut self, queue: &str) {
        let declare = Method::QueueDeclare {
            queue: ShortStr::from(queue),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        self.send(1, &declare).await;
        match self.method(1).await {
            Method::QueueDeclareOk { queue: name, .. } => assert_eq!(name.as_str(), queue),
            other => panic!("expected queue.declare-ok, got {other:?}"),
        }
    }

    /// Publishes `body` to `queue` through the default exchange on channel 1.
    pub async fn publish(&mut self, queue: &str, body: &[u8]) {
        let mut out = BytesMut::new();
        let publish = Method::BasicPublish {
            exchange: ShortStr::from(""),
            routing_key: ShortStr::from(queue),
            mandatory: false,
            immediate: false,
        };
        write_method(&mut out, 1, &publish).unwrap();
        write_header(&mut out, 1, body.len() as u64, &BasicProperties::default()).unwrap();
        write_body(&mut out, 1, body, 0);
        self.send_raw(&out).await;
    }

    /// basic.get on channel 1 (no ack), retrying briefly while the queue is
    /// empty; the body of the message.
    pub async fn get(&mut self, queue: &str) -> Vec<u8> {
        for _ in 0..100 {
            let get = Method::BasicGet {
                queue: ShortStr::from(queue),
                no_ack: true,
            };
            self.send(1, &get).await;
            match self.method(1).await {
                Method::BasicGetEmpty => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                Method::BasicGetOk { .. } => {
                    let size = match self.next_frame().await {
                        Some(Frame::Header { body_size, .. }) => body_size as usize,
                        other => panic!("expected a content header, got {other:?}"),
                    };
                    let mut body = Vec::new();
                    while body.len() < size {
                        match self.next_frame().await {
                            Some(Frame::Body { payload, .. }) => body.extend_from_slice(&payload),
                            other => panic!("expected a content body, got {other:?}"),
                        }
                    }
                    return body;
                }
                other => panic!("expected basic.get-ok or get-empty, got {other:?}"),
            }
        }
        panic!("no message arrived in {queue}");
    }

    /// Declares `queue`, publishes `body` and gets it back: proof that the
    /// connection works.
    pub async fn round_trip(&mut self, queue: &str, body: &[u8]) {
        self.declare(queue).await;
        self.publish(queue, body).await;
        assert_eq!(self.get(queue).await, body);
    }
}
