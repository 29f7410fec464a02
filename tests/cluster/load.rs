//! Clients that keep working through a failover: publishers of persistent
//! messages with confirms and a consumer with acks, each reconnecting to the
//! next node's address when its connection fails, and a ledger of what was
//! confirmed and acked, to check afterwards that nothing was lost or came back.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use parking_lot::Mutex;

/// Confirms that may be outstanding per publisher.
const WINDOW: usize = 50;

/// What the clients saw.
#[derive(Default)]
pub struct Ledger {
    /// Bodies confirmed (acked by the broker), with when, and when the
    /// connection that published them was opened.
    confirmed: Mutex<Vec<(String, Instant, Instant)>>,
    /// Bodies the consumer acked.
    acked: Mutex<HashSet<String>>,
    /// Times a client connected.
    pub connects: Mutex<Vec<Instant>>,
}

impl Ledger {
    /// Number of confirmed messages.
    pub fn confirmed_count(&self) -> usize {
        self.confirmed.lock().len()
    }

    /// The first confirm on a connection opened after `t` (confirms still in
    /// flight on older connections do not count).
    pub fn first_confirm_after(&self, t: Instant) -> Option<Instant> {
        self.confirmed
            .lock()
            .iter()
            .filter(|(_, _, connected)| *connected > t)
            .map(|(_, at, _)| *at)
            .min()
    }

    /// Bodies confirmed.
    pub fn confirmed(&self) -> Vec<String> {
        self.confirmed.lock().iter().map(|(b, _, _)| b.clone()).collect()
    }

    /// Bodies the consumer acked.
    pub fn acked(&self) -> HashSet<String> {
        self.acked.lock().clone()
    }
}

/// Declares the durable queue `queue` through `url`.
pub async fn declare(url: &str, queue: &str) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declare");
    let _ = conn.close(200, "bye".into()).await;
}

/// Running background clients; [`Clients::stop`] ends them.
pub struct Clients {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    /// No clients yet.
    pub fn new() -> Self {
        Clients {
            stop: Arc::new(AtomicBool::new(false)),
            tasks: Vec::new(),
        }
    }

    /// Starts publisher `id`, trying `urls` in turn from `first`.
    pub fn publisher(&mut self, urls: &[String], first: usize, id: usize, queue: &str, ledger: &Arc<Ledger>) {
        let (urls, queue, ledger, stop) = (urls.to_vec(), queue.to_string(), ledger.clone(), self.stop.clone());
        self.tasks.push(tokio::spawn(async move {
            publish_loop(urls, first, id, queue, ledger, stop).await
        }));
    }

    /// Starts a consumer that acks every message, trying `urls` in turn.
    pub fn consumer(&mut self, urls: &[String], first: usize, queue: &str, ledger: &Arc<Ledger>) {
        let (urls, queue, ledger, stop) = (urls.to_vec(), queue.to_string(), ledger.clone(), self.stop.clone());
        self.tasks.push(tokio::spawn(async move {
            consume_loop(urls, first, queue, ledger, stop).await
        }));
    }

    /// Stops every client and waits for them (each closes its connection).
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Release);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(20), t).await;
        }
    }
}

async fn connect(urls: &[String], next: &mut usize, ledger: &Ledger) -> Option<Connection> {
    let url = &urls[*next % urls.len()];
    let props = ConnectionProperties::default();
    match tokio::time::timeout(Duration::from_secs(5), Connection::connect(url, props)).await {
        Ok(Ok(c)) => {
            ledger.connects.lock().push(Instant::now());
            Some(c)
        }
        _ => {
            *next += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            None
        }
    }
}

async fn publish_loop(
    urls: Vec<String>,
    mut next: usize,
    id: usize,
    queue: String,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) {
    let mut seq = 0u64;
    let props = BasicProperties::default().with_delivery_mode(2);
    while !stop.load(Ordering::Acquire) {
        let Some(conn) = connect(&urls, &mut next, &ledger).await else {
            continue;
        };
        let connected = Instant::now();
        let Ok(ch) = conn.create_channel().await else { continue };
        if ch.confirm_select(ConfirmSelectOptions::default()).await.is_err() {
            continue;
        }
        'publishing: while !stop.load(Ordering::Acquire) {
            let mut pending = Vec::with_capacity(WINDOW);
            for _ in 0..WINDOW {
                seq += 1;
                let body = format!("p{id}-{seq}");
                let sent = ch
                    .basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        BasicPublishOptions::default(),
                        body.as_bytes(),
                        props.clone(),
                    )
                    .await;
                match sent {
                    Ok(confirm) => pending.push((body, confirm)),
                    Err(_) => break,
                }
            }
            let mut failed = pending.len() < WINDOW;
            for (body, confirm) in pending {
                match tokio::time::timeout(Duration::from_secs(10), confirm).await {
                    Ok(Ok(c)) if c.is_ack() => ledger.confirmed.lock().push((body, Instant::now(), connected)),
                    _ => failed = true,
                }
            }
            if failed {
                break 'publishing;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.close(200, "bye".into())).await;
        next += 1;
    }
}

async fn consume_loop(urls: Vec<String>, mut next: usize, queue: String, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        let Some(conn) = connect(&urls, &mut next, &ledger).await else {
            continue;
        };
        let Ok(ch) = conn.create_channel().await else { continue };
        let consumer = ch
            .basic_consume(
                queue.as_str().into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await;
        let Ok(mut consumer) = consumer else { continue };
        while !stop.load(Ordering::Acquire) {
            let delivery = match tokio::time::timeout(Duration::from_millis(200), consumer.next()).await {
                Err(_) => continue,
                Ok(Some(Ok(d))) => d,
                Ok(_) => break,
            };
            let body = String::from_utf8_lossy(&delivery.data).into_owned();
            if delivery.ack(BasicAckOptions::default()).await.is_err() {
                break;
            }
            ledger.acked.lock().insert(body);
        }
        // A clean close: the broker has every ack before close-ok.
        let _ = tokio::time::timeout(Duration::from_secs(5), ch.close(200, "bye".into())).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.close(200, "bye".into())).await;
        next += 1;
    }
}

/// Takes every message left in `queue` (through `url`), as bodies with counts.
pub async fn drain(url: &str, queue: &str) -> HashMap<String, usize> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connect to drain");
    let ch = conn.create_channel().await.expect("channel");
    let mut out: HashMap<String, usize> = HashMap::new();
    while let Some(msg) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        *out.entry(String::from_utf8_lossy(&msg.delivery.data).into_owned())
            .or_default() += 1;
    }
    let _ = conn.close(200, "bye".into()).await;
    out
}

/// Checks what is left against the ledger: every confirmed message is either
/// acked by the consumer or still queued, exactly once; no acked message is
/// queued again. Returns (confirmed, acked, left).
pub fn check(ledger: &Ledger, left: &HashMap<String, usize>) -> (usize, usize, usize) {
    let acked = ledger.acked();
    let confirmed = ledger.confirmed();
    for (body, n) in left {
        assert_eq!(*n, 1, "{body} is queued {n} times");
        assert!(!acked.contains(body), "{body} was acked, and came back");
    }
    let missing: Vec<&String> = confirmed
        .iter()
        .filter(|b| !acked.contains(*b) && !left.contains_key(*b))
        .collect();
    assert!(
        missing.is_empty(),
        "{} confirmed messages are lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    (confirmed.len(), acked.len(), left.len())
}
