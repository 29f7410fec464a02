//! The deliveries of a connection awaiting PUBACK or PUBREC, in a table
//! indexed by packet identifier.
//!
//! Every QoS 1 or 2 delivery stores an entry and every acknowledgement takes
//! it out again, on two different threads, hundreds of thousands of times a
//! second. A hash map spreads consecutive identifiers over all its memory, so
//! with thousands in flight nearly every insert and removal missed the cache.
//! Here the identifiers are reused last-freed first: the table only grows to
//! the most deliveries ever in flight at once, and the entries in use stay
//! together in a few cache lines.

/// Entries of type `T` by packet identifier (1 to 65535).
pub struct Inflight<T> {
    /// Slot `i` holds identifier `i + 1`.
    slots: Vec<Option<T>>,
    /// Identifiers freed, within `slots`; the last one freed is reused first.
    free: Vec<u16>,
}

impl<T> Default for Inflight<T> {
    fn default() -> Self {
        Inflight {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Inflight<T> {
    /// Stores `entry` under a free identifier for which `reserved` is false
    /// (identifiers held elsewhere, such as QoS 2 exchanges awaiting PUBCOMP)
    /// and returns it; `None` when none of the 65535 is free.
    pub fn insert(&mut self, entry: T, reserved: impl Fn(u16) -> bool) -> Option<u16> {
        let id = self.free_id(reserved)?;
        self.slots[usize::from(id) - 1] = Some(entry);
        Some(id)
    }

    fn free_id(&mut self, reserved: impl Fn(u16) -> bool) -> Option<u16> {
        // Freed identifiers are not reserved: `take` keeps them out of the
        // list until `free` puts them back.
        while let Some(id) = self.free.pop() {
            if self.slots[usize::from(id) - 1].is_none() {
                return Some(id);
            }
        }
        while self.slots.len() < usize::from(u16::MAX) {
            self.slots.push(None);
            let id = self.slots.len() as u16;
            if !reserved(id) {
                return Some(id);
            }
        }
        // Every identifier has been used at some point: take any free one.
        let i = self
            .slots
            .iter()
            .enumerate()
            .position(|(i, s)| s.is_none() && !reserved(i as u16 + 1))?;
        Some(i as u16 + 1)
    }

    /// Takes out the entry of `id`, freeing the identifier.
    pub fn remove(&mut self, id: u16) -> Option<T> {
        let entry = self.take(id)?;
        self.free.push(id);
        Some(entry)
    }

    /// Takes out the entry of `id` but keeps the identifier taken, until
    /// [`Inflight::free`] (a QoS 2 delivery awaiting PUBCOMP).
    pub fn take(&mut self, id: u16) -> Option<T> {
        self.slots.get_mut(usize::from(id).checked_sub(1)?)?.take()
    }

    /// Frees an identifier that [`Inflight::take`] or the caller's `reserved`
    /// kept taken.
    pub fn free(&mut self, id: u16) {
        if (1..=self.slots.len()).contains(&usize::from(id)) {
            self.free.push(id);
        }
    }

    /// Takes out every entry `take` says yes to, with its identifier.
    pub fn drain_where(&mut self, mut take: impl FnMut(&T) -> bool) -> Vec<(u16, T)> {
        let mut out = Vec::new();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(&mut take)
                && let Some(entry) = slot.take()
            {
                let id = i as u16 + 1;
                self.free.push(id);
                out.push((id, entry));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_reused_last_freed_first_and_never_while_taken() {
        let mut t = Inflight::default();
        let ids: Vec<u16> = (0..4).map(|n| t.insert(n, |_| false).unwrap()).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(t.remove(2), Some(1));
        assert_eq!(t.remove(2), None, "already taken out");
        assert_eq!(t.remove(0), None);
        assert_eq!(t.remove(9), None);
        assert_eq!(t.remove(3), Some(2));
        assert_eq!(t.insert(10, |_| false), Some(3));
        assert_eq!(t.insert(11, |_| false), Some(2));
        assert_eq!(t.insert(12, |_| false), Some(5));
    }

    #[test]
    fn reserved_and_taken_identifiers_stay_out_until_freed() {
        let mut t = Inflight::default();
        assert_eq!(t.insert("a", |id| id <= 2), Some(3));
        assert_eq!(t.insert("b", |id| id <= 2), Some(4));
        // 1 and 2 were passed over while reserved; freed, they are used.
        t.free(2);
        assert_eq!(t.insert("c", |_| false), Some(2));
        // Taken out but kept (awaiting PUBCOMP): not reused until freed.
        assert_eq!(t.take(3), Some("a"));
        assert_eq!(t.insert("d", |_| false), Some(5));
        t.free(3);
        assert_eq!(t.insert("e", |_| false), Some(3));
    }

    #[test]
    fn all_65535_identifiers_can_be_in_flight() {
        let mut t = Inflight::default();
        for n in 0..u32::from(u16::MAX) {
            assert!(t.insert(n, |_| false).is_some());
        }
        assert_eq!(t.insert(0, |_| false), None);
        assert_eq!(t.remove(40_000), Some(39_999));
        assert_eq!(t.insert(7, |_| false), Some(40_000));
        let odd = t.drain_where(|n| n % 2 == 1);
        assert_eq!(odd.len(), 32_767);
        assert!(odd.iter().all(|(id, n)| u32::from(*id) == n + 1 || *n == 7));
    }
}
