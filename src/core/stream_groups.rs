//! Single active consumer on streams, as RabbitMQ's stream clients use it:
//! consumers of one stream that share a name form a group in which one at a
//! time reads. For a partition of a super stream the active member is the
//! partition's index modulo the group's size, so that a super stream's
//! partitions spread over the group's consumers; otherwise it is the oldest
//! member. Members learn of changes through [`GroupMember::set_active`].

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// A consumer in a group, told when it becomes active or stops being so.
pub trait GroupMember: Send + Sync {
    /// The member becomes the group's active consumer (true) or stops being
    /// it (false). Called without the groups' lock held.
    fn set_active(&self, active: bool);
    /// The group's stream was deleted: the member is dropped from it.
    fn stream_deleted(&self);
}

struct Member {
    id: u64,
    member: Arc<dyn GroupMember>,
    active: bool,
}

#[derive(Default)]
struct Group {
    members: Vec<Member>,
    /// The stream's place among its super stream's partitions.
    partition: Option<usize>,
}

impl Group {
    /// Picks the active member; returns the members whose state changed,
    /// those deactivated first.
    fn rebalance(&mut self) -> Vec<(Arc<dyn GroupMember>, bool)> {
        let n = self.members.len();
        if n == 0 {
            return Vec::new();
        }
        let target = self.partition.map_or(0, |p| p % n);
        let mut off = Vec::new();
        let mut on = Vec::new();
        for (i, m) in self.members.iter_mut().enumerate() {
            let should = i == target;
            if m.active != should {
                m.active = should;
                match should {
                    true => on.push((m.member.clone(), true)),
                    false => off.push((m.member.clone(), false)),
                }
            }
        }
        off.extend(on);
        off
    }
}

/// The groups of a vhost, by stream and consumer name.
#[derive(Default)]
pub struct StreamGroups {
    groups: Mutex<HashMap<(String, String), Group>>,
}

fn notify(changes: Vec<(Arc<dyn GroupMember>, bool)>) {
    for (m, active) in changes {
        m.set_active(active);
    }
}

impl StreamGroups {
    /// Adds member `id` to the group `name` of `stream` (`partition`: the
    /// stream's index in its super stream); it may become active at once.
    pub fn join(&self, stream: &str, name: &str, partition: Option<usize>, id: u64, member: Arc<dyn GroupMember>) {
        let changes = {
            let mut groups = self.groups.lock();
            let g = groups.entry((stream.to_owned(), name.to_owned())).or_default();
            g.partition = partition.or(g.partition);
            g.members.push(Member {
                id,
                member,
                active: false,
            });
            g.rebalance()
        };
        notify(changes);
    }

    /// Removes member `id`; another may become active.
    pub fn leave(&self, stream: &str, name: &str, id: u64) {
        let changes = {
            let mut groups = self.groups.lock();
            let key = (stream.to_owned(), name.to_owned());
            let Some(g) = groups.get_mut(&key) else {
                return;
            };
            g.members.retain(|m| m.id != id);
            if g.members.is_empty() {
                groups.remove(&key);
                return;
            }
            g.rebalance()
        };
        notify(changes);
    }

    /// Drops every group of the deleted stream `stream`, telling each
    /// member (those waiting their turn are not consumers of the queue, so
    /// the queue cannot tell them).
    pub fn drop_stream(&self, stream: &str) {
        let members: Vec<Arc<dyn GroupMember>> = {
            let mut groups = self.groups.lock();
            let keys: Vec<_> = groups.keys().filter(|(s, _)| s == stream).cloned().collect();
            keys.into_iter()
                .filter_map(|k| groups.remove(&k))
                .flat_map(|g| g.members.into_iter().map(|m| m.member))
                .collect()
        };
        for m in members {
            m.stream_deleted();
        }
    }

    /// The members of each group of `stream`: name, then (id, active) in
    /// the order they joined.
    pub fn of_stream(&self, stream: &str) -> Vec<(String, Vec<(u64, bool)>)> {
        let groups = self.groups.lock();
        let mut out: Vec<_> = groups
            .iter()
            .filter(|((s, _), _)| s == stream)
            .map(|((_, name), g)| (name.clone(), g.members.iter().map(|m| (m.id, m.active)).collect()))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};

    struct Probe(AtomicI32);
    impl GroupMember for Probe {
        fn set_active(&self, active: bool) {
            self.0.store(if active { 1 } else { -1 }, Ordering::SeqCst);
        }
        fn stream_deleted(&self) {
            self.0.store(9, Ordering::SeqCst);
        }
    }

    fn probe() -> Arc<Probe> {
        Arc::new(Probe(AtomicI32::new(0)))
    }

    #[test]
    fn the_oldest_member_reads_and_the_next_takes_over() {
        let g = StreamGroups::default();
        let (a, b) = (probe(), probe());
        g.join("s", "app", None, 1, a.clone());
        g.join("s", "app", None, 2, b.clone());
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 0, "b waits, untold");
        g.leave("s", "app", 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
        assert_eq!(g.of_stream("s"), [("app".to_owned(), vec![(2, true)])]);
        g.drop_stream("s");
        assert_eq!(b.0.load(Ordering::SeqCst), 9, "told");
        assert!(g.of_stream("s").is_empty());
    }

    #[test]
    fn partitions_spread_over_the_members() {
        let g = StreamGroups::default();
        let (a, b) = (probe(), probe());
        // Partition 1 of a super stream: with two members, the second reads.
        g.join("ss-1", "app", Some(1), 1, a.clone());
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        g.join("ss-1", "app", Some(1), 2, b.clone());
        assert_eq!(a.0.load(Ordering::SeqCst), -1, "a hands over");
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
    }
}
