//! AMQP 1.0 connections: the protocol header on the 0-9-1 port, SASL PLAIN
//! (and no ANONYMOUS unless configured), the vhost from open.hostname, and
//! closing sessions and connections cleanly.

use fe2o3_amqp::Connection;
use fe2o3_amqp::connection::OpenError;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::sasl::SaslCode;
use serde_json::json;

use super::*;
use crate::common::{self, api::Api, declare_queue, get, start, start_with, uniq, within};

/// Opens with `builder`'s settings to `url` and returns the result, bounded
/// in time.
async fn try_open(url: &str, hostname: Option<&str>) -> Result<ConnectionHandle<()>, OpenError> {
    let builder = Connection::builder()
        .container_id(uniq("amqp1-client"))
        .hostname(hostname);
    within("AMQP 1.0 open", builder.open(url)).await
}

/// Asserts that an open with these credentials failed in SASL with outcome
/// code auth.
#[track_caller]
fn assert_sasl_auth(res: Result<ConnectionHandle<()>, OpenError>) {
    match res {
        Err(OpenError::SaslError { code, .. }) => assert_eq!(code, SaslCode::Auth, "SASL outcome"),
        Err(e) => panic!("expected a SASL outcome auth, got {e:?}"),
        Ok(_) => panic!("expected a SASL outcome auth, the connection opened"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_on_the_0_9_1_port_then_both_protocols_work() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-port");
    declare_queue(&ch, &q).await;

    // fe2o3 sends the SASL header, picks PLAIN from the offered mechanisms,
    // then the AMQP header and open: all on the port lapin uses.
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    send_accepted(&mut s, b"over amqp 1.0").await;
    within("sender close", s.close()).await.expect("sender closes");
    c.close().await;

    // 0-9-1 still works on the same port, and sees the message.
    let m = get(&ch, &q, true).await.expect("the AMQP 1.0 message");
    assert_eq!(m.delivery.data, b"over amqp 1.0");
    common::assert_broker_alive(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_fails_sasl() {
    let b = start().await;
    assert_sasl_auth(try_open(&url_for(&b, "guest", "wrong"), None).await);
    // The broker carries on.
    let c = Client::new(&b).await;
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_user_fails_sasl() {
    let b = start().await;
    assert_sasl_auth(try_open(&url_for(&b, "nobody", "guest"), None).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_is_not_offered_by_default() {
    let b = start().await;
    // PLAIN works on this broker ...
    let c = Client::new(&b).await;
    c.close().await;
    // ... ANONYMOUS does not. A URL without credentials leaves the profile we
    // set. fe2o3 fails the open itself (NotImplemented) when the broker does
    // not offer the mechanism; a broker offering it must at least refuse it.
    let plain_url = format!("amqp://127.0.0.1:{}", b.addr().port());
    let open = Connection::builder()
        .container_id(uniq("amqp1-client"))
        .sasl_profile(SaslProfile::Anonymous)
        .open(plain_url.as_str());
    match within("AMQP 1.0 open", open).await {
        Err(OpenError::NotImplemented(_)) | Err(OpenError::SaslError { .. }) => {}
        Err(e) => panic!("expected ANONYMOUS to be missing from the mechanisms, got {e:?}"),
        Ok(_) => panic!("an ANONYMOUS connection opened, but the broker must not offer it by default"),
    }
}

/// With `anonymous_login_user` set, ANONYMOUS is offered and logs in as that
/// user with `anonymous_login_pass`; a wrong configured password refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_logs_in_as_the_configured_user() {
    for (pass, accepted) in [("guest", true), ("wrong", false)] {
        let b = start_with(|c| {
            c.main.anonymous_login_user = Some("guest".into());
            c.main.anonymous_login_pass = pass.into();
        })
        .await;
        let url = format!("amqp://127.0.0.1:{}", b.addr().port());
        let open = Connection::builder()
            .container_id(uniq("amqp1-anon"))
            .sasl_profile(SaslProfile::Anonymous)
            .open(url.as_str());
        match (within("AMQP 1.0 open", open).await, accepted) {
            (Ok(mut conn), true) => {
                let conns = Api::new(&b).get_ok("/api/connections").await;
                let user = conns.as_array().and_then(|c| c.first()).map(|c| c["user"].clone());
                assert_eq!(user, Some(json!("guest")), "{conns}");
                let _ = conn.close().await;
            }
            (Err(OpenError::SaslError { .. }), false) => {}
            (Ok(_), false) => panic!("ANONYMOUS opened with a wrong configured password"),
            (Err(e), _) => panic!("ANONYMOUS with password {pass:?}: {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_comes_from_the_open_hostname() {
    let b = start().await;
    let api = Api::new(&b);
    let vhost = uniq("a1-vhost");
    let path = format!("/api/vhosts/{}", enc(&vhost));
    assert!(api.put(&path, json!({})).await.is_success(), "create vhost");
    let perms = format!("/api/permissions/{}/guest", enc(&vhost));
    let status = api
        .put(&perms, json!({"configure": ".*", "write": ".*", "read": ".*"}))
        .await;
    assert!(status.is_success(), "grant guest the vhost: {status}");
    // A queue that exists only in the new vhost, and one only in "/".
    let conn = b.connect_url(&b.url_for("guest", "guest", &enc(&vhost))).await;
    let vch = conn.create_channel().await.expect("channel");
    let q = uniq("a1-in-vhost");
    declare_queue(&vch, &q).await;
    let (_root_conn, root_ch) = b.channel().await;
    let root_q = uniq("a1-in-root");
    declare_queue(&root_ch, &root_q).await;

    // hostname "vhost:NAME" selects the vhost.
    let hostname = format!("vhost:{vhost}");
    let mut conn1 = open_with_hostname(&b, &hostname).await;
    let mut session = begin(&mut conn1).await;
    let mut s = sender(&mut session, &queue_address(&q)).await;
    send_accepted(&mut s, b"in the vhost").await;
    let m = get(&vch, &q, true).await.expect("the message in the vhost's queue");
    assert_eq!(m.delivery.data, b"in the vhost");
    // ... and not "/": its queue is not there.
    let refused = within(
        "attach",
        Sender::attach(&mut session, uniq("s"), queue_address(&root_q).as_str()),
    )
    .await;
    let err = refused.expect_err("a queue of vhost / attached on a connection to another vhost");
    assert_not_found("root queue from the other vhost", sender_attach_error(&err), &err);
    within("session end", session.end()).await.expect("session ends");
    within("close", conn1.close()).await.expect("connection closes");

    // "vhost:/" is vhost "/".
    let mut conn2 = open_with_hostname(&b, "vhost:/").await;
    let mut session = begin(&mut conn2).await;
    let mut s = sender(&mut session, &queue_address(&root_q)).await;
    send_accepted(&mut s, b"in root").await;
    let m = get(&root_ch, &root_q, true).await.expect("the message in /");
    assert_eq!(m.delivery.data, b"in root");
    within("close", conn2.close()).await.expect("connection closes");

    // Any other hostname (here the URL's host, 127.0.0.1) means "/" too.
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&root_q)).await;
    send_accepted(&mut s, b"default vhost").await;
    let m = get(&root_ch, &root_q, true).await.expect("the message in /");
    assert_eq!(m.delivery.data, b"default vhost");
    let refused = within(
        "attach",
        Sender::attach(&mut c.session, uniq("s"), queue_address(&q).as_str()),
    )
    .await;
    let err = refused.expect_err("a queue of another vhost attached on a connection to /");
    assert_not_found("vhost queue from /", sender_attach_error(&err), &err);
    c.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_refused() {
    let b = start().await;
    // A known vhost opens ...
    let mut conn = open_with_hostname(&b, "vhost:/").await;
    within("connection close", conn.close())
        .await
        .expect("connection closes");
    // ... an unknown one does not.
    let res = try_open(&url(&b), Some("vhost:no-such-vhost")).await;
    match res {
        // Refused during the open: the broker's close (amqp:not-found or
        // amqp:unauthorized-access) came instead of its open.
        Err(_) => {}
        // The broker answered open, then closed the connection with an error.
        Ok(mut conn) => {
            let closed = within("the broker to close the connection", conn.on_close()).await;
            assert!(
                closed.is_err(),
                "a connection to an unknown vhost stayed open, then closed without an error"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_sessions_and_connection_close_cleanly() {
    let b = start().await;
    let (_conn, ch) = b.channel().await;
    let q = uniq("a1-close");
    declare_queue(&ch, &q).await;
    let mut c = Client::new(&b).await;
    let mut s = c.sender(&queue_address(&q)).await;
    let mut r = c.receiver(&queue_address(&q)).await;
    send_accepted(&mut s, b"m").await;
    let d = recv(&mut r).await;
    within("accept", r.accept(&d)).await.expect("accept");
    // Closing detaches: the broker must answer each with its own detach.
    within("sender close", s.close()).await.expect("sender closes cleanly");
    within("receiver close", r.close())
        .await
        .expect("receiver closes cleanly");
    // end / close: answered by the broker's end / close without an error.
    c.close().await;
    // A second session on a fresh connection, closed without ending first.
    let mut conn = open(&b).await;
    let _session = begin(&mut conn).await;
    within("connection close", conn.close())
        .await
        .expect("connection with an open session closes cleanly");
    common::assert_broker_alive(&b).await;
}
