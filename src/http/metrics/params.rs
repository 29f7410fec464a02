//! What a scrape asks for: the metric-name prefix, the vhosts and, for
//! `/metrics/detailed`, the families (LavinMQ's query parameters).

use std::sync::Arc;

use crate::core::vhost::VHost;
use crate::http::error::{ApiError, ApiResult};

/// Metric-name prefix when the scrape does not ask for another.
pub const DEFAULT_PREFIX: &str = "lavinmq";

/// Longest metric-name prefix a scrape may ask for (LavinMQ's limit).
pub const MAX_PREFIX_LEN: usize = 20;

/// The content type of the documents served: the text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why a requested metric-name prefix cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Longer than [`MAX_PREFIX_LEN`] bytes.
    #[error("Prefix too long (max {MAX_PREFIX_LEN} characters)")]
    TooLong,
    /// Contains a character a metric name may not have, or starts with a digit.
    #[error("Invalid prefix: only letters, digits, '_' and ':' are allowed, and no leading digit")]
    InvalidCharacter,
}

/// Checks that `prefix` keeps every metric name valid, so that a query
/// parameter can never inject lines or break the output.
pub fn validate_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(PrefixError::TooLong);
    }
    let valid_chars = prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':');
    if !valid_chars || prefix.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(PrefixError::InvalidCharacter);
    }
    Ok(())
}

/// A group of metrics `/metrics/detailed` can be asked for with `family=`
/// (RabbitMQ's family names, which LavinMQ adopted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Totals of connections, channels and queues opened and closed.
    ConnectionChurn,
    /// Ready, unacknowledged and total messages per queue.
    QueueCoarse,
    /// Consumers per queue.
    QueueConsumerCount,
    /// Publish, delivery, get and ack counters per queue (RabbitMQ's family).
    QueueDelivery,
    /// Bytes, packets and channels per connection (`connection_coarse_metrics`
    /// and `connection_metrics`, which LavinMQ serves alike).
    Connection,
    /// Consumers, unacknowledged messages and prefetch per channel.
    Channel,
    /// Messages in, out and unroutable per exchange.
    Exchange,
    /// Messages published and delivered and queues per vhost.
    VhostMessageStats,
    /// The highest offset lag of each stream's stream-protocol consumers.
    StreamConsumer,
}

impl Family {
    /// The family named `name`, or `None` when there is none by that name
    /// (unknown families are ignored, as in LavinMQ).
    pub fn parse(name: &str) -> Option<Family> {
        Some(match name {
            "connection_churn_metrics" => Family::ConnectionChurn,
            "queue_coarse_metrics" => Family::QueueCoarse,
            "queue_consumer_count" => Family::QueueConsumerCount,
            "queue_delivery_metrics" => Family::QueueDelivery,
            "connection_coarse_metrics" | "connection_metrics" => Family::Connection,
            "channel_metrics" => Family::Channel,
            "exchange_metrics" => Family::Exchange,
            "vhost_message_stats" => Family::VhostMessageStats,
            "stream_consumer_metrics" => Family::StreamConsumer,
            _ => return None,
        })
    }

    /// True when the family is computed from the queues' figures.
    pub fn needs_queues(self) -> bool {
        matches!(
            self,
            Family::QueueCoarse | Family::QueueConsumerCount | Family::QueueDelivery | Family::VhostMessageStats
        )
    }
}

/// The query parameters of a scrape.
#[derive(Debug)]
pub struct ScrapeParams {
    /// What every metric name starts with (before `_`).
    pub prefix: String,
    /// The vhosts asked for; empty: all the user may see.
    pub vhosts: Vec<String>,
    /// The detailed families asked for, each once, in the order first asked.
    pub families: Vec<Family>,
}

impl ScrapeParams {
    /// Reads `prefix` (the first one given), every `vhost` and every known
    /// `family` (each once, in the order first asked for).
    pub fn parse(pairs: Vec<(String, String)>) -> ApiResult<Self> {
        let mut prefix = None;
        let mut vhosts = Vec::new();
        let mut families = Vec::new();
        for (key, value) in pairs {
            match key.as_str() {
                "prefix" if prefix.is_none() => prefix = Some(value),
                "vhost" => vhosts.push(value),
                "family" => {
                    if let Some(f) = Family::parse(&value)
                        && !families.contains(&f)
                    {
                        families.push(f);
                    }
                }
                _ => {}
            }
        }
        let prefix = prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        validate_prefix(&prefix).map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(ScrapeParams {
            prefix,
            vhosts,
            families,
        })
    }

    /// Keeps the vhosts the scrape asked for (all when it named none).
    pub fn select(&self, mut vhosts: Vec<Arc<VHost>>) -> Vec<Arc<VHost>> {
        if !self.vhosts.is_empty() {
            vhosts.retain(|v| self.vhosts.contains(&v.name));
        }
        vhosts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn params_default_and_select() {
        let p = ScrapeParams::parse(Vec::new()).expect("valid");
        assert_eq!(p.prefix, DEFAULT_PREFIX);
        assert!(p.vhosts.is_empty() && p.families.is_empty());

        let p = ScrapeParams::parse(pairs(&[
            ("prefix", "x"),
            ("prefix", "y"),
            ("vhost", "a"),
            ("vhost", "b"),
            ("family", "queue_coarse_metrics"),
            ("family", "nonsense"),
            ("family", "connection_metrics"),
            ("family", "connection_coarse_metrics"),
            ("family", "queue_coarse_metrics"),
        ]))
        .expect("valid");
        assert_eq!(p.prefix, "x");
        assert_eq!(p.vhosts, ["a", "b"]);
        assert_eq!(p.families, [Family::QueueCoarse, Family::Connection]);
    }

    #[test]
    fn bad_prefixes_are_400() {
        for prefix in ["abcdefghijklmnopqrstuvwxyz", "a\nb", "a{b}"] {
            let err = ScrapeParams::parse(pairs(&[("prefix", prefix)])).expect_err("rejected");
            assert_eq!(err.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(validate_prefix("lavinmq"), Ok(()));
        assert_eq!(validate_prefix("my_app:x1"), Ok(()));
        assert_eq!(validate_prefix(""), Ok(()));
        assert_eq!(validate_prefix("abcdefghijklmnopqrstu"), Err(PrefixError::TooLong));
        assert_eq!(validate_prefix("a b"), Err(PrefixError::InvalidCharacter));
        assert_eq!(validate_prefix("a\n"), Err(PrefixError::InvalidCharacter));
        assert_eq!(validate_prefix("1abc"), Err(PrefixError::InvalidCharacter));
    }
}
