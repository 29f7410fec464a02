//! Connections in the management API: listed, shown, closed with a reason, and
//! closed when their vhost is deleted.

use crate::common::api::enc;
use crate::common::*;
use reqwest::{Client, StatusCode};
use serde_json::Value;

fn base(b: &TestBroker) -> String {
    format!("http://{}", b.server().http_addr())
}

async fn connections(b: &TestBroker) -> Vec<Value> {
    let resp = Client::new()
        .get(format!("{}/api/connections", base(b)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), StatusCode::OK);
    resp.json::<Value>()
        .await
        .expect("json")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn list_show_and_close_with_a_reason() {
    let b = start().await;
    let (conn, _ch) = b.channel().await;
    let mut ev = events(&conn);
    eventually("connection listed with its channel", || async {
        let listed = connections(&b).await;
        listed.len() == 1 && listed[0]["channels"] == 1
    })
    .await;
    let listed = connections(&b).await;
    let c = &listed[0];
    assert_eq!((c["user"].as_str(), c["vhost"].as_str()), (Some("guest"), Some("/")));
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    let name = c["name"].as_str().unwrap().to_string();
    let path = format!("{}/api/connections/{}", base(&b), enc(&name));
    let shown = Client::new()
        .get(&path)
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert_eq!(shown.status(), StatusCode::OK);
    let closed = Client::new()
        .delete(&path)
        .basic_auth("guest", Some("guest"))
        .header("X-Reason", "maintenance window")
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), StatusCode::NO_CONTENT);
    let text = expect_error(&mut ev, 320).await;
    assert!(text.contains("maintenance window"), "{text}");
    eventually("connection gone from the list", || async {
        connections(&b).await.is_empty()
    })
    .await;
    let gone = Client::new()
        .get(&path)
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn deleting_a_vhost_closes_its_connections() {
    let b = start().await;
    let http = Client::new();
    let put = http
        .put(format!("{}/api/vhosts/doomed", base(&b)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), StatusCode::CREATED);
    let perm = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    http.put(format!("{}/api/permissions/doomed/guest", base(&b)))
        .basic_auth("guest", Some("guest"))
        .json(&perm)
        .send()
        .await
        .unwrap();
    let conn = try_connect(&b.url_for("guest", "guest", "doomed"))
        .await
        .expect("connect");
    let mut ev = events(&conn);
    let del = http
        .delete(format!("{}/api/vhosts/doomed", base(&b)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), StatusCode::NO_CONTENT);
    let text = expect_error(&mut ev, 320).await;
    assert!(text.contains("vhost deleted"), "{text}");
}
