//! Deliver frames within the frame size the subscriber tuned: a chunk ends
//! before an entry that would take it past that size, a message too large
//! for any frame goes out alone in its chunk (as RabbitMQ sends it), and
//! every message arrives once, in order, one credit per chunk.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{env, publish_all, raw_open};
use crate::common::{start, uniq, within};

/// The frame size the raw subscriber tunes.
const FRAME_MAX: usize = 8192;

/// Bodies numbered from `first`, of sizes from 100 bytes to about 3 KiB, so
/// that a few fit a frame and chunk ends fall anywhere.
fn bodies(first: usize, n: usize) -> Vec<String> {
    (first..first + n)
        .map(|i| format!("m{i:05}-{}", "x".repeat(100 + i * 397 % 3000)))
        .collect()
}

/// One frame, without its size prefix.
pub(super) async fn read_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut size = [0u8; 4];
    within("a frame", s.read_exact(&mut size)).await.unwrap();
    let mut frame = vec![0; u32::from_be_bytes(size) as usize];
    within("a frame", s.read_exact(&mut frame)).await.unwrap();
    frame
}

pub(super) async fn send_frame(s: &mut TcpStream, body: &[u8]) {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out).await.unwrap();
}

/// A deliver frame's first offset and entries (each an AMQP 1.0 message),
/// after checking its counts and the CRC of its data.
pub(super) fn chunk(frame: &[u8]) -> (u64, Vec<&[u8]>) {
    assert_eq!(frame[4], 1, "subscription id");
    let h = &frame[5..];
    let count = u16::from_be_bytes([h[2], h[3]]) as usize;
    let first = u64::from_be_bytes(h[24..32].try_into().unwrap());
    let mut data = &h[48..];
    assert_eq!(u32::from_be_bytes(h[36..40].try_into().unwrap()) as usize, data.len());
    let crc = u32::from_be_bytes(h[32..36].try_into().unwrap());
    assert_eq!(crc, crc32fast::hash(data), "the chunk's CRC");
    assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), count as u32, "records");
    let mut entries = Vec::new();
    while !data.is_empty() {
        let len = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
        entries.push(&data[4..4 + len]);
        data = &data[4 + len..];
    }
    assert_eq!(entries.len(), count, "the header counts the entries");
    (first, entries)
}

/// Reads deliveries until `expected` arrived, granting one credit per chunk;
/// checks each frame's size and the messages' order. The sizes (prefix
/// included) of the frames it read, each with its entry count.
async fn receive(s: &mut TcpStream, expected: &[String], next_offset: &mut u64) -> Vec<(usize, usize)> {
    let mut frames = Vec::new();
    let mut got = 0;
    while got < expected.len() {
        let frame = read_frame(s).await;
        match u16::from_be_bytes([frame[0], frame[1]]) {
            8 => {}
            0x8007 => {
                assert_eq!(&frame[8..10], &[0, 1], "subscribed");
                continue;
            }
            other => panic!("unexpected frame {other:#x}: {frame:?}"),
        }
        let (first, entries) = chunk(&frame);
        assert_eq!(first, *next_offset, "chunks follow each other");
        for entry in &entries {
            let body = &expected[got];
            assert!(entry.ends_with(body.as_bytes()), "message {got} in order");
            got += 1;
        }
        *next_offset += entries.len() as u64;
        let size = frame.len() + 4;
        assert!(
            size <= FRAME_MAX || entries.len() == 1,
            "a frame of {size} bytes with {} entries",
            entries.len()
        );
        frames.push((size, entries.len()));
        send_frame(s, &[0, 9, 0, 1, 1, 0, 1]).await;
    }
    frames
}

#[tokio::test]
async fn deliver_frames_stay_within_the_tuned_frame_size() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("frame-max");
    env.stream_creator().create(&stream).await.unwrap();
    // A backlog far larger than a frame, with one message larger than a
    // frame on its own among the others.
    let mut backlog = bodies(0, 60);
    backlog.push(format!("m{:05}-{}", 60, "y".repeat(3 * FRAME_MAX)));
    backlog.extend(bodies(61, 60));
    publish_all(&env, &stream, &backlog).await;

    // Subscribe from the first offset with one credit: every further chunk
    // waits for the credit granted after the one before.
    let mut s = raw_open(b.stream_addr().port(), FRAME_MAX as u32).await;
    let mut subscribe = vec![0, 7, 0, 1, 0, 0, 0, 5, 1];
    subscribe.extend_from_slice(&(stream.len() as u16).to_be_bytes());
    subscribe.extend_from_slice(stream.as_bytes());
    subscribe.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0]);
    send_frame(&mut s, &subscribe).await;
    let mut next_offset = 0;
    let frames = receive(&mut s, &backlog, &mut next_offset).await;
    let total: usize = backlog.iter().map(String::len).sum();
    assert!(frames.len() > total / FRAME_MAX, "{} chunks", frames.len());
    assert!(frames.iter().any(|&(_, n)| n > 1), "chunks still batch messages");
    let over: Vec<_> = frames.iter().filter(|&&(size, _)| size > FRAME_MAX).collect();
    assert_eq!(over.len(), 1, "only the message too large for a frame: {over:?}");

    // Messages published while it reads go out within the limit too.
    let live = bodies(121, 80);
    publish_all(&env, &stream, &live).await;
    let frames = receive(&mut s, &live, &mut next_offset).await;
    assert!(frames.iter().all(|&(size, _)| size <= FRAME_MAX), "{frames:?}");
}
