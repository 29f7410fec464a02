//! MQTT packets of every protocol version (3.1, 3.1.1, 5): any bytes a client
//! can send are parsed or refused with an error, never a panic. The first
//! byte picks the version, the rest is the stream.
#![no_main]

use bytes::BytesMut;
use lavinmq::mqtt::codec::{ProtocolVersion, parse_packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let version = match pick % 3 {
        0 => ProtocolVersion::V3_1,
        1 => ProtocolVersion::V3_1_1,
        _ => ProtocolVersion::V5,
    };
    let mut buf = BytesMut::from(stream);
    while let Ok(Some(_packet)) = parse_packet(&mut buf, 1 << 20, version) {}
});
