//! The memory alarm (`vm_memory_high_watermark`): above the watermark
//! publishers get connection.blocked ("low on memory") and are not read,
//! the node and the health check show the alarm; once the watermark is
//! raised (a reload) they are unblocked and their held-back messages arrive.

use crate::common::api::Api;
use crate::common::*;
use lavinmq::core::memory::Watermark;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_above_the_watermark_blocks_publishers_until_it_is_raised() {
    // One byte: every broker is above it, so the alarm is on from the start.
    let broker = start_with(|c| c.main.vm_memory_high_watermark = Watermark::Bytes(1)).await;
    let api = Api::new(&broker);
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    publish(&ch, "", &q, b"held").await;
    eventually("connection.blocked received", || async { conn.status().blocked() }).await;
    let (observer, _och) = broker.channel().await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        message_count(&observer, &q).await,
        0,
        "a blocked publisher must not be read"
    );

    let node = api.get_ok("/api/nodes").await;
    assert_eq!(node[0]["mem_alarm"], true, "{node}");
    assert_eq!(node[0]["mem_limit"], 1, "{node}");
    assert_eq!(node[0]["disk_free_alarm"], false, "{node}");
    let (status, body) = api.get("/api/health/checks/alarms").await;
    assert_eq!(status, 503);
    assert_eq!(body["reason"], "resource alarm(s) in effect: memory", "{body}");
    let metrics_url = format!("http://{}/metrics", broker.server().metrics_addr().unwrap());
    let metrics = reqwest::get(&metrics_url).await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("lavinmq_alarms_memory_used_watermark 1")
            && metrics.contains("lavinmq_resident_memory_limit_bytes 1\n"),
        "{metrics}"
    );

    // Raised by a reload: the default, 60 % of the available memory.
    let mut config = broker.config.clone();
    config.main.vm_memory_high_watermark = Watermark::default();
    broker.server().reload(&config).expect("reload");
    eventually("connection.unblocked received", || async { !conn.status().blocked() }).await;
    eventually("held message delivered", || async {
        message_count(&observer, &q).await == 1
    })
    .await;
    let node = api.get_ok("/api/nodes").await;
    assert_eq!(node[0]["mem_alarm"], false, "{node}");
    assert!(node[0]["mem_limit"].as_u64().is_some_and(|n| n > 1 << 20), "{node}");
    let (status, _) = api.get("/api/health/checks/alarms").await;
    assert_eq!(status, 200);
}
