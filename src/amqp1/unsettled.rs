//! The deliveries a session sent unsettled, in delivery-id order.
//!
//! A session hands out delivery ids in order, and clients settle mostly the
//! oldest first, in ranges. An ordered ring answers a range by a binary
//! search and takes from its front, where a hash map paid a hash per
//! delivery and per settled id. Deliveries settled out of order leave holes
//! that the front passes over; the ring is compacted when holes make up
//! most of it, so a client that never settles one old delivery does not make
//! it grow without bound.

use std::collections::VecDeque;

/// Unsettled deliveries (`T`: what the session keeps of one) by delivery
/// id, oldest first.
pub struct Unsettled<T> {
    /// Ascending (as sequence numbers: relative to the front) delivery ids,
    /// with the delivery or a hole where it was settled out of order.
    slots: VecDeque<(u32, Option<T>)>,
    /// Holes among `slots`.
    holes: usize,
}

impl<T> Default for Unsettled<T> {
    fn default() -> Self {
        Unsettled {
            slots: VecDeque::new(),
            holes: 0,
        }
    }
}

impl<T> Unsettled<T> {
    /// Records delivery `id`, the newest of the session so far.
    pub fn insert(&mut self, id: u32, delivery: T) {
        self.slots.push_back((id, Some(delivery)));
    }

    /// Deliveries not yet settled.
    pub fn len(&self) -> usize {
        self.slots.len() - self.holes
    }

    /// True when every delivery is settled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the deliveries in `first..=last` (all of them when `range` is
    /// None) that `keep` selects.
    pub fn take(&mut self, range: Option<(u32, u32)>, keep: impl Fn(&T) -> bool) -> Vec<T> {
        let Some(&(front, _)) = self.slots.front() else {
            return Vec::new();
        };
        // Positions relative to the oldest delivery, signed so that a range
        // starting before it (already settled) still reaches into it.
        let rel = |id: u32| i64::from(id.wrapping_sub(front) as i32);
        let (from, to) = match range {
            Some((first, last)) => (rel(first), rel(last)),
            None => (i64::MIN, i64::MAX),
        };
        let start = self.slots.partition_point(|(id, _)| rel(*id) < from);
        let mut taken = Vec::new();
        for (id, slot) in self.slots.range_mut(start..) {
            if rel(*id) > to {
                break;
            }
            if slot.as_ref().is_some_and(&keep)
                && let Some(d) = slot.take()
            {
                taken.push(d);
                self.holes += 1;
            }
        }
        while let Some((_, None)) = self.slots.front() {
            self.slots.pop_front();
            self.holes -= 1;
        }
        if self.holes > 64 && self.holes * 2 > self.slots.len() {
            self.slots.retain(|(_, d)| d.is_some());
            self.holes = 0;
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(ids: impl IntoIterator<Item = u32>) -> Unsettled<u32> {
        let mut u = Unsettled::default();
        for id in ids {
            u.insert(id, id);
        }
        u
    }

    #[test]
    fn ranges_take_what_they_cover_oldest_first_or_not() {
        let mut u = filled(10..20);
        assert_eq!(u.take(Some((0, 11)), |_| true), vec![10, 11]);
        assert_eq!(u.take(Some((15, 16)), |_| true), vec![15, 16]);
        assert_eq!(u.len(), 6);
        assert_eq!(u.take(Some((15, 16)), |_| true), Vec::<u32>::new());
        assert_eq!(u.take(Some((12, 30)), |d| d % 2 == 0), vec![12, 14, 18]);
        assert_eq!(u.take(None, |_| true), vec![13, 17, 19]);
        assert!(u.is_empty());
        assert_eq!(u.take(Some((0, 5)), |_| true), Vec::<u32>::new());
    }

    #[test]
    fn ids_wrap_around() {
        let mut u = filled([u32::MAX - 1, u32::MAX, 0, 1, 2]);
        assert_eq!(u.take(Some((u32::MAX, 0)), |_| true), vec![u32::MAX, 0]);
        assert_eq!(u.take(Some((u32::MAX - 5, 1)), |_| true), vec![u32::MAX - 1, 1]);
        assert_eq!(u.take(None, |_| true), vec![2]);
    }

    #[test]
    fn holes_behind_an_old_delivery_do_not_pile_up() {
        let mut u = filled(0..10_000);
        for id in 1..10_000 {
            assert_eq!(u.take(Some((id, id)), |_| true), vec![id]);
        }
        assert_eq!(u.len(), 1);
        assert!(u.slots.len() < 200, "{} slots kept", u.slots.len());
        assert_eq!(u.take(Some((0, 0)), |_| true), vec![0]);
        assert!(u.slots.is_empty());
    }
}
