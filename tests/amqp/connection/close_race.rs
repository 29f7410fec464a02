//! Closes that race each other, as a client with several threads sends them:
//! connection.close written more than once (each thread closing the
//! connection), channel.close frames around a connection.close, a
//! connection.close crossing the broker's own channel.close or
//! connection.close, and a close while deliveries are still being written.
//! As RabbitMQ does, the broker answers every connection.close with close-ok,
//! discards every other frame that follows the first one, and keeps the socket
//! open until the client closes its end, so that close-ok is never lost to an
//! early end of the socket.
//!
//! Each scenario runs [`ROUNDS`] times on fresh connections: the order of the
//! frames is fixed by writing them in one go, so no round depends on timing.

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How many times each scenario is repeated.
const ROUNDS: usize = 100;

/// The arguments of connection.close or channel.close.
fn close_args(code: u16, text: &str) -> Vec<u8> {
    let mut a = code.to_be_bytes().to_vec();
    a.extend(shortstr(text));
    a.extend([0, 0, 0, 0]);
    a
}

/// `connection.close` as a client sends it when it is done.
fn connection_close() -> Vec<u8> {
    method_frame(0, 10, 50, &close_args(200, "kthxbai"))
}

/// `channel.close` on `channel`, as a client sends it when it is done.
fn channel_close(channel: u16) -> Vec<u8> {
    method_frame(channel, 20, 40, &close_args(200, "bye"))
}

/// `queue.declare` of `queue` on `channel`; `flags` as on the wire (1 passive,
/// 4 exclusive).
fn queue_declare(channel: u16, queue: &str, flags: u8) -> Vec<u8> {
    let mut a = vec![0, 0];
    a.extend(shortstr(queue));
    a.push(flags);
    a.extend(0u32.to_be_bytes());
    method_frame(channel, 50, 10, &a)
}

/// `basic.consume` of `queue` on `channel` with no-ack.
fn basic_consume_no_ack(channel: u16, queue: &str) -> Vec<u8> {
    let mut a = vec![0, 0];
    a.extend(shortstr(queue));
    a.extend(shortstr(""));
    a.push(0b10); // no-ack
    a.extend(0u32.to_be_bytes());
    method_frame(channel, 60, 20, &a)
}

/// A frame's channel with its class and method ids (none for content frames).
fn id(f: &RawFrame) -> (u16, Option<(u16, u16)>) {
    (f.channel, f.method_ids())
}

const CONNECTION_CLOSE_OK: (u16, Option<(u16, u16)>) = (0, Some((10, 51)));

/// An open connection with channels `1..=n` open.
async fn open_with_channels(broker: &TestBroker, n: u16) -> RawConn {
    let mut raw = RawConn::open(broker.addr()).await;
    let opens: Vec<u8> = (1..=n).flat_map(channel_open).collect();
    raw.send(&opens).await;
    for ch in 1..=n {
        let ok = raw.read_method().await;
        assert_eq!(id(&ok), (ch, Some((20, 11))), "open-ok of channel {ch}");
    }
    raw
}

/// Closes the client's end of the socket, as a client does once it has its
/// close-ok, and returns every frame the broker sends until it closes the
/// socket. The broker must close it cleanly: a reset (which can destroy
/// frames the client has not read yet) fails the test, as does a frame cut
/// short.
async fn rest_until_eof(raw: &mut RawConn) -> Vec<RawFrame> {
    within("the client's shutdown", raw.stream.shutdown())
        .await
        .expect("shutdown of the client's end");
    let mut bytes = Vec::new();
    within("the broker to close the socket", raw.stream.read_to_end(&mut bytes))
        .await
        .expect("the broker closes the socket cleanly, without a reset");
    let mut frames = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        assert!(rest.len() >= 8, "a frame cut short: {rest:?}");
        let size = u32::from_be_bytes([rest[3], rest[4], rest[5], rest[6]]) as usize;
        assert!(rest.len() >= 8 + size, "a frame cut short: {} bytes left", rest.len());
        assert_eq!(rest[7 + size], FRAME_END, "frame end");
        frames.push(RawFrame {
            kind: rest[0],
            channel: u16::from_be_bytes([rest[1], rest[2]]),
            payload: rest[7..7 + size].to_vec(),
        });
        rest = &rest[8 + size..];
    }
    frames
}

/// amqp091-go's `TestConcurrentClose`: many goroutines call `Close()` on one
/// connection at once, so connection.close goes out several times before the
/// first close-ok is back, and a late goroutine may send one more after it.
/// Each must be answered: a goroutine whose close sees the socket end instead
/// fails with EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_close_of_a_concurrent_close_gets_close_ok() {
    let broker = start().await;
    for round in 0..ROUNDS {
        let mut raw = open_with_channels(&broker, 2).await;
        let closes: Vec<u8> = (0..3).flat_map(|_| connection_close()).collect();
        raw.send(&closes).await;
        for n in 0..3 {
            let f = raw
                .read_frame()
                .await
                .unwrap_or_else(|| panic!("round {round}: socket ended before close-ok {n}"));
            assert_eq!(id(&f), CONNECTION_CLOSE_OK, "round {round}: {f:?}");
        }
        // A goroutine that got going only after the first close-ok arrived.
        raw.send(&connection_close()).await;
        let late = raw
            .read_frame()
            .await
            .unwrap_or_else(|| panic!("round {round}: socket ended before the late close-ok"));
        assert_eq!(id(&late), CONNECTION_CLOSE_OK, "round {round}: {late:?}");
        let rest = rest_until_eof(&mut raw).await;
        assert!(rest.is_empty(), "round {round}: after close-ok: {rest:?}");
    }
    assert_broker_alive(&broker).await;
}

/// Channel closes written back to back with connection.close, in one write:
/// those before it are answered in order, then close-ok; channel.close after
/// connection.close is discarded (AMQP 0-9-1: after connection.close, every
/// method but close and close-ok is discarded), a second connection.close is
/// answered too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_closes_around_a_connection_close_are_answered_then_discarded() {
    let broker = start().await;
    for round in 0..ROUNDS {
        let mut raw = open_with_channels(&broker, 8).await;
        let mut burst: Vec<u8> = (1..=4).flat_map(channel_close).collect();
        burst.extend(connection_close());
        burst.extend((5..=8).flat_map(channel_close));
        // A publish with its content, on a channel still open when the
        // connection closed: discarded as well.
        burst.extend(basic_publish(5, "", "nowhere"));
        burst.extend(content_header(5, 3));
        burst.extend(frame(FRAME_BODY, 5, b"abc"));
        burst.extend(connection_close());
        burst.extend(channel_close(1));
        raw.send(&burst).await;
        let got: Vec<_> = rest_until_eof(&mut raw).await.iter().map(id).collect();
        let mut want: Vec<_> = (1..=4).map(|ch| (ch, Some((20, 41)))).collect();
        want.extend([CONNECTION_CLOSE_OK, CONNECTION_CLOSE_OK]);
        assert_eq!(got, want, "round {round}");
    }
    assert_broker_alive(&broker).await;
}

/// A connection.close while the broker's channel.close waits for its
/// close-ok: the connection closes all the same, with close-ok. The client's
/// close-ok and channel.close that follow it are discarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_close_while_a_channel_close_is_pending_gets_close_ok() {
    let broker = start().await;
    for round in 0..ROUNDS {
        let mut raw = open_with_channels(&broker, 2).await;
        let missing = uniq("missing");
        // The passive declare of a missing queue makes the broker close
        // channel 1 (404); the client closes the connection before it sees that.
        let mut burst = queue_declare(1, &missing, 1);
        burst.extend(connection_close());
        burst.extend(method_frame(1, 20, 41, &[]));
        burst.extend(channel_close(1));
        burst.extend(channel_close(2));
        raw.send(&burst).await;
        let got = rest_until_eof(&mut raw).await;
        assert_eq!(got.len(), 2, "round {round}: {got:?}");
        assert_eq!(id(&got[0]), (1, Some((20, 40))), "round {round}: {got:?}");
        assert_eq!(parse_close(&got[0]).code, 404, "round {round}: {got:?}");
        assert_eq!(id(&got[1]), CONNECTION_CLOSE_OK, "round {round}: {got:?}");

        // The same with the client's channel.close crossing the broker's
        // before its connection.close: that close is answered first.
        let mut raw = open_with_channels(&broker, 1).await;
        let mut burst = queue_declare(1, &missing, 1);
        burst.extend(channel_close(1));
        burst.extend(connection_close());
        raw.send(&burst).await;
        let got: Vec<_> = rest_until_eof(&mut raw).await.iter().map(id).collect();
        assert_eq!(
            got,
            [(1, Some((20, 40))), (1, Some((20, 41))), CONNECTION_CLOSE_OK],
            "round {round}"
        );
    }
    assert_broker_alive(&broker).await;
}

/// The broker's connection.close (a connection error) crossing the client's:
/// the client's close is answered with close-ok (as RabbitMQ does), and the
/// client's close-ok for the broker's close ends the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_closes_crossing_each_other_are_both_answered() {
    let broker = start().await;
    for round in 0..ROUNDS {
        let mut raw = open_with_channels(&broker, 1).await;
        // basic.qos on channel 9, never opened: 504 CHANNEL_ERROR closes the
        // connection.
        let mut burst = method_frame(9, 60, 10, &[0, 0, 0, 0, 0, 10, 0]);
        burst.extend(connection_close());
        burst.extend(channel_close(1));
        raw.send(&burst).await;
        let theirs = raw
            .read_frame()
            .await
            .unwrap_or_else(|| panic!("round {round}: socket ended before connection.close"));
        assert_eq!(id(&theirs), (0, Some((10, 50))), "round {round}: {theirs:?}");
        assert_eq!(parse_close(&theirs).code, 504, "round {round}: {theirs:?}");
        let ok = raw
            .read_frame()
            .await
            .unwrap_or_else(|| panic!("round {round}: socket ended before close-ok"));
        assert_eq!(id(&ok), CONNECTION_CLOSE_OK, "round {round}: {ok:?}");
        raw.send(&method_frame(0, 10, 51, &[])).await;
        let rest = rest_until_eof(&mut raw).await;
        assert!(rest.is_empty(), "round {round}: after close-ok: {rest:?}");
    }
    assert_broker_alive(&broker).await;
}

/// A connection.close while deliveries are still being written to the
/// client: what was written before close-ok arrives whole, close-ok follows,
/// and nothing comes after it. The exclusive queue is gone once close-ok is
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ok_follows_pending_deliveries_and_nothing_follows_it() {
    let broker = start().await;
    let body = vec![b'x'; 4000];
    for round in 0..ROUNDS {
        let mut raw = open_with_channels(&broker, 1).await;
        let q = uniq("close-race");
        let mut burst = queue_declare(1, &q, 4);
        for _ in 0..200 {
            burst.extend(basic_publish(1, "", &q));
            burst.extend(content_header(1, body.len() as u64));
            burst.extend(frame(FRAME_BODY, 1, &body));
        }
        burst.extend(basic_consume_no_ack(1, &q));
        raw.send(&burst).await;
        // Deliveries are flowing: close without reading them.
        loop {
            let f = raw
                .read_frame()
                .await
                .unwrap_or_else(|| panic!("round {round}: socket ended before a delivery"));
            if f.method_ids() == Some((60, 60)) {
                break;
            }
        }
        raw.send(&connection_close()).await;
        let rest = rest_until_eof(&mut raw).await;
        let close_ok = rest.iter().position(|f| id(f) == CONNECTION_CLOSE_OK);
        let Some(at) = close_ok else {
            panic!("round {round}: no close-ok in {} frames", rest.len());
        };
        assert_eq!(at, rest.len() - 1, "round {round}: frames after close-ok");
        for f in &rest[..at] {
            assert_eq!(f.channel, 1, "round {round}: {f:?}");
            match f.kind {
                FRAME_METHOD => assert_eq!(f.method_ids(), Some((60, 60)), "round {round}: {f:?}"),
                FRAME_HEADER => {}
                FRAME_BODY => assert_eq!(f.payload, body, "round {round}"),
                _ => panic!("round {round}: unexpected frame {f:?}"),
            }
        }
        let conn = broker.connect().await;
        assert!(!queue_exists(&conn, &q).await, "round {round}: exclusive queue left");
        conn.close(200, "OK".into()).await.expect("close");
    }
    assert_broker_alive(&broker).await;
}

/// With a real client: several tasks close their channels while another
/// closes the connection, all at once. The connection close succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapin_connection_close_racing_channel_closes_succeeds() {
    let broker = start().await;
    for round in 0..ROUNDS {
        let conn = std::sync::Arc::new(broker.connect().await);
        let mut channels = Vec::new();
        for _ in 0..4 {
            channels.push(conn.create_channel().await.expect("channel.open"));
        }
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(channels.len() + 1));
        let mut closing = Vec::new();
        for ch in channels {
            let start = start.clone();
            closing.push(tokio::spawn(async move {
                start.wait().await;
                // Ok, or an error when the connection closed first.
                let _ = ch.close(200, "bye".into()).await;
            }));
        }
        let closer = {
            let conn = conn.clone();
            tokio::spawn(async move {
                start.wait().await;
                conn.close(200, "OK".into()).await
            })
        };
        let closed = within("connection.close", closer).await.expect("close task");
        assert!(closed.is_ok(), "round {round}: connection.close failed: {closed:?}");
        for task in closing {
            within("channel.close", task).await.expect("channel close task");
        }
        assert!(!conn.status().connected(), "round {round}: {:?}", conn.status());
    }
    assert_broker_alive(&broker).await;
}
