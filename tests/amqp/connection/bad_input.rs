//! Malformed and out-of-order input on raw sockets: the broker must answer with
//! the right connection.close (or header) and keep serving everyone else.

use crate::common::*;
use tokio::io::AsyncReadExt;

/// Reads the very next frame and checks that it is connection.close on channel
/// 0 (frame type 1, class 10, method 50); answers close-ok, then expects the
/// server to close the socket.
async fn expect_close_frame(raw: &mut RawConn) -> RawClose {
    let f = raw
        .read_frame()
        .await
        .expect("server closed the socket without connection.close");
    assert_eq!(f.kind, FRAME_METHOD, "frame type of {f:?}");
    assert_eq!(f.channel, 0, "channel of {f:?}");
    assert_eq!(f.method_ids(), Some((10, 50)), "class/method of {f:?}");
    let close = parse_close(&f);
    raw.send(&method_frame(0, 10, 51, &[])).await;
    raw.expect_eof().await;
    close
}

/// An opened connection with channel 1 open.
async fn open_with_channel(broker: &TestBroker) -> RawConn {
    let mut raw = RawConn::open(broker.addr()).await;
    raw.send(&channel_open(1)).await;
    let ok = raw.read_method().await;
    assert_eq!((ok.channel, ok.method_ids()), (1, Some((20, 11))));
    raw
}

async fn assert_wrong_header_answered(broker: &TestBroker, header: &[u8]) {
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(header).await;
    let mut got = Vec::new();
    within("the server to answer and close", raw.stream.read_to_end(&mut got))
        .await
        .expect("read");
    assert_eq!(
        got,
        PROTOCOL_HEADER,
        "answer to header {:?}",
        String::from_utf8_lossy(header)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_protocol_header_is_answered_with_ours() {
    let broker = start().await;
    assert_wrong_header_answered(&broker, b"AMQP\x00\x00\x08\x00").await; // AMQP 0-8
    assert_wrong_header_answered(&broker, b"AMQP\x00\x02\x00\x00").await; // AMQP 2.0
    assert_wrong_header_answered(&broker, b"GET / HTTP/1.1\r\n\r\n").await;
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_1_0_without_sasl_is_answered_with_the_sasl_header() {
    let broker = start().await;
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(b"AMQP\x00\x01\x00\x00").await;
    let mut got = Vec::new();
    within("the server to answer and close", raw.stream.read_to_end(&mut got))
        .await
        .expect("read");
    assert_eq!(got, b"AMQP\x03\x01\x00\x00");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frames_then_close_leave_others_unaffected() {
    let broker = start().await;
    // A client that is in the middle of its work the whole time.
    let (conn, ch) = broker.channel().await;
    let q = uniq("bystander");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    let mut c = consume(&ch, &q).await;

    // Half a method frame after the handshake.
    let mut raw = open_with_channel(&broker).await;
    let full = basic_publish(1, "", &q);
    raw.send(&full[..full.len() / 2]).await;
    drop(raw);
    // Half a publish: method and header, then half the body.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&basic_publish(1, "", &q)).await;
    raw.send(&content_header(1, 10)).await;
    raw.send(&frame(FRAME_BODY, 1, b"12345")[..9]).await;
    drop(raw);
    // Half a start-ok during the handshake.
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(PROTOCOL_HEADER).await;
    raw.read_method().await;
    let so = start_ok("guest", "guest");
    raw.send(&so[..so.len() - 5]).await;
    drop(raw);
    // Half a protocol header.
    let mut raw = RawConn::tcp(broker.addr()).await;
    raw.send(b"AMQ").await;
    drop(raw);

    // The bystander never noticed, and the half publish was not delivered.
    publish_confirmed(&ch, "", &q, b"after").await;
    let d = next_delivery(&mut c).await;
    assert_eq!(d.data, b"after");
    assert!(conn.status().connected());
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_larger_than_frame_max_is_frame_error_501() {
    let broker = start().await;
    let frame_max = broker.config.amqp.frame_max;
    // The largest legal payload (frame_max - 8) is accepted...
    let q = uniq("big");
    {
        let (_conn, ch) = broker.channel().await;
        declare_queue(&ch, &q).await;
    }
    let mut raw = open_with_channel(&broker).await;
    let size = (frame_max - 8) as usize;
    raw.send(&basic_publish(1, "", &q)).await;
    raw.send(&content_header(1, size as u64)).await;
    raw.send(&frame(FRAME_BODY, 1, &vec![b'z'; size])).await;
    // ...one byte more is not. Only the header is sent: the size alone must
    // trigger the error.
    let mut header = vec![FRAME_BODY];
    header.extend_from_slice(&1u16.to_be_bytes());
    header.extend_from_slice(&(frame_max - 7).to_be_bytes());
    raw.send(&header).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");

    // A huge announced size on a fresh connection.
    let mut raw = open_with_channel(&broker).await;
    let mut header = vec![FRAME_METHOD];
    header.extend_from_slice(&1u16.to_be_bytes());
    header.extend_from_slice(&u32::MAX.to_be_bytes());
    raw.send(&header).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");

    let (conn, _ch) = broker.channel().await;
    assert_eq!(message_count(&conn, &q).await, 1, "the legal publish arrived");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_class_or_method_is_not_implemented_540() {
    let broker = start().await;
    for (class, method) in [(60u16, 99u16), (999, 10), (10, 99)] {
        let mut raw = open_with_channel(&broker).await;
        let channel = if class == 10 { 0 } else { 1 };
        raw.send(&method_frame(channel, class, method, &[])).await;
        let close = expect_close_frame(&mut raw).await;
        assert_eq!(close.code, 540, "class {class} method {method}: {close:?}");
    }
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frame_end_octet_is_frame_error_501() {
    let broker = start().await;
    // A heartbeat with a wrong end octet.
    let mut raw = open_with_channel(&broker).await;
    let mut hb = frame(FRAME_HEARTBEAT, 0, &[]);
    *hb.last_mut().expect("frame end") = 0x00;
    raw.send(&hb).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");
    // A method frame with a wrong end octet.
    let mut raw = open_with_channel(&broker).await;
    let mut m = basic_publish(1, "", "q");
    *m.last_mut().expect("frame end") = 0xCD;
    raw.send(&m).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_frame_type_is_frame_error_501() {
    let broker = start().await;
    let mut raw = open_with_channel(&broker).await;
    raw.send(&frame(9, 1, b"junk")).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_on_unopened_channel_is_channel_error_504() {
    let broker = start().await;
    let mut raw = open_with_channel(&broker).await;
    raw.send(&basic_publish(5, "", "q")).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 504, "{close:?}");
    assert_eq!((close.class_id, close.method_id), (60, 40), "close names basic.publish");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_channel_open_is_channel_error_504() {
    let broker = start().await;
    let mut raw = open_with_channel(&broker).await;
    raw.send(&channel_open(1)).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 504, "{close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_out_of_sequence_is_unexpected_frame_505() {
    let broker = start().await;
    // A content header without basic.publish.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&content_header(1, 3)).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 505, "header without publish: {close:?}");
    // A body frame without anything before it.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&frame(FRAME_BODY, 1, b"abc")).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 505, "body without publish: {close:?}");
    // basic.publish followed by a body instead of a header.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&basic_publish(1, "", "q")).await;
    raw.send(&frame(FRAME_BODY, 1, b"abc")).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 505, "body before header: {close:?}");
    // A method where the rest of the body should be.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&basic_publish(1, "", "q")).await;
    raw.send(&content_header(1, 10)).await;
    raw.send(&frame(FRAME_BODY, 1, b"12345")).await;
    raw.send(&basic_publish(1, "", "q")).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 505, "method inside content: {close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_on_a_channel_other_than_zero_is_frame_error_501() {
    let broker = start().await;
    let mut raw = open_with_channel(&broker).await;
    raw.send(&frame(FRAME_HEARTBEAT, 1, &[])).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_frame_closes_only_that_connection() {
    let broker = start().await;
    let (conn, ch) = broker.channel().await;
    let mut raw = open_with_channel(&broker).await;
    raw.send(&[0xFFu8; 64]).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 501, "{close:?}");
    assert!(conn.status().connected());
    declare_queue(&ch, &uniq("still-fine")).await;
    assert_broker_alive(&broker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos_with_prefetch_size_is_not_implemented_540() {
    let broker = start().await;
    let mut raw = open_with_channel(&broker).await;
    let mut a = 1000u32.to_be_bytes().to_vec(); // prefetch-size
    a.extend_from_slice(&10u16.to_be_bytes()); // prefetch-count
    a.push(0); // global
    raw.send(&method_frame(1, 60, 10, &a)).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 540, "{close:?}");
    assert_broker_alive(&broker).await;
}

/// `basic.publish`, its header and its body as one buffer: what a client's
/// single write of a small message looks like to the broker.
fn whole_publish(channel: u16, routing_key: &[u8], properties: &[u8], bodies: &[&[u8]]) -> Vec<u8> {
    let mut a = 0u16.to_be_bytes().to_vec();
    a.extend(shortstr(""));
    a.push(routing_key.len() as u8);
    a.extend_from_slice(routing_key);
    a.push(0);
    let mut v = method_frame(channel, 60, 40, &a);
    let size: usize = bodies.iter().map(|b| b.len()).sum();
    let mut h = 60u16.to_be_bytes().to_vec();
    h.extend_from_slice(&0u16.to_be_bytes());
    h.extend_from_slice(&(size as u64).to_be_bytes());
    h.extend_from_slice(properties);
    v.extend(frame(FRAME_HEADER, channel, &h));
    for body in bodies {
        v.extend(frame(FRAME_BODY, channel, body));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_sent_whole_in_one_write_are_stored_or_refused_like_frame_by_frame_ones() {
    let broker = start().await;
    let (_conn, ch) = broker.channel().await;
    let q = uniq("whole");
    declare_queue(&ch, &q).await;
    let no_properties = [0u8, 0];

    // In one write: a whole publish, one whose body comes in two frames, one
    // with an empty body (no body frame), and one carrying a property.
    let mut raw = open_with_channel(&broker).await;
    let mut batch = whole_publish(1, q.as_bytes(), &no_properties, &[b"one"]);
    batch.extend(whole_publish(1, q.as_bytes(), &no_properties, &[b"t", b"wo"]));
    batch.extend(whole_publish(1, q.as_bytes(), &no_properties, &[]));
    let mut typed = 0x8000u16.to_be_bytes().to_vec(); // content-type
    typed.extend(shortstr("text/plain"));
    batch.extend(whole_publish(1, q.as_bytes(), &typed, &[b"four"]));
    raw.send(&batch).await;
    eventually("four messages stored", || async { queue_count(&ch, &q).await == 4 }).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(get(&ch, &q, true).await.expect("a message").delivery);
    }
    let bodies: Vec<_> = got.iter().map(|m| m.data.as_slice()).collect();
    assert_eq!(bodies, [&b"one"[..], b"two", b"", b"four"]);
    let content_type = got[3].properties.content_type().as_ref().map(|s| s.as_str());
    assert_eq!(content_type, Some("text/plain"));

    // A routing key that is not UTF-8: a syntax error.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&whole_publish(1, &[b'q', 0xFF], &no_properties, &[b"x"]))
        .await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 502, "routing key not UTF-8: {close:?}");
    // Bytes after the properties: a syntax error.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&whole_publish(1, q.as_bytes(), &[0, 0, 7], &[b"x"])).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(close.code, 502, "trailing property bytes: {close:?}");
    // A channel that is not open: a channel error naming basic.publish.
    let mut raw = open_with_channel(&broker).await;
    raw.send(&whole_publish(5, q.as_bytes(), &no_properties, &[b"x"])).await;
    let close = expect_close_frame(&mut raw).await;
    assert_eq!(
        (close.code, close.class_id, close.method_id),
        (504, 60, 40),
        "{close:?}"
    );

    assert_eq!(queue_count(&ch, &q).await, 0, "nothing refused was stored");
    assert_broker_alive(&broker).await;
}
