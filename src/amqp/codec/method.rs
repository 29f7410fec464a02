//! Every AMQP 0-9-1 method (both directions) with its argument codec.
//!
//! Field names follow the 0-9-1 specification (with `-` turned into `_`,
//! `no-wait` spelled `nowait`). Reserved/deprecated arguments (`ticket`,
//! `capabilities`, `insist`, `known-hosts`, `out-of-band`, `channel-id`,
//! `cluster-id`) are read and discarded on decode and written as zero/empty,
//! except access.request-ok's ticket, written as 1 like RabbitMQ does.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::error::CodecError;
use crate::wire::primitives::{
    get_bits, get_longstr, get_shortstr, get_u8, get_u16, get_u32, get_u64, put_bits, put_longstr, put_shortstr,
};
use crate::wire::shortstr::ShortStr;
use crate::wire::table::FieldTable;

/// A decoded AMQP 0-9-1 method frame payload.
///
/// One variant per method of the specification plus RabbitMQ's extensions
/// (`connection.blocked/unblocked/update-secret`, `basic.nack`,
/// `confirm.*`), so the broker can match on what a client sent and build
/// replies with the same type.
#[allow(missing_docs)] // field meanings are those of the 0-9-1 specification
#[derive(Debug, Clone, PartialEq)]
pub enum Method {
    /// connection.start (10.10): server proposes protocol and auth mechanisms.
    ConnectionStart {
        version_major: u8,
        version_minor: u8,
        server_properties: FieldTable,
        mechanisms: Bytes,
        locales: Bytes,
    },
    /// connection.start-ok (10.11): client picks a mechanism and answers.
    ConnectionStartOk {
        client_properties: FieldTable,
        mechanism: ShortStr,
        response: Bytes,
        locale: ShortStr,
    },
    /// connection.secure (10.20): SASL challenge.
    ConnectionSecure { challenge: Bytes },
    /// connection.secure-ok (10.21): SASL response.
    ConnectionSecureOk { response: Bytes },
    /// connection.tune (10.30): server proposes limits.
    ConnectionTune {
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    },
    /// connection.tune-ok (10.31): client's agreed limits.
    ConnectionTuneOk {
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    },
    /// connection.open (10.40): select a virtual host.
    ConnectionOpen { virtual_host: ShortStr },
    /// connection.open-ok (10.41).
    ConnectionOpenOk,
    /// connection.close (10.50): either side closes with a reason.
    ConnectionClose {
        reply_code: u16,
        reply_text: ShortStr,
        class_id: u16,
        method_id: u16,
    },
    /// connection.close-ok (10.51).
    ConnectionCloseOk,
    /// connection.blocked (10.60, RabbitMQ extension): publishing is blocked.
    ConnectionBlocked { reason: ShortStr },
    /// connection.unblocked (10.61, RabbitMQ extension).
    ConnectionUnblocked,
    /// connection.update-secret (10.70, RabbitMQ extension): refresh credentials.
    ConnectionUpdateSecret { new_secret: Bytes, reason: ShortStr },
    /// connection.update-secret-ok (10.71).
    ConnectionUpdateSecretOk,

    /// channel.open (20.10).
    ChannelOpen,
    /// channel.open-ok (20.11).
    ChannelOpenOk,
    /// channel.flow (20.20): pause/resume deliveries.
    ChannelFlow { active: bool },
    /// channel.flow-ok (20.21).
    ChannelFlowOk { active: bool },
    /// channel.close (20.40).
    ChannelClose {
        reply_code: u16,
        reply_text: ShortStr,
        class_id: u16,
        method_id: u16,
    },
    /// channel.close-ok (20.41).
    ChannelCloseOk,

    /// access.request (30.10, deprecated).
    AccessRequest {
        realm: ShortStr,
        exclusive: bool,
        passive: bool,
        active: bool,
        write: bool,
        read: bool,
    },
    /// access.request-ok (30.11, deprecated).
    AccessRequestOk,

    /// exchange.declare (40.10).
    ExchangeDeclare {
        exchange: ShortStr,
        kind: ShortStr,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        nowait: bool,
        arguments: FieldTable,
    },
    /// exchange.declare-ok (40.11).
    ExchangeDeclareOk,
    /// exchange.delete (40.20).
    ExchangeDelete {
        exchange: ShortStr,
        if_unused: bool,
        nowait: bool,
    },
    /// exchange.delete-ok (40.21).
    ExchangeDeleteOk,
    /// exchange.bind (40.30, RabbitMQ extension): exchange-to-exchange binding.
    ExchangeBind {
        destination: ShortStr,
        source: ShortStr,
        routing_key: ShortStr,
        nowait: bool,
        arguments: FieldTable,
    },
    /// exchange.bind-ok (40.31).
    ExchangeBindOk,
    /// exchange.unbind (40.40, RabbitMQ extension).
    ExchangeUnbind {
        destination: ShortStr,
        source: ShortStr,
        routing_key: ShortStr,
        nowait: bool,
        arguments: FieldTable,
    },
    /// exchange.unbind-ok (40.51 — note: not 41).
    ExchangeUnbindOk,

    /// queue.declare (50.10).
    QueueDeclare {
        queue: ShortStr,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        nowait: bool,
        arguments: FieldTable,
    },
    /// queue.declare-ok (50.11).
    QueueDeclareOk {
        queue: ShortStr,
        message_count: u32,
        consumer_count: u32,
    },
    /// queue.bind (50.20).
    QueueBind {
        queue: ShortStr,
        exchange: ShortStr,
        routing_key: ShortStr,
        nowait: bool,
        arguments: FieldTable,
    },
    /// queue.bind-ok (50.21).
    QueueBindOk,
    /// queue.purge (50.30).
    QueuePurge { queue: ShortStr, nowait: bool },
    /// queue.purge-ok (50.31).
    QueuePurgeOk { message_count: u32 },
    /// queue.delete (50.40).
    QueueDelete {
        queue: ShortStr,
        if_unused: bool,
        if_empty: bool,
        nowait: bool,
    },
    /// queue.delete-ok (50.41).
    QueueDeleteOk { message_count: u32 },
    /// queue.unbind (50.50); has no no-wait flag in the spec.
    QueueUnbind {
        queue: ShortStr,
        exchange: ShortStr,
        routing_key: ShortStr,
        arguments: FieldTable,
    },
    /// queue.unbind-ok (50.51).
    QueueUnbindOk,

    /// basic.qos (60.10).
    BasicQos {
        prefetch_size: u32,
        prefetch_count: u16,
        global: bool,
    },
    /// basic.qos-ok (60.11).
    BasicQosOk,
    /// basic.consume (60.20).
    BasicConsume {
        queue: ShortStr,
        consumer_tag: ShortStr,
        no_local: bool,
        no_ack: bool,
        exclusive: bool,
        nowait: bool,
        arguments: FieldTable,
    },
    /// basic.consume-ok (60.21).
    BasicConsumeOk { consumer_tag: ShortStr },
    /// basic.cancel (60.30); also sent by the server (consumer cancel notify).
    BasicCancel { consumer_tag: ShortStr, nowait: bool },
    /// basic.cancel-ok (60.31).
    BasicCancelOk { consumer_tag: ShortStr },
    /// basic.publish (60.40); followed by content.
    BasicPublish {
        exchange: ShortStr,
        routing_key: ShortStr,
        mandatory: bool,
        immediate: bool,
    },
    /// basic.return (60.50); followed by content.
    BasicReturn {
        reply_code: u16,
        reply_text: ShortStr,
        exchange: ShortStr,
        routing_key: ShortStr,
    },
    /// basic.deliver (60.60); followed by content.
    BasicDeliver {
        consumer_tag: ShortStr,
        delivery_tag: u64,
        redelivered: bool,
        exchange: ShortStr,
        routing_key: ShortStr,
    },
    /// basic.get (60.70).
    BasicGet { queue: ShortStr, no_ack: bool },
    /// basic.get-ok (60.71); followed by content.
    BasicGetOk {
        delivery_tag: u64,
        redelivered: bool,
        exchange: ShortStr,
        routing_key: ShortStr,
        message_count: u32,
    },
    /// basic.get-empty (60.72).
    BasicGetEmpty,
    /// basic.ack (60.80); sent by clients and, in confirm mode, the server.
    BasicAck { delivery_tag: u64, multiple: bool },
    /// basic.reject (60.90).
    BasicReject { delivery_tag: u64, requeue: bool },
    /// basic.recover-async (60.100, deprecated).
    BasicRecoverAsync { requeue: bool },
    /// basic.recover (60.110).
    BasicRecover { requeue: bool },
    /// basic.recover-ok (60.111).
    BasicRecoverOk,
    /// basic.nack (60.120, RabbitMQ extension).
    BasicNack {
        delivery_tag: u64,
        multiple: bool,
        requeue: bool,
    },

    /// confirm.select (85.10, RabbitMQ extension): enable publisher confirms.
    ConfirmSelect { nowait: bool },
    /// confirm.select-ok (85.11).
    ConfirmSelectOk,

    /// tx.select (90.10).
    TxSelect,
    /// tx.select-ok (90.11).
    TxSelectOk,
    /// tx.commit (90.20).
    TxCommit,
    /// tx.commit-ok (90.21).
    TxCommitOk,
    /// tx.rollback (90.30).
    TxRollback,
    /// tx.rollback-ok (90.31).
    TxRollbackOk,
}

/// Field label for the reserved `ticket` short.
const TICKET: &str = "reserved ticket";

impl Method {
    /// (class id, method id, dotted name) of this method.
    fn ids(&self) -> (u16, u16, &'static str) {
        use Method::*;
        match self {
            ConnectionStart { .. } => (10, 10, "connection.start"),
            ConnectionStartOk { .. } => (10, 11, "connection.start-ok"),
            ConnectionSecure { .. } => (10, 20, "connection.secure"),
            ConnectionSecureOk { .. } => (10, 21, "connection.secure-ok"),
            ConnectionTune { .. } => (10, 30, "connection.tune"),
            ConnectionTuneOk { .. } => (10, 31, "connection.tune-ok"),
            ConnectionOpen { .. } => (10, 40, "connection.open"),
            ConnectionOpenOk => (10, 41, "connection.open-ok"),
            ConnectionClose { .. } => (10, 50, "connection.close"),
            ConnectionCloseOk => (10, 51, "connection.close-ok"),
            ConnectionBlocked { .. } => (10, 60, "connection.blocked"),
            ConnectionUnblocked => (10, 61, "connection.unblocked"),
            ConnectionUpdateSecret { .. } => (10, 70, "connection.update-secret"),
            ConnectionUpdateSecretOk => (10, 71, "connection.update-secret-ok"),
            ChannelOpen => (20, 10, "channel.open"),
            ChannelOpenOk => (20, 11, "channel.open-ok"),
            ChannelFlow { .. } => (20, 20, "channel.flow"),
            ChannelFlowOk { .. } => (20, 21, "channel.flow-ok"),
            ChannelClose { .. } => (20, 40, "channel.close"),
            ChannelCloseOk => (20, 41, "channel.close-ok"),
            AccessRequest { .. } => (30, 10, "access.request"),
            AccessRequestOk => (30, 11, "access.request-ok"),
            ExchangeDeclare { .. } => (40, 10, "exchange.declare"),
            ExchangeDeclareOk => (40, 11, "exchange.declare-ok"),
            ExchangeDelete { .. } => (40, 20, "exchange.delete"),
            ExchangeDeleteOk => (40, 21, "exchange.delete-ok"),
            ExchangeBind { .. } => (40, 30, "exchange.bind"),
            ExchangeBindOk => (40, 31, "exchange.bind-ok"),
            ExchangeUnbind { .. } => (40, 40, "exchange.unbind"),
            ExchangeUnbindOk => (40, 51, "exchange.unbind-ok"),
            QueueDeclare { .. } => (50, 10, "queue.declare"),
            QueueDeclareOk { .. } => (50, 11, "queue.declare-ok"),
            QueueBind { .. } => (50, 20, "queue.bind"),
            QueueBindOk => (50, 21, "queue.bind-ok"),
            QueuePurge { .. } => (50, 30, "queue.purge"),
            QueuePurgeOk { .. } => (50, 31, "queue.purge-ok"),
            QueueDelete { .. } => (50, 40, "queue.delete"),
            QueueDeleteOk { .. } => (50, 41, "queue.delete-ok"),
            QueueUnbind { .. } => (50, 50, "queue.unbind"),
            QueueUnbindOk => (50, 51, "queue.unbind-ok"),
            BasicQos { .. } => (60, 10, "basic.qos"),
            BasicQosOk => (60, 11, "basic.qos-ok"),
            BasicConsume { .. } => (60, 20, "basic.consume"),
            BasicConsumeOk { .. } => (60, 21, "basic.consume-ok"),
            BasicCancel { .. } => (60, 30, "basic.cancel"),
            BasicCancelOk { .. } => (60, 31, "basic.cancel-ok"),
            BasicPublish { .. } => (60, 40, "basic.publish"),
            BasicReturn { .. } => (60, 50, "basic.return"),
            BasicDeliver { .. } => (60, 60, "basic.deliver"),
            BasicGet { .. } => (60, 70, "basic.get"),
            BasicGetOk { .. } => (60, 71, "basic.get-ok"),
            BasicGetEmpty => (60, 72, "basic.get-empty"),
            BasicAck { .. } => (60, 80, "basic.ack"),
            BasicReject { .. } => (60, 90, "basic.reject"),
            BasicRecoverAsync { .. } => (60, 100, "basic.recover-async"),
            BasicRecover { .. } => (60, 110, "basic.recover"),
            BasicRecoverOk => (60, 111, "basic.recover-ok"),
            BasicNack { .. } => (60, 120, "basic.nack"),
            ConfirmSelect { .. } => (85, 10, "confirm.select"),
            ConfirmSelectOk => (85, 11, "confirm.select-ok"),
            TxSelect => (90, 10, "tx.select"),
            TxSelectOk => (90, 11, "tx.select-ok"),
            TxCommit => (90, 20, "tx.commit"),
            TxCommitOk => (90, 21, "tx.commit-ok"),
            TxRollback => (90, 30, "tx.rollback"),
            TxRollbackOk => (90, 31, "tx.rollback-ok"),
        }
    }

    /// The method's class id, e.g. for the `class_id` of a close reply.
    pub fn class_id(&self) -> u16 {
        self.ids().0
    }

    /// The method's id within its class, e.g. for the `method_id` of a close reply.
    pub fn method_id(&self) -> u16 {
        self.ids().1
    }

    /// The spec's dotted name (e.g. `"queue.declare"`), for logs and errors.
    pub fn name(&self) -> &'static str {
        self.ids().2
    }

    /// Whether a content header and body frames follow this method
    /// (basic.publish, basic.return, basic.deliver, basic.get-ok).
    pub fn has_content(&self) -> bool {
        matches!(
            self,
            Method::BasicPublish { .. }
                | Method::BasicReturn { .. }
                | Method::BasicDeliver { .. }
                | Method::BasicGetOk { .. }
        )
    }

    /// Decodes a method frame payload (starting at the class id).
    ///
    /// Trailing bytes after the last argument are rejected as malformed.
    pub fn decode(mut payload: Bytes) -> Result<Method, CodecError> {
        let b = &mut payload;
        let class = get_u16(b, "class id").map_err(|_| CodecError::TruncatedFrame("class id"))?;
        let method = get_u16(b, "method id").map_err(|_| CodecError::TruncatedFrame("method id"))?;
        use Method::*;
        let m = match (class, method) {
            (10, 10) => ConnectionStart {
                version_major: get_u8(b, "version-major")?,
                version_minor: get_u8(b, "version-minor")?,
                server_properties: FieldTable::decode(b)?,
                mechanisms: get_longstr(b, "mechanisms")?,
                locales: get_longstr(b, "locales")?,
            },
            (10, 11) => ConnectionStartOk {
                client_properties: FieldTable::decode(b)?,
                mechanism: get_shortstr(b, "mechanism")?,
                response: get_longstr(b, "response")?,
                locale: get_shortstr(b, "locale")?,
            },
            (10, 20) => ConnectionSecure {
                challenge: get_longstr(b, "challenge")?,
            },
            (10, 21) => ConnectionSecureOk {
                response: get_longstr(b, "response")?,
            },
            (10, 30) => ConnectionTune {
                channel_max: get_u16(b, "channel-max")?,
                frame_max: get_u32(b, "frame-max")?,
                heartbeat: get_u16(b, "heartbeat")?,
            },
            (10, 31) => ConnectionTuneOk {
                channel_max: get_u16(b, "channel-max")?,
                frame_max: get_u32(b, "frame-max")?,
                heartbeat: get_u16(b, "heartbeat")?,
            },
            (10, 40) => {
                let virtual_host = get_shortstr(b, "virtual-host")?;
                get_shortstr(b, "reserved capabilities")?;
                get_bits::<1>(b, "reserved insist")?;
                ConnectionOpen { virtual_host }
            }
            (10, 41) => {
                get_shortstr(b, "reserved known-hosts")?;
                ConnectionOpenOk
            }
            (10, 50) => ConnectionClose {
                reply_code: get_u16(b, "reply-code")?,
                reply_text: get_shortstr(b, "reply-text")?,
                class_id: get_u16(b, "class-id")?,
                method_id: get_u16(b, "method-id")?,
            },
            (10, 51) => ConnectionCloseOk,
            (10, 60) => ConnectionBlocked {
                reason: get_shortstr(b, "reason")?,
            },
            (10, 61) => ConnectionUnblocked,
            (10, 70) => ConnectionUpdateSecret {
                new_secret: get_longstr(b, "new-secret")?,
                reason: get_shortstr(b, "reason")?,
            },
            (10, 71) => ConnectionUpdateSecretOk,

            (20, 10) => {
                get_shortstr(b, "reserved out-of-band")?;
                ChannelOpen
            }
            (20, 11) => {
                get_longstr(b, "reserved channel-id")?;
                ChannelOpenOk
            }
            (20, 20) => {
                let [active] = get_bits(b, "active")?;
                ChannelFlow { active }
            }
            (20, 21) => {
                let [active] = get_bits(b, "active")?;
                ChannelFlowOk { active }
            }
            (20, 40) => ChannelClose {
                reply_code: get_u16(b, "reply-code")?,
                reply_text: get_shortstr(b, "reply-text")?,
                class_id: get_u16(b, "class-id")?,
                method_id: get_u16(b, "method-id")?,
            },
            (20, 41) => ChannelCloseOk,

            (30, 10) => {
                let realm = get_shortstr(b, "realm")?;
                let [exclusive, passive, active, write, read] = get_bits(b, "access flags")?;
                AccessRequest {
                    realm,
                    exclusive,
                    passive,
                    active,
                    write,
                    read,
                }
            }
            (30, 11) => {
                get_u16(b, TICKET)?;
                AccessRequestOk
            }

            (40, 10) => {
                get_u16(b, TICKET)?;
                let exchange = get_shortstr(b, "exchange")?;
                let kind = get_shortstr(b, "type")?;
                let [passive, durable, auto_delete, internal, nowait] = get_bits(b, "exchange.declare flags")?;
                ExchangeDeclare {
                    exchange,
                    kind,
                    passive,
                    durable,
                    auto_delete,
                    internal,
                    nowait,
                    arguments: FieldTable::decode(b)?,
                }
            }
            (40, 11) => ExchangeDeclareOk,
            (40, 20) => {
                get_u16(b, TICKET)?;
                let exchange = get_shortstr(b, "exchange")?;
                let [if_unused, nowait] = get_bits(b, "exchange.delete flags")?;
                ExchangeDelete {
                    exchange,
                    if_unused,
                    nowait,
                }
            }
            (40, 21) => ExchangeDeleteOk,
            (40, 30) | (40, 40) => {
                get_u16(b, TICKET)?;
                let destination = get_shortstr(b, "destination")?;
                let source = get_shortstr(b, "source")?;
                let routing_key = get_shortstr(b, "routing-key")?;
                let [nowait] = get_bits(b, "no-wait")?;
                let arguments = FieldTable::decode(b)?;
                if method == 30 {
                    ExchangeBind {
                        destination,
                        source,
                        routing_key,
                        nowait,
                        arguments,
                    }
                } else {
                    ExchangeUnbind {
                        destination,
                        source,
                        routing_key,
                        nowait,
                        arguments,
                    }
                }
            }
            (40, 31) => ExchangeBindOk,
            (40, 51) => ExchangeUnbindOk,

            (50, 10) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let [passive, durable, exclusive, auto_delete, nowait] = get_bits(b, "queue.declare flags")?;
                QueueDeclare {
                    queue,
                    passive,
                    durable,
                    exclusive,
                    auto_delete,
                    nowait,
                    arguments: FieldTable::decode(b)?,
                }
            }
            (50, 11) => QueueDeclareOk {
                queue: get_shortstr(b, "queue")?,
                message_count: get_u32(b, "message-count")?,
                consumer_count: get_u32(b, "consumer-count")?,
            },
            (50, 20) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let exchange = get_shortstr(b, "exchange")?;
                let routing_key = get_shortstr(b, "routing-key")?;
                let [nowait] = get_bits(b, "no-wait")?;
                QueueBind {
                    queue,
                    exchange,
                    routing_key,
                    nowait,
                    arguments: FieldTable::decode(b)?,
                }
            }
            (50, 21) => QueueBindOk,
            (50, 30) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let [nowait] = get_bits(b, "no-wait")?;
                QueuePurge { queue, nowait }
            }
            (50, 31) => QueuePurgeOk {
                message_count: get_u32(b, "message-count")?,
            },
            (50, 40) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let [if_unused, if_empty, nowait] = get_bits(b, "queue.delete flags")?;
                QueueDelete {
                    queue,
                    if_unused,
                    if_empty,
                    nowait,
                }
            }
            (50, 41) => QueueDeleteOk {
                message_count: get_u32(b, "message-count")?,
            },
            (50, 50) => {
                get_u16(b, TICKET)?;
                QueueUnbind {
                    queue: get_shortstr(b, "queue")?,
                    exchange: get_shortstr(b, "exchange")?,
                    routing_key: get_shortstr(b, "routing-key")?,
                    arguments: FieldTable::decode(b)?,
                }
            }
            (50, 51) => QueueUnbindOk,

            (60, 10) => {
                let prefetch_size = get_u32(b, "prefetch-size")?;
                let prefetch_count = get_u16(b, "prefetch-count")?;
                let [global] = get_bits(b, "global")?;
                BasicQos {
                    prefetch_size,
                    prefetch_count,
                    global,
                }
            }
            (60, 11) => BasicQosOk,
            (60, 20) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let consumer_tag = get_shortstr(b, "consumer-tag")?;
                let [no_local, no_ack, exclusive, nowait] = get_bits(b, "basic.consume flags")?;
                BasicConsume {
                    queue,
                    consumer_tag,
                    no_local,
                    no_ack,
                    exclusive,
                    nowait,
                    arguments: FieldTable::decode(b)?,
                }
            }
            (60, 21) => BasicConsumeOk {
                consumer_tag: get_shortstr(b, "consumer-tag")?,
            },
            (60, 30) => {
                let consumer_tag = get_shortstr(b, "consumer-tag")?;
                let [nowait] = get_bits(b, "no-wait")?;
                BasicCancel { consumer_tag, nowait }
            }
            (60, 31) => BasicCancelOk {
                consumer_tag: get_shortstr(b, "consumer-tag")?,
            },
            (60, 40) => {
                get_u16(b, TICKET)?;
                let exchange = get_shortstr(b, "exchange")?;
                let routing_key = get_shortstr(b, "routing-key")?;
                let [mandatory, immediate] = get_bits(b, "basic.publish flags")?;
                BasicPublish {
                    exchange,
                    routing_key,
                    mandatory,
                    immediate,
                }
            }
            (60, 50) => BasicReturn {
                reply_code: get_u16(b, "reply-code")?,
                reply_text: get_shortstr(b, "reply-text")?,
                exchange: get_shortstr(b, "exchange")?,
                routing_key: get_shortstr(b, "routing-key")?,
            },
            (60, 60) => {
                let consumer_tag = get_shortstr(b, "consumer-tag")?;
                let delivery_tag = get_u64(b, "delivery-tag")?;
                let [redelivered] = get_bits(b, "redelivered")?;
                BasicDeliver {
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange: get_shortstr(b, "exchange")?,
                    routing_key: get_shortstr(b, "routing-key")?,
                }
            }
            (60, 70) => {
                get_u16(b, TICKET)?;
                let queue = get_shortstr(b, "queue")?;
                let [no_ack] = get_bits(b, "no-ack")?;
                BasicGet { queue, no_ack }
            }
            (60, 71) => {
                let delivery_tag = get_u64(b, "delivery-tag")?;
                let [redelivered] = get_bits(b, "redelivered")?;
                BasicGetOk {
                    delivery_tag,
                    redelivered,
                    exchange: get_shortstr(b, "exchange")?,
                    routing_key: get_shortstr(b, "routing-key")?,
                    message_count: get_u32(b, "message-count")?,
                }
            }
            (60, 72) => {
                get_shortstr(b, "reserved cluster-id")?;
                BasicGetEmpty
            }
            (60, 80) => {
                let delivery_tag = get_u64(b, "delivery-tag")?;
                let [multiple] = get_bits(b, "multiple")?;
                BasicAck { delivery_tag, multiple }
            }
            (60, 90) => {
                let delivery_tag = get_u64(b, "delivery-tag")?;
                let [requeue] = get_bits(b, "requeue")?;
                BasicReject { delivery_tag, requeue }
            }
            (60, 100) => {
                let [requeue] = get_bits(b, "requeue")?;
                BasicRecoverAsync { requeue }
            }
            (60, 110) => {
                let [requeue] = get_bits(b, "requeue")?;
                BasicRecover { requeue }
            }
            (60, 111) => BasicRecoverOk,
            (60, 120) => {
                let delivery_tag = get_u64(b, "delivery-tag")?;
                let [multiple, requeue] = get_bits(b, "basic.nack flags")?;
                BasicNack {
                    delivery_tag,
                    multiple,
                    requeue,
                }
            }

            (85, 10) => {
                let [nowait] = get_bits(b, "no-wait")?;
                ConfirmSelect { nowait }
            }
            (85, 11) => ConfirmSelectOk,

            (90, 10) => TxSelect,
            (90, 11) => TxSelectOk,
            (90, 20) => TxCommit,
            (90, 21) => TxCommitOk,
            (90, 30) => TxRollback,
            (90, 31) => TxRollbackOk,

            (class, method) => return Err(CodecError::UnknownMethod { class, method }),
        };
        if !b.is_empty() {
            return Err(CodecError::Malformed(format!(
                "{} trailing bytes after {} arguments",
                b.len(),
                m.name()
            )));
        }
        Ok(m)
    }

    /// Writes class id, method id and arguments (the method frame payload).
    ///
    /// Fails only if a short string exceeds 255 bytes or a long value exceeds
    /// `u32::MAX` bytes; `buf` may then hold a partial payload.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        let (class, method, _) = self.ids();
        buf.put_u16(class);
        buf.put_u16(method);
        let b = buf;
        use Method::*;
        match self {
            ConnectionStart {
                version_major,
                version_minor,
                server_properties,
                mechanisms,
                locales,
            } => {
                b.put_u8(*version_major);
                b.put_u8(*version_minor);
                server_properties.encode(b)?;
                put_longstr(b, mechanisms)?;
                put_longstr(b, locales)?;
            }
            ConnectionStartOk {
                client_properties,
                mechanism,
                response,
                locale,
            } => {
                client_properties.encode(b)?;
                put_shortstr(b, mechanism)?;
                put_longstr(b, response)?;
                put_shortstr(b, locale)?;
            }
            ConnectionSecure { challenge } => put_longstr(b, challenge)?,
            ConnectionSecureOk { response } => put_longstr(b, response)?,
            ConnectionTune {
                channel_max,
                frame_max,
                heartbeat,
            }
            | ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat,
            } => {
                b.put_u16(*channel_max);
                b.put_u32(*frame_max);
                b.put_u16(*heartbeat);
            }
            ConnectionOpen { virtual_host } => {
                put_shortstr(b, virtual_host)?;
                put_shortstr(b, "")?;
                put_bits(b, [false]);
            }
            ConnectionOpenOk => put_shortstr(b, "")?,
            ConnectionClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            }
            | ChannelClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            } => {
                b.put_u16(*reply_code);
                put_shortstr(b, reply_text)?;
                b.put_u16(*class_id);
                b.put_u16(*method_id);
            }
            ConnectionBlocked { reason } => put_shortstr(b, reason)?,
            ConnectionUpdateSecret { new_secret, reason } => {
                put_longstr(b, new_secret)?;
                put_shortstr(b, reason)?;
            }
            ChannelOpen => put_shortstr(b, "")?,
            ChannelOpenOk => put_longstr(b, b"")?,
            ChannelFlow { active } | ChannelFlowOk { active } => put_bits(b, [*active]),
            AccessRequest {
                realm,
                exclusive,
                passive,
                active,
                write,
                read,
            } => {
                put_shortstr(b, realm)?;
                put_bits(b, [*exclusive, *passive, *active, *write, *read]);
            }
            // RabbitMQ (and amq-protocol) answer with ticket 1; clients ignore it.
            AccessRequestOk => b.put_u16(1),
            ExchangeDeclare {
                exchange,
                kind,
                passive,
                durable,
                auto_delete,
                internal,
                nowait,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, exchange)?;
                put_shortstr(b, kind)?;
                put_bits(b, [*passive, *durable, *auto_delete, *internal, *nowait]);
                arguments.encode(b)?;
            }
            ExchangeDelete {
                exchange,
                if_unused,
                nowait,
            } => {
                b.put_u16(0);
                put_shortstr(b, exchange)?;
                put_bits(b, [*if_unused, *nowait]);
            }
            ExchangeBind {
                destination,
                source,
                routing_key,
                nowait,
                arguments,
            }
            | ExchangeUnbind {
                destination,
                source,
                routing_key,
                nowait,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, destination)?;
                put_shortstr(b, source)?;
                put_shortstr(b, routing_key)?;
                put_bits(b, [*nowait]);
                arguments.encode(b)?;
            }
            QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                nowait,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_bits(b, [*passive, *durable, *exclusive, *auto_delete, *nowait]);
                arguments.encode(b)?;
            }
            QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            } => {
                put_shortstr(b, queue)?;
                b.put_u32(*message_count);
                b.put_u32(*consumer_count);
            }
            QueueBind {
                queue,
                exchange,
                routing_key,
                nowait,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_shortstr(b, exchange)?;
                put_shortstr(b, routing_key)?;
                put_bits(b, [*nowait]);
                arguments.encode(b)?;
            }
            QueuePurge { queue, nowait } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_bits(b, [*nowait]);
            }
            QueuePurgeOk { message_count } | QueueDeleteOk { message_count } => b.put_u32(*message_count),
            QueueDelete {
                queue,
                if_unused,
                if_empty,
                nowait,
            } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_bits(b, [*if_unused, *if_empty, *nowait]);
            }
            QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_shortstr(b, exchange)?;
                put_shortstr(b, routing_key)?;
                arguments.encode(b)?;
            }
            BasicQos {
                prefetch_size,
                prefetch_count,
                global,
            } => {
                b.put_u32(*prefetch_size);
                b.put_u16(*prefetch_count);
                put_bits(b, [*global]);
            }
            BasicConsume {
                queue,
                consumer_tag,
                no_local,
                no_ack,
                exclusive,
                nowait,
                arguments,
            } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_shortstr(b, consumer_tag)?;
                put_bits(b, [*no_local, *no_ack, *exclusive, *nowait]);
                arguments.encode(b)?;
            }
            BasicConsumeOk { consumer_tag } | BasicCancelOk { consumer_tag } => put_shortstr(b, consumer_tag)?,
            BasicCancel { consumer_tag, nowait } => {
                put_shortstr(b, consumer_tag)?;
                put_bits(b, [*nowait]);
            }
            BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => {
                b.put_u16(0);
                put_shortstr(b, exchange)?;
                put_shortstr(b, routing_key)?;
                put_bits(b, [*mandatory, *immediate]);
            }
            BasicReturn {
                reply_code,
                reply_text,
                exchange,
                routing_key,
            } => encode_basic_return(b, *reply_code, reply_text, exchange, routing_key)?,
            BasicDeliver {
                consumer_tag,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
            } => encode_basic_deliver(b, consumer_tag, *delivery_tag, *redelivered, exchange, routing_key)?,
            BasicGet { queue, no_ack } => {
                b.put_u16(0);
                put_shortstr(b, queue)?;
                put_bits(b, [*no_ack]);
            }
            BasicGetOk {
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                message_count,
            } => encode_basic_get_ok(b, *delivery_tag, *redelivered, exchange, routing_key, *message_count)?,
            BasicGetEmpty => put_shortstr(b, "")?,
            BasicAck { delivery_tag, multiple } => {
                b.put_u64(*delivery_tag);
                put_bits(b, [*multiple]);
            }
            BasicReject { delivery_tag, requeue } => {
                b.put_u64(*delivery_tag);
                put_bits(b, [*requeue]);
            }
            BasicRecoverAsync { requeue } | BasicRecover { requeue } => put_bits(b, [*requeue]),
            BasicNack {
                delivery_tag,
                multiple,
                requeue,
            } => {
                b.put_u64(*delivery_tag);
                put_bits(b, [*multiple, *requeue]);
            }
            ConfirmSelect { nowait } => put_bits(b, [*nowait]),
            ConnectionCloseOk
            | ConnectionUnblocked
            | ConnectionUpdateSecretOk
            | ChannelCloseOk
            | ExchangeDeclareOk
            | ExchangeDeleteOk
            | ExchangeBindOk
            | ExchangeUnbindOk
            | QueueBindOk
            | QueueUnbindOk
            | BasicQosOk
            | BasicRecoverOk
            | ConfirmSelectOk
            | TxSelect
            | TxSelectOk
            | TxCommit
            | TxCommitOk
            | TxRollback
            | TxRollbackOk => {}
        }
        Ok(())
    }
}

/// basic.deliver arguments from borrowed fields; shared by [`Method::encode`]
/// and the frame module's allocation-free fast path so both stay identical.
pub(crate) fn encode_basic_deliver(
    b: &mut BytesMut,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) -> Result<(), CodecError> {
    put_shortstr(b, consumer_tag)?;
    b.put_u64(delivery_tag);
    put_bits(b, [redelivered]);
    put_shortstr(b, exchange)?;
    put_shortstr(b, routing_key)
}

/// basic.get-ok arguments from borrowed fields (see [`encode_basic_deliver`]).
pub(crate) fn encode_basic_get_ok(
    b: &mut BytesMut,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    message_count: u32,
) -> Result<(), CodecError> {
    b.put_u64(delivery_tag);
    put_bits(b, [redelivered]);
    put_shortstr(b, exchange)?;
    put_shortstr(b, routing_key)?;
    b.put_u32(message_count);
    Ok(())
}

/// basic.return arguments from borrowed fields (see [`encode_basic_deliver`]).
pub(crate) fn encode_basic_return(
    b: &mut BytesMut,
    reply_code: u16,
    reply_text: &str,
    exchange: &str,
    routing_key: &str,
) -> Result<(), CodecError> {
    b.put_u16(reply_code);
    put_shortstr(b, reply_text)?;
    put_shortstr(b, exchange)?;
    put_shortstr(b, routing_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(m: &Method) -> Vec<u8> {
        let mut out = BytesMut::new();
        m.encode(&mut out).unwrap();
        out.to_vec()
    }

    #[test]
    fn known_bytes_basic_ack() {
        let m = Method::BasicAck {
            delivery_tag: 5,
            multiple: true,
        };
        assert_eq!(enc(&m), [0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 5, 1]);
        assert_eq!(m.name(), "basic.ack");
        assert!(!m.has_content());
    }

    #[test]
    fn queue_declare_bits_packed_lsb_first() {
        let m = Method::QueueDeclare {
            queue: "q".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: true,
            nowait: false,
            arguments: FieldTable::new(),
        };
        assert_eq!(enc(&m), [0, 50, 0, 10, 0, 0, 1, b'q', 0b01010, 0, 0, 0, 0]);
    }

    #[test]
    fn reserved_fields_are_discarded() {
        // connection.open with non-empty capabilities and insist=1.
        let raw = Bytes::from_static(b"\x00\x0a\x00\x28\x01/\x03abc\x01");
        assert_eq!(
            Method::decode(raw).unwrap(),
            Method::ConnectionOpen {
                virtual_host: "/".into()
            }
        );
    }

    #[test]
    fn errors() {
        assert!(matches!(
            Method::decode(Bytes::from_static(&[0, 60, 0, 99])),
            Err(CodecError::UnknownMethod { class: 60, method: 99 })
        ));
        assert!(matches!(
            Method::decode(Bytes::from_static(&[0, 60])),
            Err(CodecError::TruncatedFrame(_))
        ));
        let e = Method::decode(Bytes::from_static(&[0, 60, 0, 80, 0, 0])).unwrap_err();
        assert_eq!(e.reply_code(), 502);
        let e = Method::decode(Bytes::from_static(&[0, 90, 0, 10, 0])).unwrap_err();
        assert!(matches!(e, CodecError::Malformed(_)));
    }
}
