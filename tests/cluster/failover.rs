//! Killing, freezing and restarting nodes under confirmed load: nothing
//! confirmed is lost, nothing acked comes back, and the cluster keeps (or
//! comes back to) serving by itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};

use crate::harness::{Cluster, Etcd, LOG_FOLLOWING, LOG_IN_SYNC, LOG_LEADER, LOG_LEADER_LOST, TIMEOUT, wait_until};
use crate::load::{self, Clients, Ledger};

/// Generous bound for a cluster event (election, resync); a liveness bound,
/// not a performance figure.
const SLOW: Duration = Duration::from_secs(45);

/// A three-node cluster with a leader and both followers in sync.
fn synced_cluster(etcd: &Etcd) -> (Cluster, usize) {
    let cluster = Cluster::start(3, etcd, true);
    let leader = cluster.wait_leader(SLOW);
    for i in (0..3).filter(|i| *i != leader) {
        cluster.node(i).expect_log(LOG_IN_SYNC, SLOW);
    }
    (cluster, leader)
}

fn urls(cluster: &Cluster) -> Vec<String> {
    (0..cluster.len()).map(|i| cluster.node(i).amqp_url()).collect()
}

/// Waits until `n` more messages were confirmed than at the call.
fn wait_confirms(ledger: &Ledger, n: usize, what: &str) {
    let start = ledger.confirmed_count();
    wait_until(what, SLOW, || ledger.confirmed_count() >= start + n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_killed_under_load_loses_nothing_confirmed() {
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let urls = urls(&cluster);
    load::declare(&urls[leader], "failover").await;
    let ledger = Arc::new(Ledger::default());
    // Publishers through every node's address; a consumer through a follower's.
    let mut publishers = Clients::new();
    for p in 0..4 {
        publishers.publisher(&urls, p, p, "failover", &ledger);
    }
    let mut consumer = Clients::new();
    consumer.consumer(&urls, (leader + 1) % 3, "failover", &ledger);
    wait_confirms(&ledger, 2000, "confirms before the kill");
    consumer.stop().await;
    assert!(!ledger.acked().is_empty(), "the consumer acked messages");
    // Let the followers hold the consumer's last acks before the leader dies.
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_confirms(&ledger, 500, "confirms after the consumer stopped");
    let killed = Instant::now();
    cluster.node(leader).kill9();
    let new_leader = cluster.wait_new_leader(leader, SLOW);
    wait_until("a confirm on a new connection after the kill", SLOW, || {
        ledger.first_confirm_after(killed).is_some()
    });
    let failover = ledger.first_confirm_after(killed).map(|t| t - killed);
    eprintln!("leader kill -9: first confirm again after {failover:?} (lease TTL 2 s)");
    wait_confirms(&ledger, 1000, "confirms on the new leader");
    publishers.stop().await;
    let left = load::drain(&urls[new_leader], "failover").await;
    let (confirmed, acked, queued) = load::check(&ledger, &left);
    eprintln!("confirmed {confirmed}, acked {acked}, left {queued}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_killed_and_restarted_resyncs_only_what_changed() {
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let urls = urls(&cluster);
    load::declare(&urls[leader], "resync").await;
    let ledger = Arc::new(Ledger::default());
    let mut publishers = Clients::new();
    for p in 0..2 {
        publishers.publisher(&urls[leader..=leader], 0, p, "resync", &ledger);
    }
    wait_confirms(&ledger, 1000, "confirms before the kill");
    let follower = (leader + 1) % 3;
    cluster.node(follower).kill9();
    // The leader drops the dead follower from the ISR and keeps confirming.
    wait_confirms(&ledger, 2000, "confirms while a follower is dead");
    let mark = cluster.node(follower).log_len();
    cluster.node(follower).restart();
    let line = cluster.node(follower).expect_log_after(mark, LOG_FOLLOWING, SLOW);
    cluster.node(follower).expect_log_after(mark, LOG_IN_SYNC, SLOW);
    // "... at tcp://...: N of M files fetched": with checksums, not all.
    let text = cluster.node(follower).log_lines()[line].clone();
    let counts: Vec<usize> = text
        .rsplit(": ")
        .next()
        .unwrap_or_default()
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        counts.len() == 2 && counts[0] < counts[1],
        "the restarted follower fetched every file: {text}"
    );
    wait_confirms(&ledger, 1000, "confirms with the follower back");
    publishers.stop().await;
    let left = load::drain(&urls[leader], "resync").await;
    load::check(&ledger, &left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frozen_follower_leaves_the_isr_and_rejoins() {
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let urls = urls(&cluster);
    load::declare(&urls[leader], "frozen").await;
    let ledger = Arc::new(Ledger::default());
    let mut publishers = Clients::new();
    publishers.publisher(&urls[leader..=leader], 0, 0, "frozen", &ledger);
    wait_confirms(&ledger, 500, "confirms before the freeze");
    let follower = (leader + 2) % 3;
    let leader_mark = cluster.node(leader).log_len();
    cluster.node(follower).sigstop();
    // Confirms stall at most until the ack timeout, then go on without it.
    cluster
        .node(leader)
        .expect_log_after(leader_mark, "removing follower from the in-sync replica set", SLOW);
    wait_confirms(&ledger, 2000, "confirms while a follower is frozen");
    let mark = cluster.node(follower).log_len();
    cluster.node(follower).sigcont();
    cluster.node(follower).expect_log_after(mark, LOG_IN_SYNC, SLOW);
    wait_confirms(&ledger, 500, "confirms after the follower rejoined");
    publishers.stop().await;
    let left = load::drain(&urls[leader], "frozen").await;
    load::check(&ledger, &left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn frozen_leader_is_deposed_and_confirms_nothing_after() {
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let node = cluster.node(leader);
    load::declare(&node.amqp_url(), "deposed").await;
    let conn = Connection::connect(&node.amqp_url(), ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let props = BasicProperties::default().with_delivery_mode(2);
    let publish = |body: String| {
        let ch = ch.clone();
        let props = props.clone();
        async move {
            ch.basic_publish(
                "".into(),
                "deposed".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                props,
            )
            .await
        }
    };
    let before = publish("before".into()).await.expect("publish").await.expect("confirm");
    assert!(before.is_ack(), "a confirm before the freeze");
    node.sigstop();
    // Sent while the leader is frozen: they wait in its socket.
    let mut frozen = Vec::new();
    for i in 0..20 {
        frozen.push(publish(format!("frozen-{i}")).await.expect("publish while frozen"));
    }
    let new_leader = cluster.wait_new_leader(leader, SLOW);
    assert_ne!(new_leader, leader);
    let mark = node.log_len();
    node.sigcont();
    for confirm in frozen {
        if let Ok(Ok(c)) = tokio::time::timeout(TIMEOUT, confirm).await {
            assert!(!c.is_ack(), "the deposed leader confirmed a message");
        }
    }
    node.expect_log_after(mark, LOG_LEADER_LOST, SLOW);
    // It follows the new leader and forwards clients to it.
    node.expect_log_after(mark, LOG_FOLLOWING, SLOW);
    let ledger = Arc::new(Ledger::default());
    let mut publishers = Clients::new();
    publishers.publisher(&[node.amqp_url()], 0, 0, "deposed", &ledger);
    wait_confirms(&ledger, 100, "confirms through the old leader's address");
    publishers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_etcd_the_leader_stops_and_the_cluster_recovers_by_itself() {
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let urls = urls(&cluster);
    load::declare(&urls[leader], "etcd-down").await;
    let marks: Vec<usize> = (0..3).map(|i| cluster.node(i).log_len()).collect();
    etcd.stop();
    // No lease, no leader: it stops serving rather than risk a split brain.
    cluster
        .node(leader)
        .expect_log_after(marks[leader], LOG_LEADER_LOST, SLOW);
    etcd.restart();
    wait_until("a leader after etcd came back", SLOW, || {
        (0..3).any(|i| cluster.node(i).log_count_after(marks[i], LOG_LEADER) > 0)
    });
    let ledger = Arc::new(Ledger::default());
    let mut publishers = Clients::new();
    publishers.publisher(&urls, 0, 0, "etcd-down", &ledger);
    wait_confirms(&ledger, 200, "confirms after etcd came back");
    publishers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_restart_under_load_loses_nothing() {
    let etcd = Etcd::start();
    let (cluster, _) = synced_cluster(&etcd);
    let urls = urls(&cluster);
    load::declare(&urls[0], "rolling").await;
    let ledger = Arc::new(Ledger::default());
    let mut publishers = Clients::new();
    for p in 0..2 {
        publishers.publisher(&urls, p, p, "rolling", &ledger);
    }
    wait_confirms(&ledger, 500, "confirms before the restarts");
    for i in 0..3 {
        let node = cluster.node(i);
        let mark = node.log_len();
        let status = node.sigterm_and_wait().expect("node exits on SIGTERM");
        assert!(status.success(), "node{i} exited with {status}");
        node.restart();
        wait_until("the restarted node to lead or be in sync", SLOW, || {
            node.log_count_after(mark, LOG_IN_SYNC) + node.log_count_after(mark, LOG_LEADER) > 0
        });
        wait_confirms(&ledger, 300, "confirms after a restart");
    }
    publishers.stop().await;
    let leader = cluster.wait_leader(SLOW);
    let left = load::drain(&urls[leader], "rolling").await;
    let (confirmed, _, queued) = load::check(&ledger, &left);
    eprintln!("rolling restart: confirmed {confirmed}, left {queued}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn declarations_answered_ok_survive_a_leader_kill() {
    use crate::harness::http_request;
    let etcd = Etcd::start();
    let (cluster, leader) = synced_cluster(&etcd);
    let node = cluster.node(leader);
    // Over AMQP: declare-ok, bind-ok.
    let conn = node.connect().await;
    let ch = conn.create_channel().await.expect("channel");
    let durable = lapin::options::QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare("declared".into(), durable, Default::default())
        .await
        .expect("declare-ok");
    ch.exchange_declare(
        "declared-x".into(),
        lapin::ExchangeKind::Direct,
        lapin::options::ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        Default::default(),
    )
    .await
    .expect("declare-ok");
    ch.queue_bind(
        "declared".into(),
        "declared-x".into(),
        "k".into(),
        Default::default(),
        Default::default(),
    )
    .await
    .expect("bind-ok");
    // Over HTTP, through a follower's address: 201 once replicated.
    let follower = cluster.node((leader + 1) % 3);
    let auth = Some(("guest", "guest"));
    let put = http_request(
        "PUT",
        &follower.http_addr(),
        "/api/queues/%2f/declared-http",
        auth,
        Some(r#"{"durable":true}"#),
        TIMEOUT,
    )
    .expect("PUT queue");
    assert!(put.status == 201 || put.status == 204, "PUT queue: {}", put.status);
    node.kill9();
    let new_leader = cluster.wait_new_leader(leader, SLOW);
    let url = cluster.node(new_leader).amqp_url();
    let conn = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("connect to the new leader");
    let ch = conn.create_channel().await.expect("channel");
    let passive = lapin::options::QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    for q in ["declared", "declared-http"] {
        ch.queue_declare(q.into(), passive, Default::default())
            .await
            .unwrap_or_else(|e| panic!("{q} is gone after the failover: {e}"));
    }
    // The binding routes on the new leader.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    ch.basic_publish(
        "declared-x".into(),
        "k".into(),
        BasicPublishOptions::default(),
        b"routed",
        BasicProperties::default().with_delivery_mode(2),
    )
    .await
    .expect("publish")
    .await
    .expect("confirm");
    let got = ch
        .basic_get("declared".into(), lapin::options::BasicGetOptions { no_ack: true })
        .await
        .expect("get");
    assert_eq!(
        got.map(|m| m.delivery.data),
        Some(b"routed".to_vec()),
        "the binding survived"
    );
}

/// What one client that stays with one follower's address saw.
#[derive(Default)]
struct Held {
    /// Connection errors: failed connects and dropped connections.
    errors: std::sync::atomic::AtomicUsize,
    /// When its last publish was confirmed.
    last_confirm: parking_lot::Mutex<Option<Instant>>,
}

/// Publishes persistent messages one at a time with confirms through `url`,
/// reconnecting at once to the same address after any error.
async fn held_client(url: String, queue: &'static str, held: Arc<Held>, stop: Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering;
    let props = BasicProperties::default().with_delivery_mode(2);
    while !stop.load(Ordering::Acquire) {
        let connect = Connection::connect(&url, ConnectionProperties::default());
        let conn = match tokio::time::timeout(SLOW, connect).await {
            Ok(Ok(c)) => c,
            _ => {
                held.errors.fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let channel = async {
            let ch = conn.create_channel().await?;
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok::<_, lapin::Error>(ch)
        };
        let Ok(ch) = channel.await else {
            held.errors.fetch_add(1, Ordering::AcqRel);
            continue;
        };
        while !stop.load(Ordering::Acquire) {
            let publish = ch.basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                b"held",
                props.clone(),
            );
            let confirmed = match publish.await {
                Ok(confirm) => matches!(tokio::time::timeout(SLOW, confirm).await, Ok(Ok(c)) if c.is_ack()),
                Err(_) => false,
            };
            if !confirmed {
                held.errors.fetch_add(1, Ordering::AcqRel);
                break;
            }
            *held.last_confirm.lock() = Some(Instant::now());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.close(200, "bye".into())).await;
    }
}

/// Clients connected through the followers, with the default lease TTL
/// (3 s): when the leader is killed each sees one connection error (the
/// connection to the dead leader ends) and no more, because the followers
/// hold new connections until the new leader takes them, also the one that
/// is elected, which hands them to itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_hold_clients_through_a_failover() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let etcd = Etcd::start();
    let cluster = Cluster::start_with(3, &etcd, true, |_, cfg| cfg.lease_ttl("3"));
    let leader = cluster.wait_leader(SLOW);
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &i in &followers {
        cluster.node(i).expect_log(LOG_IN_SYNC, SLOW);
    }
    let urls = urls(&cluster);
    load::declare(&urls[leader], "held").await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<Arc<Held>> = (0..4).map(|_| Arc::new(Held::default())).collect();
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, held)| {
            let url = urls[followers[i % 2]].clone();
            tokio::spawn(held_client(url, "held", held.clone(), stop.clone()))
        })
        .collect();
    wait_until("every client publishing", SLOW, || {
        clients.iter().all(|c| c.last_confirm.lock().is_some())
    });
    let killed = Instant::now();
    cluster.node(leader).kill9();
    cluster.wait_new_leader(leader, SLOW);
    let confirmed_again = || {
        clients
            .iter()
            .map(|c| c.last_confirm.lock().filter(|t| *t > killed).map(|t| t - killed))
            .collect::<Option<Vec<_>>>()
    };
    wait_until("every client confirmed again after the kill", SLOW, || {
        confirmed_again().is_some()
    });
    let back = confirmed_again().unwrap_or_default();
    stop.store(true, Ordering::Release);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
    }
    let errors: Vec<usize> = clients.iter().map(|c| c.errors.load(Ordering::Acquire)).collect();
    eprintln!(
        "leader kill -9 with lease TTL 3 s: clients confirmed again after {back:?}; connection errors {errors:?}"
    );
    assert!(
        errors.iter().all(|&e| e <= 1),
        "connection errors per client: {errors:?}"
    );
}
