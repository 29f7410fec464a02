//! RabbitMQ stream protocol frames as a client can send them: any bytes are
//! split into frames and decoded into commands, or refused with an error,
//! never a panic. Splitting is checked against a small frame limit and no
//! limit, and fed whole or a byte at a time (the same frames either way).
//! Each command that decodes is written back with the codec's writers and
//! must decode to itself (a sub-entry batch written back uncompressed; one
//! the codec could not read is not written back); the messages of a publish
//! are written into a deliver chunk, whose layout is checked.
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use lavinmq::stream_protocol::codec::chunk::ChunkWriter;
use lavinmq::stream_protocol::codec::command::OffsetSpec;
use lavinmq::stream_protocol::codec::primitives::{begin_frame, end_frame, put_string, put_string_map};
use lavinmq::stream_protocol::codec::sub_batch::Entry;
use lavinmq::stream_protocol::codec::{Command, DecodeError, code, key, reply, split_frame};
use libfuzzer_sys::fuzz_target;

/// A frame limit below what most commands need, to reach the refusal.
const SMALL_MAX: u32 = 64;

fuzz_target!(|data: &[u8]| {
    for max in [SMALL_MAX, 0] {
        let (frames, end) = split_whole(data, max);
        let (bytewise, bytewise_end) = split_bytewise(data, max);
        assert_eq!(frames, bytewise, "max {max}");
        assert_eq!(end, bytewise_end, "max {max}");
        let mut at = 0;
        for frame in &frames {
            // A frame is exactly the bytes its size announced.
            let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
            assert_eq!(size as usize, frame.len());
            assert!(max == 0 || size <= max);
            assert_eq!(&data[at + 4..at + 4 + frame.len()], &frame[..]);
            at += 4 + frame.len();
        }
        if let Some(DecodeError::TooLarge(size)) = end {
            assert!(max > 0 && size > max);
            assert_eq!(size.to_be_bytes()[..], data[at..at + 4]);
        }
        // Decoding does not depend on the limit: once is enough.
        if max == 0 {
            for frame in &frames {
                if let Ok(command) = Command::decode(frame) {
                    let _ = command.correlation_id();
                    round_trip(&command);
                    if let Command::Publish { publisher_id, messages } = &command {
                        let bodies = messages.iter().flat_map(|m| match &m.entry {
                            Entry::Single(b) => std::slice::from_ref(b),
                            Entry::Batch(bs) => &bs[..],
                            Entry::Unreadable(_) => &[],
                        });
                        check_chunk(*publisher_id, bodies.map(|b| &b[..]));
                    }
                }
            }
        }
    }
});

/// The frames of `data` given at once, and the error that stopped the
/// splitting (`None`: the input ran out between or inside frames).
fn split_whole(data: &[u8], max: u32) -> (Vec<Bytes>, Option<DecodeError>) {
    let mut buf = BytesMut::from(data);
    let mut frames = Vec::new();
    loop {
        match split_frame(&mut buf, max) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) => return (frames, None),
            Err(e) => return (frames, Some(e)),
        }
    }
}

/// The frames of `data` arriving a byte at a time.
fn split_bytewise(data: &[u8], max: u32) -> (Vec<Bytes>, Option<DecodeError>) {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for &b in data {
        buf.put_u8(b);
        loop {
            match split_frame(&mut buf, max) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

/// Writes `command` back and checks that it is one frame that decodes to it.
fn round_trip(command: &Command) {
    if let Command::Publish { messages, .. } = command
        && messages.iter().any(|m| matches!(m.entry, Entry::Unreadable(_)))
    {
        return;
    }
    let mut out = BytesMut::new();
    encode(&mut out, command);
    let whole = out.len();
    let frame = split_frame(&mut out, 0).unwrap().expect("a whole frame");
    assert!(out.is_empty(), "{} of {whole} bytes left after the frame", out.len());
    assert_eq!(&Command::decode(&frame).expect("the written frame decodes"), command);
}

fn put_opt_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn put_strings(out: &mut BytesMut, list: &[String]) {
    out.put_u32(list.len() as u32);
    for s in list {
        put_string(out, s);
    }
}

fn put_map(out: &mut BytesMut, map: &[(String, String)]) {
    put_string_map(out, map.iter().map(|(k, v)| (k.as_str(), v.as_str())));
}

fn put_offset(out: &mut BytesMut, offset: OffsetSpec) {
    match offset {
        OffsetSpec::First => out.put_u16(1),
        OffsetSpec::Last => out.put_u16(2),
        OffsetSpec::Next => out.put_u16(3),
        OffsetSpec::Offset(o) => {
            out.put_u16(4);
            out.put_u64(o);
        }
        OffsetSpec::Timestamp(t) => {
            out.put_u16(5);
            out.put_i64(t);
        }
    }
}

/// Writes a command as a client would; the commands the broker also sends
/// (tune, close, heartbeat, close response) with the broker's own writers.
fn encode(out: &mut BytesMut, command: &Command) {
    use Command::*;
    let (k, version) = match command {
        Tune { frame_max, heartbeat } => return reply::tune(out, *frame_max, *heartbeat),
        Close {
            correlation_id,
            code,
            reason,
        } => return reply::close(out, *correlation_id, *code, reason),
        Heartbeat => return reply::heartbeat(out),
        CloseResponse => return reply::generic(out, key::CLOSE, 0, code::OK),
        DeclarePublisher { .. } => (key::DECLARE_PUBLISHER, 1),
        // Version 2 carries filter values.
        Publish { messages, .. } => (
            key::PUBLISH,
            1 + u16::from(messages.iter().any(|m| m.filter_value.is_some())),
        ),
        QueryPublisherSequence { .. } => (key::QUERY_PUBLISHER_SEQUENCE, 1),
        DeletePublisher { .. } => (key::DELETE_PUBLISHER, 1),
        Subscribe { .. } => (key::SUBSCRIBE, 1),
        Credit { .. } => (key::CREDIT, 1),
        StoreOffset { .. } => (key::STORE_OFFSET, 1),
        QueryOffset { .. } => (key::QUERY_OFFSET, 1),
        Unsubscribe { .. } => (key::UNSUBSCRIBE, 1),
        Create { .. } => (key::CREATE, 1),
        Delete { .. } => (key::DELETE, 1),
        Metadata { .. } => (key::METADATA, 1),
        PeerProperties { .. } => (key::PEER_PROPERTIES, 1),
        SaslHandshake { .. } => (key::SASL_HANDSHAKE, 1),
        SaslAuthenticate { .. } => (key::SASL_AUTHENTICATE, 1),
        Open { .. } => (key::OPEN, 1),
        Route { .. } => (key::ROUTE, 1),
        Partitions { .. } => (key::PARTITIONS, 1),
        ConsumerUpdateResponse { .. } => (key::CONSUMER_UPDATE | key::RESPONSE, 1),
        ExchangeCommandVersions { .. } => (key::EXCHANGE_COMMAND_VERSIONS, 1),
        StreamStats { .. } => (key::STREAM_STATS, 1),
        CreateSuperStream { .. } => (key::CREATE_SUPER_STREAM, 1),
        DeleteSuperStream { .. } => (key::DELETE_SUPER_STREAM, 1),
    };
    let f = begin_frame(out, k, version);
    match command {
        Tune { .. } | Close { .. } | Heartbeat | CloseResponse => unreachable!(),
        DeclarePublisher {
            correlation_id,
            publisher_id,
            reference,
            stream,
        } => {
            out.put_u32(*correlation_id);
            out.put_u8(*publisher_id);
            put_opt_string(out, reference.as_deref());
            put_string(out, stream);
        }
        Publish { publisher_id, messages } => {
            out.put_u8(*publisher_id);
            out.put_u32(messages.len() as u32);
            for m in messages {
                out.put_u64(m.publishing_id);
                if version >= 2 {
                    put_opt_string(out, m.filter_value.as_deref());
                }
                match &m.entry {
                    Entry::Single(b) => put_bytes(out, b),
                    Entry::Batch(bodies) => {
                        let mut raw = BytesMut::new();
                        for b in bodies {
                            put_bytes(&mut raw, b);
                        }
                        out.put_u8(0x80);
                        out.put_u16(bodies.len() as u16);
                        out.put_u32(raw.len() as u32);
                        put_bytes(out, &raw);
                    }
                    Entry::Unreadable(_) => unreachable!("not written back"),
                }
            }
        }
        QueryPublisherSequence {
            correlation_id,
            reference,
            stream,
        }
        | QueryOffset {
            correlation_id,
            reference,
            stream,
        } => {
            out.put_u32(*correlation_id);
            put_string(out, reference);
            put_string(out, stream);
        }
        DeletePublisher {
            correlation_id,
            publisher_id: id,
        }
        | Unsubscribe {
            correlation_id,
            subscription_id: id,
        } => {
            out.put_u32(*correlation_id);
            out.put_u8(*id);
        }
        Subscribe {
            correlation_id,
            subscription_id,
            stream,
            offset,
            credit,
            properties,
        } => {
            out.put_u32(*correlation_id);
            out.put_u8(*subscription_id);
            put_string(out, stream);
            put_offset(out, *offset);
            out.put_u16(*credit);
            put_map(out, properties);
        }
        Credit {
            subscription_id,
            credit,
        } => {
            out.put_u8(*subscription_id);
            out.put_u16(*credit);
        }
        StoreOffset {
            reference,
            stream,
            offset,
        } => {
            put_string(out, reference);
            put_string(out, stream);
            out.put_u64(*offset);
        }
        Create {
            correlation_id,
            stream,
            arguments,
        } => {
            out.put_u32(*correlation_id);
            put_string(out, stream);
            put_map(out, arguments);
        }
        Delete {
            correlation_id,
            stream: name,
        }
        | StreamStats {
            correlation_id,
            stream: name,
        }
        | Open {
            correlation_id,
            vhost: name,
        }
        | Partitions {
            correlation_id,
            super_stream: name,
        }
        | DeleteSuperStream { correlation_id, name } => {
            out.put_u32(*correlation_id);
            put_string(out, name);
        }
        Metadata {
            correlation_id,
            streams,
        } => {
            out.put_u32(*correlation_id);
            put_strings(out, streams);
        }
        PeerProperties {
            correlation_id,
            properties,
        } => {
            out.put_u32(*correlation_id);
            put_map(out, properties);
        }
        SaslHandshake { correlation_id } => out.put_u32(*correlation_id),
        SaslAuthenticate {
            correlation_id,
            mechanism,
            data,
        } => {
            out.put_u32(*correlation_id);
            put_string(out, mechanism);
            put_bytes(out, data);
        }
        Route {
            correlation_id,
            routing_key,
            super_stream,
        } => {
            out.put_u32(*correlation_id);
            put_string(out, routing_key);
            put_string(out, super_stream);
        }
        ConsumerUpdateResponse {
            correlation_id,
            code,
            offset,
        } => {
            out.put_u32(*correlation_id);
            out.put_u16(*code);
            if let Some(offset) = offset {
                put_offset(out, *offset);
            }
        }
        ExchangeCommandVersions {
            correlation_id,
            versions,
        } => {
            out.put_u32(*correlation_id);
            out.put_u32(versions.len() as u32);
            for (k, min, max) in versions {
                out.put_u16(*k);
                out.put_u16(*min);
                out.put_u16(*max);
            }
        }
        CreateSuperStream {
            correlation_id,
            name,
            partitions,
            binding_keys,
            arguments,
        } => {
            out.put_u32(*correlation_id);
            put_string(out, name);
            put_strings(out, partitions);
            put_strings(out, binding_keys);
            put_map(out, arguments);
        }
    }
    end_frame(out, f);
}

/// Writes `messages` into a deliver chunk and reads the chunk back: one
/// frame, the subscription, the entry count, the data length and CRC, and
/// each entry's size and bytes.
fn check_chunk<'a>(subscription_id: u8, messages: impl Iterator<Item = &'a [u8]> + Clone) {
    let mut out = BytesMut::new();
    let mut chunk = ChunkWriter::begin(&mut out, subscription_id, 7, 1_700_000_000_000);
    for m in messages.clone() {
        chunk.begin_entry(&mut out);
        out.put_slice(m);
        chunk.end_entry(&mut out);
    }
    let n = messages.clone().count();
    assert_eq!(chunk.entries() as usize, n);
    assert_eq!(chunk.next_offset(), 7 + n as u64);
    if n == 0 {
        chunk.abandon(&mut out);
        assert!(out.is_empty());
        return;
    }
    chunk.finish(&mut out);
    let frame = split_frame(&mut out, 0).unwrap().expect("a whole frame");
    assert!(out.is_empty());
    assert_eq!(Command::decode(&frame), Err(DecodeError::UnknownKey(key::DELIVER)));
    assert_eq!(&frame[..4], &[0, key::DELIVER as u8, 0, 1]);
    assert_eq!(frame[4], subscription_id);
    let h = &frame[5..];
    assert_eq!(u16::from_be_bytes([h[2], h[3]]) as usize, n);
    assert_eq!(u64::from_be_bytes(h[24..32].try_into().unwrap()), 7);
    let data = &h[48..];
    assert_eq!(u32::from_be_bytes(h[36..40].try_into().unwrap()) as usize, data.len());
    assert_eq!(u32::from_be_bytes(h[32..36].try_into().unwrap()), crc32(data));
    let mut rest = data;
    for m in messages {
        let size = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        assert_eq!(&rest[4..4 + size], m);
        rest = &rest[4 + size..];
    }
    assert!(rest.is_empty());
}

/// CRC-32 (IEEE), bit by bit: what osiris and the clients check.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
