//! The performatives of AMQP 1.0 (open, begin, attach, flow, transfer,
//! disposition, detach, end, close), the SASL frames, and the delivery states
//! and errors they carry: decoded from a frame body into structs, encoded
//! back as described lists.
//!
//! Decoding goes through [`Value`], which allocates a list per performative;
//! a transfer's payload stays a slice of the frame.

use bytes::{Bytes, BytesMut};

use super::types::{DecodeError, Value, encode_described_list};

/// Descriptor codes of the performatives and the types inside them.
pub mod code {
    /// open
    pub const OPEN: u64 = 0x10;
    /// begin
    pub const BEGIN: u64 = 0x11;
    /// attach
    pub const ATTACH: u64 = 0x12;
    /// flow
    pub const FLOW: u64 = 0x13;
    /// transfer
    pub const TRANSFER: u64 = 0x14;
    /// disposition
    pub const DISPOSITION: u64 = 0x15;
    /// detach
    pub const DETACH: u64 = 0x16;
    /// end
    pub const END: u64 = 0x17;
    /// close
    pub const CLOSE: u64 = 0x18;
    /// error
    pub const ERROR: u64 = 0x1d;
    /// received (delivery state)
    pub const RECEIVED: u64 = 0x23;
    /// accepted outcome
    pub const ACCEPTED: u64 = 0x24;
    /// rejected outcome
    pub const REJECTED: u64 = 0x25;
    /// released outcome
    pub const RELEASED: u64 = 0x26;
    /// modified outcome
    pub const MODIFIED: u64 = 0x27;
    /// source terminus
    pub const SOURCE: u64 = 0x28;
    /// target terminus
    pub const TARGET: u64 = 0x29;
    /// transaction coordinator (a target)
    pub const COORDINATOR: u64 = 0x30;
    /// sasl-mechanisms
    pub const SASL_MECHANISMS: u64 = 0x40;
    /// sasl-init
    pub const SASL_INIT: u64 = 0x41;
    /// sasl-challenge
    pub const SASL_CHALLENGE: u64 = 0x42;
    /// sasl-response
    pub const SASL_RESPONSE: u64 = 0x43;
    /// sasl-outcome
    pub const SASL_OUTCOME: u64 = 0x44;
}

/// Why a frame body is not a performative we understand.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PerformativeError {
    /// The bytes are not valid AMQP 1.0 encoding.
    #[error("{0}")]
    Decode(#[from] DecodeError),
    /// Valid encoding, but not a performative (or a field has the wrong type).
    #[error("{0}")]
    Invalid(String),
}

type Result<T> = std::result::Result<T, PerformativeError>;

fn invalid(what: impl Into<String>) -> PerformativeError {
    PerformativeError::Invalid(what.into())
}

/// The fields of a described list, read by position; missing trailing
/// fields read as null, as the standard allows.
struct Fields(Vec<Value>);

const NULL: Value = Value::Null;

impl Fields {
    fn get(&self, i: usize) -> &Value {
        self.0.get(i).unwrap_or(&NULL)
    }

    fn take(&mut self, i: usize) -> Value {
        self.0
            .get_mut(i)
            .map(|v| std::mem::replace(v, Value::Null))
            .unwrap_or(Value::Null)
    }

    fn opt_u32(&self, i: usize, name: &str) -> Result<Option<u32>> {
        match self.get(i) {
            Value::Null => Ok(None),
            v => v
                .as_u32()
                .map(Some)
                .ok_or_else(|| invalid(format!("{name} is not a uint"))),
        }
    }

    fn u32_or(&self, i: usize, name: &str, default: u32) -> Result<u32> {
        Ok(self.opt_u32(i, name)?.unwrap_or(default))
    }

    fn req_u32(&self, i: usize, name: &str) -> Result<u32> {
        self.opt_u32(i, name)?
            .ok_or_else(|| invalid(format!("{name} is mandatory")))
    }

    fn bool_or(&self, i: usize, name: &str, default: bool) -> Result<bool> {
        match self.get(i) {
            Value::Null => Ok(default),
            v => v.as_bool().ok_or_else(|| invalid(format!("{name} is not a boolean"))),
        }
    }

    fn opt_string(&self, i: usize, name: &str) -> Result<Option<String>> {
        match self.get(i) {
            Value::Null => Ok(None),
            v => v
                .as_str()
                .map(|s| Some(s.to_owned()))
                .ok_or_else(|| invalid(format!("{name} is not a string"))),
        }
    }

    fn opt_u8(&self, i: usize, name: &str) -> Result<Option<u8>> {
        match self.opt_u32(i, name)? {
            None => Ok(None),
            Some(v) => u8::try_from(v)
                .map(Some)
                .map_err(|_| invalid(format!("{name} out of range"))),
        }
    }
}

/// Reads the described list with descriptor `expect` (or any, when None) at
/// the front of `buf`; returns its code and fields.
fn described_list(buf: &mut &[u8]) -> Result<(u64, Fields)> {
    let v = Value::decode(buf)?;
    let Value::Described(d, body) = v else {
        return Err(invalid("expected a described type"));
    };
    let code = match *d {
        super::types::Descriptor::Code(c) => c,
        super::types::Descriptor::Name(n) => return Err(invalid(format!("unexpected descriptor {n}"))),
    };
    match *body {
        Value::List(items) => Ok((code, Fields(items))),
        _ => Err(invalid(format!("descriptor {code:#x} does not describe a list"))),
    }
}

/// The `error` type: why a link, session or connection ended, or why an
/// attach or transfer was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct AmqpError {
    /// A symbol such as `amqp:not-found`.
    pub condition: String,
    /// Human-readable explanation.
    pub description: Option<String>,
}

impl AmqpError {
    /// An error with a condition and a description.
    pub fn new(condition: &str, description: impl Into<String>) -> Self {
        AmqpError {
            condition: condition.to_owned(),
            description: Some(description.into()),
        }
    }

    fn from_value(v: &Value) -> Option<Self> {
        let (c, body) = v.described_code()?;
        if c != code::ERROR {
            return None;
        }
        let Value::List(items) = body else { return None };
        let f = |i: usize| items.get(i).and_then(|v| v.as_str()).map(str::to_owned);
        Some(AmqpError {
            condition: f(0).unwrap_or_default(),
            description: f(1),
        })
    }

    fn to_value(&self) -> Value {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        let mut slice = &out[..];
        Value::decode(&mut slice).unwrap_or(Value::Null)
    }

    /// Appends the described list.
    pub fn encode(&self, out: &mut BytesMut) {
        let description = self.description.clone().map_or(Value::Null, Value::String);
        encode_described_list(code::ERROR, &[Value::Symbol(self.condition.clone()), description], out);
    }
}

/// The state of a delivery: the outcomes a receiver settles with.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryState {
    /// Processed: the message is done with.
    Accepted,
    /// Invalid: dead-lettered or dropped.
    Rejected(Option<AmqpError>),
    /// Not processed: back to the queue as it was.
    Released,
    /// Not processed, with changes: requeued, or dead-lettered when
    /// `undeliverable_here`.
    Modified {
        /// Count the attempt as a failed delivery.
        delivery_failed: bool,
        /// Do not hand it to this receiver again.
        undeliverable_here: bool,
        /// Annotations to merge into the message's.
        annotations: Option<Value>,
    },
    /// Partial progress (resuming links), which we do not act on.
    Received,
}

impl DeliveryState {
    /// Reads a delivery state; null is none.
    pub fn from_value(v: &Value) -> Result<Option<Self>> {
        if v.is_null() {
            return Ok(None);
        }
        let Some((c, body)) = v.described_code() else {
            return Err(invalid("delivery state is not a described type"));
        };
        let items: &[Value] = match body {
            Value::List(items) => items,
            _ => &[],
        };
        let at = |i: usize| items.get(i).unwrap_or(&NULL);
        Ok(Some(match c {
            code::ACCEPTED => DeliveryState::Accepted,
            code::REJECTED => DeliveryState::Rejected(AmqpError::from_value(at(0))),
            code::RELEASED => DeliveryState::Released,
            code::MODIFIED => DeliveryState::Modified {
                delivery_failed: at(0).as_bool().unwrap_or(false),
                undeliverable_here: at(1).as_bool().unwrap_or(false),
                annotations: (!at(2).is_null()).then(|| at(2).clone()),
            },
            code::RECEIVED => DeliveryState::Received,
            other => return Err(invalid(format!("unknown delivery state {other:#x}"))),
        }))
    }

    /// Appends the described list.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            DeliveryState::Accepted => encode_described_list(code::ACCEPTED, &[], out),
            DeliveryState::Released => encode_described_list(code::RELEASED, &[], out),
            DeliveryState::Received => encode_described_list(code::RECEIVED, &[Value::Uint(0), Value::Ulong(0)], out),
            DeliveryState::Rejected(e) => {
                let e = e.as_ref().map_or(Value::Null, AmqpError::to_value);
                encode_described_list(code::REJECTED, &[e], out)
            }
            DeliveryState::Modified {
                delivery_failed,
                undeliverable_here,
                annotations,
            } => encode_described_list(
                code::MODIFIED,
                &[
                    Value::Bool(*delivery_failed),
                    Value::Bool(*undeliverable_here),
                    annotations.clone().unwrap_or(Value::Null),
                ],
                out,
            ),
        }
    }

    fn to_value(&self) -> Value {
        let mut out = BytesMut::new();
        self.encode(&mut out);
        let mut slice = &out[..];
        Value::decode(&mut slice).unwrap_or(Value::Null)
    }
}

/// open: the connection's parameters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Open {
    /// The peer's container id.
    pub container_id: String,
    /// The host the client wants; RabbitMQ reads `vhost:NAME` from it.
    pub hostname: Option<String>,
    /// Largest frame the sender of the open accepts.
    pub max_frame_size: u32,
    /// Highest channel number the sender accepts.
    pub channel_max: u16,
    /// Milliseconds of silence after which the sender closes.
    pub idle_time_out: Option<u32>,
    /// Properties of the connection (product, version, ...).
    pub properties: Option<Value>,
}

/// begin: a session on a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Begin {
    /// Set when answering a begin: the peer's channel.
    pub remote_channel: Option<u16>,
    /// The id of the next transfer the sender sends.
    pub next_outgoing_id: u32,
    /// Transfers the sender can take now.
    pub incoming_window: u32,
    /// Transfers the sender may send now.
    pub outgoing_window: u32,
    /// Highest link handle the sender accepts.
    pub handle_max: u32,
}

/// Which end of a link the attach comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends messages (false on the wire).
    Sender,
    /// Receives messages (true on the wire).
    Receiver,
}

impl Role {
    fn from_bool(b: bool) -> Self {
        if b { Role::Receiver } else { Role::Sender }
    }

    fn to_bool(self) -> bool {
        self == Role::Receiver
    }
}

/// attach: a link on a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Attach {
    /// Link name, unique per pair of containers and direction.
    pub name: String,
    /// Handle the sender of the attach uses for the link.
    pub handle: u32,
    /// The sender of the attach's end.
    pub role: Role,
    /// 0 unsettled, 1 settled, 2 mixed.
    pub snd_settle_mode: u8,
    /// 0 first, 1 second.
    pub rcv_settle_mode: u8,
    /// The source terminus, kept whole to echo.
    pub source: Option<Value>,
    /// The target terminus, kept whole to echo.
    pub target: Option<Value>,
    /// Set by senders: the delivery count they start with.
    pub initial_delivery_count: Option<u32>,
    /// Largest message the sender of the attach accepts.
    pub max_message_size: Option<u64>,
    /// Properties of the link.
    pub properties: Option<Value>,
}

/// The fields of a source or target terminus we read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Terminus {
    /// The node's address.
    pub address: Option<String>,
    /// A node the peer asks us to create.
    pub dynamic: bool,
    /// The filter map of a source.
    pub filter: Option<Value>,
    /// Capabilities of the terminus.
    pub capabilities: Option<Value>,
}

impl Terminus {
    /// Reads a source (`is_source`) or target from its described list.
    pub fn parse(v: &Value, is_source: bool) -> Option<Terminus> {
        let (_, body) = v.described_code()?;
        let Value::List(items) = body else { return None };
        let at = |i: usize| items.get(i).unwrap_or(&NULL);
        Some(Terminus {
            address: at(0).as_str().map(str::to_owned),
            dynamic: at(4).as_bool().unwrap_or(false),
            filter: (is_source && !at(7).is_null()).then(|| at(7).clone()),
            capabilities: {
                let i = if is_source { 10 } else { 6 };
                (!at(i).is_null()).then(|| at(i).clone())
            },
        })
    }

    /// A source or target with just an address.
    pub fn with_address(address: Option<&str>, is_source: bool) -> Value {
        let mut out = BytesMut::new();
        let a = address.map_or(Value::Null, |a| Value::String(a.to_owned()));
        encode_described_list(if is_source { code::SOURCE } else { code::TARGET }, &[a], &mut out);
        let mut slice = &out[..];
        Value::decode(&mut slice).unwrap_or(Value::Null)
    }
}

/// flow: window and credit updates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flow {
    /// The next transfer id the sender of the flow expects.
    pub next_incoming_id: Option<u32>,
    /// Transfers the sender of the flow can take.
    pub incoming_window: u32,
    /// The id of the sender's next transfer.
    pub next_outgoing_id: u32,
    /// Transfers the sender may send.
    pub outgoing_window: u32,
    /// The link this flow is about, if any.
    pub handle: Option<u32>,
    /// The link's delivery count.
    pub delivery_count: Option<u32>,
    /// Credit the receiver grants.
    pub link_credit: Option<u32>,
    /// Messages the sender has available.
    pub available: Option<u32>,
    /// Use up the credit or give it back.
    pub drain: bool,
    /// Asks for a flow back.
    pub echo: bool,
}

/// transfer: a message, or one frame of a message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transfer {
    /// The link.
    pub handle: u32,
    /// Session-wide delivery id (first frame of a delivery).
    pub delivery_id: Option<u32>,
    /// Link-wide delivery tag (first frame).
    pub delivery_tag: Option<Bytes>,
    /// Message format (0 for AMQP messages).
    pub message_format: Option<u32>,
    /// Sent settled: no disposition follows.
    pub settled: Option<bool>,
    /// More frames of this delivery follow.
    pub more: bool,
    /// The delivery state, when set by the sender.
    pub state: Option<DeliveryState>,
    /// The sender gave up on this delivery.
    pub aborted: bool,
}

/// disposition: settles or updates a range of deliveries.
#[derive(Debug, Clone, PartialEq)]
pub struct Disposition {
    /// Which side's deliveries (the sender of the disposition's role).
    pub role: Role,
    /// First delivery id.
    pub first: u32,
    /// Last delivery id (first when absent).
    pub last: Option<u32>,
    /// The deliveries are settled.
    pub settled: bool,
    /// Their outcome.
    pub state: Option<DeliveryState>,
}

/// detach: a link ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Detach {
    /// The link.
    pub handle: u32,
    /// The link is closed, not just detached.
    pub closed: bool,
    /// Why.
    pub error: Option<AmqpError>,
}

/// A decoded AMQP-layer frame body.
#[derive(Debug, Clone, PartialEq)]
pub enum Performative {
    /// open
    Open(Open),
    /// begin
    Begin(Begin),
    /// attach
    Attach(Box<Attach>),
    /// flow
    Flow(Flow),
    /// transfer, with the payload after it in the frame
    Transfer(Transfer, Bytes),
    /// disposition
    Disposition(Disposition),
    /// detach
    Detach(Detach),
    /// end, with an error when the peer ended on one
    End(Option<AmqpError>),
    /// close, with an error when the peer closed on one
    Close(Option<AmqpError>),
}

impl Performative {
    /// Decodes a frame body.
    pub fn decode(body: &Bytes) -> Result<Performative> {
        // Transfers, one per message, mostly take the direct path.
        if let Some((t, payload)) = super::transfer::decode(body) {
            return Ok(Performative::Transfer(t, payload));
        }
        Self::decode_generic(body)
    }

    /// Decodes any performative through the value tree (what the direct
    /// path for transfers is checked against).
    pub fn decode_generic(body: &Bytes) -> Result<Performative> {
        let mut slice = &body[..];
        let (c, mut f) = described_list(&mut slice)?;
        Ok(match c {
            code::OPEN => Performative::Open(Open {
                container_id: f.opt_string(0, "container-id")?.unwrap_or_default(),
                hostname: f.opt_string(1, "hostname")?,
                max_frame_size: f.u32_or(2, "max-frame-size", u32::MAX)?,
                channel_max: u16::try_from(f.u32_or(3, "channel-max", 65535)?).unwrap_or(u16::MAX),
                idle_time_out: f.opt_u32(4, "idle-time-out")?,
                properties: Some(f.take(9)).filter(|v| !v.is_null()),
            }),
            code::BEGIN => Performative::Begin(Begin {
                remote_channel: f.opt_u32(0, "remote-channel")?.map(|c| c as u16),
                next_outgoing_id: f.req_u32(1, "next-outgoing-id")?,
                incoming_window: f.req_u32(2, "incoming-window")?,
                outgoing_window: f.req_u32(3, "outgoing-window")?,
                handle_max: f.u32_or(4, "handle-max", u32::MAX)?,
            }),
            code::ATTACH => Performative::Attach(Box::new(Attach {
                name: f.opt_string(0, "name")?.ok_or_else(|| invalid("name is mandatory"))?,
                handle: f.req_u32(1, "handle")?,
                role: Role::from_bool(f.bool_or(2, "role", false)?),
                snd_settle_mode: f.opt_u8(3, "snd-settle-mode")?.unwrap_or(2),
                rcv_settle_mode: f.opt_u8(4, "rcv-settle-mode")?.unwrap_or(0),
                source: Some(f.take(5)).filter(|v| !v.is_null()),
                target: Some(f.take(6)).filter(|v| !v.is_null()),
                initial_delivery_count: f.opt_u32(9, "initial-delivery-count")?,
                max_message_size: f.get(10).as_u64(),
                properties: Some(f.take(13)).filter(|v| !v.is_null()),
            })),
            code::FLOW => Performative::Flow(Flow {
                next_incoming_id: f.opt_u32(0, "next-incoming-id")?,
                incoming_window: f.req_u32(1, "incoming-window")?,
                next_outgoing_id: f.req_u32(2, "next-outgoing-id")?,
                outgoing_window: f.req_u32(3, "outgoing-window")?,
                handle: f.opt_u32(4, "handle")?,
                delivery_count: f.opt_u32(5, "delivery-count")?,
                link_credit: f.opt_u32(6, "link-credit")?,
                available: f.opt_u32(7, "available")?,
                drain: f.bool_or(8, "drain", false)?,
                echo: f.bool_or(9, "echo", false)?,
            }),
            code::TRANSFER => {
                let payload = body.slice(body.len() - slice.len()..);
                let settled = match f.get(4) {
                    Value::Null => None,
                    v => Some(v.as_bool().ok_or_else(|| invalid("settled is not a boolean"))?),
                };
                Performative::Transfer(
                    Transfer {
                        handle: f.req_u32(0, "handle")?,
                        delivery_id: f.opt_u32(1, "delivery-id")?,
                        delivery_tag: f.get(2).as_binary().cloned(),
                        message_format: f.opt_u32(3, "message-format")?,
                        settled,
                        more: f.bool_or(5, "more", false)?,
                        state: DeliveryState::from_value(f.get(7))?,
                        aborted: f.bool_or(9, "aborted", false)?,
                    },
                    payload,
                )
            }
            code::DISPOSITION => Performative::Disposition(Disposition {
                role: Role::from_bool(f.bool_or(0, "role", false)?),
                first: f.req_u32(1, "first")?,
                last: f.opt_u32(2, "last")?,
                settled: f.bool_or(3, "settled", false)?,
                state: DeliveryState::from_value(f.get(4))?,
            }),
            code::DETACH => Performative::Detach(Detach {
                handle: f.req_u32(0, "handle")?,
                closed: f.bool_or(1, "closed", false)?,
                error: AmqpError::from_value(f.get(2)),
            }),
            code::END => Performative::End(AmqpError::from_value(f.get(0))),
            code::CLOSE => Performative::Close(AmqpError::from_value(f.get(0))),
            other => return Err(invalid(format!("unknown performative {other:#x}"))),
        })
    }

    /// Appends the performative (not the payload of a transfer).
    pub fn encode(&self, out: &mut BytesMut) {
        let opt_u32 = |v: Option<u32>| v.map_or(Value::Null, Value::Uint);
        let err = |e: &Option<AmqpError>| e.as_ref().map_or(Value::Null, AmqpError::to_value);
        match self {
            Performative::Open(o) => encode_described_list(
                code::OPEN,
                &[
                    Value::String(o.container_id.clone()),
                    o.hostname.clone().map_or(Value::Null, Value::String),
                    Value::Uint(o.max_frame_size),
                    Value::Ushort(o.channel_max),
                    opt_u32(o.idle_time_out),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    o.properties.clone().unwrap_or(Value::Null),
                ],
                out,
            ),
            Performative::Begin(b) => encode_described_list(
                code::BEGIN,
                &[
                    b.remote_channel.map_or(Value::Null, Value::Ushort),
                    Value::Uint(b.next_outgoing_id),
                    Value::Uint(b.incoming_window),
                    Value::Uint(b.outgoing_window),
                    Value::Uint(b.handle_max),
                ],
                out,
            ),
            Performative::Attach(a) => encode_described_list(
                code::ATTACH,
                &[
                    Value::String(a.name.clone()),
                    Value::Uint(a.handle),
                    Value::Bool(a.role.to_bool()),
                    Value::Ubyte(a.snd_settle_mode),
                    Value::Ubyte(a.rcv_settle_mode),
                    a.source.clone().unwrap_or(Value::Null),
                    a.target.clone().unwrap_or(Value::Null),
                    Value::Null,
                    Value::Null,
                    opt_u32(a.initial_delivery_count),
                    a.max_message_size.map_or(Value::Null, Value::Ulong),
                    Value::Null,
                    Value::Null,
                    a.properties.clone().unwrap_or(Value::Null),
                ],
                out,
            ),
            Performative::Flow(f) => encode_described_list(
                code::FLOW,
                &[
                    opt_u32(f.next_incoming_id),
                    Value::Uint(f.incoming_window),
                    Value::Uint(f.next_outgoing_id),
                    Value::Uint(f.outgoing_window),
                    opt_u32(f.handle),
                    opt_u32(f.delivery_count),
                    opt_u32(f.link_credit),
                    opt_u32(f.available),
                    Value::Bool(f.drain),
                    Value::Bool(f.echo),
                ],
                out,
            ),
            Performative::Transfer(t, _) => encode_described_list(
                code::TRANSFER,
                &[
                    Value::Uint(t.handle),
                    opt_u32(t.delivery_id),
                    t.delivery_tag.clone().map_or(Value::Null, Value::Binary),
                    opt_u32(t.message_format),
                    t.settled.map_or(Value::Null, Value::Bool),
                    Value::Bool(t.more),
                    Value::Null,
                    t.state.as_ref().map_or(Value::Null, DeliveryState::to_value),
                    Value::Null,
                    Value::Bool(t.aborted),
                ],
                out,
            ),
            Performative::Disposition(d) => encode_described_list(
                code::DISPOSITION,
                &[
                    Value::Bool(d.role.to_bool()),
                    Value::Uint(d.first),
                    opt_u32(d.last),
                    Value::Bool(d.settled),
                    d.state.as_ref().map_or(Value::Null, DeliveryState::to_value),
                ],
                out,
            ),
            Performative::Detach(d) => encode_described_list(
                code::DETACH,
                &[Value::Uint(d.handle), Value::Bool(d.closed), err(&d.error)],
                out,
            ),
            Performative::End(e) => encode_described_list(code::END, &[err(e)], out),
            Performative::Close(e) => encode_described_list(code::CLOSE, &[err(e)], out),
        }
    }
}

/// A decoded SASL frame body.
#[derive(Debug, Clone, PartialEq)]
pub enum Sasl {
    /// The mechanisms the server offers.
    Mechanisms(Vec<String>),
    /// The client's choice, with its initial response.
    Init {
        /// Mechanism name.
        mechanism: String,
        /// Initial response (PLAIN: `authzid\0user\0password`).
        initial_response: Option<Bytes>,
        /// The host the client connects to.
        hostname: Option<String>,
    },
    /// A challenge or response, which no mechanism we offer uses.
    Other(u64),
    /// The result of the exchange: 0 ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp.
    Outcome(u8),
}

impl Sasl {
    /// Decodes a SASL frame body.
    pub fn decode(body: &Bytes) -> Result<Sasl> {
        let mut slice = &body[..];
        let (c, f) = described_list(&mut slice)?;
        Ok(match c {
            code::SASL_MECHANISMS => Sasl::Mechanisms(match f.get(0) {
                Value::Array(items) => items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect(),
                v => v.as_str().map(|s| vec![s.to_owned()]).unwrap_or_default(),
            }),
            code::SASL_INIT => Sasl::Init {
                mechanism: f
                    .opt_string(0, "mechanism")?
                    .ok_or_else(|| invalid("mechanism is mandatory"))?,
                initial_response: f.get(1).as_binary().cloned(),
                hostname: f.opt_string(2, "hostname")?,
            },
            code::SASL_OUTCOME => Sasl::Outcome(f.opt_u8(0, "code")?.unwrap_or(0)),
            other @ (code::SASL_CHALLENGE | code::SASL_RESPONSE) => Sasl::Other(other),
            other => return Err(invalid(format!("unknown SASL frame {other:#x}"))),
        })
    }

    /// Appends the described list.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Sasl::Mechanisms(m) => encode_described_list(
                code::SASL_MECHANISMS,
                &[Value::Array(m.iter().map(|s| Value::Symbol(s.clone())).collect())],
                out,
            ),
            Sasl::Init {
                mechanism,
                initial_response,
                hostname,
            } => encode_described_list(
                code::SASL_INIT,
                &[
                    Value::Symbol(mechanism.clone()),
                    initial_response.clone().map_or(Value::Null, Value::Binary),
                    hostname.clone().map_or(Value::Null, Value::String),
                ],
                out,
            ),
            Sasl::Other(c) => encode_described_list(*c, &[Value::Binary(Bytes::new())], out),
            Sasl::Outcome(c) => encode_described_list(code::SASL_OUTCOME, &[Value::Ubyte(*c)], out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(p: Performative) {
        let mut out = BytesMut::new();
        p.encode(&mut out);
        let back = Performative::decode(&out.freeze()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn performatives_round_trip() {
        round_trip(Performative::Open(Open {
            container_id: "c".into(),
            hostname: Some("vhost:/".into()),
            max_frame_size: 65536,
            channel_max: 255,
            idle_time_out: Some(60000),
            properties: None,
        }));
        round_trip(Performative::Begin(Begin {
            remote_channel: Some(0),
            next_outgoing_id: 1,
            incoming_window: 100,
            outgoing_window: 100,
            handle_max: 7,
        }));
        round_trip(Performative::Attach(Box::new(Attach {
            name: "l".into(),
            handle: 3,
            role: Role::Receiver,
            snd_settle_mode: 0,
            rcv_settle_mode: 0,
            source: Some(Terminus::with_address(Some("/queues/q"), true)),
            target: None,
            initial_delivery_count: Some(0),
            max_message_size: None,
            properties: None,
        })));
        round_trip(Performative::Flow(Flow {
            next_incoming_id: Some(1),
            incoming_window: 2,
            next_outgoing_id: 3,
            outgoing_window: 4,
            handle: Some(5),
            delivery_count: Some(6),
            link_credit: Some(7),
            available: None,
            drain: true,
            echo: false,
        }));
        round_trip(Performative::Disposition(Disposition {
            role: Role::Receiver,
            first: 1,
            last: Some(9),
            settled: true,
            state: Some(DeliveryState::Modified {
                delivery_failed: true,
                undeliverable_here: false,
                annotations: None,
            }),
        }));
        round_trip(Performative::Detach(Detach {
            handle: 1,
            closed: true,
            error: Some(AmqpError::new("amqp:not-found", "no queue")),
        }));
        round_trip(Performative::Close(None));
        round_trip(Performative::End(Some(AmqpError::new("amqp:internal-error", "x"))));
    }

    #[test]
    fn transfer_keeps_its_payload() {
        let mut out = BytesMut::new();
        super::super::transfer::encode(&mut out, 2, Some(5), Some(*b"tag!"), false, true);
        out.extend_from_slice(b"payload");
        let Performative::Transfer(t, payload) = Performative::decode(&out.freeze()).unwrap() else {
            panic!("not a transfer");
        };
        assert_eq!(
            (t.handle, t.delivery_id, t.more, t.settled),
            (2, Some(5), true, Some(false))
        );
        assert_eq!(t.delivery_tag.as_deref(), Some(&b"tag!"[..]));
        assert_eq!(&payload[..], b"payload");
    }

    #[test]
    fn sasl_round_trips() {
        for s in [
            Sasl::Mechanisms(vec!["PLAIN".into(), "ANONYMOUS".into()]),
            Sasl::Init {
                mechanism: "PLAIN".into(),
                initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
                hostname: None,
            },
            Sasl::Outcome(1),
        ] {
            let mut out = BytesMut::new();
            s.encode(&mut out);
            assert_eq!(Sasl::decode(&out.freeze()).unwrap(), s);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for body in [&b""[..], b"\x00", b"\x00\x53\x10", b"\x00\x53\x99\x45", b"\x45"] {
            assert!(Performative::decode(&Bytes::copy_from_slice(body)).is_err());
        }
    }
}
