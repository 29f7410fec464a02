//! `queue-churn` and `connection-count`: how fast the broker creates and
//! deletes queues, and what many idle connections cost.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::AsyncBufReadExt;
use tokio::task::JoinSet;

use crate::client::{Connection, Error, QueueDeclare};
use crate::exit_signal;
use crate::uri::{self, AmqpUri};
use lavinmq::amqp::codec::{FieldTable, Method, ShortStr};

/// Flags of `queue-churn`.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf queue-churn",
    about = "Measure how fast queues are declared and deleted"
)]
pub struct QueueChurnArgs {
    /// URI to connect to (amqp://, or amqps:// for TLS; add ?verify=none for a
    /// self-signed certificate)
    #[arg(long, default_value = "amqp://guest:guest@localhost")]
    pub uri: String,
    /// Seconds to measure each case (after a 2 s warm-up)
    #[arg(short = 'z', long, default_value_t = 5)]
    pub time: u64,
}

/// Flags of `connection-count`.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf connection-count",
    about = "Open many connections (with channels and consumers) and report memory use"
)]
pub struct ConnectionCountArgs {
    /// URI to connect to (amqp://, or amqps:// for TLS; add ?verify=none for a
    /// self-signed certificate)
    #[arg(long, default_value = "amqp://guest:guest@localhost")]
    pub uri: String,
    /// Number of connections to add per round
    #[arg(short = 'x', long = "count", default_value_t = 100)]
    pub connections: usize,
    /// Channels per connection
    #[arg(short = 'c', long, default_value_t = 1)]
    pub channels: u16,
    /// Consumers per channel
    #[arg(short = 'C', long, default_value_t = 0)]
    pub consumers: usize,
    /// Queue the consumers consume from
    #[arg(short = 'u', long, default_value = "connection-count")]
    pub queue: String,
    /// Connect to random 127.0.x.y addresses (spreads the source ports)
    #[arg(short = 'l', long)]
    pub localhost: bool,
}

fn parse_uri(s: &str) -> Result<AmqpUri, i32> {
    uri::parse(s).map_err(|e| {
        eprintln!("{e}");
        2
    })
}

/// One timed case of queue-churn: warm up, then count iterations for `time`.
async fn churn_case(
    conn: &mut Connection,
    label: &str,
    durable: bool,
    warmup: Duration,
    time: Duration,
) -> Result<(), Error> {
    let none = FieldTable::new();
    let mut seq = 0u64;
    let salt: u32 = rand::random();
    let mut once = async |conn: &mut Connection| -> Result<(), Error> {
        seq += 1;
        let name = if durable {
            format!("queue-churn-durable-{salt:08x}{seq:08x}")
        } else {
            String::new()
        };
        let declare = QueueDeclare {
            name: &name,
            passive: false,
            durable,
            exclusive: !durable,
            auto_delete: !durable,
            arguments: &none,
        };
        let q = conn.queue_declare(1, declare).await?;
        conn.queue_delete(1, &q).await?;
        Ok(())
    };
    let until = Instant::now() + warmup;
    while Instant::now() < until {
        once(conn).await?;
    }
    let (start, mut n) = (Instant::now(), 0u64);
    let mut per_op = Vec::with_capacity(4096);
    while start.elapsed() < time {
        let t = Instant::now();
        once(conn).await?;
        per_op.push(t.elapsed().as_secs_f64());
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let mean = per_op.iter().sum::<f64>() / per_op.len().max(1) as f64;
    let var = per_op.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / per_op.len().max(1) as f64;
    println!(
        "{label:>30} {:>10.1} ops/s ({:>8.1}µs) (± {:.2}%)",
        n as f64 / secs,
        mean * 1e6,
        if mean > 0.0 { var.sqrt() / mean * 100.0 } else { 0.0 }
    );
    Ok(())
}

/// `lavinmqperf queue-churn`.
pub async fn queue_churn(args: QueueChurnArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    let run = async {
        let mut conn = Connection::connect(&uri, "lavinmqperf queue-churn").await?;
        conn.open_channel(1).await?;
        let time = Duration::from_secs(args.time.max(1));
        let warmup = Duration::from_secs(2);
        churn_case(&mut conn, "create/delete transient queue", false, warmup, time).await?;
        churn_case(&mut conn, "create/delete durable queue", true, warmup, time).await?;
        conn.close().await
    };
    tokio::select! {
        r = run => match r {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        },
        () = exit_signal() => 130,
    }
}

/// Opens one connection with its channels and consumers.
async fn open_one(uri: AmqpUri, args: ConnectionCountArgs) -> Result<Connection, Error> {
    let mut conn = Connection::connect(&uri, "lavinmqperf connection-count").await?;
    let none = FieldTable::new();
    for ch in 1..=args.channels {
        conn.open_channel(ch).await?;
        if args.consumers > 0 && ch == 1 {
            let declare = QueueDeclare {
                name: &args.queue,
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: &none,
            };
            conn.queue_declare(ch, declare).await?;
        }
        for _ in 0..args.consumers {
            // No-wait consumes, like LavinMQ's tool: nothing to wait for.
            let consume = Method::BasicConsume {
                queue: ShortStr::from(args.queue.as_str()),
                consumer_tag: ShortStr::default(),
                no_local: false,
                no_ack: true,
                exclusive: false,
                nowait: true,
                arguments: FieldTable::new(),
            };
            conn.send(ch, &consume).await?;
        }
    }
    Ok(conn)
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn humanize(bytes: u64) -> String {
    let mut v = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if v < 1024.0 {
            return format!("{v:.1}{unit}");
        }
        v /= 1024.0;
    }
    format!("{v:.1}TiB")
}

/// `lavinmqperf connection-count`.
pub async fn connection_count(args: ConnectionCountArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    let mut conns = Vec::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let run = async {
        loop {
            let mut left = args.connections;
            while left > 0 {
                let slice = left.min(100);
                left -= slice;
                let start = Instant::now();
                let mut set = JoinSet::new();
                for _ in 0..slice {
                    let mut uri = uri.clone();
                    if args.localhost {
                        uri.host = format!("127.0.{}.{}", rand::random::<u8>(), rand::random::<u8>());
                    }
                    set.spawn(open_one(uri, args.clone()));
                }
                while let Some(r) = set.join_next().await {
                    match r {
                        Ok(Ok(c)) => conns.push(c),
                        Ok(Err(e)) => return Err(e.to_string()),
                        Err(e) => return Err(e.to_string()),
                    }
                    print!(".");
                    let _ = std::io::stdout().flush();
                }
                println!(" {}ms", start.elapsed().as_millis());
            }
            let n = conns.len();
            println!();
            println!(
                "{n} connections {} channels {} consumers. Using {} memory.",
                n * usize::from(args.channels),
                n * usize::from(args.channels) * args.consumers,
                humanize(rss())
            );
            println!("Press enter to add {} connections or ctrl-c to abort", args.connections);
            match stdin.next_line().await {
                Ok(Some(_)) => {}
                // No more input: done.
                Ok(None) | Err(_) => return Ok(()),
            }
        }
    };
    tokio::select! {
        r = run => match r {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{e}");
                1
            }
        },
        () = exit_signal() => 0,
    }
}
