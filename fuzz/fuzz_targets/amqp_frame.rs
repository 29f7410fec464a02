//! AMQP 0-9-1 frames and methods: any bytes a client can send are either
//! parsed or refused with an error, never a panic.
#![no_main]

use bytes::BytesMut;
use lavinmq::amqp::codec::{Frame, Method, parse_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = parse_frame(&mut buf, 131_072) {
        if let Frame::Method { method, .. } = frame {
            let _ = method.name();
        }
    }
    let _ = Method::decode(bytes::Bytes::copy_from_slice(data));
});
