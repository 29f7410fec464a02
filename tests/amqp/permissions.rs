//! Permissions enforced on AMQP operations as RabbitMQ does: configure to
//! declare and delete, write to publish and bind into, read to consume, get,
//! purge and bind from; 403 ACCESS_REFUSED naming the resource; changes apply to
//! open connections. Topic permissions, which narrow write and read on topic
//! exchanges by routing key, are in `permissions/topic.rs`; logins with
//! OAuth 2 access tokens, whose scopes are the permissions, in
//! `permissions/oauth.rs`; the management UI's single sign-on in
//! `permissions/sso.rs`.

use crate::common;
mod oauth;
mod sso;
mod topic;

use common::*;
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, ConfirmSelectOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lavinmq::core::user::{Permissions, SHA256, User, hash_password};

fn add_user(b: &TestBroker, name: &str, configure: &str, write: &str, read: &str) {
    let users = &b.server().broker.users;
    let user = User {
        limits: Default::default(),
        topic_permissions: Default::default(),
        name: name.into(),
        password_hash: hash_password("pw"),
        hashing_algorithm: SHA256.into(),
        tags: vec![],
        permissions: [(
            "/".to_string(),
            Permissions {
                configure: configure.into(),
                write: write.into(),
                read: read.into(),
            },
        )]
        .into_iter()
        .collect(),
    };
    users.put(user).expect("user stored");
}

async fn connect_as(b: &TestBroker, user: &str) -> lapin::Connection {
    try_connect(&b.url_for(user, "pw", "/")).await.expect("connect")
}

/// Publishes on `ch` (in confirm mode) and waits for the confirm, or for the
/// error that closed the channel.
async fn publish_and_confirm(
    ch: &lapin::Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
) -> lapin::Result<lapin::Confirmation> {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        Default::default(),
        body,
        Default::default(),
    )
    .await?
    .await
}

async fn refused<T: std::fmt::Debug>(
    conn: &lapin::Connection,
    what: impl std::future::Future<Output = lapin::Result<T>>,
) -> String {
    let mut ev = events(conn);
    let _ = what.await;
    expect_error(&mut ev, 403).await
}

#[tokio::test]
async fn configure_permission_guards_declare_and_delete() {
    let b = start().await;
    add_user(&b, "app", "^app\\.", ".*", ".*");
    let conn = connect_as(&b, "app").await;
    let ch = conn.create_channel().await.unwrap();
    declare_queue(&ch, "app.jobs").await;
    let text = refused(&conn, declare_queue_try(&ch, "other")).await;
    assert_eq!(
        text,
        "ACCESS_REFUSED - access to queue 'other' in vhost '/' refused for user 'app'"
    );
    // A server-named queue is refused too, and not left behind.
    let ch = conn.create_channel().await.unwrap();
    let text = refused(&conn, declare_queue_try(&ch, "")).await;
    assert!(text.contains("amq.gen-"), "{text}");
    assert!(
        b.server()
            .broker
            .vhost("/")
            .unwrap()
            .queues()
            .iter()
            .all(|q| !q.name.starts_with("amq.gen-"))
    );
}

async fn declare_queue_try(ch: &lapin::Channel, name: &str) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await
}

#[tokio::test]
async fn write_guards_publish_and_read_guards_consume_get_and_bind() {
    let b = start().await;
    let (_c, admin) = b.channel().await;
    declare_queue(&admin, "guarded").await;
    add_user(&b, "reader", "", "^$", ".*");
    let conn = connect_as(&b, "reader").await;
    let ch = conn.create_channel().await.unwrap();
    // Reading is allowed.
    assert!(
        ch.basic_get("guarded".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .is_none()
    );
    // Publishing to the default exchange needs write on amq.default.
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    let text = refused(&conn, publish_and_confirm(&ch, "", "guarded", b"x")).await;
    assert!(text.contains("exchange 'amq.default'"), "{text}");
    add_user(&b, "writer", "", ".*", "");
    let conn = connect_as(&b, "writer").await;
    let ch = conn.create_channel().await.unwrap();
    let text = refused(
        &conn,
        ch.basic_consume(
            "guarded".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert!(text.contains("queue 'guarded'"), "{text}");
    let ch = conn.create_channel().await.unwrap();
    // Binding needs read on the exchange (the writer has none).
    let text = refused(
        &conn,
        ch.queue_bind(
            "guarded".into(),
            "amq.direct".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await;
    assert!(text.contains("exchange 'amq.direct'"), "{text}");
}

#[tokio::test]
async fn a_changed_permission_applies_to_an_open_connection() {
    let b = start().await;
    let (_c, admin) = b.channel().await;
    declare_queue(&admin, "live").await;
    add_user(&b, "live-user", ".*", ".*", ".*");
    let conn = connect_as(&b, "live-user").await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default()).await.unwrap();
    publish(&ch, "", "live", b"allowed").await;
    ch.wait_for_confirms().await.unwrap();
    // Revoke write; the same channel's next publish is refused.
    b.server()
        .broker
        .users
        .update("live-user", |u| {
            if let Some(p) = u.permissions.get_mut("/") {
                p.write = "^$".into();
            }
        })
        .unwrap();
    let text = refused(&conn, publish_and_confirm(&ch, "", "live", b"refused")).await;
    assert!(text.contains("refused for user 'live-user'"), "{text}");
}
