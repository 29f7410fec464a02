//! Gives memory back to the operating system after connections close, or
//! after something else asked for it (a management API answer listing
//! thousands of queues builds a large JSON tree for a moment).
//!
//! Each connection allocates its buffers on whichever worker thread served
//! it, so glibc spreads them over its per-thread arenas; freed, that memory
//! stays with the process. Closing 1,000 idle connections left about 13 MB
//! of resident memory behind that `malloc_trim` returns. The trim runs only
//! after connections have closed, at most once per [`TRIM_INTERVAL`], on a
//! blocking thread: it walks every arena, which would stall a worker.
//!
//! Code is unmapped at the end of start-up and then every [`TRIM_INTERVAL`]
//! ([`code_pages`]): what runs maps itself back at once, what ran once (the
//! start-up, a management page) leaves the resident set.

#[cfg(target_os = "linux")]
pub mod code_pages;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::core::broker::Broker;

/// How often to look for closed connections and to unmap code.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Set by [`request`], cleared by the next trim.
static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks for a trim at the next interval: for code that has just freed a lot
/// of heap.
pub fn request() {
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Unmaps code after each interval, and trims the heap after each interval
/// in which a connection closed or a trim was [`request`]ed, until
/// `shutdown`.
pub async fn trim_periodically(broker: Arc<Broker>, shutdown: CancellationToken) {
    let churn = broker.connections.churn.clone();
    let mut seen = churn.connection_closed.get();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TRIM_INTERVAL) => {}
            _ = shutdown.cancelled() => return,
        }
        let closed = churn.connection_closed.get();
        let heap = closed != seen || REQUESTED.swap(false, Ordering::Relaxed);
        seen = closed;
        let _ = tokio::task::spawn_blocking(move || {
            if heap {
                release_heap();
            }
            release_code();
        })
        .await;
    }
}

/// Unmaps the code start-up ran, on a blocking thread: for the end of
/// start-up.
pub fn after_start_up() {
    tokio::task::spawn_blocking(release_code);
}

#[cfg(target_os = "linux")]
fn release_code() {
    code_pages::release();
}

#[cfg(not(target_os = "linux"))]
fn release_code() {}

/// Returns free heap memory to the OS where the allocator can.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_heap() {
    // SAFETY: malloc_trim only inspects and releases the allocator's own
    // free memory; it is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_heap() {}
