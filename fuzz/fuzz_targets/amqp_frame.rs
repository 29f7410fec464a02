//! AMQP 0-9-1 frames and methods: any bytes a client can send are either
//! parsed or refused with an error, never a panic. The publish fast path
//! reads the same bytes: what it takes whole, the general parser must take
//! too, as the same publish.
#![no_main]

use bytes::BytesMut;
use lavinmq::amqp::codec::publish_frames::{WholePublish, peek_publish};
use lavinmq::amqp::codec::{Frame, Method, parse_frame};
use libfuzzer_sys::fuzz_target;

const FRAME_MAX: u32 = 131_072;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = parse_frame(&mut buf, FRAME_MAX) {
        if let Frame::Method { method, .. } = frame {
            let _ = method.name();
        }
    }
    let _ = Method::decode(bytes::Bytes::copy_from_slice(data));

    let Some(p) = peek_publish(data, FRAME_MAX) else {
        return;
    };
    let mut fast = BytesMut::from(data);
    let whole = WholePublish::split_off(&mut fast, &p);
    let mut general = BytesMut::from(data);
    let Ok(Some(Frame::Method { method, .. })) = parse_frame(&mut general, FRAME_MAX) else {
        // The method did not parse: neither may the fast path's parts.
        assert!(
            whole.is_err(),
            "the fast path took a publish the general parser refused"
        );
        return;
    };
    let Method::BasicPublish {
        exchange,
        routing_key,
        mandatory,
        immediate,
    } = method
    else {
        panic!("the fast path took a method other than basic.publish");
    };
    let header = parse_frame(&mut general, FRAME_MAX);
    let Ok(Some(Frame::Header {
        raw_properties,
        body_size,
        ..
    })) = header
    else {
        assert!(whole.is_err(), "the fast path took a header the general parser refused");
        return;
    };
    let whole = whole.expect("the general parser took the whole publish");
    assert_eq!((whole.exchange, whole.routing_key), (exchange, routing_key));
    assert_eq!((whole.mandatory, whole.immediate), (mandatory, immediate));
    assert_eq!(whole.raw_properties, raw_properties);
    assert_eq!(whole.body.len() as u64, body_size);
    if body_size > 0 {
        let Ok(Some(Frame::Body { payload, .. })) = parse_frame(&mut general, FRAME_MAX) else {
            panic!("the fast path took a body the general parser refused");
        };
        assert_eq!(whole.body, payload);
    }
    assert_eq!(fast.len(), general.len(), "both parsers consumed the same bytes");
});
