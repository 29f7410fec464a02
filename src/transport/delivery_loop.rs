//! The task that feeds one consumer, whatever its protocol: it runs its
//! queue's delivery (which writes into the connection's outbox) whenever woken
//! by a publish, a settlement or the socket draining.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use super::outbox::Outbox;
use crate::core::queue::Queue;

/// Delivery batches run before the task yields to other tasks.
const ROUNDS_PER_TURN: u32 = 16;

/// Runs `queue`'s delivery until `cancelled` is set or the outbox closes;
/// `wake` is notified by the consumer when there may be work.
pub async fn run(queue: &Queue, outbox: &Outbox, wake: &Notify, cancelled: &AtomicBool) {
    let is_cancelled = || cancelled.load(Ordering::Acquire);
    loop {
        if is_cancelled() || outbox.is_closed() {
            return;
        }
        if queue.deliver_ready() {
            // Keep going for a while before letting other tasks run: busy
            // publishers must not starve the consumers of their messages.
            let mut rounds = 1;
            while rounds < ROUNDS_PER_TURN && !is_cancelled() && queue.deliver_ready() {
                rounds += 1;
            }
            tokio::task::yield_now().await;
        } else if outbox.is_full() {
            outbox.wait_for_space().await;
        } else {
            wake.notified().await;
        }
    }
}
