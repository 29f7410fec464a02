//! A stream consumer's message filter (`x-stream-filter`), as LavinMQ reads it:
//! a string (comma-separated values of the message's `x-stream-filter-value`
//! header), a table (header keys with the values they must have, and the geo
//! areas `geo-within-radius`, `geo-bbox` and `geo-polygon` that the message's
//! `x-geo-lat`/`x-geo-lon` headers must fall in), or an array of those.
//! `x-filter-match-type` (`all`, the default, or `any`) says whether every
//! condition or one of them must hold; with `x-stream-match-unfiltered` a
//! message without an `x-stream-filter-value` header passes too.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::sync::Arc;

use super::{BasicProperties, FieldTable, FieldValue};

/// The header whose comma-separated values the string conditions match.
const FILTER_VALUE_HEADER: &str = "x-stream-filter-value";

/// Mean radius of the Earth, for distances between points (as LavinMQ).
const EARTH_RADIUS_KM: f64 = 6371.0;

/// A consumer's message filter, built once at `basic.consume` and applied to
/// each message the consumer reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    conditions: Vec<Condition>,
    match_all: bool,
    match_unfiltered: bool,
}

/// One condition of a filter.
#[derive(Debug, Clone, PartialEq)]
enum Condition {
    /// One of the message's `x-stream-filter-value` values equals this.
    Value(String),
    /// The message has this header, with this value as text; `None` for an
    /// argument value that has no text form, which no header matches.
    Header { key: String, value: Option<String> },
    /// The message's position lies in this area.
    Geo(Area),
    /// One of these holds (a filter's any-of conditions, made one condition
    /// of an all-of filter by [`Filter::and_header`]).
    AnyOf(Vec<Condition>),
    /// The message has this header, whose text matches (an AMQP 1.0
    /// application-properties filter entry).
    HeaderText { key: String, want: TextMatch },
    /// A protocol adapter's test of the message's properties.
    Properties(PropertiesTest),
}

/// A condition on a message's properties that the core cannot state in its
/// own terms: an AMQP 1.0 properties filter reads fields (`to`, `subject`,
/// typed ids) that only that protocol's adapter knows how to find.
#[derive(Clone)]
pub struct PropertiesTest(Arc<dyn Fn(&BasicProperties) -> bool + Send + Sync>);

impl PropertiesTest {
    /// A condition met by the messages whose properties pass `test`.
    pub fn new(test: impl Fn(&BasicProperties) -> bool + Send + Sync + 'static) -> Self {
        PropertiesTest(Arc::new(test))
    }
}

impl std::fmt::Debug for PropertiesTest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PropertiesTest(..)")
    }
}

impl PartialEq for PropertiesTest {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// How an AMQP 1.0 filter compares a property's text, as RabbitMQ reads a
/// filter's string value: `&p:x` matches text starting with `x`, `&s:x` text
/// ending with `x`, `&&...` stands for `&...` matched exactly, anything else
/// is matched exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextMatch {
    /// The whole text.
    Exact(String),
    /// The start of the text.
    Prefix(String),
    /// The end of the text.
    Suffix(String),
}

impl TextMatch {
    /// Reads a filter's string value (see [`TextMatch`]).
    pub fn parse(s: &str) -> TextMatch {
        if let Some(p) = s.strip_prefix("&p:") {
            TextMatch::Prefix(p.to_string())
        } else if let Some(x) = s.strip_prefix("&s:") {
            TextMatch::Suffix(x.to_string())
        } else if let Some(rest) = s.strip_prefix("&&") {
            TextMatch::Exact(format!("&{rest}"))
        } else {
            TextMatch::Exact(s.to_string())
        }
    }

    /// Whether `have` matches.
    pub fn matches(&self, have: &str) -> bool {
        match self {
            TextMatch::Exact(want) => have == want,
            TextMatch::Prefix(p) => have.starts_with(p.as_str()),
            TextMatch::Suffix(x) => have.ends_with(x.as_str()),
        }
    }
}

/// A geographical area a message's position must lie in.
#[derive(Debug, Clone, PartialEq)]
enum Area {
    /// Within `radius_km` of `center` (great-circle distance).
    Radius { center: Point, radius_km: f64 },
    /// Inside a latitude/longitude box.
    Box(BoundingBox),
    /// Inside a polygon (ray casting), pre-checked against its bounding box.
    Polygon { points: Vec<Point>, bbox: BoundingBox },
}

/// A position in decimal degrees.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    lat: f64,
    lon: f64,
}

/// Latitude and longitude ranges, both inclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BoundingBox {
    min_lat: f64,
    max_lat: f64,
    min_lon: f64,
    max_lon: f64,
}

impl Filter {
    /// Reads the filter arguments of a `basic.consume`; `None` when there is
    /// no condition, so that such a consumer reads every message unchecked.
    pub fn from_arguments(args: &FieldTable) -> Result<Option<Filter>, String> {
        let mut conditions = Vec::new();
        if let Some(arg) = args.get("x-stream-filter") {
            parse_filter(arg, &mut conditions)?;
        }
        let match_all = match args.get("x-filter-match-type") {
            None => true,
            Some(v) => match v.as_str().map(str::to_ascii_lowercase).as_deref() {
                Some("all") => true,
                Some("any") => false,
                _ => return Err("x-filter-match-type must be 'any' or 'all'".into()),
            },
        };
        let match_unfiltered = match args.get("x-stream-match-unfiltered") {
            None => false,
            Some(FieldValue::Bool(b)) => *b,
            Some(_) => return Err("x-stream-match-unfiltered must be a boolean".into()),
        };
        Ok((!conditions.is_empty()).then_some(Filter {
            conditions,
            match_all,
            match_unfiltered,
        }))
    }

    /// `filter` with one more condition, which every message must also meet:
    /// header `key` whose text matches `want`. A filter whose conditions
    /// were any-of keeps them as one condition of the new all-of filter.
    pub fn and_header(filter: Option<Filter>, key: &str, want: TextMatch) -> Filter {
        let condition = Condition::HeaderText {
            key: key.to_string(),
            want,
        };
        Self::and(filter, condition)
    }

    /// `filter` with one more condition, which every message must also meet:
    /// its properties pass `test`.
    pub fn and_properties(filter: Option<Filter>, test: PropertiesTest) -> Filter {
        Self::and(filter, Condition::Properties(test))
    }

    fn and(filter: Option<Filter>, condition: Condition) -> Filter {
        match filter {
            None => Filter {
                conditions: vec![condition],
                match_all: true,
                match_unfiltered: false,
            },
            Some(mut f) if f.match_all => {
                f.conditions.push(condition);
                f
            }
            Some(f) => Filter {
                conditions: vec![Condition::AnyOf(f.conditions), condition],
                match_all: true,
                match_unfiltered: f.match_unfiltered,
            },
        }
    }

    /// True when a message with these headers passes the filter (one whose
    /// properties could not be read, for conditions on properties).
    pub fn accepts(&self, headers: Option<&FieldTable>) -> bool {
        self.check(headers, None)
    }

    /// True when a message with these properties passes the filter.
    pub fn accepts_message(&self, props: &BasicProperties) -> bool {
        self.check(props.headers.as_ref(), Some(props))
    }

    fn check(&self, headers: Option<&FieldTable>, props: Option<&BasicProperties>) -> bool {
        if self.match_unfiltered && headers.is_none_or(|h| h.get(FILTER_VALUE_HEADER).is_none()) {
            return true;
        }
        if headers.is_none() && props.is_none() {
            return false;
        }
        if self.match_all {
            self.conditions.iter().all(|c| c.matches(headers, props))
        } else {
            self.conditions.iter().any(|c| c.matches(headers, props))
        }
    }
}

/// Adds the conditions of an `x-stream-filter` value (or of an item of an
/// array of them).
fn parse_filter(arg: &FieldValue, out: &mut Vec<Condition>) -> Result<(), String> {
    match arg {
        FieldValue::LongStr(_) => {
            let s = arg.as_str().ok_or("x-stream-filter must be UTF-8 text")?;
            out.extend(s.split(',').map(|v| Condition::Value(v.trim().to_string())));
        }
        FieldValue::Table(table) => {
            for (key, value) in table.iter() {
                parse_table_entry(key.as_str(), value, out)
                    .map_err(|e| format!("Invalid value for filter {}: {e}", key.as_str()))?;
            }
        }
        FieldValue::Array(items) => {
            for item in items {
                parse_filter(item, out)?;
            }
        }
        FieldValue::Void => {}
        _ => return Err("x-stream-filter must be a string, table, or array".into()),
    }
    Ok(())
}

/// Adds the condition of one entry of a filter table.
fn parse_table_entry(key: &str, value: &FieldValue, out: &mut Vec<Condition>) -> Result<(), String> {
    match key {
        "x-stream-filter" => {
            // Only a string counts here; anything else is ignored, as in LavinMQ.
            if let Some(s) = value.as_str() {
                out.extend(s.split(',').map(|v| Condition::Value(v.trim().to_string())));
            }
        }
        "geo-within-radius" => out.push(Condition::Geo(radius_area(geo_table(value)?)?)),
        "geo-bbox" => out.push(Condition::Geo(Area::Box(bbox_area(geo_table(value)?)?))),
        "geo-polygon" => out.push(Condition::Geo(polygon_area(geo_table(value)?)?)),
        _ => out.push(Condition::Header {
            key: key.to_string(),
            value: text_of(value, &mut TextBuf::new()).map(str::to_string),
        }),
    }
    Ok(())
}

fn geo_table(value: &FieldValue) -> Result<&FieldTable, String> {
    value.as_table().ok_or_else(|| "expected a table".to_string())
}

/// A number of a filter argument or a message header; LavinMQ takes 32- and
/// 64-bit integers and floats, nothing else.
fn number(value: &FieldValue) -> Option<f64> {
    match *value {
        FieldValue::I32(v) => Some(v.into()),
        FieldValue::I64(v) => Some(v as f64),
        FieldValue::F32(v) => Some(v.into()),
        FieldValue::F64(v) => Some(v),
        _ => None,
    }
}

/// The number under `key` of a geo filter's table.
fn required_number(table: &FieldTable, key: &str) -> Result<f64, String> {
    let value = table.get(key).ok_or_else(|| format!("Missing hash key: \"{key}\""))?;
    number(value).ok_or_else(|| "Expected numeric value".to_string())
}

/// `geo-within-radius: {lat, lon, radius_km}`.
fn radius_area(t: &FieldTable) -> Result<Area, String> {
    let center = Point::new(required_number(t, "lat")?, required_number(t, "lon")?)?;
    let radius_km = required_number(t, "radius_km")?;
    if radius_km <= 0.0 || radius_km.is_nan() {
        return Err("Radius must be positive".into());
    }
    Ok(Area::Radius { center, radius_km })
}

/// `geo-bbox: {min_lat, max_lat, min_lon, max_lon}`.
fn bbox_area(t: &FieldTable) -> Result<BoundingBox, String> {
    BoundingBox::new(
        required_number(t, "min_lat")?,
        required_number(t, "max_lat")?,
        required_number(t, "min_lon")?,
        required_number(t, "max_lon")?,
    )
}

/// `geo-polygon: {points: [[lat, lon], ...]}` with at least three points.
fn polygon_area(t: &FieldTable) -> Result<Area, String> {
    let points = t.get("points").ok_or("Missing required field: points")?;
    let points = points.as_array().ok_or("Points must be an array")?;
    if points.len() < 3 {
        return Err(format!("Polygon must have at least 3 points, got {}", points.len()));
    }
    let points = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let pair = p.as_array().ok_or(format!("Point at index {i} must be an array"))?;
            let [lat, lon] = pair else {
                return Err(format!("Point at index {i} must have exactly 2 elements [lat, lon]"));
            };
            let coordinate = |v| number(v).ok_or_else(|| "Expected numeric value".to_string());
            Point::new(coordinate(lat)?, coordinate(lon)?)
        })
        .collect::<Result<Vec<Point>, String>>()?;
    let bbox = points.iter().skip(1).fold(
        BoundingBox {
            min_lat: points[0].lat,
            max_lat: points[0].lat,
            min_lon: points[0].lon,
            max_lon: points[0].lon,
        },
        |b, p| BoundingBox {
            min_lat: b.min_lat.min(p.lat),
            max_lat: b.max_lat.max(p.lat),
            min_lon: b.min_lon.min(p.lon),
            max_lon: b.max_lon.max(p.lon),
        },
    );
    Ok(Area::Polygon { points, bbox })
}

impl Condition {
    fn matches(&self, headers: Option<&FieldTable>, props: Option<&BasicProperties>) -> bool {
        match self {
            Condition::Properties(test) => return props.is_some_and(|p| (test.0)(p)),
            Condition::AnyOf(any) => return any.iter().any(|c| c.matches(headers, props)),
            _ => {}
        }
        let Some(headers) = headers else {
            return false;
        };
        match self {
            Condition::Properties(_) | Condition::AnyOf(_) => false,
            Condition::Value(want) => {
                let Some(value) = headers.get(FILTER_VALUE_HEADER) else {
                    return false;
                };
                let mut buf = TextBuf::new();
                text_of(value, &mut buf).is_some_and(|have| have.split(',').any(|v| v == want))
            }
            Condition::Header { key, value } => {
                let (Some(want), Some(have)) = (value, headers.get(key)) else {
                    return false;
                };
                text_of(have, &mut TextBuf::new()) == Some(want.as_str())
            }
            Condition::Geo(area) => Point::from_headers(headers).is_some_and(|p| area.contains(p)),
            Condition::HeaderText { key, want } => headers
                .get(key)
                .is_some_and(|have| text_of(have, &mut TextBuf::new()).is_some_and(|t| want.matches(t))),
        }
    }
}

impl Area {
    fn contains(&self, p: Point) -> bool {
        match self {
            Area::Radius { center, radius_km } => center.distance_km(p) <= *radius_km,
            Area::Box(b) => b.contains(p),
            Area::Polygon { points, bbox } => bbox.contains(p) && polygon_contains(points, p),
        }
    }
}

/// Ray casting: a ray from `p` crosses the polygon's edges an odd number of
/// times when `p` is inside (the same test as LavinMQ, so the same points on
/// edges count as inside).
fn polygon_contains(points: &[Point], p: Point) -> bool {
    let mut inside = false;
    let mut j = points.len() - 1;
    for (i, pi) in points.iter().enumerate() {
        let pj = points[j];
        if (pi.lon > p.lon) != (pj.lon > p.lon)
            && p.lat < (pj.lat - pi.lat) * (p.lon - pi.lon) / (pj.lon - pi.lon) + pi.lat
        {
            inside = !inside;
        }
        j = i;
    }
    inside
}

impl Point {
    fn new(lat: f64, lon: f64) -> Result<Point, String> {
        if !(-90.0..=90.0).contains(&lat) {
            return Err("Latitude must be between -90 and 90".into());
        }
        if !(-180.0..=180.0).contains(&lon) {
            return Err("Longitude must be between -180 and 180".into());
        }
        Ok(Point { lat, lon })
    }

    /// The message's `x-geo-lat`/`x-geo-lon`; `None` when either is missing,
    /// not a number or out of range.
    fn from_headers(headers: &FieldTable) -> Option<Point> {
        let lat = number(headers.get("x-geo-lat")?)?;
        let lon = number(headers.get("x-geo-lon")?)?;
        Point::new(lat, lon).ok()
    }

    /// Great-circle distance (haversine).
    fn distance_km(self, other: Point) -> f64 {
        let (lat1, lat2) = (self.lat.to_radians(), other.lat.to_radians());
        let d_lat = (other.lat - self.lat).to_radians();
        let d_lon = (other.lon - self.lon).to_radians();
        let a = (d_lat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (d_lon / 2.0).sin().powi(2);
        EARTH_RADIUS_KM * 2.0 * a.sqrt().atan2((1.0 - a).sqrt())
    }
}

impl BoundingBox {
    fn new(min_lat: f64, max_lat: f64, min_lon: f64, max_lon: f64) -> Result<BoundingBox, String> {
        let ordered = |a: f64, b: f64| matches!(a.partial_cmp(&b), Some(Ordering::Less | Ordering::Equal));
        if !ordered(min_lat, max_lat) {
            return Err("min_lat must be <= max_lat".into());
        }
        if !ordered(min_lon, max_lon) {
            return Err("min_lon must be <= max_lon".into());
        }
        if !(min_lat >= -90.0 && max_lat <= 90.0) {
            return Err("Latitude must be between -90 and 90".into());
        }
        if !(min_lon >= -180.0 && max_lon <= 180.0) {
            return Err("Longitude must be between -180 and 180".into());
        }
        Ok(BoundingBox {
            min_lat,
            max_lat,
            min_lon,
            max_lon,
        })
    }

    fn contains(&self, p: Point) -> bool {
        p.lat >= self.min_lat && p.lat <= self.max_lat && p.lon >= self.min_lon && p.lon <= self.max_lon
    }
}

/// A small stack buffer for the text of a number, so that comparing a header
/// with a filter value allocates nothing per message.
struct TextBuf {
    bytes: [u8; 64],
    len: usize,
}

impl TextBuf {
    fn new() -> Self {
        TextBuf { bytes: [0; 64], len: 0 }
    }
}

impl std::fmt::Write for TextBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.bytes
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// A header value as text, the way LavinMQ compares filter values: strings
/// as they are, booleans and numbers written out (a whole float keeps its
/// `.0`). Tables, arrays, timestamps, byte arrays and void have none.
/// The text a header value is compared as (numbers in decimal, booleans as
/// `true`/`false`); `None` for values without one (tables, arrays, bytes).
pub fn value_text(v: &FieldValue) -> Option<String> {
    text_of(v, &mut TextBuf::new()).map(str::to_string)
}

fn text_of<'a>(v: &'a FieldValue, buf: &'a mut TextBuf) -> Option<&'a str> {
    let written = match *v {
        FieldValue::LongStr(_) => return v.as_str(),
        FieldValue::Bool(b) => return Some(if b { "true" } else { "false" }),
        FieldValue::F32(f) => write_float(buf, f.into()),
        FieldValue::F64(f) => write_float(buf, f),
        FieldValue::Decimal { scale, value } => write_decimal(buf, scale, value),
        _ => match v.as_i64() {
            Some(n) => write!(buf, "{n}"),
            None => return None,
        },
    };
    written.ok()?;
    std::str::from_utf8(&buf.bytes[..buf.len]).ok()
}

fn write_float(buf: &mut TextBuf, f: f64) -> std::fmt::Result {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
        write!(buf, "{f:.1}")
    } else {
        write!(buf, "{f}")
    }
}

fn write_decimal(buf: &mut TextBuf, scale: u8, value: u32) -> std::fmt::Result {
    let scale = u32::from(scale);
    match 10u64.checked_pow(scale) {
        Some(div) if scale > 0 => {
            let value = u64::from(value);
            write!(buf, "{}.{:0width$}", value / div, value % div, width = scale as usize)
        }
        _ => write!(buf, "{value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs.iter().map(|(k, v)| ((*k).into(), v.clone())).collect()
    }

    fn filter(pairs: &[(&str, FieldValue)]) -> Filter {
        Filter::from_arguments(&table(pairs)).unwrap().expect("a filter")
    }

    fn headers(pairs: &[(&str, FieldValue)]) -> FieldTable {
        table(pairs)
    }

    #[test]
    fn property_text_matches_exactly_by_prefix_or_by_suffix() {
        assert_eq!(TextMatch::parse("&p:eu-"), TextMatch::Prefix("eu-".into()));
        assert_eq!(TextMatch::parse("&s:.png"), TextMatch::Suffix(".png".into()));
        assert_eq!(TextMatch::parse("&&p:x"), TextMatch::Exact("&p:x".into()));
        assert_eq!(TextMatch::parse("eu"), TextMatch::Exact("eu".into()));
        let f = Filter::and_header(None, "region", TextMatch::parse("&p:eu-"));
        let f = Filter::and_header(Some(f), "file", TextMatch::parse("&s:.png"));
        let msg = |region: &str, file: &str| headers(&[("region", region.into()), ("file", file.into())]);
        assert!(f.accepts(Some(&msg("eu-west", "a.png"))));
        assert!(!f.accepts(Some(&msg("us-east", "a.png"))));
        assert!(!f.accepts(Some(&msg("eu-west", "a.jpg"))));
        assert!(!f.accepts(Some(&headers(&[("region", "eu-west".into())]))));
        // Numbers compare as their text.
        let n = Filter::and_header(None, "n", TextMatch::Exact("7".into()));
        assert!(n.accepts(Some(&headers(&[("n", FieldValue::I32(7))]))));
        // Any-of filter values stay any-of beside the property.
        let any = filter(&[
            ("x-stream-filter", FieldValue::Array(vec!["a".into(), "b".into()])),
            ("x-filter-match-type", "any".into()),
        ]);
        let both = Filter::and_header(Some(any), "region", TextMatch::parse("eu"));
        let m = |value: &str, region: &str| headers(&[(FILTER_VALUE_HEADER, value.into()), ("region", region.into())]);
        assert!(both.accepts(Some(&m("b", "eu"))));
        assert!(!both.accepts(Some(&m("b", "us"))));
        assert!(!both.accepts(Some(&m("c", "eu"))));
    }

    #[test]
    fn string_filters_match_all_any_and_unfiltered() {
        let all = filter(&[("x-stream-filter", "a, b".into())]);
        let value = |v: &str| headers(&[(FILTER_VALUE_HEADER, v.into())]);
        assert!(all.accepts(Some(&value("a,b,c"))));
        assert!(!all.accepts(Some(&value("a"))));
        // Message values are split, not trimmed (as LavinMQ).
        assert!(!all.accepts(Some(&value("a, b"))));
        assert!(!all.accepts(None));
        let any = filter(&[
            ("x-stream-filter", FieldValue::Array(vec!["a".into(), "b".into()])),
            ("x-filter-match-type", "ANY".into()),
            ("x-stream-match-unfiltered", true.into()),
        ]);
        assert!(any.accepts(Some(&value("b"))));
        assert!(!any.accepts(Some(&value("c"))));
        assert!(any.accepts(None));
        assert!(any.accepts(Some(&headers(&[("other", 1.into())]))));
    }

    #[test]
    fn table_filters_match_headers_as_text() {
        let t = table(&[("region", "eu".into()), ("level", 3.into())]);
        let all = filter(&[("x-stream-filter", FieldValue::Table(t.clone()))]);
        assert!(all.accepts(Some(&headers(&[("region", "eu".into()), ("level", "3".into())]))));
        assert!(all.accepts(Some(&headers(&[("region", "eu".into()), ("level", 3i64.into())]))));
        assert!(!all.accepts(Some(&headers(&[("region", "eu".into())]))));
        let any = filter(&[
            ("x-stream-filter", FieldValue::Table(t)),
            ("x-filter-match-type", "any".into()),
        ]);
        assert!(any.accepts(Some(&headers(&[("region", "eu".into())]))));
        assert!(!any.accepts(Some(&headers(&[("region", "us".into())]))));
        // The key x-stream-filter inside a table is the string filter.
        let both = filter(&[(
            "x-stream-filter",
            FieldValue::Table(table(&[("x-stream-filter", "red".into()), ("size", "big".into())])),
        )]);
        assert!(both.accepts(Some(&headers(&[
            (FILTER_VALUE_HEADER, "red".into()),
            ("size", "big".into())
        ]))));
        assert!(!both.accepts(Some(&headers(&[("size", "big".into())]))));
    }

    #[test]
    fn empty_and_invalid_filters() {
        assert_eq!(Filter::from_arguments(&FieldTable::new()), Ok(None));
        let empty = table(&[("x-stream-filter", FieldValue::Table(FieldTable::new()))]);
        assert_eq!(Filter::from_arguments(&empty), Ok(None));
        for bad in [
            table(&[("x-stream-filter", 5.into())]),
            table(&[("x-stream-filter", FieldValue::Array(vec![5.into()]))]),
            table(&[("x-stream-filter", "a".into()), ("x-filter-match-type", "some".into())]),
            table(&[
                ("x-stream-filter", "a".into()),
                ("x-stream-match-unfiltered", "true".into()),
            ]),
        ] {
            assert!(Filter::from_arguments(&bad).is_err(), "{bad:?}");
        }
    }

    fn geo(key: &str, value: FieldTable) -> Result<Option<Filter>, String> {
        Filter::from_arguments(&table(&[(
            "x-stream-filter",
            FieldValue::Table(table(&[(key, FieldValue::Table(value))])),
        )]))
    }

    fn at(lat: f64, lon: f64) -> FieldTable {
        headers(&[("x-geo-lat", FieldValue::F64(lat)), ("x-geo-lon", FieldValue::F64(lon))])
    }

    #[test]
    fn geo_filters() {
        // Stockholm, and 50 km around it: Uppsala (~64 km) is outside, Södertälje (~30 km) inside.
        let radius = geo(
            "geo-within-radius",
            table(&[
                ("lat", FieldValue::F64(59.3293)),
                ("lon", FieldValue::F64(18.0686)),
                ("radius_km", 50.into()),
            ]),
        )
        .unwrap()
        .unwrap();
        assert!(radius.accepts(Some(&at(59.1955, 17.6253))));
        assert!(!radius.accepts(Some(&at(59.8586, 17.6389))));
        assert!(!radius.accepts(Some(&headers(&[
            ("x-geo-lat", "59.3".into()),
            ("x-geo-lon", "18.0".into())
        ]))));
        let bbox = geo(
            "geo-bbox",
            table(&[
                ("min_lat", 10.into()),
                ("max_lat", 20.into()),
                ("min_lon", FieldValue::F64(-5.5)),
                ("max_lon", 5.into()),
            ]),
        )
        .unwrap()
        .unwrap();
        assert!(bbox.accepts(Some(&at(15.0, 0.0))));
        assert!(!bbox.accepts(Some(&at(25.0, 0.0))));
        let square = |pts: &[(i32, i32)]| {
            let points = pts
                .iter()
                .map(|(a, b)| FieldValue::Array(vec![(*a).into(), (*b).into()]))
                .collect();
            geo("geo-polygon", table(&[("points", FieldValue::Array(points))]))
        };
        let poly = square(&[(0, 0), (0, 10), (10, 10), (10, 0)]).unwrap().unwrap();
        assert!(poly.accepts(Some(&at(5.0, 5.0))));
        assert!(!poly.accepts(Some(&at(11.0, 5.0))));
        assert!(!poly.accepts(Some(&headers(&[]))));
        assert!(square(&[(0, 0), (1, 1)]).unwrap_err().contains("at least 3 points"));
        assert!(
            geo("geo-within-radius", table(&[("lat", 1.into())]))
                .unwrap_err()
                .contains("lon")
        );
        assert!(
            geo(
                "geo-within-radius",
                table(&[("lat", 91.into()), ("lon", 0.into()), ("radius_km", 1.into())])
            )
            .unwrap_err()
            .contains("Latitude")
        );
        assert!(
            geo(
                "geo-bbox",
                table(&[
                    ("min_lat", 20.into()),
                    ("max_lat", 10.into()),
                    ("min_lon", 0.into()),
                    ("max_lon", 1.into())
                ])
            )
            .unwrap_err()
            .contains("min_lat")
        );
    }

    #[test]
    fn numbers_as_text() {
        let text = |v: FieldValue| text_of(&v, &mut TextBuf::new()).map(str::to_string);
        assert_eq!(text(FieldValue::F64(1.0)).as_deref(), Some("1.0"));
        assert_eq!(text(FieldValue::F64(2.5)).as_deref(), Some("2.5"));
        assert_eq!(text(FieldValue::I8(-3)).as_deref(), Some("-3"));
        assert_eq!(
            text(FieldValue::Decimal { scale: 2, value: 1234 }).as_deref(),
            Some("12.34")
        );
        assert_eq!(text(true.into()).as_deref(), Some("true"));
        assert_eq!(text(FieldValue::Void), None);
    }
}
