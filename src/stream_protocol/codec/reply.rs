//! What the broker writes: responses to requests and the commands it sends
//! on its own (confirms, publish errors, metadata updates, heartbeats,
//! consumer updates, close).

use bytes::{BufMut, BytesMut};

use super::key;
use super::primitives::{begin_frame, end_frame, put_string, put_string_map};

/// A response carrying only a code.
pub fn generic(out: &mut BytesMut, request_key: u16, correlation_id: u32, code: u16) {
    let f = begin_frame(out, request_key | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    end_frame(out, f);
}

/// A response with a code and a map of strings (peer properties, open).
pub fn with_map<'a>(
    out: &mut BytesMut,
    request_key: u16,
    correlation_id: u32,
    code: u16,
    map: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) {
    let f = begin_frame(out, request_key | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    put_string_map(out, map);
    end_frame(out, f);
}

/// A response with a code and a list of strings (SASL mechanisms, route,
/// partitions).
pub fn with_strings<'a>(
    out: &mut BytesMut,
    request_key: u16,
    correlation_id: u32,
    code: u16,
    list: impl ExactSizeIterator<Item = &'a str>,
) {
    let f = begin_frame(out, request_key | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    out.put_u32(list.len() as u32);
    for s in list {
        put_string(out, s);
    }
    end_frame(out, f);
}

/// A response with a code and a u64 (query offset, query publisher sequence).
pub fn with_u64(out: &mut BytesMut, request_key: u16, correlation_id: u32, code: u16, value: u64) {
    let f = begin_frame(out, request_key | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    out.put_u64(value);
    end_frame(out, f);
}

/// The broker's tune: the largest frame and the heartbeat it proposes.
pub fn tune(out: &mut BytesMut, frame_max: u32, heartbeat: u32) {
    let f = begin_frame(out, key::TUNE, 1);
    out.put_u32(frame_max);
    out.put_u32(heartbeat);
    end_frame(out, f);
}

/// A heartbeat.
pub fn heartbeat(out: &mut BytesMut) {
    let f = begin_frame(out, key::HEARTBEAT, 1);
    end_frame(out, f);
}

/// The broker closes the connection.
pub fn close(out: &mut BytesMut, correlation_id: u32, code: u16, reason: &str) {
    let f = begin_frame(out, key::CLOSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    put_string(out, reason);
    end_frame(out, f);
}

/// Confirms the publishing ids of a publisher.
pub fn publish_confirm(out: &mut BytesMut, publisher_id: u8, ids: &[u64]) {
    let f = begin_frame(out, key::PUBLISH_CONFIRM, 1);
    out.put_u8(publisher_id);
    out.put_u32(ids.len() as u32);
    for id in ids {
        out.put_u64(*id);
    }
    end_frame(out, f);
}

/// Refuses publishing ids of a publisher, each with a code.
pub fn publish_error(out: &mut BytesMut, publisher_id: u8, errors: &[(u64, u16)]) {
    let f = begin_frame(out, key::PUBLISH_ERROR, 1);
    out.put_u8(publisher_id);
    out.put_u32(errors.len() as u32);
    for (id, code) in errors {
        out.put_u64(*id);
        out.put_u16(*code);
    }
    end_frame(out, f);
}

/// Tells the client that a stream it uses changed (deleted: code
/// `stream not available`).
pub fn metadata_update(out: &mut BytesMut, code: u16, stream: &str) {
    let f = begin_frame(out, key::METADATA_UPDATE, 1);
    out.put_u16(code);
    put_string(out, stream);
    end_frame(out, f);
}

/// A broker in a metadata answer.
pub struct Broker<'a> {
    /// Its reference in the stream entries.
    pub reference: u16,
    /// The host clients should connect to.
    pub host: &'a str,
    /// The port clients should connect to.
    pub port: u32,
}

/// The metadata of some streams: the brokers, then each stream with its
/// code, leader and replicas (`None`: the stream does not exist).
pub fn metadata(out: &mut BytesMut, correlation_id: u32, brokers: &[Broker<'_>], streams: &[(&str, Option<u16>)]) {
    let f = begin_frame(out, key::METADATA | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u32(brokers.len() as u32);
    for b in brokers {
        out.put_u16(b.reference);
        put_string(out, b.host);
        out.put_u32(b.port);
    }
    out.put_u32(streams.len() as u32);
    for (name, leader) in streams {
        put_string(out, name);
        match leader {
            Some(l) => {
                out.put_u16(super::code::OK);
                out.put_u16(*l);
            }
            None => {
                out.put_u16(super::code::STREAM_DOES_NOT_EXIST);
                out.put_u16(u16::MAX);
            }
        }
        out.put_u32(0);
    }
    end_frame(out, f);
}

/// The command versions the broker speaks: key, lowest, highest.
pub fn command_versions(out: &mut BytesMut, correlation_id: u32, versions: &[(u16, u16, u16)]) {
    let f = begin_frame(out, key::EXCHANGE_COMMAND_VERSIONS | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(super::code::OK);
    out.put_u32(versions.len() as u32);
    for (k, min, max) in versions {
        out.put_u16(*k);
        out.put_u16(*min);
        out.put_u16(*max);
    }
    end_frame(out, f);
}

/// A stream's statistics, by name.
pub fn stream_stats(out: &mut BytesMut, correlation_id: u32, code: u16, stats: &[(&str, i64)]) {
    let f = begin_frame(out, key::STREAM_STATS | key::RESPONSE, 1);
    out.put_u32(correlation_id);
    out.put_u16(code);
    out.put_u32(stats.len() as u32);
    for (k, v) in stats {
        put_string(out, k);
        out.put_i64(*v);
    }
    end_frame(out, f);
}

/// Tells a single active consumer it became active or stopped being so;
/// the client answers an activation with the offset to start from.
pub fn consumer_update(out: &mut BytesMut, correlation_id: u32, subscription_id: u8, active: bool) {
    let f = begin_frame(out, key::CONSUMER_UPDATE, 1);
    out.put_u32(correlation_id);
    out.put_u8(subscription_id);
    out.put_u8(u8::from(active));
    end_frame(out, f);
}
