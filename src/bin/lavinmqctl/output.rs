//! What commands print: aligned tables and `key: value` lines for people,
//! one JSON document for scripts (`-f json`), tab-separated rows without a
//! header with `-s`, and informational lines that `-q`, `-s` and JSON mute.

use std::io::Write;

use serde_json::{Map, Value};

use crate::cli::Format;
use crate::error::CtlResult;

/// Columns of a text table are separated by this much space.
const GAP: &str = "  ";

/// The output settings of one run.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    format: Format,
    quiet: bool,
    silent: bool,
}

impl Output {
    /// Settings from the global `-f`, `-q` and `-s` flags.
    pub fn new(format: Format, quiet: bool, silent: bool) -> Self {
        Output { format, quiet, silent }
    }

    fn json(&self) -> bool {
        self.format == Format::Json
    }

    /// Whether the output is one JSON document (`-f json`), for commands
    /// whose text and JSON shapes differ.
    pub fn is_json(&self) -> bool {
        self.json()
    }

    /// Prints an informational line such as `Listing queues for vhost / ...`.
    pub fn info(&self, message: &str) -> CtlResult<()> {
        if self.quiet || self.silent || self.json() {
            return Ok(());
        }
        emit(&format!("{message}\n"))
    }

    /// Prints `columns` of each item: a JSON array of objects, or a table.
    pub fn table(&self, columns: &[String], items: &[Value]) -> CtlResult<()> {
        if self.json() {
            let rows = items
                .iter()
                .map(|item| {
                    let obj: Map<String, Value> = columns
                        .iter()
                        .map(|c| (c.clone(), lookup(item, c).cloned().unwrap_or(Value::Null)))
                        .collect();
                    Value::Object(obj)
                })
                .collect();
            return emit(&format!("{}\n", Value::Array(rows)));
        }
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|item| columns.iter().map(|c| cell(lookup(item, c))).collect())
            .collect();
        emit(&render_table(columns, &rows, self.silent))
    }

    /// Prints named fields: a JSON object, or one `key: value` line each.
    pub fn record(&self, fields: &[(&str, Value)]) -> CtlResult<()> {
        if self.json() {
            let obj: Map<String, Value> = fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            return emit(&format!("{}\n", Value::Object(obj)));
        }
        let text: String = fields
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", cell(Some(v))))
            .collect();
        emit(&text)
    }

    /// Prints a JSON document: indented for people, on one line for scripts.
    pub fn document(&self, value: &Value) -> CtlResult<()> {
        let text = if self.json() {
            value.to_string()
        } else {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        };
        emit(&format!("{text}\n"))
    }

    /// Prints one string: as is, or as a JSON string.
    pub fn text(&self, s: &str) -> CtlResult<()> {
        if self.json() {
            emit(&format!("{}\n", Value::String(s.to_string())))
        } else {
            emit(&format!("{s}\n"))
        }
    }
}

/// Writes to standard output, reporting a failure (such as a closed pipe).
fn emit(text: &str) -> CtlResult<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// The value at a dotted path such as `message_stats.publish`; a key that
/// itself contains dots (none of the API's do) is found first.
pub fn lookup<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    item.get(path)
        .or_else(|| path.split('.').try_fold(item, |v, key| v.get(key)))
}

/// How a value reads in a table cell: strings unquoted, lists of scalars
/// comma-separated, objects as compact JSON, nothing for null or missing.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if items.iter().all(|i| !i.is_array() && !i.is_object()) => {
            items.iter().map(|i| cell(Some(i))).collect::<Vec<_>>().join(",")
        }
        Some(other) => other.to_string(),
    }
}

/// A header and rows with each column padded to its widest cell, or (silent)
/// tab-separated rows without a header.
pub fn render_table(columns: &[String], rows: &[Vec<String>], silent: bool) -> String {
    let mut out = String::new();
    if silent {
        for row in rows {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let width = |s: &str| s.chars().count();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| width(c))
                .chain(std::iter::once(width(&columns[i])))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut line = |cells: &[String]| {
        let mut text = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                text.push_str(GAP);
            }
            text.push_str(c);
            if i + 1 < cells.len() {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(width(c));
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(columns);
    for row in rows {
        line(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn aligns_columns_to_the_widest_cell() {
        let cols = vec!["name".to_string(), "messages".to_string()];
        let rows = vec![
            vec!["a-long-queue".to_string(), "3".to_string()],
            vec!["q".to_string(), "12".to_string()],
        ];
        assert_eq!(
            render_table(&cols, &rows, false),
            "name          messages\na-long-queue  3\nq             12\n"
        );
        assert_eq!(render_table(&cols, &rows, true), "a-long-queue\t3\nq\t12\n");
    }

    #[test]
    fn renders_cells_and_dotted_lookups() {
        let item = json!({"name": "x", "tags": ["a", "b"], "args": {"k": 1}, "n": null,
                          "message_stats": {"publish": 5}});
        assert_eq!(cell(lookup(&item, "tags")), "a,b");
        assert_eq!(cell(lookup(&item, "args")), r#"{"k":1}"#);
        assert_eq!(cell(lookup(&item, "n")), "");
        assert_eq!(cell(lookup(&item, "missing")), "");
        assert_eq!(cell(lookup(&item, "message_stats.publish")), "5");
    }
}
