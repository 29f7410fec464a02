//! Refusals, each with its response code, and malformed frames: a bad frame
//! closes its own connection with a close frame and a code, and nothing
//! else is touched.

use std::time::Duration;

use rabbitmq_stream_client::error::{StreamCreateError, StreamDeleteError};
use rabbitmq_stream_client::types::{OffsetSpecification, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{body, consumer, env, env_for, numbered, publish_all, raw_open, take};
use crate::common::{start, uniq};

#[tokio::test]
async fn bad_credentials_and_unknown_vhosts_are_refused() {
    let b = start().await;
    let wrong = env_for(&b, "guest", "wrong", "/").await;
    assert!(wrong.is_err(), "a wrong password is refused");
    let no_vhost = env_for(&b, "guest", "guest", "no-such-vhost").await;
    assert!(no_vhost.is_err(), "an unknown vhost is refused");
    // The broker still serves others.
    let env = env(&b).await;
    env.stream_creator().create(&uniq("after")).await.unwrap();
}

#[tokio::test]
async fn creating_deleting_and_publishing_answer_with_codes() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("codes");
    env.stream_creator().create(&stream).await.unwrap();
    match env.stream_creator().create(&stream).await {
        Err(StreamCreateError::Create { status, .. }) => assert_eq!(status, ResponseCode::StreamAlreadyExists),
        other => panic!("expected stream-already-exists, got {other:?}"),
    }
    match env.delete_stream("no-such-stream").await {
        Err(StreamDeleteError::Delete { status, .. }) => assert_eq!(status, ResponseCode::StreamDoesNotExist),
        other => panic!("expected stream-does-not-exist, got {other:?}"),
    }
    assert!(env.producer().build("no-such-stream").await.is_err());
    assert!(
        env.consumer().build("no-such-stream").await.is_err(),
        "no subscription to a missing stream"
    );
    // A classic queue is not a stream.
    let (_conn, ch) = b.channel().await;
    crate::common::declare_queue(&ch, "classic-q").await;
    match env.stream_creator().create("classic-q").await {
        Err(StreamCreateError::Create { status, .. }) => assert_eq!(status, ResponseCode::StreamAlreadyExists),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(env.producer().build("classic-q").await.is_err());
}

/// Reads until the broker closes the socket; what it sent.
async fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return all,
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the broker did not close the connection"),
        }
    }
}

#[tokio::test]
async fn a_malformed_frame_closes_only_its_connection() {
    let b = start().await;
    let env = env(&b).await;
    let stream = uniq("safe");
    env.stream_creator().create(&stream).await.unwrap();
    publish_all(&env, &stream, &numbered("kept", 0..5)).await;
    let port = b.stream_addr().port();

    // An unknown command key after the opening: a close with code 13
    // (unknown frame), then the socket closes.
    let mut s = raw_open(port, 65536).await;
    s.write_all(&[0, 0, 0, 4, 0x7f, 0x01, 0, 1]).await.unwrap();
    let got = until_closed(&mut s).await;
    let close = got.windows(10).any(|w| w[..4] == [0, 22, 0, 1] && w[8..10] == [0, 13]);
    assert!(close, "a close with unknown-frame: {got:?}");

    // A subscribe cut short inside its stream name.
    let mut s = raw_open(port, 65536).await;
    s.write_all(&[0, 0, 0, 12, 0, 7, 0, 1, 0, 0, 0, 9, 1, 0, 200, b'x'])
        .await
        .unwrap();
    let got = until_closed(&mut s).await;
    assert!(got.windows(4).any(|w| w == [0, 22, 0, 1]), "a close: {got:?}");

    // A frame larger than the negotiated maximum.
    let mut s = raw_open(port, 65536).await;
    s.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 2, 0, 1]).await.unwrap();
    let got = until_closed(&mut s).await;
    let too_large = got.windows(10).any(|w| w[..4] == [0, 22, 0, 1] && w[8..10] == [0, 14]);
    assert!(too_large, "a close with frame-too-large: {got:?}");

    // Garbage instead of the opening: the socket closes.
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    until_closed(&mut s).await;

    // The stream and other clients are untouched.
    let mut c = consumer(&env, &stream, OffsetSpecification::First).await;
    let bodies: Vec<String> = take(&mut c, 5).await.iter().map(body).collect();
    assert_eq!(bodies, numbered("kept", 0..5));
}

#[tokio::test]
async fn a_user_without_write_permission_cannot_publish() {
    let b = start().await;
    let api = crate::common::api::Api::new(&b);
    assert!(
        api.put("/api/users/reader", serde_json::json!({"password": "pw", "tags": ""}))
            .await
            .is_success()
    );
    let perms = serde_json::json!({"configure": "", "write": "", "read": ".*"});
    assert!(api.put("/api/permissions/%2F/reader", perms).await.is_success());
    let admin = env(&b).await;
    let stream = uniq("perm");
    admin.stream_creator().create(&stream).await.unwrap();
    publish_all(&admin, &stream, &numbered("m", 0..2)).await;
    let reader = env_for(&b, "reader", "pw", "/").await.expect("reader logs in");
    assert!(reader.producer().build(&stream).await.is_err(), "no write permission");
    assert!(
        reader.stream_creator().create(&uniq("nope")).await.is_err(),
        "no configure permission"
    );
    let mut c = consumer(&reader, &stream, OffsetSpecification::First).await;
    assert_eq!(take(&mut c, 2).await.len(), 2, "reading is allowed");
}
