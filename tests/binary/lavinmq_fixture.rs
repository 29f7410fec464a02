//! Writes LavinMQ 2.x data dirs for the take-over tests, byte for byte as
//! LavinMQ 2.9 lays them out (its `schema.cr`, `message_store.cr`,
//! `message.cr`, `definitions_store.cr`, `stream_message_store.cr`,
//! `mqtt/retain_store.cr`, `auth/user.cr` and amq-protocol's `frames.cr`):
//! integers in host (little-endian) order, AMQP field tables in network order
//! inside a host-order length, a segment per `msgs.N` file that starts with
//! schema version 4, sealed segments cut to their data with a `meta.N` beside
//! them and the segment being written left at its full size, zero-filled.

use std::path::Path;

use base64::Engine;
use sha2::Digest;

/// Hex SHA-1, as LavinMQ names vhost and queue directories.
pub fn sha1_hex(s: &str) -> String {
    sha1::Sha1::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn md5_hex(s: &str) -> String {
    md5::Md5::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// RabbitMQ's salted hash: base64(salt ‖ H(salt ‖ password)).
fn salted<D: Digest>(password: &str) -> String {
    let salt = [0x90u8, 0x8e, 0x41, 0x17];
    let mut h = D::new();
    h.update(salt);
    h.update(password.as_bytes());
    let mut out = salt.to_vec();
    out.extend_from_slice(&h.finalize());
    base64::engine::general_purpose::STANDARD.encode(out)
}

/// A password hash in each format LavinMQ writes, with its `hashing_algorithm`.
pub fn password_hash(algorithm: &str, password: &str) -> (String, &'static str) {
    match algorithm {
        "sha256" => (salted::<sha2::Sha256>(password), "rabbit_password_hashing_sha256"),
        "sha512" => (salted::<sha2::Sha512>(password), "rabbit_password_hashing_sha512"),
        "md5" => (salted::<md5::Md5>(password), "rabbit_password_hashing_md5"),
        _ => {
            let h = bcrypt::hash_with_result(password, 4).expect("bcrypt");
            (h.format_for_version(bcrypt::Version::TwoA), "lavinmq_bcrypt")
        }
    }
}

/// A header value of the fixtures.
pub enum Header<'a> {
    /// 'I': signed 32-bit.
    Int(i32),
    /// 'S': long string.
    Str(&'a str),
    /// 't': boolean.
    Bool(bool),
}

/// An AMQP field table's contents (network order).
pub fn table(entries: &[(&str, Header<'_>)]) -> Vec<u8> {
    let mut t = Vec::new();
    for (k, v) in entries {
        t.push(k.len() as u8);
        t.extend(k.as_bytes());
        match v {
            Header::Int(i) => {
                t.push(b'I');
                t.extend(i.to_be_bytes());
            }
            Header::Bool(b) => {
                t.push(b't');
                t.push(u8::from(*b));
            }
            Header::Str(s) => {
                t.push(b'S');
                t.extend((s.len() as u32).to_be_bytes());
                t.extend(s.as_bytes());
            }
        }
    }
    t
}

/// The properties of a fixture message.
#[derive(Default, Clone)]
pub struct Props {
    pub content_type: Option<String>,
    pub headers: Option<Vec<u8>>,
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub message_id: Option<String>,
    pub timestamp: Option<i64>,
}

fn short(out: &mut Vec<u8>, s: &str) {
    out.push(s.len() as u8);
    out.extend(s.as_bytes());
}

impl Props {
    /// LavinMQ's encoding: host-order flags, fields in flag order.
    fn encode(&self) -> Vec<u8> {
        let mut flags = 0u16;
        let mut f = Vec::new();
        if let Some(s) = &self.content_type {
            flags |= 0x8000;
            short(&mut f, s);
        }
        if let Some(h) = &self.headers {
            flags |= 0x2000;
            f.extend((h.len() as u32).to_le_bytes());
            f.extend(h);
        }
        if let Some(d) = self.delivery_mode {
            flags |= 0x1000;
            f.push(d);
        }
        if let Some(p) = self.priority {
            flags |= 0x0800;
            f.push(p);
        }
        if let Some(s) = &self.message_id {
            flags |= 0x0080;
            short(&mut f, s);
        }
        if let Some(t) = self.timestamp {
            flags |= 0x0040;
            f.extend(t.to_le_bytes());
        }
        let mut out = flags.to_le_bytes().to_vec();
        out.extend(f);
        out
    }
}

/// One message record.
pub fn record(ts: i64, exchange: &str, routing_key: &str, props: &Props, body: &[u8]) -> Vec<u8> {
    let mut r = ts.to_le_bytes().to_vec();
    short(&mut r, exchange);
    short(&mut r, routing_key);
    r.extend(props.encode());
    r.extend((body.len() as u64).to_le_bytes());
    r.extend(body);
    r
}

/// Writes a message store into `dir`: records packed into segments of about
/// `segment_size` bytes, the positions of the records `acked` selects listed
/// in the acks files. Returns the number of segments.
pub fn write_store<R: AsRef<[u8]>>(
    dir: &Path,
    records: impl IntoIterator<Item = R>,
    segment_size: usize,
    acked: impl Fn(usize) -> bool,
) -> u32 {
    std::fs::create_dir_all(dir).unwrap();
    let mut seg_id = 1u32;
    let mut seg = 4i32.to_le_bytes().to_vec();
    let mut acks: Vec<u8> = Vec::new();
    let mut count = 0u32;
    let flush = |id: u32, seg: &mut Vec<u8>, acks: &mut Vec<u8>, count: u32, last: bool| {
        let name = |kind: &str| dir.join(format!("{kind}.{id:010}"));
        if last {
            // The segment being written: pre-sized, zero after the data.
            seg.resize(seg.len() + segment_size, 0);
        } else {
            std::fs::write(name("meta"), count.to_le_bytes()).unwrap();
        }
        std::fs::write(name("msgs"), &seg).unwrap();
        if !acks.is_empty() {
            // Ack files are pre-sized too; a zero ends the positions.
            acks.resize(acks.len() + 64, 0);
            std::fs::write(name("acks"), &acks).unwrap();
        }
    };
    for (i, r) in records.into_iter().enumerate() {
        let r = r.as_ref();
        if seg.len() + r.len() > segment_size && count > 0 {
            flush(seg_id, &mut seg, &mut acks, count, false);
            seg_id += 1;
            seg = 4i32.to_le_bytes().to_vec();
            acks.clear();
            count = 0;
        }
        if acked(i) {
            acks.extend((seg.len() as u32).to_le_bytes());
        }
        seg.extend(r);
        count += 1;
    }
    flush(seg_id, &mut seg, &mut acks, count, true);
    seg_id
}

/// A method frame of `definitions.amqp` (host order).
pub fn frame(class: u16, method: u16, fields: &[u8]) -> Vec<u8> {
    let mut payload = class.to_le_bytes().to_vec();
    payload.extend(method.to_le_bytes());
    payload.extend(fields);
    let mut f = vec![1u8];
    f.extend(0u16.to_le_bytes());
    f.extend((payload.len() as u32).to_le_bytes());
    f.extend(payload);
    f.push(0xCE);
    f
}

fn args(t: &[u8]) -> Vec<u8> {
    let mut a = (t.len() as u32).to_le_bytes().to_vec();
    a.extend(t);
    a
}

/// `exchange.declare` (durable).
pub fn exchange_declare(name: &str, kind: &str, arguments: &[u8]) -> Vec<u8> {
    let mut f = 0u16.to_le_bytes().to_vec();
    short(&mut f, name);
    short(&mut f, kind);
    f.push(0b10);
    f.extend(args(arguments));
    frame(40, 10, &f)
}

/// `queue.declare` (durable).
pub fn queue_declare(name: &str, arguments: &[u8]) -> Vec<u8> {
    let mut f = 0u16.to_le_bytes().to_vec();
    short(&mut f, name);
    f.push(0b10);
    f.extend(args(arguments));
    frame(50, 10, &f)
}

/// `queue.delete`.
pub fn queue_delete(name: &str) -> Vec<u8> {
    let mut f = 0u16.to_le_bytes().to_vec();
    short(&mut f, name);
    f.push(0);
    frame(50, 40, &f)
}

/// `queue.bind`.
pub fn queue_bind(queue: &str, exchange: &str, routing_key: &str) -> Vec<u8> {
    queue_bind_with(queue, exchange, routing_key, &[])
}

/// `queue.bind` with arguments.
pub fn queue_bind_with(queue: &str, exchange: &str, routing_key: &str, arguments: &[u8]) -> Vec<u8> {
    let mut f = 0u16.to_le_bytes().to_vec();
    short(&mut f, queue);
    short(&mut f, exchange);
    short(&mut f, routing_key);
    f.push(0);
    f.extend(args(arguments));
    frame(50, 20, &f)
}

/// A vhost directory with its `.vhost` file and `definitions.amqp`.
pub fn write_vhost(root: &Path, name: &str, frames: &[Vec<u8>]) -> std::path::PathBuf {
    let dir = root.join(sha1_hex(name));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".vhost"), name).unwrap();
    let mut log = 1i32.to_le_bytes().to_vec();
    for (n, k) in [
        ("", "direct"),
        ("amq.direct", "direct"),
        ("amq.fanout", "fanout"),
        ("amq.topic", "topic"),
        ("amq.headers", "headers"),
        ("amq.match", "headers"),
    ] {
        log.extend(exchange_declare(n, k, &[]));
    }
    for f in frames {
        log.extend(f);
    }
    std::fs::write(dir.join("definitions.amqp"), log).unwrap();
    dir
}

/// A queue directory (`<vhost dir>/<sha1(name)>` with its `.queue` file).
pub fn queue_dir(vhost_dir: &Path, name: &str) -> std::path::PathBuf {
    let dir = vhost_dir.join(sha1_hex(name));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".queue"), name).unwrap();
    dir
}

/// The MQTT retained store of a vhost: the index of topics and one payload
/// file per topic.
pub fn write_retained(vhost_dir: &Path, retained: &[(&str, &[u8])]) {
    let dir = vhost_dir.join("mqtt_retained_store");
    std::fs::create_dir_all(&dir).unwrap();
    let mut index = String::new();
    for (topic, payload) in retained {
        index.push_str(topic);
        index.push('\n');
        std::fs::write(dir.join(format!("{}.msg", md5_hex(topic))), payload).unwrap();
    }
    std::fs::write(dir.join("index"), index).unwrap();
}

/// A stream segment's `meta.N`: count, first offset, first and last timestamps.
pub fn write_stream_meta(dir: &Path, id: u32, count: u32, first_offset: i64, ts: i64) {
    let mut m = count.to_le_bytes().to_vec();
    m.extend(first_offset.to_le_bytes());
    m.extend(ts.to_le_bytes());
    m.extend(ts.to_le_bytes());
    std::fs::write(dir.join(format!("meta.{id:010}")), m).unwrap();
}

/// A stream's `consumer_offsets`: tag and the offset to read next, as
/// LavinMQ appends them (the last entry of a tag wins).
pub fn write_consumer_offsets(dir: &Path, entries: &[(&str, i64)]) {
    let mut f = Vec::new();
    for (tag, offset) in entries {
        short(&mut f, tag);
        f.extend(offset.to_le_bytes());
    }
    f.resize(f.len() + 256, 0);
    std::fs::write(dir.join("consumer_offsets"), f).unwrap();
}
