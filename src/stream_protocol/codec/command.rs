//! The frames a client sends, decoded into [`Command`]s.

use bytes::Bytes;

use super::primitives::Reader;
use super::sub_batch::{self, Entry};
use super::{DecodeError, key};

/// The client's answer to the broker's tune.
const TUNE_RESPONSE: u16 = key::TUNE | key::RESPONSE;
/// The client's answer to a close the broker sent.
const CLOSE_RESPONSE: u16 = key::CLOSE | key::RESPONSE;
/// A single active consumer's answer to a consumer update.
const CONSUMER_UPDATE_RESPONSE: u16 = key::CONSUMER_UPDATE | key::RESPONSE;

/// Where a subscription starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The oldest message kept.
    First,
    /// The last chunk (here: the newest message).
    Last,
    /// Messages published from now on.
    Next,
    /// A message offset.
    Offset(u64),
    /// The first message stored at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// One message of a publish frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The publisher's id for it, confirmed back.
    pub publishing_id: u64,
    /// The filter value (publish version 2), kept for filtering subscribers.
    pub filter_value: Option<String>,
    /// The AMQP 1.0 encoded message, or a sub-entry batch of them.
    pub entry: Entry,
}

/// A frame from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    Publish {
        publisher_id: u8,
        messages: Vec<Published>,
    },
    QueryPublisherSequence {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpec,
        credit: u16,
        properties: Vec<(String, String)>,
    },
    Credit {
        subscription_id: u8,
        credit: u16,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffset {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    Create {
        correlation_id: u32,
        stream: String,
        arguments: Vec<(String, String)>,
    },
    Delete {
        correlation_id: u32,
        stream: String,
    },
    Metadata {
        correlation_id: u32,
        streams: Vec<String>,
    },
    PeerProperties {
        correlation_id: u32,
        properties: Vec<(String, String)>,
    },
    SaslHandshake {
        correlation_id: u32,
    },
    SaslAuthenticate {
        correlation_id: u32,
        mechanism: String,
        data: Bytes,
    },
    Tune {
        frame_max: u32,
        heartbeat: u32,
    },
    Open {
        correlation_id: u32,
        vhost: String,
    },
    Close {
        correlation_id: u32,
        code: u16,
        reason: String,
    },
    /// The client's answer to a close the broker sent.
    CloseResponse,
    Heartbeat,
    Route {
        correlation_id: u32,
        routing_key: String,
        super_stream: String,
    },
    Partitions {
        correlation_id: u32,
        super_stream: String,
    },
    /// A single active consumer's answer to a consumer update.
    ConsumerUpdateResponse {
        correlation_id: u32,
        code: u16,
        offset: Option<OffsetSpec>,
    },
    ExchangeCommandVersions {
        correlation_id: u32,
        versions: Vec<(u16, u16, u16)>,
    },
    StreamStats {
        correlation_id: u32,
        stream: String,
    },
    CreateSuperStream {
        correlation_id: u32,
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Vec<(String, String)>,
    },
    DeleteSuperStream {
        correlation_id: u32,
        name: String,
    },
}

impl Command {
    /// Decodes one frame (size prefix removed).
    pub fn decode(frame: &Bytes) -> Result<Command, DecodeError> {
        let mut r = Reader::new(frame);
        let k = r.u16("key")?;
        let version = r.u16("version")?;
        let c = match k {
            key::DECLARE_PUBLISHER => Command::DeclarePublisher {
                correlation_id: r.u32("correlation id")?,
                publisher_id: r.u8("publisher id")?,
                reference: r.opt_string("publisher reference")?.filter(|s| !s.is_empty()),
                stream: r.string("stream")?,
            },
            key::PUBLISH => {
                let publisher_id = r.u8("publisher id")?;
                let n = r.count(12, "published messages")?;
                let mut messages = Vec::with_capacity(n);
                for _ in 0..n {
                    let publishing_id = r.u64("publishing id")?;
                    let filter_value = match version >= 2 {
                        true => r.opt_string("filter value")?,
                        false => None,
                    };
                    let entry = match sub_batch::starts_batch(&r) {
                        true => sub_batch::read(&mut r)?,
                        false => Entry::Single(r.bytes("message")?),
                    };
                    messages.push(Published {
                        publishing_id,
                        filter_value,
                        entry,
                    });
                }
                Command::Publish { publisher_id, messages }
            }
            key::QUERY_PUBLISHER_SEQUENCE => Command::QueryPublisherSequence {
                correlation_id: r.u32("correlation id")?,
                reference: r.string("publisher reference")?,
                stream: r.string("stream")?,
            },
            key::DELETE_PUBLISHER => Command::DeletePublisher {
                correlation_id: r.u32("correlation id")?,
                publisher_id: r.u8("publisher id")?,
            },
            key::SUBSCRIBE => {
                let correlation_id = r.u32("correlation id")?;
                let subscription_id = r.u8("subscription id")?;
                let stream = r.string("stream")?;
                let offset = offset_spec(&mut r)?;
                let credit = r.u16("credit")?;
                // Older clients leave the properties out.
                let properties = match r.remaining() {
                    0 => Vec::new(),
                    _ => r.string_map("subscription properties")?,
                };
                Command::Subscribe {
                    correlation_id,
                    subscription_id,
                    stream,
                    offset,
                    credit,
                    properties,
                }
            }
            key::CREDIT => Command::Credit {
                subscription_id: r.u8("subscription id")?,
                credit: r.u16("credit")?,
            },
            key::STORE_OFFSET => Command::StoreOffset {
                reference: r.string("reference")?,
                stream: r.string("stream")?,
                offset: r.u64("offset")?,
            },
            key::QUERY_OFFSET => Command::QueryOffset {
                correlation_id: r.u32("correlation id")?,
                reference: r.string("reference")?,
                stream: r.string("stream")?,
            },
            key::UNSUBSCRIBE => Command::Unsubscribe {
                correlation_id: r.u32("correlation id")?,
                subscription_id: r.u8("subscription id")?,
            },
            key::CREATE => Command::Create {
                correlation_id: r.u32("correlation id")?,
                stream: r.string("stream")?,
                arguments: match r.remaining() {
                    0 => Vec::new(),
                    _ => r.string_map("arguments")?,
                },
            },
            key::DELETE => Command::Delete {
                correlation_id: r.u32("correlation id")?,
                stream: r.string("stream")?,
            },
            key::METADATA => Command::Metadata {
                correlation_id: r.u32("correlation id")?,
                streams: r.strings("streams")?,
            },
            key::PEER_PROPERTIES => Command::PeerProperties {
                correlation_id: r.u32("correlation id")?,
                properties: r.string_map("peer properties")?,
            },
            key::SASL_HANDSHAKE => Command::SaslHandshake {
                correlation_id: r.u32("correlation id")?,
            },
            key::SASL_AUTHENTICATE => Command::SaslAuthenticate {
                correlation_id: r.u32("correlation id")?,
                mechanism: r.string("mechanism")?,
                data: r.bytes("sasl data")?,
            },
            // The client answers the broker's tune with its own.
            key::TUNE | TUNE_RESPONSE => Command::Tune {
                frame_max: r.u32("frame max")?,
                heartbeat: r.u32("heartbeat")?,
            },
            key::OPEN => Command::Open {
                correlation_id: r.u32("correlation id")?,
                vhost: r.string("virtual host")?,
            },
            key::CLOSE => Command::Close {
                correlation_id: r.u32("correlation id")?,
                code: r.u16("closing code")?,
                reason: r.string("closing reason")?,
            },
            CLOSE_RESPONSE => Command::CloseResponse,
            key::HEARTBEAT => Command::Heartbeat,
            key::ROUTE => Command::Route {
                correlation_id: r.u32("correlation id")?,
                routing_key: r.string("routing key")?,
                super_stream: r.string("super stream")?,
            },
            key::PARTITIONS => Command::Partitions {
                correlation_id: r.u32("correlation id")?,
                super_stream: r.string("super stream")?,
            },
            CONSUMER_UPDATE_RESPONSE => {
                let correlation_id = r.u32("correlation id")?;
                let code = r.u16("response code")?;
                // Type 0 ("none") answers a deactivation (the Java client).
                let offset = match r.remaining() {
                    0 => None,
                    _ if r.peek_u16() == Some(0) => None,
                    _ => Some(offset_spec(&mut r)?),
                };
                Command::ConsumerUpdateResponse {
                    correlation_id,
                    code,
                    offset,
                }
            }
            key::EXCHANGE_COMMAND_VERSIONS => {
                let correlation_id = r.u32("correlation id")?;
                let n = r.count(6, "command versions")?;
                let mut versions = Vec::with_capacity(n);
                for _ in 0..n {
                    versions.push((r.u16("key")?, r.u16("min version")?, r.u16("max version")?));
                }
                Command::ExchangeCommandVersions {
                    correlation_id,
                    versions,
                }
            }
            key::STREAM_STATS => Command::StreamStats {
                correlation_id: r.u32("correlation id")?,
                stream: r.string("stream")?,
            },
            key::CREATE_SUPER_STREAM => Command::CreateSuperStream {
                correlation_id: r.u32("correlation id")?,
                name: r.string("super stream")?,
                partitions: r.strings("partitions")?,
                binding_keys: r.strings("binding keys")?,
                arguments: match r.remaining() {
                    0 => Vec::new(),
                    _ => r.string_map("arguments")?,
                },
            },
            key::DELETE_SUPER_STREAM => Command::DeleteSuperStream {
                correlation_id: r.u32("correlation id")?,
                name: r.string("super stream")?,
            },
            other => return Err(DecodeError::UnknownKey(other)),
        };
        Ok(c)
    }

    /// The correlation id of a request, to answer an error to it.
    pub fn correlation_id(&self) -> Option<u32> {
        use Command::*;
        match self {
            DeclarePublisher { correlation_id, .. }
            | QueryPublisherSequence { correlation_id, .. }
            | DeletePublisher { correlation_id, .. }
            | Subscribe { correlation_id, .. }
            | QueryOffset { correlation_id, .. }
            | Unsubscribe { correlation_id, .. }
            | Create { correlation_id, .. }
            | Delete { correlation_id, .. }
            | Metadata { correlation_id, .. }
            | PeerProperties { correlation_id, .. }
            | SaslHandshake { correlation_id }
            | SaslAuthenticate { correlation_id, .. }
            | Open { correlation_id, .. }
            | Close { correlation_id, .. }
            | Route { correlation_id, .. }
            | Partitions { correlation_id, .. }
            | ExchangeCommandVersions { correlation_id, .. }
            | StreamStats { correlation_id, .. }
            | CreateSuperStream { correlation_id, .. }
            | DeleteSuperStream { correlation_id, .. } => Some(*correlation_id),
            _ => None,
        }
    }
}

/// Reads an offset specification: a type, then a value for offsets and
/// timestamps.
fn offset_spec(r: &mut Reader<'_>) -> Result<OffsetSpec, DecodeError> {
    Ok(match r.u16("offset type")? {
        1 => OffsetSpec::First,
        2 => OffsetSpec::Last,
        3 => OffsetSpec::Next,
        4 => OffsetSpec::Offset(r.u64("offset")?),
        5 => OffsetSpec::Timestamp(r.u64("timestamp")? as i64),
        _ => return Err(DecodeError::Invalid("offset type")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_of_a_subscribe_is_an_error_not_a_panic() {
        let mut f = vec![0, 7, 0, 1, 0, 0, 0, 9, 3, 0, 1, b's', 0, 4];
        f.extend_from_slice(&42u64.to_be_bytes());
        f.extend_from_slice(&[0, 10, 0, 0, 0, 1, 0, 1, b'k', 0, 1, b'v']);
        let whole = Command::decode(&Bytes::from(f.clone())).unwrap();
        assert_eq!(
            whole,
            Command::Subscribe {
                correlation_id: 9,
                subscription_id: 3,
                stream: "s".into(),
                offset: OffsetSpec::Offset(42),
                credit: 10,
                properties: vec![("k".into(), "v".into())],
            }
        );
        // Cut before the properties, the subscribe is still whole.
        for cut in 0..f.len() {
            if cut == 24 {
                continue;
            }
            assert!(
                Command::decode(&Bytes::copy_from_slice(&f[..cut])).is_err(),
                "prefix {cut}"
            );
        }
    }

    #[test]
    fn a_forged_count_is_refused_before_any_allocation() {
        let f = Bytes::from_static(&[0, 2, 0, 1, 1, 0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(Command::decode(&f), Err(DecodeError::Truncated("published messages")));
    }
}
