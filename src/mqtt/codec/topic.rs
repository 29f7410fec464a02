//! Topic names and topic filters (MQTT 3.1.1 section 4.7): the rules a
//! name or filter must follow, and which topics a filter matches.
//!
//! Levels are separated by `/`; `+` matches one whole level and `#` the
//! remaining levels (including none). Matching is byte-exact and case
//! sensitive, with no normalisation.

use crate::mqtt::codec::error::TopicError;

/// Checks a topic name, as carried by PUBLISH or a will: at least one
/// character [MQTT-4.7.3-1] and no wildcard characters [MQTT-3.3.2-2].
pub fn validate_topic_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::Empty);
    }
    if name.bytes().any(|b| b == b'+' || b == b'#') {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Checks a topic filter, as carried by SUBSCRIBE and UNSUBSCRIBE: at least
/// one character [MQTT-4.7.3-1], `#` only as the whole last level
/// [MQTT-4.7.1-2], `+` only as a whole level [MQTT-4.7.1-3].
pub fn validate_topic_filter(filter: &str) -> Result<(), TopicError> {
    if filter.is_empty() {
        return Err(TopicError::Empty);
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        if level.contains('#') && (level != "#" || levels.peek().is_some()) {
            return Err(TopicError::MisplacedMultiLevelWildcard);
        }
        if level.contains('+') && level != "+" {
            return Err(TopicError::MisplacedSingleLevelWildcard);
        }
    }
    Ok(())
}

/// Whether `topic` starts with `$`: such topics (e.g. `$SYS/...`) are kept
/// for the broker and never matched by a filter starting with a wildcard.
pub fn is_dollar_topic(topic: &str) -> bool {
    topic.starts_with('$')
}

/// Whether the topic filter `filter` matches the topic name `topic`.
///
/// Both are assumed valid ([`validate_topic_filter`], [`validate_topic_name`]).
/// A filter starting with `+` or `#` does not match a topic starting with `$`
/// [MQTT-4.7.2-1]; `a/#` matches `a` itself; `+` matches an empty level.
pub fn matches(filter: &str, topic: &str) -> bool {
    // Byte by byte, one level at a time: this runs for every delivery, and
    // splitting both strings into levels cost more than the comparison.
    let (f, t) = (filter.as_bytes(), topic.as_bytes());
    if is_dollar_topic(topic) && matches!(f.first(), Some(b'+' | b'#')) {
        return false;
    }
    let (mut fi, mut ti) = (0, 0);
    loop {
        // Both at the start of a level.
        match f.get(fi) {
            Some(b'#') => return true,
            Some(b'+') => {
                fi += 1;
                while t.get(ti).is_some_and(|&b| b != b'/') {
                    ti += 1;
                }
            }
            _ => {
                while let Some(&b) = f.get(fi).filter(|&&b| b != b'/') {
                    if t.get(ti) != Some(&b) {
                        return false;
                    }
                    fi += 1;
                    ti += 1;
                }
                if t.get(ti).is_some_and(|&b| b != b'/') {
                    return false;
                }
            }
        }
        // Both at a `/` or at their end.
        match (fi < f.len(), ti < t.len()) {
            (false, false) => return true,
            (true, true) => {
                fi += 1;
                ti += 1;
            }
            // `a/#` matches `a` too.
            (true, false) => return &f[fi..] == b"/#",
            (false, true) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        for ok in [
            "a",
            "/",
            "a/b",
            "/finance",
            "a//b",
            "sport/tennis/player1",
            " ",
            "$SYS/x",
            "ACCOUNTS",
        ] {
            assert_eq!(validate_topic_name(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(validate_topic_name(""), Err(TopicError::Empty));
        for bad in ["+", "#", "a/+", "a/#", "a+b", "sport/tennis#"] {
            assert_eq!(validate_topic_name(bad), Err(TopicError::WildcardInName), "{bad:?}");
        }
    }

    #[test]
    fn topic_filters() {
        for ok in [
            "#",
            "+",
            "/",
            "a/#",
            "a/+",
            "+/+",
            "+/#",
            "/+",
            "sport/+/player1",
            "a//#",
            "$SYS/#",
            "a/b",
        ] {
            assert_eq!(validate_topic_filter(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(validate_topic_filter(""), Err(TopicError::Empty));
        for bad in ["sport/tennis#", "sport/tennis/#/ranking", "#/a", "a/##", "a#", "##"] {
            assert_eq!(
                validate_topic_filter(bad),
                Err(TopicError::MisplacedMultiLevelWildcard),
                "{bad:?}"
            );
        }
        for bad in ["sport+", "a/b+/c", "++", "+a/b", "a/+b"] {
            assert_eq!(
                validate_topic_filter(bad),
                Err(TopicError::MisplacedSingleLevelWildcard),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn multi_level_wildcard_matching() {
        // Section 4.7.1.2 examples.
        let f = "sport/tennis/player1/#";
        assert!(matches(f, "sport/tennis/player1"));
        assert!(matches(f, "sport/tennis/player1/ranking"));
        assert!(matches(f, "sport/tennis/player1/score/wimbledon"));
        assert!(!matches(f, "sport/tennis/player2"));
        assert!(matches("sport/#", "sport"));
        assert!(matches("#", "a/b/c"));
        assert!(matches("#", "/"));
        assert!(!matches("a/b/#", "a"));
    }

    #[test]
    fn single_level_wildcard_matching() {
        // Section 4.7.1.3 examples.
        assert!(matches("sport/tennis/+", "sport/tennis/player1"));
        assert!(matches("sport/tennis/+", "sport/tennis/player2"));
        assert!(!matches("sport/tennis/+", "sport/tennis/player1/ranking"));
        assert!(!matches("sport/+", "sport"));
        assert!(matches("sport/+", "sport/"));
        assert!(matches("+/+", "/finance"));
        assert!(matches("/+", "/finance"));
        assert!(!matches("+", "/finance"));
        assert!(matches("+/tennis/#", "sport/tennis/player1"));
    }

    #[test]
    fn exact_matching_is_case_sensitive() {
        assert!(matches("ACCOUNTS", "ACCOUNTS"));
        assert!(!matches("ACCOUNTS", "Accounts"));
        assert!(!matches("a/b", "a/b/c"));
        assert!(!matches("a/b/c", "a/b"));
        assert!(!matches("a/b", "a/b/"));
        assert!(matches("/", "/"));
    }

    #[test]
    fn dollar_topics_and_leading_wildcards() {
        // [MQTT-4.7.2-1] and the examples of section 4.7.2.
        assert!(!matches("#", "$SYS/monitor/Clients"));
        assert!(!matches("+/monitor/Clients", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/#", "$SYS/monitor/Clients"));
        assert!(matches("$SYS/monitor/+", "$SYS/monitor/Clients"));
        assert!(!matches("+", "$SYS"));
        assert!(matches("$SYS", "$SYS"));
        assert!(matches("a/+", "a/$b"));
        assert!(is_dollar_topic("$SYS"));
        assert!(!is_dollar_topic("SYS"));
    }

    /// The matcher as the specification words it, level by level.
    fn matches_by_levels(filter: &str, topic: &str) -> bool {
        if is_dollar_topic(topic) && filter.starts_with(['+', '#']) {
            return false;
        }
        let mut filter_levels = filter.split('/');
        let mut topic_levels = topic.split('/');
        loop {
            match (filter_levels.next(), topic_levels.next()) {
                (Some("#"), _) => return true,
                (Some("+"), Some(_)) => {}
                (Some(f), Some(t)) if f == t => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    /// Every string of up to `n` symbols from `alphabet`.
    fn strings(alphabet: &[char], n: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..n {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn byte_matcher_agrees_with_the_level_by_level_one() {
        let topics: Vec<String> = strings(&['a', 'b', '/', '$'], 4)
            .into_iter()
            .filter(|t| validate_topic_name(t).is_ok())
            .collect();
        let filters: Vec<String> = strings(&['a', '/', '+', '#', '$'], 5)
            .into_iter()
            .filter(|f| validate_topic_filter(f).is_ok())
            .collect();
        for f in &filters {
            for t in &topics {
                assert_eq!(matches(f, t), matches_by_levels(f, t), "filter {f:?} topic {t:?}");
            }
        }
    }
}
