//! Filtering, sorting, column selection and pagination of list responses, as
//! RabbitMQ's API offers them on every listing: `name` (+ `use_regex`), `sort`
//! (+ `sort_reverse`), `columns`, and `page` + `page_size`. Applied as one layer
//! over the whole router, to any successful GET answered with a JSON array, so
//! every listing behaves alike and handlers stay unaware of it.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::error::ApiError;

/// Largest `page_size` RabbitMQ accepts.
const MAX_PAGE_SIZE: usize = 500;
/// `page_size` when only `page` is given.
const DEFAULT_PAGE_SIZE: usize = 100;
/// Largest response body the layer reads back to reshape.
const MAX_BODY: usize = 512 * 1024 * 1024;

/// The listing parameters of one request.
#[derive(Debug, Default, PartialEq)]
pub struct ListQuery {
    name: Option<String>,
    use_regex: bool,
    sort: Option<String>,
    sort_reverse: bool,
    columns: Option<Vec<String>>,
    page: Option<usize>,
    page_size: Option<usize>,
}

fn truthy(v: &str) -> bool {
    v.eq_ignore_ascii_case("true") || v == "1"
}

impl ListQuery {
    /// Reads the parameters from a query string; `None` when there are none, so
    /// that the response passes through untouched.
    pub fn parse(query: &str) -> Result<Option<ListQuery>, ApiError> {
        let mut q = ListQuery::default();
        let number = |k: &str, v: &str| {
            v.parse::<usize>()
                .map_err(|_| ApiError::bad_request(format!("{k} must be a positive integer, got '{v}'")))
        };
        for (k, v) in form_urlencoded(query) {
            match k.as_str() {
                "name" if !v.is_empty() => q.name = Some(v),
                "use_regex" => q.use_regex = truthy(&v),
                "sort" if !v.is_empty() => q.sort = Some(v),
                "sort_reverse" => q.sort_reverse = truthy(&v),
                "columns" if !v.is_empty() => {
                    q.columns = Some(v.split(',').map(|c| c.trim().to_string()).collect());
                }
                "page" => q.page = Some(number("page", &v)?),
                "page_size" => q.page_size = Some(number("page_size", &v)?),
                _ => {}
            }
        }
        Ok((q != ListQuery::default()).then_some(q))
    }

    /// Applies the parameters to a listing.
    pub fn apply(&self, mut items: Vec<Value>) -> Result<Value, ApiError> {
        let total = items.len();
        if let Some(name) = &self.name {
            let matches = name_matcher(name, self.use_regex)?;
            items.retain(|i| i.get("name").and_then(Value::as_str).is_some_and(&matches));
        }
        if let Some(key) = &self.sort {
            items.sort_by(|a, b| compare(lookup(a, key), lookup(b, key)));
        }
        if self.sort_reverse {
            items.reverse();
        }
        let filtered = items.len();
        let page = match self.page {
            Some(page) => {
                let size = self.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
                if size == 0 || size > MAX_PAGE_SIZE {
                    return Err(ApiError::bad_request(format!(
                        "page_size must be between 1 and {MAX_PAGE_SIZE}"
                    )));
                }
                let page_count = filtered.div_ceil(size).max(1);
                if page == 0 || page > page_count {
                    return Err(ApiError::bad_request("page out of range"));
                }
                items = items.into_iter().skip((page - 1) * size).take(size).collect();
                Some((page, size, page_count))
            }
            None => None,
        };
        if let Some(cols) = &self.columns {
            items = items.iter().map(|i| select_columns(i, cols)).collect();
        }
        Ok(match page {
            None => Value::Array(items),
            Some((page, size, page_count)) => json!({
                "filtered_count": filtered, "item_count": items.len(), "items": items,
                "page": page, "page_count": page_count, "page_size": size, "total_count": total,
            }),
        })
    }
}

/// Decodes `a=b&c=d` pairs (percent-decoded; undecodable input yields none).
fn form_urlencoded(query: &str) -> Vec<(String, String)> {
    let uri = format!("/?{query}");
    uri.parse::<axum::http::Uri>()
        .ok()
        .and_then(|u| axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&u).ok())
        .map(|q| q.0)
        .unwrap_or_default()
}

/// RabbitMQ matches names case-insensitively, as a substring or a regex.
fn name_matcher(pattern: &str, regex: bool) -> Result<impl Fn(&str) -> bool, ApiError> {
    let re = if regex {
        regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .map_err(|e| ApiError::bad_request(format!("invalid regex '{pattern}': {e}")))?
    } else {
        regex::RegexBuilder::new(&regex::escape(pattern))
            .case_insensitive(true)
            .build()
            .map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    Ok(move |name: &str| re.is_match(name))
}

/// The value at a dotted path such as `message_stats.publish`.
fn lookup<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |v, key| v.get(key))
}

/// Orders missing values first, then numbers, then strings, then the rest.
fn compare(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, _) => Ordering::Less,
        (_, None) => Ordering::Greater,
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (Some(x), Some(y)) => x.to_string().cmp(&y.to_string()),
    }
}

/// Keeps only the dotted `columns` of `item`, nested as they were.
fn select_columns(item: &Value, columns: &[String]) -> Value {
    let mut out = Value::Object(Map::new());
    for col in columns {
        let Some(v) = lookup(item, col) else { continue };
        let mut target = &mut out;
        let parts: Vec<&str> = col.split('.').collect();
        for (i, part) in parts.iter().enumerate() {
            let Some(map) = target.as_object_mut() else { break };
            if i + 1 == parts.len() {
                map.insert(part.to_string(), v.clone());
                break;
            }
            target = map.entry(part.to_string()).or_insert_with(|| Value::Object(Map::new()));
        }
    }
    out
}

/// A listing answered as items rather than bytes: the layer pages, sorts and
/// serializes it once, where a plain JSON answer would be serialized by its
/// handler and parsed again here (for 10,000 queues most of the request's time).
pub struct Listing(pub Vec<Value>);

/// The items of a [`Listing`], carried in the response to the layer.
#[derive(Clone)]
struct ListedItems(Vec<Value>);

impl IntoResponse for Listing {
    fn into_response(self) -> Response {
        let mut resp = Response::new(Body::empty());
        resp.extensions_mut().insert(ListedItems(self.0));
        resp
    }
}

/// An answer above this many bytes asks for a memory trim.
const BIG_ANSWER: usize = 1 << 20;

/// The layer: serializes [`Listing`] answers and reshapes successful JSON
/// array answers to GETs with listing parameters; everything else passes
/// through.
pub async fn layer(req: Request, next: Next) -> Response {
    // A bad parameter is an error only for a listing: other answers ignore it.
    let query = if req.method() == Method::GET {
        ListQuery::parse(req.uri().query().unwrap_or("")).transpose()
    } else {
        None
    };
    let mut resp = next.run(req).await;
    if let Some(ListedItems(items)) = resp.extensions_mut().remove::<ListedItems>() {
        return answer(query, items, resp.status());
    }
    let big = axum::body::HttpBody::size_hint(resp.body())
        .exact()
        .is_some_and(|len| len > BIG_ANSWER as u64);
    if big {
        // Building it took many times its size in short-lived allocations.
        crate::memory_trim::request();
    }
    let Some(query) = query else {
        return resp;
    };
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if resp.status() != StatusCode::OK || !is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return ApiError::bad_request("response too large to page").into_response();
    };
    let items = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(items)) => items,
        _ => return Response::from_parts(parts, Body::from(bytes)),
    };
    answer(Some(query), items, parts.status)
}

/// Applies `query` (if any) to `items` and serializes the result.
fn answer(query: Option<Result<ListQuery, ApiError>>, items: Vec<Value>, status: StatusCode) -> Response {
    let value = match query {
        None => Value::Array(items),
        Some(q) => match q.and_then(|q| q.apply(items)) {
            Ok(v) => v,
            Err(e) => return e.into_response(),
        },
    };
    let resp = (status, axum::Json(value)).into_response();
    if axum::body::HttpBody::size_hint(resp.body())
        .exact()
        .is_some_and(|len| len > BIG_ANSWER as u64)
    {
        crate::memory_trim::request();
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<Value> {
        (1..=5)
            .map(|i| json!({"name": format!("q{i}"), "messages": 10 - i, "message_stats": {"publish": i}}))
            .collect()
    }

    fn query(s: &str) -> ListQuery {
        ListQuery::parse(s).expect("valid").expect("some")
    }

    #[test]
    fn no_parameters_means_untouched() {
        assert_eq!(ListQuery::parse("").expect("ok"), None);
        assert_eq!(ListQuery::parse("lengths_age=60").expect("ok"), None);
    }

    #[test]
    fn pages_with_counts() {
        let v = query("page=2&page_size=2").apply(items()).expect("ok");
        assert_eq!(v["items"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["items"][0]["name"], "q3");
        assert_eq!((v["page"].as_u64(), v["page_count"].as_u64()), (Some(2), Some(3)));
        assert_eq!(
            (v["total_count"].as_u64(), v["filtered_count"].as_u64()),
            (Some(5), Some(5))
        );
        assert!(query("page=4&page_size=2").apply(items()).is_err());
        assert!(query("page=1&page_size=501").apply(items()).is_err());
    }

    #[test]
    fn filters_sorts_and_selects() {
        let v = query("name=Q%5B12%5D&use_regex=true").apply(items()).expect("ok");
        assert_eq!(v.as_array().map(Vec::len), Some(2));
        let v = query("name=q3").apply(items()).expect("ok");
        assert_eq!(v[0]["name"], "q3");
        let v = query("sort=messages").apply(items()).expect("ok");
        assert_eq!(v[0]["name"], "q5");
        let v = query("sort=message_stats.publish&sort_reverse=true")
            .apply(items())
            .expect("ok");
        assert_eq!(v[0]["name"], "q5");
        let v = query("columns=name,message_stats.publish").apply(items()).expect("ok");
        assert_eq!(v[0], json!({"name": "q1", "message_stats": {"publish": 1}}));
        assert!(query("name=(&use_regex=true").apply(items()).is_err());
    }
}
