//! Reading LavinMQ's per-vhost `definitions.amqp`: an `i32` version (1)
//! followed by AMQP method frames (`exchange.declare/delete/bind/unbind`,
//! `queue.declare/delete/bind/unbind`) whose integers are in the host's byte
//! order (little endian) while field-table contents keep network order.
//!
//! The log is replayed as LavinMQ replays it at start: the last declaration
//! of a name wins, a delete removes the entity and its bindings, an unbind
//! removes a matching bind. The result is RabbitMQ definitions JSON
//! (exchanges, queues and bindings), ready for the definitions import.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::core::table_json::table_to_json;
use crate::wire::FieldTable;

/// The live exchanges, queues and bindings of one vhost's log, as RabbitMQ
/// definitions items (each with its `vhost`).
#[derive(Debug, Default)]
pub struct VHostEntities {
    /// `exchanges` items.
    pub exchanges: Vec<Value>,
    /// `queues` items.
    pub queues: Vec<Value>,
    /// `bindings` items.
    pub bindings: Vec<Value>,
    /// Frames that could not be read (the rest of the log is ignored).
    pub damage: Option<String>,
}

/// Replays the log `data` of vhost `vhost`.
pub fn replay(vhost: &str, data: &[u8]) -> VHostEntities {
    let mut out = VHostEntities::default();
    if data.is_empty() {
        return out;
    }
    let mut r = Reader { data, pos: 0 };
    match r.i32() {
        Ok(1) => {}
        Ok(v) => {
            out.damage = Some(format!("unsupported definitions version {v}"));
            return out;
        }
        Err(e) => {
            out.damage = Some(e);
            return out;
        }
    }
    let mut exchanges: Vec<(String, Value)> = Vec::new();
    let mut queues: Vec<(String, Value)> = Vec::new();
    let mut bindings: Vec<Value> = Vec::new();
    while r.pos < data.len() {
        let frame = match r.frame() {
            Ok(f) => f,
            Err(e) => {
                out.damage = Some(format!("at byte {}: {e}", r.pos));
                break;
            }
        };
        match frame {
            Frame::ExchangeDeclare(name, v) => upsert(&mut exchanges, name, v),
            Frame::QueueDeclare(name, v) => upsert(&mut queues, name, v),
            Frame::ExchangeDelete(name) => {
                exchanges.retain(|(n, _)| *n != name);
                bindings.retain(|b| {
                    !(b["destination_type"] == "exchange" && b["destination"] == name.as_str())
                        && b["source"] != name.as_str()
                });
            }
            Frame::QueueDelete(name) => {
                queues.retain(|(n, _)| *n != name);
                bindings.retain(|b| !(b["destination_type"] == "queue" && b["destination"] == name.as_str()));
            }
            Frame::Bind(b) => {
                if !bindings.contains(&b) {
                    bindings.push(b);
                }
            }
            Frame::Unbind(b) => bindings.retain(|x| *x != b),
        }
    }
    let with_vhost = |mut v: Value| {
        v["vhost"] = json!(vhost);
        v
    };
    out.exchanges = exchanges.into_iter().map(|(_, v)| with_vhost(v)).collect();
    out.queues = queues.into_iter().map(|(_, v)| with_vhost(v)).collect();
    out.bindings = bindings.into_iter().map(with_vhost).collect();
    out
}

fn upsert(list: &mut Vec<(String, Value)>, name: String, v: Value) {
    match list.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = v,
        None => list.push((name, v)),
    }
}

enum Frame {
    ExchangeDeclare(String, Value),
    ExchangeDelete(String),
    QueueDeclare(String, Value),
    QueueDelete(String),
    Bind(Value),
    Unbind(Value),
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or("truncated frame")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(self.u32()? as i32)
    }

    fn short_str(&mut self) -> Result<String, String> {
        let len = self.u8()?;
        let raw = self.take(usize::from(len))?;
        String::from_utf8(raw.to_vec()).map_err(|_| "name is not UTF-8".to_string())
    }

    fn table(&mut self) -> Result<Value, String> {
        let len = self.u32()? as usize;
        let raw = self.take(len)?;
        let table = FieldTable::decode_body(Bytes::copy_from_slice(raw)).map_err(|e| format!("arguments: {e}"))?;
        Ok(table_to_json(&table))
    }

    /// One frame; the frame's own size bounds what its method may read.
    fn frame(&mut self) -> Result<Frame, String> {
        let kind = self.u8()?;
        let _channel = self.u16()?;
        let size = self.u32()? as usize;
        let start = self.pos;
        if kind != 1 {
            return Err(format!("unexpected frame type {kind}"));
        }
        let frame = self.method()?;
        let end = start.checked_add(size).ok_or("frame size out of range")?;
        if self.pos > end {
            return Err("method longer than its frame".into());
        }
        self.pos = end;
        if self.u8()? != 0xCE {
            return Err("missing frame end".into());
        }
        Ok(frame)
    }

    fn method(&mut self) -> Result<Frame, String> {
        let class = self.u16()?;
        let method = self.u16()?;
        let _reserved = self.u16()?;
        Ok(match (class, method) {
            (40, 10) => {
                let name = self.short_str()?;
                let kind = self.short_str()?;
                let bits = self.u8()?;
                let mut arguments = self.table()?;
                crate::core::consistent_hash::pin_lavinmq_algorithm(&kind, &mut arguments);
                let v = json!({"name": name, "type": kind, "durable": bits & 2 != 0,
                               "auto_delete": bits & 4 != 0, "internal": bits & 8 != 0, "arguments": arguments});
                Frame::ExchangeDeclare(name, v)
            }
            (40, 20) => Frame::ExchangeDelete(self.short_str()?),
            (40, 30) | (40, 40) => {
                let destination = self.short_str()?;
                let source = self.short_str()?;
                let routing_key = self.short_str()?;
                let _no_wait = self.u8()?;
                let arguments = self.table()?;
                let b = json!({"source": source, "destination": destination, "destination_type": "exchange",
                               "routing_key": routing_key, "arguments": arguments});
                if method == 30 { Frame::Bind(b) } else { Frame::Unbind(b) }
            }
            (50, 10) => {
                let name = self.short_str()?;
                let bits = self.u8()?;
                let arguments = self.table()?;
                let v = json!({"name": name, "durable": bits & 2 != 0, "auto_delete": bits & 8 != 0,
                               "arguments": arguments});
                Frame::QueueDeclare(name, v)
            }
            (50, 40) => Frame::QueueDelete(self.short_str()?),
            (50, 20) | (50, 50) => {
                let queue = self.short_str()?;
                let exchange = self.short_str()?;
                let routing_key = self.short_str()?;
                // queue.bind has a no-wait bit; queue.unbind has none.
                if method == 20 {
                    let _no_wait = self.u8()?;
                }
                let arguments = self.table()?;
                let b = json!({"source": exchange, "destination": queue, "destination_type": "queue",
                               "routing_key": routing_key, "arguments": arguments});
                if method == 20 { Frame::Bind(b) } else { Frame::Unbind(b) }
            }
            _ => return Err(format!("unexpected method {class}.{method}")),
        })
    }
}

/// Writes LavinMQ's frame encoding, for the tests below.
#[cfg(test)]
mod encode {
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

    pub fn short(s: &str) -> Vec<u8> {
        let mut v = vec![s.len() as u8];
        v.extend(s.as_bytes());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{frame, short};
    use super::*;

    fn empty_table() -> Vec<u8> {
        0u32.to_le_bytes().to_vec()
    }

    fn queue_declare(name: &str) -> Vec<u8> {
        let mut f = 0u16.to_le_bytes().to_vec();
        f.extend(short(name));
        f.push(2);
        f.extend(empty_table());
        frame(50, 10, &f)
    }

    fn queue_bind(q: &str, x: &str, rk: &str) -> Vec<u8> {
        let mut f = 0u16.to_le_bytes().to_vec();
        f.extend(short(q));
        f.extend(short(x));
        f.extend(short(rk));
        f.push(0);
        f.extend(empty_table());
        frame(50, 20, &f)
    }

    #[test]
    fn replays_declares_binds_and_deletes() {
        let mut log = 1i32.to_le_bytes().to_vec();
        log.extend(queue_declare("a"));
        log.extend(queue_declare("b"));
        log.extend(queue_bind("a", "amq.topic", "k"));
        log.extend(queue_bind("b", "amq.topic", "k"));
        let mut del = 0u16.to_le_bytes().to_vec();
        del.extend(short("b"));
        del.push(0);
        log.extend(frame(50, 40, &del));
        let out = replay("v", &log);
        assert_eq!(out.damage, None);
        assert_eq!(out.queues.len(), 1);
        assert_eq!(out.queues[0]["name"], "a");
        assert_eq!(out.queues[0]["vhost"], "v");
        assert_eq!(out.bindings.len(), 1);
        assert_eq!(out.bindings[0]["destination"], "a");
    }

    #[test]
    fn damaged_tail_keeps_what_came_before() {
        let mut log = 1i32.to_le_bytes().to_vec();
        log.extend(queue_declare("a"));
        let q = queue_declare("b");
        log.extend(&q[..q.len() - 4]);
        let out = replay("v", &log);
        assert_eq!(out.queues.len(), 1);
        assert!(out.damage.is_some());
    }
}
