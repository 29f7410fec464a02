//! AMQP field tables and basic properties (the wire types every method and
//! content header carries): decoding any bytes returns a value or an error;
//! a decoded value encodes to bytes that decode and encode to the same bytes
//! (compared as bytes: a NaN float is not equal to itself).
#![no_main]

use bytes::{Bytes, BytesMut};
use lavinmq::wire::{BasicProperties, FieldTable};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(table) = FieldTable::decode(&mut Bytes::copy_from_slice(data)) {
        let mut first = BytesMut::new();
        if table.encode(&mut first).is_ok() {
            let again = FieldTable::decode(&mut first.clone().freeze()).expect("an encoded table decodes");
            let mut second = BytesMut::new();
            again.encode(&mut second).expect("a decoded table encodes");
            assert_eq!(first, second, "a table survives a round trip");
        }
    }
    if let Ok(props) = BasicProperties::decode(&mut Bytes::copy_from_slice(data)) {
        let mut first = BytesMut::new();
        if props.encode(&mut first).is_ok() {
            let again = BasicProperties::decode(&mut first.clone().freeze()).expect("encoded properties decode");
            let mut second = BytesMut::new();
            again.encode(&mut second).expect("decoded properties encode");
            assert_eq!(first, second, "properties survive a round trip");
        }
    }
});
