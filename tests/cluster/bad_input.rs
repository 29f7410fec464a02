//! Bad input on the clustering port is refused and logged; the leader keeps
//! serving and its followers stay in sync.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{Cluster, Etcd, LOG_IN_SYNC};
use crate::load::{self, Clients, Ledger};

/// Sends `bytes` to the clustering port and returns what came back before the
/// leader closed the connection.
fn poke(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the clustering port");
    s.set_read_timeout(Some(Duration::from_secs(15))).expect("timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_wrong_secret_and_truncation_are_refused() {
    let etcd = Etcd::start();
    let cluster = Cluster::start(2, &etcd, true);
    let leader = cluster.wait_leader(Duration::from_secs(45));
    let follower = 1 - leader;
    cluster.node(follower).expect_log(LOG_IN_SYNC, Duration::from_secs(45));
    let node = cluster.node(leader);
    let port = node.clustering_port();
    let mark = node.log_len();
    let follower_mark = cluster.node(follower).log_len();

    poke(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    node.expect_log_after(mark, "not a replication peer", Duration::from_secs(15));

    let mut wrong = b"LVMQCLU2".to_vec();
    wrong.push(5);
    wrong.extend_from_slice(b"guess");
    wrong.extend_from_slice(&7u32.to_le_bytes());
    assert_eq!(poke(port, &wrong), vec![1], "a wrong secret is answered with a refusal");
    node.expect_log_after(mark, "wrong cluster secret", Duration::from_secs(15));

    // The handshake cut off in the middle of the secret.
    let mark = node.log_len();
    let mut cut = b"LVMQCLU2".to_vec();
    cut.push(40);
    cut.extend_from_slice(b"abc");
    assert!(poke(port, &cut).is_empty());
    node.expect_log_after(mark, "replication connection closed", Duration::from_secs(15));

    // The leader still serves, and the follower is still in sync: confirms flow.
    let url = node.amqp_url();
    load::declare(&url, "after-bad-input").await;
    let ledger = Arc::new(Ledger::default());
    let mut clients = Clients::new();
    clients.publisher(std::slice::from_ref(&url), 0, 0, "after-bad-input", &ledger);
    crate::harness::wait_until("confirms after bad input", Duration::from_secs(45), || {
        ledger.confirmed_count() >= 200
    });
    clients.stop().await;
    assert!(node.is_running() && cluster.node(follower).is_running());
    assert_eq!(
        cluster
            .node(follower)
            .log_count_after(follower_mark, "replication from"),
        0,
        "the follower's replication was not disturbed"
    );
}
