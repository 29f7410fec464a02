//! MQTT and AMQP over WebSocket on the HTTP listener: the subprotocol (or,
//! without one, the path) picks the protocol, binary messages carry the
//! protocol's bytes, and the HTTP API keeps working next to upgraded
//! connections, including ones that send garbage.

use crate::common;

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use common::mqtt::{connect as mqtt_connect, options as mqtt_options};
use common::{TestBroker, start, uniq, within};
use futures_util::{SinkExt, StreamExt};
use lavinmq::amqp::codec::{FieldTable, Frame, Method, ShortStr, parse_frame, write_method};
use lavinmq::mqtt::codec::{
    Ack, Connack, Connect, Disconnect, MqttStr, Packet, ProtocolVersion, Publish, QoS, ReasonCode, Subscribe,
    SubscriptionOptions, Will, parse_packet, write_packet,
};
use reqwest::StatusCode;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Largest MQTT packet the test client accepts.
const MAX_PACKET: usize = 1 << 20;

/// The HTTP listener, reached over loopback (guest may only log in from there).
fn http_addr(broker: &TestBroker) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], broker.server().http_addr().port()))
}

/// Opens a WebSocket to `path` on the HTTP listener, offering `subprotocol`
/// (a comma-separated list) when given.
async fn ws_open(broker: &TestBroker, path: &str, subprotocol: Option<&str>) -> (Ws, Response) {
    let url = format!("ws://{}{path}", http_addr(broker));
    let mut req = url.as_str().into_client_request().expect("client request");
    if let Some(p) = subprotocol {
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_str(p).expect("header value"),
        );
    }
    within("WebSocket handshake", tokio_tungstenite::connect_async(req))
        .await
        .unwrap_or_else(|e| panic!("WebSocket handshake on {path} ({subprotocol:?}) failed: {e}"))
}

/// The subprotocol the server confirmed, if any.
fn confirmed_protocol(resp: &Response) -> Option<String> {
    resp.headers()
        .get("Sec-WebSocket-Protocol")
        .map(|v| v.to_str().expect("ascii header").to_string())
}

/// Next binary payload from the server, `None` once it closed the WebSocket
/// (close frame, end of stream or a failed read). Pings and pongs are skipped.
async fn next_binary(ws: &mut Ws) -> Option<Bytes> {
    within("a WebSocket message", async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => return Some(b),
                Some(Ok(Message::Text(t))) => panic!("unexpected text message: {t:?}"),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return None,
            }
        }
    })
    .await
}

/// Waits until the server closes the WebSocket; returns the binary data it
/// sent before.
async fn expect_closed(ws: &mut Ws) -> Vec<u8> {
    let mut got = Vec::new();
    while let Some(b) = next_binary(ws).await {
        got.extend_from_slice(&b);
    }
    got
}

fn mstr(s: &str) -> MqttStr {
    MqttStr::try_from(s).expect("MQTT string")
}

/// An MQTT client over a WebSocket, speaking through the crate's codec.
struct WsMqtt {
    ws: Ws,
    buf: BytesMut,
    next_id: u16,
}

impl WsMqtt {
    fn new(ws: Ws) -> Self {
        WsMqtt {
            ws,
            buf: BytesMut::new(),
            next_id: 1,
        }
    }

    /// Opens the WebSocket and sends CONNECT; returns the client and the
    /// confirmed subprotocol.
    async fn open(broker: &TestBroker, path: &str, subprotocol: Option<&str>) -> (WsMqtt, Option<String>) {
        let (ws, resp) = ws_open(broker, path, subprotocol).await;
        (WsMqtt::new(ws), confirmed_protocol(&resp))
    }

    async fn send(&mut self, packet: &Packet) {
        let mut out = BytesMut::new();
        write_packet(&mut out, packet, ProtocolVersion::V3_1_1).expect("encode packet");
        within("WebSocket send", self.ws.send(Message::binary(out.freeze())))
            .await
            .expect("WebSocket send");
    }

    /// Next packet from the broker; fails the test if the WebSocket closes.
    async fn recv(&mut self) -> Packet {
        loop {
            if let Some(p) =
                parse_packet(&mut self.buf, MAX_PACKET, ProtocolVersion::V3_1_1).expect("packet from the broker")
            {
                return p;
            }
            match next_binary(&mut self.ws).await {
                Some(b) => self.buf.extend_from_slice(&b),
                None => panic!("WebSocket closed while waiting for an MQTT packet"),
            }
        }
    }

    /// Sends CONNECT and returns the CONNACK.
    async fn connect(&mut self, connect: Connect) -> Connack {
        self.send(&Packet::Connect(Box::new(connect))).await;
        match self.recv().await {
            Packet::Connack(c) => c,
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    /// Connects anonymously with a clean session and asserts acceptance.
    async fn connect_ok(&mut self, client_id: &str, will: Option<Will>) {
        let ack = self
            .connect(connect_packet(ProtocolVersion::V3_1_1, client_id, will))
            .await;
        assert_eq!(
            ack,
            Connack {
                session_present: false,
                code: ReasonCode::SUCCESS,
                properties: None,
            }
        );
    }

    /// Subscribes to one filter and asserts the granted QoS.
    async fn subscribe(&mut self, filter: &str, qos: QoS) {
        let packet_id = self.packet_id();
        self.send(&Packet::Subscribe(Subscribe {
            packet_id,
            filters: vec![(mstr(filter), SubscriptionOptions::qos(qos))],
            properties: None,
        }))
        .await;
        match self.recv().await {
            Packet::Suback(s) => {
                assert_eq!(s.packet_id, packet_id);
                assert_eq!(s.codes, vec![ReasonCode::granted(qos)], "SUBACK for {filter}");
            }
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Publishes with QoS 0 or 1 (waiting for the PUBACK).
    async fn publish(&mut self, topic: &str, qos: QoS, payload: &[u8]) {
        let packet_id = if qos == QoS::AtMostOnce { 0 } else { self.packet_id() };
        self.send(&Packet::Publish(Publish {
            dup: false,
            qos,
            retain: false,
            topic: mstr(topic),
            packet_id,
            payload: Bytes::copy_from_slice(payload),
            properties: None,
        }))
        .await;
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => match self.recv().await {
                Packet::Puback(a) => assert_eq!(a.packet_id, packet_id),
                other => panic!("expected PUBACK, got {other:?}"),
            },
            QoS::ExactlyOnce => unimplemented!("QoS 2 is not used here"),
        }
    }

    /// The next PUBLISH; QoS 1 deliveries are acknowledged.
    async fn next_publish(&mut self) -> Publish {
        match self.recv().await {
            Packet::Publish(p) => {
                if p.qos == QoS::AtLeastOnce {
                    self.send(&Packet::Puback(Ack::ok(p.packet_id))).await;
                }
                p
            }
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    /// Sends PINGREQ and expects PINGRESP.
    async fn ping(&mut self) {
        self.send(&Packet::Pingreq).await;
        assert_eq!(self.recv().await, Packet::Pingresp);
    }

    /// Sends DISCONNECT and waits until the broker closes the WebSocket.
    async fn disconnect(mut self) {
        self.send(&Packet::Disconnect(Disconnect::normal())).await;
        let rest = expect_closed(&mut self.ws).await;
        assert!(rest.is_empty(), "data after DISCONNECT: {rest:?}");
    }

    fn packet_id(&mut self) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }
}

/// An anonymous clean-session CONNECT.
fn connect_packet(protocol: ProtocolVersion, client_id: &str, will: Option<Will>) -> Connect {
    Connect {
        protocol,
        clean_session: true,
        keep_alive: 30,
        client_id: mstr(client_id),
        will,
        username: None,
        password: None,
        properties: None,
    }
}

/// The management API's JSON for `path`, as guest.
async fn api_get(broker: &TestBroker, path: &str) -> (StatusCode, Value) {
    let url = format!("http://{}{path}", http_addr(broker));
    let resp = within(
        "HTTP request",
        reqwest::Client::new()
            .get(url)
            .basic_auth("guest", Some("guest"))
            .send(),
    )
    .await
    .expect("HTTP request");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = within("HTTP body", resp.text()).await.expect("HTTP body");
    assert!(
        content_type.starts_with("application/json"),
        "{path}: content-type {content_type:?}, body {body:?}"
    );
    (status, serde_json::from_str(&body).expect("JSON body"))
}

// ---------------------------------------------------------------------------
// MQTT over WebSocket
// ---------------------------------------------------------------------------

#[tokio::test]
async fn mqtt_over_websocket_with_subprotocol_receives_tcp_publish() {
    let broker = start().await;
    let (mut ws, confirmed) = WsMqtt::open(&broker, "/", Some("mqtt")).await;
    assert_eq!(
        confirmed.as_deref(),
        Some("mqtt"),
        "Sec-WebSocket-Protocol of the response"
    );
    let client_id = uniq("ws-sub");
    ws.connect_ok(&client_id, None).await;
    let topic = format!("ws/{}/temp", uniq("t"));
    ws.subscribe(&topic, QoS::AtLeastOnce).await;

    let mut tcp = mqtt_connect(mqtt_options(&broker, &uniq("tcp-pub"))).await;
    tcp.publish(&topic, rumqttc::QoS::AtLeastOnce, false, b"from tcp").await;

    let p = ws.next_publish().await;
    assert_eq!(p.topic.as_str(), topic);
    assert_eq!(&p.payload[..], b"from tcp");
    assert_eq!(p.qos, QoS::AtLeastOnce);
    assert!(!p.retain);
    assert!(!p.dup);

    // The other way: the WebSocket client publishes, the TCP client receives.
    let back = format!("{topic}/back");
    tcp.subscribe_ok(&back, rumqttc::QoS::AtLeastOnce).await;
    ws.publish(&back, QoS::AtLeastOnce, b"from websocket").await;
    let got = tcp.next_publish().await;
    assert_eq!(got.topic, back);
    assert_eq!(&got.payload[..], b"from websocket");

    ws.ping().await;

    // The WebSocket connection is listed like any other MQTT connection, on
    // the HTTP listener's port.
    let (status, conns) = api_get(&broker, "/api/connections").await;
    assert_eq!(status, StatusCode::OK);
    let conn = conns
        .as_array()
        .expect("connection list")
        .iter()
        .find(|c| c["client_properties"]["client_id"] == client_id.as_str())
        .unwrap_or_else(|| panic!("WebSocket connection {client_id} not listed: {conns}"));
    assert_eq!(conn["protocol"], "MQTT 3.1.1");
    assert_eq!(conn["port"], broker.server().http_addr().port());
    assert_eq!(conn["user"], "guest");

    ws.disconnect().await;
    tcp.disconnect().await;
}

#[tokio::test]
async fn mqtt_over_websocket_by_path_without_subprotocol() {
    let broker = start().await;
    for path in ["/ws/mqtt", "/mqtt", "/ws/mqtt/"] {
        let (mut ws, confirmed) = WsMqtt::open(&broker, path, None).await;
        assert_eq!(confirmed, None, "{path}: no subprotocol was offered");
        ws.connect_ok(&uniq("ws-path"), None).await;
        let topic = format!("path/{}", uniq("t"));
        ws.subscribe(&topic, QoS::AtLeastOnce).await;
        ws.publish(&topic, QoS::AtLeastOnce, path.as_bytes()).await;
        let p = ws.next_publish().await;
        assert_eq!(p.topic.as_str(), topic, "{path}");
        assert_eq!(&p.payload[..], path.as_bytes());
        ws.disconnect().await;
    }
}

#[tokio::test]
async fn mqtt_subprotocol_variants_are_confirmed() {
    let broker = start().await;
    // "mqttv3.1" with an MQTT 3.1 (MQIsdp) CONNECT.
    let (mut ws, confirmed) = WsMqtt::open(&broker, "/", Some("mqttv3.1")).await;
    assert_eq!(confirmed.as_deref(), Some("mqttv3.1"));
    let ack = ws
        .connect(connect_packet(ProtocolVersion::V3_1, &uniq("v31"), None))
        .await;
    assert_eq!(ack.code, ReasonCode::SUCCESS);
    ws.ping().await;
    ws.disconnect().await;

    // The first MQTT name of several offered is the one confirmed; the path
    // does not matter then.
    let (mut ws, confirmed) = WsMqtt::open(&broker, "/some/where", Some("chat, mqtt")).await;
    assert_eq!(confirmed.as_deref(), Some("mqtt"));
    ws.connect_ok(&uniq("multi"), None).await;
    ws.disconnect().await;
}

#[tokio::test]
async fn mqtt_over_websocket_refuses_bad_password() {
    let broker = start().await;
    let (mut ws, _) = WsMqtt::open(&broker, "/mqtt", Some("mqtt")).await;
    let mut connect = connect_packet(ProtocolVersion::V3_1_1, &uniq("badpw"), None);
    connect.username = Some(mstr("guest"));
    connect.password = Some(Bytes::from_static(b"wrong"));
    let ack = ws.connect(connect).await;
    assert_eq!(ack.code, ReasonCode::BAD_USER_NAME_OR_PASSWORD);
    assert!(!ack.session_present);
    let rest = expect_closed(&mut ws.ws).await;
    assert!(rest.is_empty(), "data after a refusal: {rest:?}");
}

#[tokio::test]
async fn will_of_websocket_client_dropped_without_disconnect() {
    let broker = start().await;
    let topic = format!("will/{}", uniq("t"));
    let mut watcher = mqtt_connect(mqtt_options(&broker, &uniq("watcher"))).await;
    watcher.subscribe_ok(&topic, rumqttc::QoS::AtLeastOnce).await;

    let (mut ws, _) = WsMqtt::open(&broker, "/mqtt", Some("mqtt")).await;
    let will = Will {
        topic: mstr(&topic),
        payload: Bytes::from_static(b"websocket gone"),
        qos: QoS::AtLeastOnce,
        retain: false,
        properties: None,
    };
    ws.connect_ok(&uniq("dying"), Some(will)).await;
    ws.ping().await;
    // Dropping the stream closes the TCP connection without a close frame.
    drop(ws);

    let p = watcher.next_publish().await;
    assert_eq!(p.topic, topic);
    assert_eq!(&p.payload[..], b"websocket gone");
    watcher.assert_no_publish().await;
}

// ---------------------------------------------------------------------------
// AMQP over WebSocket
// ---------------------------------------------------------------------------

/// An AMQP 0-9-1 client over a WebSocket, speaking through the crate's codec.
struct WsAmqp {
    ws: Ws,
    buf: BytesMut,
}

impl WsAmqp {
    async fn send_raw(&mut self, bytes: &[u8]) {
        within(
            "WebSocket send",
            self.ws.send(Message::binary(Bytes::copy_from_slice(bytes))),
        )
        .await
        .expect("WebSocket send");
    }

    async fn send(&mut self, channel: u16, method: &Method) {
        let mut out = BytesMut::new();
        write_method(&mut out, channel, method).expect("encode method");
        self.send_raw(&out).await;
    }

    /// Waits until at least `n` bytes are buffered.
    async fn fill(&mut self, n: usize) {
        while self.buf.len() < n {
            match next_binary(&mut self.ws).await {
                Some(b) => self.buf.extend_from_slice(&b),
                None => panic!(
                    "WebSocket closed with {} bytes buffered: {:?}",
                    self.buf.len(),
                    self.buf
                ),
            }
        }
    }

    async fn frame(&mut self) -> Frame {
        loop {
            if let Some(f) = parse_frame(&mut self.buf, 0).expect("frame from the broker") {
                return f;
            }
            let more = self.buf.len() + 1;
            self.fill(more).await;
        }
    }

    /// The next method frame, which must be on `channel`.
    async fn method(&mut self, channel: u16) -> Method {
        loop {
            match self.frame().await {
                Frame::Method { channel: c, method } => {
                    assert_eq!(c, channel, "method {method:?} on channel {c}");
                    return method;
                }
                Frame::Heartbeat { .. } => {}
                other => panic!("expected a method frame, got {other:?}"),
            }
        }
    }
}

/// The AMQP 0-9-1 protocol header.
const AMQP_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// Sends the protocol header and checks, byte by byte, that connection.start
/// comes back (frame type 1, channel 0, class 10, method 10).
async fn amqp_start(ws: Ws) -> WsAmqp {
    let mut c = WsAmqp {
        ws,
        buf: BytesMut::new(),
    };
    c.send_raw(AMQP_HEADER).await;
    c.fill(11).await;
    assert_eq!(c.buf[0], 1, "frame type of {:?}", &c.buf[..11]);
    assert_eq!(&c.buf[1..3], &[0, 0], "channel");
    assert_eq!(&c.buf[7..11], &[0, 10, 0, 10], "class and method id");
    match c.method(0).await {
        Method::ConnectionStart {
            version_major,
            version_minor,
            mechanisms,
            ..
        } => {
            assert_eq!((version_major, version_minor), (0, 9));
            let mechanisms = String::from_utf8_lossy(&mechanisms).to_string();
            assert!(mechanisms.split(' ').any(|m| m == "PLAIN"), "mechanisms {mechanisms:?}");
        }
        other => panic!("expected connection.start, got {other:?}"),
    }
    c
}

/// start-ok (PLAIN guest/guest), tune-ok, open "/" and channel 1.
async fn amqp_login(c: &mut WsAmqp) {
    c.send(
        0,
        &Method::ConnectionStartOk {
            client_properties: FieldTable::default(),
            mechanism: ShortStr::from("PLAIN"),
            response: Bytes::from_static(b"\0guest\0guest"),
            locale: ShortStr::from("en_US"),
        },
    )
    .await;
    let (channel_max, frame_max) = match c.method(0).await {
        Method::ConnectionTune {
            channel_max, frame_max, ..
        } => (channel_max, frame_max),
        other => panic!("expected connection.tune, got {other:?}"),
    };
    c.send(
        0,
        &Method::ConnectionTuneOk {
            channel_max,
            frame_max,
            heartbeat: 0,
        },
    )
    .await;
    c.send(
        0,
        &Method::ConnectionOpen {
            virtual_host: ShortStr::from("/"),
        },
    )
    .await;
    match c.method(0).await {
        Method::ConnectionOpenOk => {}
        other => panic!("expected connection.open-ok, got {other:?}"),
    }
    c.send(1, &Method::ChannelOpen).await;
    match c.method(1).await {
        Method::ChannelOpenOk => {}
        other => panic!("expected channel.open-ok, got {other:?}"),
    }
}

#[tokio::test]
async fn amqp_over_websocket_handshake_declare_and_get() {
    let broker = start().await;
    let (ws, resp) = ws_open(&broker, "/", Some("amqp")).await;
    assert_eq!(confirmed_protocol(&resp).as_deref(), Some("amqp"));
    let mut c = amqp_start(ws).await;
    amqp_login(&mut c).await;

    let queue = uniq("ws-amqp");
    c.send(
        1,
        &Method::QueueDeclare {
            queue: ShortStr::from(queue.as_str()),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments: FieldTable::default(),
        },
    )
    .await;
    match c.method(1).await {
        Method::QueueDeclareOk {
            queue: name,
            message_count,
            consumer_count,
        } => {
            assert_eq!(name.as_str(), queue);
            assert_eq!((message_count, consumer_count), (0, 0));
        }
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }

    // The queue is real: a TCP client sees it and publishes into it, and the
    // WebSocket client gets the message back.
    let (conn, ch) = broker.channel().await;
    assert!(
        common::queue_exists(&conn, &queue).await,
        "queue {queue} declared over WebSocket"
    );
    common::publish(&ch, "", &queue, b"to the websocket").await;
    let mut got = None;
    for _ in 0..100 {
        c.send(
            1,
            &Method::BasicGet {
                queue: ShortStr::from(queue.as_str()),
                no_ack: true,
            },
        )
        .await;
        match c.method(1).await {
            Method::BasicGetEmpty => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            Method::BasicGetOk { routing_key, .. } => {
                assert_eq!(routing_key.as_str(), queue);
                got = Some(());
                break;
            }
            other => panic!("expected basic.get-ok or get-empty, got {other:?}"),
        }
    }
    assert!(got.is_some(), "message never reached the queue");
    match c.frame().await {
        Frame::Header { channel, body_size, .. } => assert_eq!((channel, body_size), (1, 16)),
        other => panic!("expected a content header, got {other:?}"),
    }
    match c.frame().await {
        Frame::Body { channel, payload } => {
            assert_eq!(channel, 1);
            assert_eq!(&payload[..], b"to the websocket");
        }
        other => panic!("expected a content body, got {other:?}"),
    }

    c.send(
        0,
        &Method::ConnectionClose {
            reply_code: 200,
            reply_text: ShortStr::from("bye"),
            class_id: 0,
            method_id: 0,
        },
    )
    .await;
    match c.method(0).await {
        Method::ConnectionCloseOk => {}
        other => panic!("expected connection.close-ok, got {other:?}"),
    }
    // As over TCP, the broker answers any further connection.close until the
    // client closes its end (RabbitMQ's closing state); this client does.
    within("WebSocket close", c.ws.close(None))
        .await
        .expect("WebSocket close");
    let rest = expect_closed(&mut c.ws).await;
    assert!(rest.is_empty(), "data after close-ok: {rest:?}");
    within("connection.close", conn.close(200, "OK".into()))
        .await
        .expect("connection.close");
}

#[tokio::test]
async fn amqp_over_websocket_is_the_default_without_subprotocol() {
    let broker = start().await;
    for path in ["/", "/ws", "/api/overview"] {
        let (ws, resp) = ws_open(&broker, path, None).await;
        assert_eq!(confirmed_protocol(&resp), None);
        let mut c = amqp_start(ws).await;
        amqp_login(&mut c).await;
    }
}

#[tokio::test]
async fn amqp_over_websocket_refuses_bad_password() {
    let broker = start().await;
    let (ws, _) = ws_open(&broker, "/", Some("amqp")).await;
    let mut c = amqp_start(ws).await;
    c.send(
        0,
        &Method::ConnectionStartOk {
            client_properties: FieldTable::default(),
            mechanism: ShortStr::from("PLAIN"),
            response: Bytes::from_static(b"\0guest\0wrong"),
            locale: ShortStr::from("en_US"),
        },
    )
    .await;
    // Without the authentication_failure_close capability the broker just
    // closes, as RabbitMQ does.
    let rest = expect_closed(&mut c.ws).await;
    assert!(
        !rest.windows(4).any(|w| w == [0, 10, 0, 30]),
        "connection.tune after a failed login: {rest:?}"
    );
}

// ---------------------------------------------------------------------------
// Misbehaving WebSocket clients and the HTTP API next to them
// ---------------------------------------------------------------------------

#[tokio::test]
async fn garbage_over_mqtt_websocket_is_closed_and_http_api_keeps_working() {
    let broker = start().await;
    let (mut bad, _) = ws_open(&broker, "/mqtt", Some("mqtt")).await;
    // A client that opened a WebSocket and says nothing does not block anyone.
    let (mut silent, _) = ws_open(&broker, "/mqtt", Some("mqtt")).await;

    // Packet type 15 is reserved: not a CONNECT.
    within(
        "WebSocket send",
        bad.send(Message::binary(Bytes::from_static(&[
            0xF0, 0x05, 1, 2, 3, 4, 5, 0xFF, 0xFF,
        ]))),
    )
    .await
    .expect("WebSocket send");
    let rest = expect_closed(&mut bad).await;
    assert!(rest.is_empty(), "no MQTT answer to garbage: {rest:?}");

    let (status, overview) = api_get(&broker, "/api/overview").await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview.is_object(), "overview: {overview}");
    let listeners = overview["listeners"].as_array().expect("listeners");
    assert!(
        listeners.iter().any(|l| l["protocol"] == "mqtt"),
        "mqtt listener in {listeners:?}"
    );

    // A well-behaved WebSocket client still gets served.
    let (mut ok, _) = WsMqtt::open(&broker, "/mqtt", Some("mqtt")).await;
    ok.connect_ok(&uniq("after-garbage"), None).await;
    ok.ping().await;
    ok.disconnect().await;

    // And plain HTTP requests without Upgrade still get JSON.
    let (status, vhosts) = api_get(&broker, "/api/vhosts").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        vhosts.as_array().expect("vhost list").iter().any(|v| v["name"] == "/"),
        "vhosts: {vhosts}"
    );
    let (status, _) = api_get(&broker, "/api/whoami").await;
    assert_eq!(status, StatusCode::OK);

    within("WebSocket close", silent.close(None))
        .await
        .expect("WebSocket close");
    common::assert_broker_alive(&broker).await;
}

#[tokio::test]
async fn garbage_over_amqp_websocket_gets_protocol_header_and_close() {
    let broker = start().await;
    let (ws, _) = ws_open(&broker, "/", Some("amqp")).await;
    let mut c = WsAmqp {
        ws,
        buf: BytesMut::new(),
    };
    c.send_raw(b"GET / HTTP/1.1\r\n\r\n").await;
    let rest = expect_closed(&mut c.ws).await;
    assert_eq!(&rest[..], AMQP_HEADER, "the broker answers a bad header with its own");
    let (status, overview) = api_get(&broker, "/api/overview").await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview.is_object());
}

#[tokio::test]
async fn http_api_without_upgrade_is_unchanged() {
    let broker = start().await;
    let (status, overview) = api_get(&broker, "/api/overview").await;
    assert_eq!(status, StatusCode::OK);
    assert!(overview["object_totals"].is_object(), "overview: {overview}");
    // Authentication still applies to plain requests.
    let url = format!("http://{}/api/overview", http_addr(&broker));
    let resp = within("HTTP request", reqwest::Client::new().get(url).send())
        .await
        .expect("HTTP request");
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}
