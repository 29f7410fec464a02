//! RabbitMQ 4's management node at `/management`: HTTP over AMQP 1.0 on a
//! pair of links with one name. Each request is a message whose `to` is a
//! path (`/queues/Q`, `/exchanges/X`, `/bindings`), whose `subject` is the
//! HTTP method and whose body is an amqp-value map; the answer carries the
//! status code as its subject and the request's message-id as its
//! correlation-id. RabbitMQ 4's own clients declare their topology this way.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;

use super::address::Address;
use super::codec::types::{Descriptor, Value, encode_described_list};
use super::message::{from_field, to_field};
use super::session::SessionShared;
use crate::core::exchange::Destination;
use crate::core::permissions::{Access, Compiled};
use crate::core::vhost::{ExchangeOptions, QueueOptions, VHost};
use crate::wire::{FieldTable, FieldValue};

/// A management request as it arrived.
struct Request {
    message_id: Value,
    path: String,
    method: String,
    body: Value,
}

/// An answer: status code and amqp-value body.
struct Response {
    status: u16,
    body: Value,
}

fn error(status: u16, text: impl Into<String>) -> Response {
    Response {
        status,
        body: Value::String(text.into()),
    }
}

fn ok(status: u16, body: Value) -> Response {
    Response { status, body }
}

/// What requests act with: the connection's vhost, user and permissions.
pub struct Requester<'a> {
    /// The connection's vhost.
    pub vhost: &'a VHost,
    /// The user.
    pub user: &'a str,
    /// The user's permissions.
    pub perms: &'a Compiled,
    /// The connection, owner of the exclusive queues it declares.
    pub conn_id: u64,
}

/// Reads the request's properties and amqp-value body.
fn parse_request(payload: &[u8]) -> Option<Request> {
    let mut rest = payload;
    let mut props: Option<Vec<Value>> = None;
    let mut body = Value::Null;
    while !rest.is_empty() {
        let v = Value::decode(&mut rest).ok()?;
        let Value::Described(d, inner) = v else { return None };
        match (*d, *inner) {
            (Descriptor::Code(0x73), Value::List(items)) => props = Some(items),
            (Descriptor::Code(0x77), value) => body = value,
            _ => {}
        }
    }
    let props = props?;
    let at = |i: usize| props.get(i).cloned().unwrap_or(Value::Null);
    Some(Request {
        message_id: at(0),
        path: at(2).as_str()?.to_owned(),
        method: at(3).as_str()?.to_owned(),
        body,
    })
}

/// The encoded answer to a request (properties, application-properties and
/// an amqp-value body).
fn encode_response(correlation_id: Value, r: Response) -> Bytes {
    let mut out = BytesMut::new();
    encode_described_list(
        0x73,
        &[
            Value::Null,
            Value::Null,
            Value::Null,
            Value::String(r.status.to_string()),
            Value::Null,
            correlation_id,
        ],
        &mut out,
    );
    out.put_slice(&[0x00, 0x53, 0x74]);
    Value::Map(vec![(
        Value::String("http:response".into()),
        Value::String("1.1".into()),
    )])
    .encode(&mut out);
    out.put_slice(&[0x00, 0x53, 0x77]);
    r.body.encode(&mut out);
    out.freeze()
}

/// Handles one request message; None when it is not a request at all.
pub fn handle(rq: &Requester<'_>, payload: &[u8]) -> Option<Bytes> {
    let req = parse_request(payload)?;
    let response = route(rq, &req);
    if response.status >= 400 {
        tracing::warn!(
            "management request {} {} failed: {:?}",
            req.method,
            req.path,
            response.body.as_str()
        );
    }
    Some(encode_response(req.message_id, response))
}

fn map_get<'a>(m: &'a Value, key: &str) -> Option<&'a Value> {
    match m {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
        _ => None,
    }
}

fn arguments(m: &Value) -> Result<FieldTable, Response> {
    let mut t = FieldTable::default();
    match map_get(m, "arguments") {
        None | Some(Value::Null) => {}
        Some(Value::Map(pairs)) => {
            for (k, v) in pairs {
                let (Some(k), Some(v)) = (k.as_str(), to_field(v)) else {
                    return Err(error(400, format!("unsupported argument {k:?}")));
                };
                t.insert(k, v);
            }
        }
        Some(_) => return Err(error(400, "arguments must be a map")),
    }
    Ok(t)
}

fn flag(m: &Value, key: &str, default: bool) -> Result<bool, Response> {
    match map_get(m, key) {
        None => Ok(default),
        Some(v) => v
            .as_bool()
            .ok_or_else(|| error(400, format!("'{key}' must be a boolean"))),
    }
}

fn table_value(t: &FieldTable) -> Value {
    Value::Map(
        t.iter()
            .filter_map(|(k, v)| Some((Value::String(k.to_string()), from_field(v)?)))
            .collect(),
    )
}

/// Decodes a percent-encoded path segment.
fn segment(s: &str) -> Result<String, Response> {
    match Address::parse(&format!("/queues/{s}")) {
        Ok(Address::Queue(name)) => Ok(name),
        _ => Err(error(400, format!("bad path segment '{s}'"))),
    }
}

/// The status a core error answers with.
fn core_status(e: &crate::core::Error) -> Response {
    use crate::core::Error as E;
    let status = match e {
        E::NotFound(_) => 404,
        E::AccessRefused(_) => 403,
        E::PreconditionFailed(_) => 409,
        E::ResourceLocked(_) => 409,
        E::ResourceError(_) => 403,
        _ => 400,
    };
    error(status, e.text())
}

fn check(rq: &Requester<'_>, access: Access, kind: &str, name: &str) -> Result<(), Response> {
    rq.perms
        .check(access, kind, name, &rq.vhost.name, rq.user)
        .map_err(|e| core_status(&e))
}

fn reserved(name: &str, kind: &str) -> Result<(), Response> {
    if name.starts_with("amq.") {
        return Err(error(
            403,
            format!("{kind} '{name}' starts with reserved prefix 'amq.'"),
        ));
    }
    if name.contains('\n') || name.contains('\r') {
        return Err(error(
            400,
            format!("Bad name '{name}': line feed and carriage return characters not allowed"),
        ));
    }
    Ok(())
}

fn route(rq: &Requester<'_>, req: &Request) -> Response {
    let (path, query) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let result = match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["queues", q]) => segment(q).and_then(|q| get_queue(rq, &q)),
        ("PUT", ["queues", q]) => segment(q).and_then(|q| declare_queue(rq, &q, &req.body)),
        ("DELETE", ["queues", q, "messages"]) => segment(q).and_then(|q| purge_queue(rq, &q)),
        ("DELETE", ["queues", q]) => segment(q).and_then(|q| delete_queue(rq, &q)),
        ("PUT", ["exchanges", x]) => segment(x).and_then(|x| declare_exchange(rq, &x, &req.body)),
        ("DELETE", ["exchanges", x]) => segment(x).and_then(|x| delete_exchange(rq, &x)),
        ("POST", ["bindings"]) => bind(rq, &req.body),
        ("DELETE", ["bindings", b]) => unbind(rq, b),
        ("GET", ["bindings"]) => list_bindings(rq, query),
        _ => Err(error(400, format!("unsupported request {} {}", req.method, req.path))),
    };
    result.unwrap_or_else(|e| e)
}

fn queue_value(rq: &Requester<'_>, q: &crate::core::queue::Queue) -> Value {
    let (messages, consumers) = q.counts();
    let args = q.arguments();
    let kind = args
        .get("x-queue-type")
        .and_then(FieldValue::as_str)
        .unwrap_or("classic")
        .to_owned();
    let s = |v: &str| Value::String(v.to_owned());
    Value::Map(vec![
        (s("message_count"), Value::Ulong(messages)),
        (s("consumer_count"), Value::Uint(consumers)),
        (s("name"), s(&q.name)),
        (s("vhost"), s(&rq.vhost.name)),
        (s("durable"), Value::Bool(q.durable)),
        (s("auto_delete"), Value::Bool(q.auto_delete)),
        (s("exclusive"), Value::Bool(q.exclusive_owner.is_some())),
        (s("type"), s(&kind)),
        (s("arguments"), table_value(&args)),
        (s("leader"), s("lavinmq")),
        (s("replicas"), Value::Array(vec![s("lavinmq")])),
    ])
}

fn get_queue(rq: &Requester<'_>, name: &str) -> Result<Response, Response> {
    let q = rq
        .vhost
        .queue(name)
        .ok_or_else(|| error(404, format!("queue '{name}' in vhost '{}' not found", rq.vhost.name)))?;
    Ok(ok(200, queue_value(rq, &q)))
}

fn declare_queue(rq: &Requester<'_>, name: &str, body: &Value) -> Result<Response, Response> {
    if name.is_empty() {
        return Err(error(400, "declare queue with empty name not allowed"));
    }
    reserved(name, "queue")?;
    let opts = QueueOptions {
        durable: flag(body, "durable", true)?,
        exclusive: flag(body, "exclusive", false)?,
        auto_delete: flag(body, "auto_delete", false)?,
        passive: false,
    };
    let args = arguments(body)?;
    check(rq, Access::Configure, "queue", name)?;
    if let Some(dlx) = args.get("x-dead-letter-exchange").and_then(FieldValue::as_str) {
        check(rq, Access::Read, "queue", name)?;
        check(rq, Access::Write, "exchange", dlx)?;
    }
    let existed = rq.vhost.queue(name).is_some();
    rq.vhost
        .declare_queue(name, &opts, args, rq.conn_id)
        .map_err(|e| core_status(&e))?;
    let q = rq
        .vhost
        .queue(name)
        .ok_or_else(|| error(404, "queue deleted meanwhile"))?;
    Ok(ok(if existed { 200 } else { 201 }, queue_value(rq, &q)))
}

fn purge_queue(rq: &Requester<'_>, name: &str) -> Result<Response, Response> {
    check(rq, Access::Read, "queue", name)?;
    let n = rq.vhost.purge_queue(name, rq.conn_id).map_err(|e| core_status(&e))?;
    Ok(ok(
        200,
        Value::Map(vec![(Value::String("message_count".into()), Value::Ulong(n))]),
    ))
}

fn delete_queue(rq: &Requester<'_>, name: &str) -> Result<Response, Response> {
    check(rq, Access::Configure, "queue", name)?;
    let n = rq
        .vhost
        .delete_queue(name, false, false, Some(rq.conn_id))
        .map_err(|e| core_status(&e))?;
    Ok(ok(
        200,
        Value::Map(vec![(Value::String("message_count".into()), Value::Ulong(n))]),
    ))
}

fn declare_exchange(rq: &Requester<'_>, name: &str, body: &Value) -> Result<Response, Response> {
    if name.is_empty() {
        return Err(error(403, "operation not permitted on the default exchange"));
    }
    let kind = match map_get(body, "type") {
        None => "direct",
        Some(v) => v.as_str().ok_or_else(|| error(400, "'type' must be a string"))?,
    };
    let opts = ExchangeOptions {
        durable: flag(body, "durable", true)?,
        auto_delete: flag(body, "auto_delete", false)?,
        internal: flag(body, "internal", false)?,
        passive: false,
    };
    let args = arguments(body)?;
    check(rq, Access::Configure, "exchange", name)?;
    if rq.vhost.exchange(name).is_none() {
        reserved(name, "exchange")?;
    }
    rq.vhost
        .declare_exchange(name, kind, &opts, args)
        .map_err(|e| core_status(&e))?;
    Ok(ok(204, Value::Null))
}

fn delete_exchange(rq: &Requester<'_>, name: &str) -> Result<Response, Response> {
    if name.is_empty() {
        return Err(error(403, "operation not permitted on the default exchange"));
    }
    reserved(name, "exchange")?;
    check(rq, Access::Configure, "exchange", name)?;
    match rq.vhost.delete_exchange(name, false) {
        Ok(()) | Err(crate::core::Error::NotFound(_)) => Ok(ok(204, Value::Null)),
        Err(e) => Err(core_status(&e)),
    }
}

/// A binding's destination: a queue (true) or an exchange, and its name.
fn binding_checks(rq: &Requester<'_>, source: &str, queue: bool, dest: &str) -> Result<(), Response> {
    if source.is_empty() || dest.is_empty() {
        return Err(error(403, "operation not permitted on the default exchange"));
    }
    check(rq, Access::Write, if queue { "queue" } else { "exchange" }, dest)?;
    check(rq, Access::Read, "exchange", source)
}

fn bind(rq: &Requester<'_>, body: &Value) -> Result<Response, Response> {
    let text = |key: &str| map_get(body, key).and_then(Value::as_str).map(str::to_owned);
    let source = text("source").ok_or_else(|| error(400, "binding without 'source'"))?;
    let key = text("binding_key").unwrap_or_default();
    let args = arguments(body)?;
    let result = match (text("destination_queue"), text("destination_exchange")) {
        (Some(q), _) => {
            binding_checks(rq, &source, true, &q)?;
            rq.vhost.bind_queue(&q, &source, &key, args, Some(rq.conn_id))
        }
        (None, Some(x)) => {
            binding_checks(rq, &source, false, &x)?;
            rq.vhost.bind_exchange(&x, &source, &key, args)
        }
        (None, None) => return Err(error(400, "binding without destination")),
    };
    result.map_err(|e| core_status(&e))?;
    Ok(ok(204, Value::Null))
}

/// Our stand-in for RabbitMQ's hash of binding arguments in binding paths:
/// empty without arguments, as RabbitMQ's, so that clients that build the
/// path themselves (always without arguments) find the binding.
fn args_hash(args: &FieldTable) -> String {
    if args.is_empty() {
        return String::new();
    }
    let mut h: u32 = 0x811c_9dc5;
    for (k, v) in args.iter() {
        for b in k.as_bytes().iter().chain(format!("{v:?}").as_bytes()) {
            h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
        }
    }
    format!("{h:08x}")
}

fn unbind(rq: &Requester<'_>, path_segment: &str) -> Result<Response, Response> {
    let mut src = None;
    let mut dst = None;
    let mut key = None;
    let mut hash = None;
    for part in path_segment.split(';') {
        match part.split_once('=') {
            Some(("src", v)) => src = Some(segment(v)?),
            Some(("dstq", v)) => dst = Some((true, segment(v)?)),
            Some(("dste", v)) => dst = Some((false, segment(v)?)),
            Some(("key", v)) => key = Some(if v.is_empty() { String::new() } else { segment(v)? }),
            Some(("args", v)) => hash = Some(v.to_owned()),
            _ => return Err(error(400, format!("bad binding path segment '{path_segment}'"))),
        }
    }
    let (Some(source), Some((queue, dest)), Some(key)) = (src, dst, key) else {
        return Err(error(400, format!("bad binding path segment '{path_segment}'")));
    };
    binding_checks(rq, &source, queue, &dest)?;
    let hash = hash.unwrap_or_default();
    let Some(x) = rq.vhost.exchange(&source) else {
        return Ok(ok(204, Value::Null));
    };
    let found = x.bindings().into_iter().find(|b| {
        b.routing_key == key
            && args_hash(&b.arguments) == hash
            && match &b.destination {
                Destination::Queue(q) => queue && q.name == dest,
                Destination::Exchange(e) => !queue && e.name == dest,
            }
    });
    if let Some(b) = found {
        let result = if queue {
            rq.vhost.unbind_queue(&dest, &source, &key, &b.arguments, rq.conn_id)
        } else {
            rq.vhost.unbind_exchange(&dest, &source, &key, &b.arguments)
        };
        result.map_err(|e| core_status(&e))?;
    }
    Ok(ok(204, Value::Null))
}

fn list_bindings(rq: &Requester<'_>, query: &str) -> Result<Response, Response> {
    let mut src = None;
    let mut dst = None;
    let mut key = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "src" => src = Some(v.into_owned()),
            "dstq" => dst = Some((true, v.into_owned())),
            "dste" => dst = Some((false, v.into_owned())),
            "key" => key = Some(v.into_owned()),
            _ => {}
        }
    }
    let (Some(source), Some(key)) = (src, key) else {
        return Err(error(400, "query needs 'src' and 'key'"));
    };
    let Some((queue, dest)) = dst else {
        return Err(error(400, "missing 'dste' or 'dstq' in query"));
    };
    let s = |v: &str| Value::String(v.to_owned());
    let found = rq
        .vhost
        .exchange(&source)
        .map(|x| x.bindings())
        .unwrap_or_default()
        .into_iter()
        .filter(|b| {
            b.routing_key == key
                && match &b.destination {
                    Destination::Queue(q) => queue && q.name == dest,
                    Destination::Exchange(e) => !queue && e.name == dest,
                }
        })
        .map(|b| {
            let (kind, c) = if queue {
                ("destination_queue", 'q')
            } else {
                ("destination_exchange", 'e')
            };
            let enc = |v: &str| form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>();
            let location = format!(
                "/bindings/src={};dst{c}={};key={};args={}",
                enc(&source),
                enc(&dest),
                enc(&key),
                args_hash(&b.arguments)
            );
            Value::Map(vec![
                (s("source"), s(&source)),
                (s(kind), s(&dest)),
                (s("binding_key"), s(&key)),
                (s("arguments"), table_value(&b.arguments)),
                (s("location"), s(&location)),
            ])
        })
        .collect();
    Ok(ok(200, Value::List(found)))
}

/// The link on which a client receives management answers: answers wait
/// for its credit.
pub struct ReplyLink {
    /// The link's handle.
    pub handle: u32,
    /// The link's name, which the paired request link shares.
    pub name: String,
    session: Arc<SessionShared>,
    state: Mutex<ReplyState>,
}

#[derive(Default)]
struct ReplyState {
    credit: u32,
    delivery_count: u32,
    waiting: VecDeque<Bytes>,
}

impl ReplyLink {
    /// A reply link on `handle` of `session`.
    pub fn new(handle: u32, name: String, session: Arc<SessionShared>) -> Arc<ReplyLink> {
        Arc::new(ReplyLink {
            handle,
            name,
            session,
            state: Mutex::new(ReplyState::default()),
        })
    }

    /// Queues an answer and sends what the credit allows.
    pub fn push(&self, answer: Bytes) {
        self.state.lock().waiting.push_back(answer);
        self.pump();
    }

    /// The client's flow: returns the delivery count and credit after it.
    pub fn grant(&self, delivery_count: Option<u32>, link_credit: u32) -> (u32, u32) {
        {
            let mut s = self.state.lock();
            let theirs = delivery_count.unwrap_or(s.delivery_count);
            s.credit = theirs
                .wrapping_add(link_credit)
                .wrapping_sub(s.delivery_count)
                .min(link_credit);
        }
        self.pump();
        let s = self.state.lock();
        (s.delivery_count, s.credit)
    }

    fn pump(&self) {
        let mut s = self.state.lock();
        while s.credit > 0 {
            let Some(answer) = s.waiting.pop_front() else { break };
            s.credit -= 1;
            s.delivery_count = s.delivery_count.wrapping_add(1);
            self.session
                .send_message(self.handle, true, |out| out.put_slice(&answer), |_| None);
        }
    }
}

/// An answer held until the definition change it reports is synced (and,
/// clustered, replicated), as 0-9-1's `-ok` replies are.
struct HeldAnswer {
    link: Arc<ReplyLink>,
    answer: Mutex<Option<Bytes>>,
}

impl crate::store::SyncWaiter for HeldAnswer {
    fn synced(&self, _token: u64, ok: bool) {
        let Some(answer) = self.answer.lock().take() else {
            return;
        };
        if ok {
            self.link.push(answer);
            self.link.session.outbox.flush();
        } else {
            tracing::warn!("a definition change was not synced; no answer sent");
        }
    }
}

/// Sends `answer` on `link` once the definitions log as written so far is
/// durable (see [`crate::amqp::durable_reply::send_when_durable`]).
pub fn answer_when_durable(sync: &crate::store::GroupSync, link: Arc<ReplyLink>, answer: Bytes) {
    let waiter: Arc<dyn crate::store::SyncWaiter> = Arc::new(HeldAnswer {
        link,
        answer: Mutex::new(Some(answer)),
    });
    sync.register_for_files(&waiter, 0);
}
