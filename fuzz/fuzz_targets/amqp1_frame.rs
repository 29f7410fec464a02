//! AMQP 1.0 as a client can send it: frames, then each frame's performative,
//! SASL frame or, for a transfer, the message sections in its payload, and a
//! management request. Any bytes are decoded or refused with an error, never
//! a panic; a transfer the direct path reads is read the same way by the
//! value tree.
#![no_main]

use bytes::BytesMut;
use lavinmq::amqp1::codec::frame::parse_frame;
use lavinmq::amqp1::codec::performative::{Performative, Sasl};
use lavinmq::amqp1::codec::transfer;
use lavinmq::amqp1::codec::types::skip;
use lavinmq::amqp1::message::Received;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = skip(data);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = parse_frame(&mut buf, 1 << 20) {
        let _ = Sasl::decode(&frame.body);
        // The direct path for transfers reads what the value tree reads.
        if let Some((t, payload)) = transfer::decode(&frame.body) {
            assert_eq!(
                Performative::decode_generic(&frame.body).ok(),
                Some(Performative::Transfer(t, payload))
            );
        }
        if let Ok(Performative::Transfer(_, payload)) = Performative::decode(&frame.body) {
            let _ = Received::parse(&payload);
        }
    }
});
