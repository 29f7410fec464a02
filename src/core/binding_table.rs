//! The bindings of one exchange: a list to iterate, and a hash index to find
//! one binding without a scan. Binding, unbinding and checking for a binding
//! then cost the same with ten or a hundred thousand bindings on the exchange;
//! a scan per bind made bind churn slow down as bindings accumulated, and
//! deleting a queue with many bindings took quadratic time.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

use super::FieldTable;
use super::exchange::{Binding, Destination};
use super::headers::tables_equivalent;

/// The bindings of an exchange. Their order is not kept across removals.
#[derive(Debug, Default)]
pub struct BindingTable {
    all: Vec<Binding>,
    /// Positions in `all` by the hash of (destination, routing key); the
    /// bindings there are compared in full, so a collision costs only time.
    index: HashMap<u64, SmallVec<[usize; 1]>>,
    /// Keyed per table (SipHash), so that clients cannot choose routing keys
    /// that collide.
    hasher: RandomState,
}

impl BindingTable {
    fn slot(&self, destination: &Destination, routing_key: &str) -> u64 {
        self.hasher.hash_one((destination.identity(), routing_key))
    }

    /// Every binding, for iteration.
    pub fn iter(&self) -> std::slice::Iter<'_, Binding> {
        self.all.iter()
    }

    /// A copy of every binding.
    pub fn to_vec(&self) -> Vec<Binding> {
        self.all.clone()
    }

    /// How many bindings there are.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Positions of the bindings to `destination` with `routing_key`, whatever
    /// their arguments.
    fn positions<'a>(&'a self, destination: &'a Destination, routing_key: &'a str) -> impl Iterator<Item = usize> + 'a {
        let slot = self.slot(destination, routing_key);
        self.index.get(&slot).into_iter().flatten().copied().filter(move |&i| {
            let b = &self.all[i];
            b.destination == *destination && b.routing_key == routing_key
        })
    }

    /// The bindings to `destination` with `routing_key`, whatever their arguments.
    pub fn with_key<'a>(
        &'a self,
        destination: &'a Destination,
        routing_key: &'a str,
    ) -> impl Iterator<Item = &'a Binding> + 'a {
        self.positions(destination, routing_key).map(|i| &self.all[i])
    }

    /// The position of the binding with exactly this identity (RabbitMQ's:
    /// destination, routing key and arguments).
    fn find(&self, destination: &Destination, routing_key: &str, arguments: &FieldTable) -> Option<usize> {
        self.positions(destination, routing_key)
            .find(|&i| tables_equivalent(&self.all[i].arguments, arguments))
    }

    /// True when this exact binding exists.
    pub fn contains(&self, destination: &Destination, routing_key: &str, arguments: &FieldTable) -> bool {
        self.find(destination, routing_key, arguments).is_some()
    }

    /// True when any binding to `destination` has `routing_key`.
    pub fn has_key(&self, destination: &Destination, routing_key: &str) -> bool {
        self.positions(destination, routing_key).next().is_some()
    }

    /// Adds a binding the caller has checked is not there yet.
    pub fn insert(&mut self, binding: Binding) {
        let slot = self.slot(&binding.destination, &binding.routing_key);
        self.index.entry(slot).or_default().push(self.all.len());
        self.all.push(binding);
    }

    /// Removes the binding with this identity; false if there was none.
    pub fn remove(&mut self, destination: &Destination, routing_key: &str, arguments: &FieldTable) -> bool {
        let Some(pos) = self.find(destination, routing_key, arguments) else {
            return false;
        };
        let slot = self.slot(destination, routing_key);
        self.unindex(slot, pos);
        let last = self.all.len() - 1;
        self.all.swap_remove(pos);
        if pos != last {
            // The last binding moved into the gap: point its entry there.
            let moved = &self.all[pos];
            let moved_slot = self.slot(&moved.destination, &moved.routing_key);
            if let Some(p) = self
                .index
                .get_mut(&moved_slot)
                .and_then(|ps| ps.iter_mut().find(|p| **p == last))
            {
                *p = pos;
            }
        }
        self.shrink_if_sparse();
        true
    }

    /// Gives back the room of a burst of bindings once most are gone (a
    /// shrink copies what is left, after at least as many removals).
    fn shrink_if_sparse(&mut self) {
        let len = self.all.len();
        if self.all.capacity() > 64 && len < self.all.capacity() / 4 {
            self.all.shrink_to(len * 2);
            self.index.shrink_to(len * 2);
        }
    }

    fn unindex(&mut self, slot: u64, pos: usize) {
        if let Some(ps) = self.index.get_mut(&slot) {
            ps.retain(|p| *p != pos);
            if ps.is_empty() {
                self.index.remove(&slot);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::exchange::{Exchange, ExchangeKind};
    use crate::core::{FieldTable, FieldValue};
    use std::sync::Arc;

    fn dest(name: &str) -> Destination {
        Destination::Exchange(Arc::new(Exchange::new(
            name,
            ExchangeKind::Direct,
            false,
            false,
            false,
            FieldTable::new(),
        )))
    }

    fn binding(d: &Destination, key: &str, args: &FieldTable) -> Binding {
        Binding {
            destination: d.clone(),
            routing_key: key.into(),
            arguments: args.clone(),
        }
    }

    #[test]
    fn finds_and_removes_in_any_order() {
        let (a, b) = (dest("a"), dest("b"));
        let none = FieldTable::new();
        let mut t = BindingTable::default();
        for i in 0..1000 {
            t.insert(binding(if i % 2 == 0 { &a } else { &b }, &format!("k{i}"), &none));
        }
        assert_eq!(t.len(), 1000);
        assert!(t.contains(&a, "k0", &none));
        assert!(!t.contains(&b, "k0", &none));
        // Remove from the front, the middle and the end: the moved bindings stay findable.
        for i in [0, 500, 998, 1, 999, 250] {
            let d = if i % 2 == 0 { &a } else { &b };
            assert!(t.remove(d, &format!("k{i}"), &none), "k{i}");
            assert!(!t.remove(d, &format!("k{i}"), &none), "k{i} twice");
        }
        assert_eq!(t.len(), 994);
        for i in 0..1000 {
            let d = if i % 2 == 0 { &a } else { &b };
            let gone = [0, 500, 998, 1, 999, 250].contains(&i);
            assert_eq!(t.contains(d, &format!("k{i}"), &none), !gone, "k{i}");
        }
        // Most go: the table shrinks, and what is left stays findable.
        for i in 0..980 {
            let d = if i % 2 == 0 { &a } else { &b };
            t.remove(d, &format!("k{i}"), &none);
        }
        assert_eq!(t.len(), 18);
        assert!(t.all.capacity() < 100, "{}", t.all.capacity());
        for i in 980..1000 {
            let d = if i % 2 == 0 { &a } else { &b };
            let gone = [998, 999].contains(&i);
            assert_eq!(t.contains(d, &format!("k{i}"), &none), !gone, "k{i}");
            t.remove(d, &format!("k{i}"), &none);
        }
        assert!(t.is_empty());
        assert!(t.index.is_empty());
    }

    #[test]
    fn arguments_tell_bindings_with_one_key_apart() {
        let a = dest("a");
        let none = FieldTable::new();
        let mut x = FieldTable::new();
        x.insert("x-match", FieldValue::LongStr("any".into()));
        let mut t = BindingTable::default();
        t.insert(binding(&a, "k", &none));
        t.insert(binding(&a, "k", &x));
        assert!(t.contains(&a, "k", &x));
        assert_eq!(t.with_key(&a, "k").count(), 2);
        assert!(t.remove(&a, "k", &none));
        assert!(t.has_key(&a, "k"));
        assert!(t.contains(&a, "k", &x));
        assert!(t.remove(&a, "k", &x));
        assert!(!t.has_key(&a, "k"));
    }
}
