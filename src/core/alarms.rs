//! Resource alarms: the broker-wide conditions (low disk space, high memory
//! use) under which publishers are blocked. Each monitor raises and clears
//! its own alarm; connections follow them all through one watch channel, so
//! a publisher is held while any alarm is on and is told why, in RabbitMQ's
//! words, with `connection.blocked`.

use tokio::sync::watch;

/// Which alarms are in effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Alarms {
    /// Free disk space is below its threshold.
    pub disk: bool,
    /// Memory use is above its high watermark.
    pub memory: bool,
}

impl Alarms {
    /// True when publishers must be blocked.
    pub fn any(self) -> bool {
        self.disk || self.memory
    }

    /// The reason `connection.blocked` carries, as RabbitMQ words it
    /// (`low on memory & low on disk` when both are on).
    pub fn reason(self) -> &'static str {
        match (self.memory, self.disk) {
            (true, true) => "low on memory & low on disk",
            (true, false) => "low on memory",
            _ => "low on disk",
        }
    }

    /// The alarms by name, for health checks: `memory`, `disk`.
    pub fn names(self) -> Vec<&'static str> {
        [("memory", self.memory), ("disk", self.disk)]
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect()
    }
}

/// The alarms in effect, for monitors to set and connections to follow.
pub struct ResourceAlarms {
    state: watch::Sender<Alarms>,
}

impl Default for ResourceAlarms {
    fn default() -> Self {
        ResourceAlarms {
            state: watch::channel(Alarms::default()).0,
        }
    }
}

impl ResourceAlarms {
    /// The alarms in effect now.
    pub fn current(&self) -> Alarms {
        *self.state.borrow()
    }

    /// Follows the alarms: a connection waits on `changed()` while blocked.
    pub fn subscribe(&self) -> watch::Receiver<Alarms> {
        self.state.subscribe()
    }

    /// Sets one alarm through `pick`; returns true when it changed (and
    /// followers were woken).
    pub fn set(&self, pick: fn(&mut Alarms) -> &mut bool, on: bool) -> bool {
        self.state.send_if_modified(|a| {
            let flag = pick(a);
            let changed = *flag != on;
            *flag = on;
            changed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_names_follow_rabbitmq() {
        let both = Alarms {
            disk: true,
            memory: true,
        };
        assert_eq!(both.reason(), "low on memory & low on disk");
        assert_eq!(both.names(), ["memory", "disk"]);
        let memory = Alarms {
            memory: true,
            ..Alarms::default()
        };
        assert_eq!(memory.reason(), "low on memory");
        assert!(memory.any());
        assert!(!Alarms::default().any());
        assert!(Alarms::default().names().is_empty());
    }

    #[test]
    fn setting_an_alarm_wakes_followers_only_on_change() {
        let alarms = ResourceAlarms::default();
        let mut rx = alarms.subscribe();
        assert!(alarms.set(|a| &mut a.memory, true));
        assert!(rx.has_changed().unwrap_or(false));
        rx.borrow_and_update();
        assert!(!alarms.set(|a| &mut a.memory, true));
        assert!(!rx.has_changed().unwrap_or(true));
        assert!(alarms.set(|a| &mut a.disk, true));
        assert_eq!(
            alarms.current(),
            Alarms {
                disk: true,
                memory: true
            }
        );
    }
}
