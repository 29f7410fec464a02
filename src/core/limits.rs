//! Limits kept by name, as RabbitMQ keeps a vhost's and a user's: set and
//! cleared by their names from the API and definitions, a negative value
//! meaning no limit.

use super::{Error, Result};

/// A set of named limits; implementors say which names they hold.
pub trait NamedLimits {
    /// What the limits are called in the refusal of an unknown name
    /// (`limits`, `user limits`).
    const TERMS: &'static str;

    /// The value of limit `name`, or `None` for a name that is no limit.
    fn slot(&mut self, name: &str) -> Option<&mut Option<i64>>;

    /// Sets limit `name`; fails for a name that is not a known limit.
    fn set(&mut self, name: &str, value: i64) -> Result<()> {
        let slot = self
            .slot(name)
            .ok_or_else(|| Error::PreconditionFailed(format!("Unrecognised terms [{name}] in {}", Self::TERMS)))?;
        *slot = Some(value);
        Ok(())
    }

    /// Removes limit `name`; false when it was not set (or is unknown).
    fn clear(&mut self, name: &str) -> bool {
        self.slot(name).and_then(Option::take).is_some()
    }
}

/// A limit in force: `None` when unset or negative.
pub fn in_force(limit: Option<i64>) -> Option<u64> {
    limit.and_then(|n| u64::try_from(n).ok())
}
