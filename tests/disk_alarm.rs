//! The free-disk-space alarm: below `free_disk_min` publishers get
//! connection.blocked and are not read; when space returns they get
//! connection.unblocked and their held-back messages arrive.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_disk_blocks_publishers_and_unblocks_them_when_space_returns() {
    // A threshold far above any real disk: the alarm is on from the start.
    let broker = start_with(|c| c.main.free_disk_min = u64::MAX / 2).await;
    let (conn, ch) = broker.channel().await;
    let q = uniq("q");
    declare_queue(&ch, &q).await;
    // Published while blocked: held back, not lost, and the publisher is told.
    publish(&ch, "", &q, b"held").await;
    eventually("connection.blocked received", || async { conn.status().blocked() }).await;
    let (observer, _och) = broker.channel().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        message_count(&observer, &q).await,
        0,
        "a blocked publisher must not be read"
    );
    broker.server().broker.disk.set_min_free(0);
    eventually("connection.unblocked received", || async { !conn.status().blocked() }).await;
    eventually("held message delivered", || async {
        message_count(&observer, &q).await == 1
    })
    .await;
}
