//! Publish frames kept as chunks for the subscribers of their stream: a
//! subscriber behind the writer gets the frames' messages exactly as they
//! were sent, several frames joined into one chunk with a valid CRC; the
//! messages in between that are not plain (or were published before it
//! attached) are encoded message by message; a subscriber starting in the
//! middle of a frame gets the rest of it message by message, then the
//! frames as they were sent. Every offset arrives once, in order, and a
//! named publisher's repeated frame is not stored again.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::frame_max::{chunk, read_frame, send_frame};
use super::{env, raw_open};
use crate::common::{start, uniq, within};

/// The frame size the raw clients tune: far more than a frame of runs.
const FRAME_MAX: u32 = 1 << 20;

/// The AMQP 1.0 message for publishing id `id`: a body only, in the long
/// data-section form that the broker's own encoding uses only for bodies of
/// 256 bytes and more, so that a delivered entry shows which way it came.
fn plain(id: u64) -> Vec<u8> {
    let body = format!("run-message-{id}");
    let mut m = vec![0x00, 0x53, 0x75, 0xb0];
    m.extend_from_slice(&(body.len() as u32).to_be_bytes());
    m.extend_from_slice(body.as_bytes());
    m
}

/// A message with an (empty) properties section before its body: not
/// plain, so stored and sent message by message, as the bytes published
/// (kept beside the message read from them).
fn with_properties(id: u64) -> Vec<u8> {
    let mut m = vec![0x00, 0x53, 0x73, 0x45];
    m.extend_from_slice(&plain(id));
    m
}

/// Sends a publish frame of publisher 7 for `ids`.
async fn publish(s: &mut TcpStream, ids: std::ops::Range<u64>, message: fn(u64) -> Vec<u8>) {
    let mut f = vec![0, 2, 0, 1, 7];
    f.extend_from_slice(&((ids.end - ids.start) as u32).to_be_bytes());
    for id in ids {
        f.extend_from_slice(&id.to_be_bytes());
        let m = message(id);
        f.extend_from_slice(&(m.len() as u32).to_be_bytes());
        f.extend_from_slice(&m);
    }
    send_frame(s, &f).await;
}

/// Reads confirms until `n` publishing ids are confirmed.
async fn confirmed(s: &mut TcpStream, n: usize) {
    let mut got = 0;
    while got < n {
        let f = read_frame(s).await;
        assert_eq!(&f[..4], &[0, 3, 0, 1], "a confirm, not {f:?}");
        got += u32::from_be_bytes(f[5..9].try_into().unwrap()) as usize;
    }
}

/// A raw subscriber (subscription id 1) of `stream` from `offset` (`None`:
/// the next message) with `credit` chunks.
async fn subscribe(port: u16, stream: &str, offset: Option<u64>, credit: u16) -> TcpStream {
    let mut s = raw_open(port, FRAME_MAX).await;
    let mut f = vec![0, 7, 0, 1, 0, 0, 0, 9, 1];
    f.extend_from_slice(&(stream.len() as u16).to_be_bytes());
    f.extend_from_slice(stream.as_bytes());
    match offset {
        Some(o) => {
            f.extend_from_slice(&[0, 4]);
            f.extend_from_slice(&o.to_be_bytes());
        }
        None => f.extend_from_slice(&[0, 3]),
    }
    f.extend_from_slice(&credit.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    send_frame(&mut s, &f).await;
    let answer = read_frame(&mut s).await;
    assert_eq!(&answer[..4], &[0x80, 7, 0, 1]);
    assert_eq!(&answer[8..10], &[0, 1], "subscribed");
    s
}

/// What a subscriber received: each chunk's offsets, and the spans of
/// offsets whose entries are the bytes published (`true`) or the broker's
/// encoding of the same message (`false`).
#[derive(Debug, Default)]
struct Got {
    chunks: Vec<std::ops::Range<u64>>,
    spans: Vec<(std::ops::Range<u64>, bool)>,
}

/// Reads chunks until offset `end`, granting a credit after each, checking
/// that offsets follow `next` and that each entry is message `offset`'s.
/// `sent` gives the bytes published for an offset.
async fn receive(s: &mut TcpStream, next: &mut u64, end: u64, sent: impl Fn(u64) -> Vec<u8>) -> Got {
    let mut got = Got::default();
    while *next < end {
        let frame = read_frame(s).await;
        assert_eq!(&frame[..4], &[0, 8, 0, 1], "a delivery, not {frame:?}");
        let (first, entries) = chunk(&frame);
        assert_eq!(first, *next, "chunks follow each other");
        for (i, entry) in entries.iter().enumerate() {
            let offset = first + i as u64;
            let body = format!("run-message-{offset}");
            assert!(entry.ends_with(body.as_bytes()), "offset {offset}: {entry:?}");
            let verbatim = *entry == sent(offset).as_slice();
            match got.spans.last_mut() {
                Some((span, v)) if *v == verbatim => span.end = offset + 1,
                _ => got.spans.push((offset..offset + 1, verbatim)),
            }
        }
        *next += entries.len() as u64;
        got.chunks.push(first..*next);
        send_frame(s, &[0, 9, 0, 1, 1, 0, 1]).await;
    }
    got
}

#[tokio::test]
async fn publish_frames_reach_subscribers_as_sent_and_joined() {
    let b = start().await;
    let port = b.stream_addr().port();
    let env = env(&b).await;
    let stream = uniq("runs");
    env.stream_creator().create(&stream).await.unwrap();
    // Offsets 300..400 carry properties; all others are plain.
    let sent = |o: u64| match o {
        300..400 => with_properties(o),
        _ => plain(o),
    };

    // A subscriber with no credit yet: the frames wait for it.
    let mut behind = subscribe(port, &stream, None, 0).await;
    let mut p = raw_open(port, FRAME_MAX).await;
    let mut declare = vec![0, 1, 0, 1, 0, 0, 0, 8, 7, 0, 8];
    declare.extend_from_slice(b"runs-pub");
    declare.extend_from_slice(&(stream.len() as u16).to_be_bytes());
    declare.extend_from_slice(stream.as_bytes());
    send_frame(&mut p, &declare).await;
    let answer = read_frame(&mut p).await;
    assert_eq!(&answer[8..10], &[0, 1], "publisher declared");
    for first in [0, 100, 200] {
        publish(&mut p, first..first + 100, plain).await;
    }
    publish(&mut p, 300..400, with_properties).await;
    for first in [400, 500] {
        publish(&mut p, first..first + 100, plain).await;
    }
    // The last frame again: duplicates of a named publisher, confirmed and
    // not stored.
    publish(&mut p, 500..600, plain).await;
    within("confirms", confirmed(&mut p, 700)).await;
    // A subscriber in the middle of a frame, reading later: it holds the
    // frames from there on for it.
    let mut middle = subscribe(port, &stream, Some(150), 0).await;

    send_frame(&mut behind, &[0, 9, 0, 1, 1, 0, 1]).await;
    let mut next = 0;
    let got = receive(&mut behind, &mut next, 600, sent).await;
    // The first three frames in one chunk for the one credit; the frame
    // with properties message by message, the last two frames after it;
    // every entry as it was published.
    assert_eq!(got.chunks[0], 0..300, "{got:?}");
    assert_eq!(got.spans, [(0..600, true)]);

    // Published while it reads: the next offset is 600 (the duplicates took
    // none), sent as it was published.
    publish(&mut p, 600..700, plain).await;
    within("confirm", confirmed(&mut p, 100)).await;
    let got = receive(&mut behind, &mut next, 700, plain).await;
    assert_eq!(got.chunks.len(), 1, "one chunk: {got:?}");
    assert_eq!(got.spans, [(600..700, true)]);

    // Starting in the middle of a frame: the rest of it message by message
    // (a plain message's body in the broker's encoding: these data sections
    // were sent with a four-byte length), then the frames as they were sent.
    send_frame(&mut middle, &[0, 9, 0, 1, 1, 0, 10]).await;
    let mut next = 150;
    let got = receive(&mut middle, &mut next, 700, sent).await;
    assert_eq!(got.spans, [(150..200, false), (200..700, true)]);
    p.shutdown().await.ok();
}
