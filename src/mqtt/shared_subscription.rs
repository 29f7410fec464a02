//! Shared subscriptions (`$share/{group}/{filter}`, MQTT 5 section 4.8.2,
//! also accepted from MQTT 3.1.1 clients): the members of a group take turns
//! with the messages matching the filter.
//!
//! In the core a group is one queue bound to `amq.topic` with the filter's
//! binding key, and each member connection consumes from it; the queue hands
//! each message to one consumer, and a member that goes away with messages
//! unacknowledged gives them back to the queue for the others. The queue
//! lives as long as a session of the group does ([`super::shared_group`]).

use super::codec::topic::validate_topic_filter;

/// The prefix that marks a shared subscription.
const PREFIX: &str = "$share/";
/// The start of every group queue's name.
pub const QUEUE_PREFIX: &str = "mqtt-shared-";

/// A parsed shared subscription filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFilter<'a> {
    /// The share name.
    pub group: &'a str,
    /// The topic filter the group subscribes to.
    pub filter: &'a str,
}

/// Why a `$share/` filter is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SharedFilterError {
    /// No `/` and filter after the share name, or an empty share name.
    #[error("a shared subscription needs a share name and a filter: $share/{{name}}/{{filter}}")]
    Incomplete,
    /// The share name contains a wildcard [MQTT-4.8.2-2].
    #[error("a share name cannot contain '+' or '#' [MQTT-4.8.2-2]")]
    WildcardInName,
    /// The filter after the share name is not a valid filter.
    #[error("invalid filter in shared subscription")]
    InvalidFilter,
}

/// Splits `$share/{group}/{filter}`; `Ok(None)` for an ordinary filter.
pub fn parse(filter: &str) -> Result<Option<SharedFilter<'_>>, SharedFilterError> {
    let Some(rest) = filter.strip_prefix(PREFIX) else {
        return Ok(None);
    };
    let Some((group, filter)) = rest.split_once('/') else {
        return Err(SharedFilterError::Incomplete);
    };
    if group.is_empty() || filter.is_empty() {
        return Err(SharedFilterError::Incomplete);
    }
    if group.contains(['+', '#']) {
        return Err(SharedFilterError::WildcardInName);
    }
    validate_topic_filter(filter).map_err(|_| SharedFilterError::InvalidFilter)?;
    Ok(Some(SharedFilter { group, filter }))
}

/// The name of a group's queue.
pub fn queue_name(shared: &SharedFilter<'_>) -> String {
    format!("{QUEUE_PREFIX}{}-{}", shared.group, shared.filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_share_names_and_filters() {
        assert_eq!(parse("a/b"), Ok(None));
        assert_eq!(
            parse("$share/g1/t/#"),
            Ok(Some(SharedFilter {
                group: "g1",
                filter: "t/#"
            }))
        );
        assert_eq!(parse("$share/g1"), Err(SharedFilterError::Incomplete));
        assert_eq!(parse("$share//t"), Err(SharedFilterError::Incomplete));
        assert_eq!(parse("$share/g1/"), Err(SharedFilterError::Incomplete));
        assert_eq!(parse("$share/g+/x"), Err(SharedFilterError::WildcardInName));
        assert_eq!(parse("$share/g/a#"), Err(SharedFilterError::InvalidFilter));
    }
}
