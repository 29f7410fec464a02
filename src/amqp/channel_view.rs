//! An AMQP channel as the management API sees it: its settings, consumers and
//! message counts, and cancelling one of its consumers from the broker's side.

use std::sync::atomic::Ordering;

use super::channel::ChannelShared;
use crate::core::connections::{ChannelDetails, ChannelView, ConsumerDetails, UnackedDetails};
use crate::core::stats::{ChannelCounters, Rates};

impl ChannelView for ChannelShared {
    fn number(&self) -> u16 {
        self.number
    }

    fn details(&self) -> ChannelDetails {
        ChannelDetails {
            prefetch_count: self.prefetch.load(Ordering::Relaxed),
            global_prefetch_count: self.global_prefetch.load(Ordering::Relaxed),
            confirm: self.confirm_mode.load(Ordering::Relaxed),
            transactional: self.tx_mode.load(Ordering::Relaxed),
            unacked: self.unacked.lock().len() as u64,
            unconfirmed: u64::from(self.awaiting_sync()),
            flow_active: self.flow_active(),
        }
    }

    fn consumers(&self) -> Vec<ConsumerDetails> {
        let mut all: Vec<_> = self
            .consumers
            .lock()
            .values()
            .map(|c| ConsumerDetails {
                tag: c.tag.clone(),
                queue: c.queue.name.clone(),
                ack_required: !c.no_ack,
                exclusive: c.exclusive,
                prefetch_count: c.prefetch.load(Ordering::Relaxed),
                priority: c.priority,
                active: c.queue.is_consumer_active(c.id),
            })
            .collect();
        all.sort_by(|a, b| a.tag.cmp(&b.tag));
        all
    }

    fn set_prefetch(&self, prefetch: u16) -> bool {
        let prefetch = u32::from(prefetch);
        self.prefetch.store(prefetch, Ordering::Relaxed);
        for c in self.consumers.lock().values() {
            c.prefetch.store(prefetch, Ordering::Relaxed);
            // A higher limit may let it deliver at once.
            crate::core::consumer::Consumer::notify(&**c);
        }
        true
    }

    fn cancel_consumer(&self, tag: &str) -> bool {
        let Some(c) = self.consumers.lock().get(tag).cloned() else {
            return false;
        };
        c.cancel();
        c.queue.detach_consumer(c.id);
        self.server_cancel(tag);
        true
    }

    fn unacked(&self, queue: &str) -> Vec<UnackedDetails> {
        self.unacked
            .lock()
            .iter()
            .filter(|u| u.queue.name == queue)
            .map(|u| UnackedDetails {
                delivery_tag: u.tag,
                queue: u.queue.name.clone(),
                consumer_tag: u.consumer.as_ref().map(|c| c.tag.clone()),
                delivered_at: u.delivered_at,
            })
            .collect()
    }

    fn counters(&self) -> &ChannelCounters {
        &self.counters
    }

    fn rates(&self) -> &Rates {
        &self.rates
    }
}
