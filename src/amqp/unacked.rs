//! Messages delivered on a channel and not yet acknowledged, in delivery-tag order,
//! so that `multiple` acks and single acks both find their entries by binary search.

use std::collections::VecDeque;
use std::sync::Arc;

use super::consumer::AmqpConsumer;
use crate::core::queue::Queue;
use crate::store::SegPos;

/// One delivered message awaiting ack.
pub struct Unacked {
    /// Channel-local delivery tag.
    pub tag: u64,
    /// Queue the message came from.
    pub queue: Arc<Queue>,
    /// Where the message is stored.
    pub pos: SegPos,
    /// Consumer it went to (`None` for basic.get), whose prefetch it counts against.
    pub consumer: Option<Arc<AmqpConsumer>>,
    /// When it was delivered (ms since the epoch, coarse clock).
    pub delivered_at: i64,
    /// How long it may stay unacknowledged (ms), when a consumer timeout applies.
    pub timeout: Option<u64>,
}

/// Delivery tags and the unacked deliveries of a channel.
#[derive(Default)]
pub struct UnackedList {
    last_tag: u64,
    list: VecDeque<Unacked>,
}

impl UnackedList {
    /// Allocates the next delivery tag.
    pub fn next_tag(&mut self) -> u64 {
        self.last_tag += 1;
        self.last_tag
    }

    /// Records a delivery (tags arrive in increasing order).
    pub fn push(&mut self, u: Unacked) {
        self.list.push_back(u);
    }

    /// Removes the entries an ack/nack/reject names: `tag` alone, or with
    /// `multiple` every tag up to it (0 = all). As in RabbitMQ, `tag` itself must be
    /// unacked (unless 0 with `multiple`); otherwise `None`.
    pub fn take(&mut self, tag: u64, multiple: bool) -> Option<Vec<Unacked>> {
        if multiple && tag == 0 {
            return Some(self.list.drain(..).collect());
        }
        let i = self.list.binary_search_by_key(&tag, |u| u.tag).ok()?;
        if multiple {
            return Some(self.list.drain(..=i).collect());
        }
        self.list.remove(i).map(|u| vec![u])
    }

    /// Puts entries back (a rolled-back transaction), keeping tag order.
    pub fn restore(&mut self, entries: Vec<Unacked>) {
        for u in entries {
            let i = self.list.partition_point(|x| x.tag < u.tag);
            self.list.insert(i, u);
        }
    }

    /// Removes every entry.
    pub fn take_all(&mut self) -> Vec<Unacked> {
        self.list.drain(..).collect()
    }

    /// The first delivery kept unacknowledged past its consumer timeout at
    /// `now`: its timeout in milliseconds.
    pub fn timed_out(&self, now: i64) -> Option<u64> {
        self.list
            .iter()
            .filter_map(|u| u.timeout.map(|t| (u.delivered_at, t)))
            .find(|&(at, timeout)| now.saturating_sub(at) > timeout as i64)
            .map(|(_, timeout)| timeout)
    }

    /// The entries, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Unacked> {
        self.list.iter()
    }

    /// Number of unacked deliveries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when nothing is unacked.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}
