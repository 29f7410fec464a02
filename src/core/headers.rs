//! Header matching for headers exchanges, and argument-table equivalence for
//! redeclarations, both comparing numbers by value whatever their wire type (a client
//! may send 5 as a 32-bit or a 64-bit integer), as RabbitMQ does.

use super::{FieldTable, FieldValue};

/// True when two field values are equal, numbers compared by value.
pub fn values_equal(a: &FieldValue, b: &FieldValue) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// True when two argument tables hold the same keys with equal values.
pub fn tables_equivalent(a: &FieldTable, b: &FieldTable) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|v2| values_equal(v, v2)))
}

/// How a headers binding combines its conditions (`x-match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchMode {
    /// Every condition must hold, `x-` keys ignored.
    All,
    /// One condition suffices, `x-` keys ignored.
    Any,
    /// Every condition must hold, `x-` keys included.
    AllWithX,
    /// One condition suffices, `x-` keys included.
    AnyWithX,
}

impl MatchMode {
    /// Reads `x-match` from binding arguments; `None` for an unknown value.
    pub fn from_arguments(args: &FieldTable) -> Option<MatchMode> {
        match args.get("x-match").map(|v| v.as_str()) {
            None => Some(MatchMode::All),
            Some(Some("all")) => Some(MatchMode::All),
            Some(Some("any")) => Some(MatchMode::Any),
            Some(Some("all-with-x")) => Some(MatchMode::AllWithX),
            Some(Some("any-with-x")) => Some(MatchMode::AnyWithX),
            Some(_) => None,
        }
    }
}

/// True when message `headers` satisfy the binding `args`. A void binding value only
/// requires the header to be present.
pub fn headers_match(args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let mode = MatchMode::from_arguments(args).unwrap_or(MatchMode::All);
    let with_x = matches!(mode, MatchMode::AllWithX | MatchMode::AnyWithX);
    let mut conditions = args
        .iter()
        .filter(|(k, _)| k.as_ref() != "x-match" && (with_x || !k.starts_with("x-")));
    let holds = |(k, v): (&super::ShortStr, &FieldValue)| {
        let Some(h) = headers.and_then(|h| h.get(k)) else {
            return false;
        };
        matches!(v, FieldValue::Void) || values_equal(v, h)
    };
    match mode {
        MatchMode::All | MatchMode::AllWithX => conditions.all(holds),
        MatchMode::Any | MatchMode::AnyWithX => conditions.any(holds),
    }
}
