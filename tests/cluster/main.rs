//! Clustering tests: three `lavinmq` processes electing a leader through a
//! private etcd and replicating between them. The multi-process machinery is in
//! [`harness`].

mod bad_input;
mod failover;
mod forwarding;
mod harness;
mod load;
mod status;

use std::time::Duration;

use harness::{Etcd, TIMEOUT, within};

/// `GET /health` through reqwest: whether etcd reports itself healthy.
async fn healthy(client: &reqwest::Client, etcd: &Etcd) -> bool {
    let resp = within(
        "etcd /health",
        TIMEOUT,
        client.get(format!("{}/health", etcd.client_url())).send(),
    )
    .await;
    match resp {
        Ok(resp) if resp.status().is_success() => {
            let body: serde_json::Value = resp.json().await.expect("/health answers JSON");
            body["health"] == "true"
        }
        _ => false,
    }
}

/// The harness's etcd: healthy after start, a key written through the v3 JSON
/// gateway survives a stop and a restart on the same data directory and ports.
#[tokio::test]
async fn etcd_starts_and_stops() {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("reqwest client");

    let etcd = Etcd::start();
    assert!(healthy(&client, &etcd).await, "etcd healthy after start");

    let put = client
        .post(format!("{}/v3/kv/put", etcd.client_url()))
        .json(&serde_json::json!({ "key": b64("smoke/key"), "value": b64("value-1") }))
        .send()
        .await
        .expect("v3 put");
    assert!(put.status().is_success(), "v3 put: {}", put.status());
    assert_eq!(etcd.get("smoke/key").as_deref(), Some("value-1"));
    etcd.put("smoke/other", "value-2");
    assert_eq!(
        etcd.get_prefix("smoke/"),
        [
            ("smoke/key".to_owned(), "value-1".to_owned()),
            ("smoke/other".to_owned(), "value-2".to_owned())
        ]
    );

    let (client_port, data_dir) = (etcd.client_port(), etcd.data_dir().to_owned());
    etcd.stop();
    assert!(!etcd.is_running());
    assert!(!healthy(&client, &etcd).await, "etcd answers after stop");

    etcd.restart();
    assert_eq!((etcd.client_port(), etcd.data_dir()), (client_port, data_dir.as_path()));
    assert!(healthy(&client, &etcd).await, "etcd healthy after restart");
    let range = client
        .post(format!("{}/v3/kv/range", etcd.client_url()))
        .json(&serde_json::json!({ "key": b64("smoke/key") }))
        .send()
        .await
        .expect("v3 range");
    let range: serde_json::Value = range.json().await.expect("range answers JSON");
    assert_eq!(range["kvs"][0]["value"], b64("value-1"), "{range}");

    etcd.pause();
    assert!(!etcd.is_healthy(), "a paused etcd answers");
    etcd.resume();
    etcd.wait_healthy(TIMEOUT);
    etcd.delete_prefix("smoke/");
    assert_eq!(etcd.get("smoke/key"), None);
}
