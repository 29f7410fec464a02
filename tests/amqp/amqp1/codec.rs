//! The broker's AMQP 1.0 codec against an independent one (`serde_amqp`
//! and the performatives of `fe2o3-amqp-types`): what that codec encodes
//! decodes here to the same fields, what the broker encodes decodes there to
//! the same fields, and values of every type survive the trip both ways.

use bytes::{Bytes, BytesMut};
use fe2o3_amqp::types::definitions::{
    self as theirs_def, ErrorCondition, Handle, ReceiverSettleMode, SenderSettleMode,
};
use fe2o3_amqp::types::messaging::{
    Accepted, DeliveryState as TheirState, Modified, Rejected, Released, Source, Target, TargetArchetype,
};
use fe2o3_amqp::types::performatives::{
    Attach as TheirAttach, Begin as TheirBegin, ChannelMax, Close as TheirClose, Detach as TheirDetach,
    Disposition as TheirDisposition, End as TheirEnd, Flow as TheirFlow, MaxFrameSize, Open as TheirOpen,
    Performative as Their, Transfer as TheirTransfer,
};
use fe2o3_amqp::types::sasl::{SaslCode, SaslInit, SaslMechanisms, SaslOutcome};
use lavinmq::amqp1::codec::performative::{
    AmqpError, Begin, DeliveryState, Detach, Disposition, Flow, Open, Performative, Role, Sasl, Terminus, Transfer,
};
use lavinmq::amqp1::codec::types::Value;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor as TheirDescriptor;
use serde_amqp::primitives::{Array, Binary, OrderedMap, Symbol, Timestamp, Uuid};
use serde_amqp::{Value as TheirValue, from_slice, to_value, to_vec};

/// Their encoding of a performative, decoded by the broker.
fn decoded(p: &Their) -> Performative {
    let bytes = Bytes::from(to_vec(p).expect("their encoding"));
    Performative::decode(&bytes).unwrap_or_else(|e| panic!("{p:?} decodes: {e}"))
}

/// The broker's encoding of a performative, decoded by them.
fn theirs_of(p: &Performative) -> Their {
    let mut out = BytesMut::new();
    p.encode(&mut out);
    from_slice(&out).unwrap_or_else(|e| panic!("{p:?} ({out:02x?}) decodes there: {e}"))
}

fn their_error(condition: theirs_def::AmqpError, description: &str) -> theirs_def::Error {
    theirs_def::Error {
        condition: ErrorCondition::AmqpError(condition),
        description: Some(description.to_owned()),
        info: None,
    }
}

fn error(condition: &str, description: &str) -> AmqpError {
    AmqpError::new(condition, description)
}

#[test]
fn open_begin_and_flow_read_as_encoded_both_ways() {
    let open = TheirOpen {
        container_id: "c-1".into(),
        hostname: Some("vhost:/".into()),
        max_frame_size: MaxFrameSize(131_072),
        channel_max: ChannelMax(2047),
        idle_time_out: Some(60_000),
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let ours = Open {
        container_id: "c-1".into(),
        hostname: Some("vhost:/".into()),
        max_frame_size: 131_072,
        channel_max: 2047,
        idle_time_out: Some(60_000),
        properties: None,
    };
    assert_eq!(decoded(&Their::Open(open.clone())), Performative::Open(ours.clone()));
    assert_eq!(theirs_of(&Performative::Open(ours)), Their::Open(open));

    let begin = TheirBegin {
        remote_channel: Some(3),
        next_outgoing_id: 7,
        incoming_window: 2048,
        outgoing_window: u32::MAX,
        handle_max: Handle(255),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    };
    let ours = Begin {
        remote_channel: Some(3),
        next_outgoing_id: 7,
        incoming_window: 2048,
        outgoing_window: u32::MAX,
        handle_max: 255,
    };
    assert_eq!(decoded(&Their::Begin(begin.clone())), Performative::Begin(ours.clone()));
    assert_eq!(theirs_of(&Performative::Begin(ours)), Their::Begin(begin));

    for (handle, drain, echo) in [(None, false, false), (Some(4), true, true)] {
        let flow = TheirFlow {
            next_incoming_id: Some(10),
            incoming_window: 5000,
            next_outgoing_id: 11,
            outgoing_window: 6000,
            handle: handle.map(Handle),
            delivery_count: handle.map(|_| 900),
            link_credit: handle.map(|_| 1000),
            available: None,
            drain,
            echo,
            properties: None,
        };
        let ours = Flow {
            next_incoming_id: Some(10),
            incoming_window: 5000,
            next_outgoing_id: 11,
            outgoing_window: 6000,
            handle,
            delivery_count: handle.map(|_| 900),
            link_credit: handle.map(|_| 1000),
            available: None,
            drain,
            echo,
        };
        assert_eq!(decoded(&Their::Flow(flow.clone())), Performative::Flow(ours.clone()));
        assert_eq!(theirs_of(&Performative::Flow(ours)), Their::Flow(flow));
    }
}

#[test]
fn attaches_keep_names_modes_and_termini() {
    for (role, snd, rcv) in [
        (
            theirs_def::Role::Sender,
            SenderSettleMode::Settled,
            ReceiverSettleMode::First,
        ),
        (
            theirs_def::Role::Receiver,
            SenderSettleMode::Unsettled,
            ReceiverSettleMode::Second,
        ),
        (
            theirs_def::Role::Receiver,
            SenderSettleMode::Mixed,
            ReceiverSettleMode::First,
        ),
    ] {
        let attach = TheirAttach {
            name: "link-1".into(),
            handle: Handle(9),
            role: role.clone(),
            snd_settle_mode: snd.clone(),
            rcv_settle_mode: rcv.clone(),
            source: Some(Box::new(Source::builder().address("/queues/q1").build())),
            target: Some(Box::new(TargetArchetype::Target(
                Target::builder().address("/exchanges/x/k").build(),
            ))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: Some(1 << 20),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let Performative::Attach(a) = decoded(&Their::Attach(attach.clone())) else {
            panic!("an attach");
        };
        assert_eq!(a.name, "link-1");
        assert_eq!(a.handle, 9);
        assert_eq!(a.role == Role::Receiver, role == theirs_def::Role::Receiver);
        assert_eq!(a.snd_settle_mode, snd as u8);
        assert_eq!(a.rcv_settle_mode, rcv as u8);
        assert_eq!(a.initial_delivery_count, Some(0));
        assert_eq!(a.max_message_size, Some(1 << 20));
        let source = Terminus::parse(a.source.as_ref().expect("a source"), true).expect("source");
        assert_eq!(source.address.as_deref(), Some("/queues/q1"));
        let target = Terminus::parse(a.target.as_ref().expect("a target"), false).expect("target");
        assert_eq!(target.address.as_deref(), Some("/exchanges/x/k"));

        // Encoded back (as the broker echoes an attach), it reads the same there.
        let Their::Attach(back) = theirs_of(&Performative::Attach(a)) else {
            panic!("an attach there");
        };
        assert_eq!(back, attach);
    }
}

#[test]
fn transfers_read_alike_on_the_direct_path_the_generic_one_and_theirs() {
    let states = [
        None,
        Some(TheirState::Accepted(Accepted {})),
        Some(TheirState::Released(Released {})),
    ];
    for (i, state) in states.into_iter().enumerate() {
        for (settled, more, aborted) in [
            (None, false, false),
            (Some(true), true, false),
            (Some(false), false, true),
        ] {
            let transfer = TheirTransfer {
                handle: Handle(2),
                delivery_id: Some(70_000 + i as u32),
                delivery_tag: Some(Binary::from(vec![1, 2, 3, 4])),
                message_format: Some(0),
                settled,
                more,
                rcv_settle_mode: None,
                state: state.clone(),
                resume: false,
                aborted,
                batchable: false,
            };
            let mut body = to_vec(&Their::Transfer(transfer.clone())).expect("their encoding");
            body.extend_from_slice(b"\x00\x53\x75\xa0\x02hi");
            let body = Bytes::from(body);
            let expected = Transfer {
                handle: 2,
                delivery_id: Some(70_000 + i as u32),
                delivery_tag: Some(Bytes::from_static(&[1, 2, 3, 4])),
                message_format: Some(0),
                settled,
                more,
                state: match i {
                    0 => None,
                    1 => Some(DeliveryState::Accepted),
                    _ => Some(DeliveryState::Released),
                },
                aborted,
            };
            let payload = Bytes::from_static(b"\x00\x53\x75\xa0\x02hi");
            let want = Performative::Transfer(expected.clone(), payload.clone());
            assert_eq!(Performative::decode(&body).expect("decode"), want);
            assert_eq!(Performative::decode_generic(&body).expect("generic decode"), want);

            let mut out = BytesMut::new();
            Performative::Transfer(expected, payload).encode(&mut out);
            let back: Their = from_slice(&out).expect("decodes there");
            assert_eq!(back, Their::Transfer(transfer));
        }
    }
}

#[test]
fn dispositions_carry_every_outcome_both_ways() {
    let mut annotations = OrderedMap::new();
    annotations.insert(Symbol::from("x-opt-reason"), TheirValue::String("retry".into()));
    let cases = [
        (TheirState::Accepted(Accepted {}), DeliveryState::Accepted),
        (TheirState::Released(Released {}), DeliveryState::Released),
        (
            TheirState::Rejected(Rejected {
                error: Some(their_error(theirs_def::AmqpError::NotFound, "gone")),
            }),
            DeliveryState::Rejected(Some(error("amqp:not-found", "gone"))),
        ),
        (
            TheirState::Modified(Modified {
                delivery_failed: Some(true),
                undeliverable_here: Some(false),
                message_annotations: None,
            }),
            DeliveryState::Modified {
                delivery_failed: true,
                undeliverable_here: false,
                annotations: None,
            },
        ),
    ];
    for (their_state, state) in cases {
        let disposition = TheirDisposition {
            role: theirs_def::Role::Receiver,
            first: 5,
            last: Some(9),
            settled: true,
            state: Some(their_state),
            batchable: false,
        };
        let ours = Disposition {
            role: Role::Receiver,
            first: 5,
            last: Some(9),
            settled: true,
            state: Some(state),
        };
        assert_eq!(
            decoded(&Their::Disposition(disposition.clone())),
            Performative::Disposition(ours.clone())
        );
        assert_eq!(
            theirs_of(&Performative::Disposition(ours)),
            Their::Disposition(disposition)
        );
    }

    // Annotations of a modified outcome arrive as a map keyed by symbols.
    let modified = TheirDisposition {
        role: theirs_def::Role::Receiver,
        first: 1,
        last: None,
        settled: true,
        state: Some(TheirState::Modified(Modified {
            delivery_failed: Some(false),
            undeliverable_here: Some(true),
            message_annotations: Some(annotations),
        })),
        batchable: false,
    };
    let Performative::Disposition(d) = decoded(&Their::Disposition(modified)) else {
        panic!("a disposition");
    };
    let Some(DeliveryState::Modified {
        annotations: Some(Value::Map(pairs)),
        undeliverable_here: true,
        ..
    }) = d.state
    else {
        panic!("modified with annotations: {:?}", d.state);
    };
    assert_eq!(
        pairs,
        vec![(Value::Symbol("x-opt-reason".into()), Value::String("retry".into()))]
    );
}

#[test]
fn detach_end_and_close_carry_their_errors_both_ways() {
    let err = their_error(theirs_def::AmqpError::ResourceLimitExceeded, "too many");
    let ours_err = error("amqp:resource-limit-exceeded", "too many");
    let detach = TheirDetach {
        handle: Handle(4),
        closed: true,
        error: Some(err.clone()),
    };
    let ours = Detach {
        handle: 4,
        closed: true,
        error: Some(ours_err.clone()),
    };
    assert_eq!(
        decoded(&Their::Detach(detach.clone())),
        Performative::Detach(ours.clone())
    );
    assert_eq!(theirs_of(&Performative::Detach(ours)), Their::Detach(detach));

    for e in [None, Some((err.clone(), ours_err.clone()))] {
        let (theirs_e, ours_e) = e.map_or((None, None), |(t, o)| (Some(t), Some(o)));
        let end = TheirEnd {
            error: theirs_e.clone(),
        };
        assert_eq!(decoded(&Their::End(end.clone())), Performative::End(ours_e.clone()));
        assert_eq!(theirs_of(&Performative::End(ours_e.clone())), Their::End(end));
        let close = TheirClose { error: theirs_e };
        assert_eq!(
            decoded(&Their::Close(close.clone())),
            Performative::Close(ours_e.clone())
        );
        assert_eq!(theirs_of(&Performative::Close(ours_e)), Their::Close(close));
    }
}

#[test]
fn sasl_frames_read_as_encoded_both_ways() {
    let mechanisms = SaslMechanisms {
        sasl_server_mechanisms: Array(vec![Symbol::from("PLAIN"), Symbol::from("ANONYMOUS")]),
    };
    let bytes = Bytes::from(to_vec(&mechanisms).expect("encoding"));
    assert_eq!(
        Sasl::decode(&bytes).expect("decode"),
        Sasl::Mechanisms(vec!["PLAIN".into(), "ANONYMOUS".into()])
    );
    let mut out = BytesMut::new();
    Sasl::Mechanisms(vec!["PLAIN".into(), "EXTERNAL".into()]).encode(&mut out);
    let back: SaslMechanisms = from_slice(&out).expect("decodes there");
    assert_eq!(
        back.sasl_server_mechanisms.0,
        vec![Symbol::from("PLAIN"), Symbol::from("EXTERNAL")]
    );

    let init = SaslInit {
        mechanism: Symbol::from("PLAIN"),
        initial_response: Some(Binary::from(b"\0guest\0guest".to_vec())),
        hostname: Some("vhost:/".into()),
    };
    let ours = Sasl::Init {
        mechanism: "PLAIN".into(),
        initial_response: Some(Bytes::from_static(b"\0guest\0guest")),
        hostname: Some("vhost:/".into()),
    };
    let bytes = Bytes::from(to_vec(&init).expect("encoding"));
    assert_eq!(Sasl::decode(&bytes).expect("decode"), ours);
    let mut out = BytesMut::new();
    ours.encode(&mut out);
    let back: SaslInit = from_slice(&out).expect("decodes there");
    assert_eq!(
        (back.mechanism, back.initial_response, back.hostname),
        (init.mechanism, init.initial_response, init.hostname)
    );

    for (code, theirs_code) in [(0u8, SaslCode::Ok), (1, SaslCode::Auth), (2, SaslCode::Sys)] {
        let outcome = SaslOutcome {
            code: theirs_code,
            additional_data: None,
        };
        let bytes = Bytes::from(to_vec(&outcome).expect("encoding"));
        assert_eq!(Sasl::decode(&bytes).expect("decode"), Sasl::Outcome(code));
        let mut out = BytesMut::new();
        Sasl::Outcome(code).encode(&mut out);
        let back: SaslOutcome = from_slice(&out).expect("decodes there");
        assert_eq!(back.code as u8, code);
        assert_eq!(back.additional_data, None);
    }
}

/// Values of every type (and both widths where the encoding has two).
fn their_values() -> Vec<TheirValue> {
    let mut map = OrderedMap::new();
    map.insert(TheirValue::Symbol(Symbol::from("k")), TheirValue::Int(-1));
    map.insert(TheirValue::String("s".into()), TheirValue::List(vec![TheirValue::Null]));
    vec![
        TheirValue::Null,
        TheirValue::Bool(true),
        TheirValue::Bool(false),
        TheirValue::Ubyte(200),
        TheirValue::Ushort(60_000),
        TheirValue::Uint(0),
        TheirValue::Uint(200),
        TheirValue::Uint(4_000_000_000),
        TheirValue::Ulong(0),
        TheirValue::Ulong(255),
        TheirValue::Ulong(u64::MAX),
        TheirValue::Byte(-100),
        TheirValue::Short(-30_000),
        TheirValue::Int(-100),
        TheirValue::Int(i32::MIN),
        TheirValue::Long(-100),
        TheirValue::Long(i64::MAX),
        to_value(&1.5f32).expect("float"),
        to_value(&-2.25f64).expect("double"),
        TheirValue::Char('€'),
        TheirValue::Timestamp(Timestamp::from_milliseconds(1_700_000_000_123)),
        TheirValue::Uuid(Uuid::from([7u8; 16])),
        TheirValue::Binary(Binary::from(vec![0u8, 1, 2])),
        TheirValue::Binary(Binary::from(vec![9u8; 300])),
        TheirValue::String("héllo".into()),
        TheirValue::String("x".repeat(300)),
        TheirValue::Symbol(Symbol::from("amqp:accepted:list")),
        TheirValue::Symbol(Symbol::from("y".repeat(300))),
        TheirValue::List(vec![]),
        TheirValue::List(vec![TheirValue::Uint(1), TheirValue::String("two".into())]),
        TheirValue::List((0..100).map(|i| TheirValue::Long(i * 1_000_000_007)).collect()),
        TheirValue::Map(map),
        TheirValue::Array(Array(vec![TheirValue::Int(1), TheirValue::Int(2)])),
        TheirValue::Array(Array(vec![
            TheirValue::Symbol(Symbol::from("a")),
            TheirValue::Symbol(Symbol::from("b")),
        ])),
        TheirValue::Described(Box::new(Described {
            descriptor: TheirDescriptor::Code(0x73),
            value: TheirValue::List(vec![TheirValue::String("id".into())]),
        })),
        TheirValue::Described(Box::new(Described {
            descriptor: TheirDescriptor::Name(Symbol::from("rabbitmq:stream-offset-spec")),
            value: TheirValue::String("first".into()),
        })),
        TheirValue::List(vec![TheirValue::Map(OrderedMap::new())]),
    ]
}

#[test]
fn values_of_every_type_survive_both_codecs() {
    for value in their_values() {
        let theirs = to_vec(&value).expect("their encoding");
        let mut slice = &theirs[..];
        let ours = Value::decode(&mut slice).unwrap_or_else(|e| panic!("{value:?} ({theirs:02x?}) decodes: {e}"));
        assert!(slice.is_empty(), "{value:?}: all of it read");
        let mut out = BytesMut::new();
        ours.encode(&mut out);
        let back: TheirValue =
            from_slice(&out).unwrap_or_else(|e| panic!("{value:?} re-encoded as {out:02x?} decodes there: {e}"));
        assert_eq!(back, value, "re-encoded as {out:02x?}");
    }
}
