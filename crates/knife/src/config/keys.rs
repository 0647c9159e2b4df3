// The table/key catalog of knife.toml, derived from the config types' JSON schema
// (schemars), and the check that reports a key in the wrong table with its line (UX-08).

//! Every `knife.toml` table and its keys ([`catalog`]), read from the schema of
//! [`super::Config`] so it cannot drift from the types; docs/config.md is checked against it
//! (`ux_08_…` tests). [`check`] walks a file's TOML (with spans) before serde sees it and
//! turns an unknown key into a [`ConfigKeyError`] naming the line, the table it landed in and
//! the table(s) it belongs to: a `default_provider` written after `[providers.x]` is inside
//! that table, and the message says to move it above the first header.

use serde_json::{Map, Value};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// How a table appears in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    /// The top level or a `[name]` table with fixed keys.
    Fixed,
    /// `[[name]]`: an array of tables with fixed keys.
    Array,
    /// `[name.<id>]`: a table per id (e.g. `[providers.<id>]`), each with fixed keys.
    PerId,
    /// A table of free-form keys (e.g. `[providers.<id>.env]`: variable = value).
    FreeForm,
}

/// One key of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The key as written in the file.
    pub name: String,
    /// The doc comment of the config field (its first paragraph, on one line).
    pub doc: String,
    /// True when the key is itself a table (or array of tables) listed separately.
    pub is_table: bool,
}

/// One table of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// Dotted path: `""` (top level), `server`, `providers.<id>`, `providers.<id>.env`,
    /// `permissions`, `projects`, `projects.permissions`.
    pub path: String,
    /// How it is written.
    pub kind: TableKind,
    /// Its keys, in the order of the type's fields.
    pub keys: Vec<Key>,
}

impl Table {
    /// How a person writes the table: `the top level`, `[server]`, `[[permissions]]`,
    /// `[providers.<id>]`.
    pub fn header(&self) -> String {
        match (self.path.as_str(), self.kind) {
            ("", _) => "the top level".into(),
            (p, TableKind::Array) => format!("[[{p}]]"),
            (p, _) => format!("[{p}]"),
        }
    }

    fn key(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.name == name)
    }
}

/// A key that is not where the config types expect it (SPEC UX-08).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigKeyError {
    /// The key exists, but in another table.
    #[error(
        "line {line}: `{key}` is not a key of {table}{inside}; it belongs {belongs}. {fix} \
         (every key: docs/config.md)"
    )]
    WrongTable {
        /// 1-based line of the key.
        line: usize,
        /// The key.
        key: String,
        /// Where it was found (`[providers.<id>]`).
        table: String,
        /// ` (the table that starts on line 4)`, or empty at the top level.
        inside: String,
        /// Where it belongs (`at the top level`, `in [server]`, …).
        belongs: String,
        /// What to do.
        fix: String,
    },
    /// No table has this key.
    #[error("line {line}: unknown key `{key}` {place}; {table} takes: {known} (docs/config.md)")]
    Unknown {
        /// 1-based line of the key.
        line: usize,
        /// The key.
        key: String,
        /// `in [server]` or `at the top level`.
        place: String,
        /// Where it was found.
        table: String,
        /// The keys that table takes.
        known: String,
    },
}

/// Every table of `knife.toml`, top level first, from the schema of [`super::Config`].
pub fn catalog() -> Vec<Table> {
    let schema = schemars::schema_for!(super::Config);
    let root = schema.as_value();
    let defs = root
        .get("$defs")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut tables = Vec::new();
    walk(root, &defs, String::new(), TableKind::Fixed, &mut tables);
    tables
}

/// `schema` with a `$ref` or an `Option` (`anyOf: [X, null]`) unwrapped.
fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or_default();
        return defs.get(name).map_or(schema, |d| resolve(d, defs));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let real: Vec<&Value> = branches
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let [one] = real.as_slice() {
                return resolve(one, defs);
            }
        }
    }
    schema
}

fn has_properties(schema: &Value) -> bool {
    schema.get("properties").is_some_and(Value::is_object)
}

fn walk(
    schema: &Value,
    defs: &Map<String, Value>,
    path: String,
    kind: TableKind,
    out: &mut Vec<Table>,
) {
    let index = out.len();
    out.push(Table {
        path: path.clone(),
        kind,
        keys: Vec::new(),
    });
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let mut keys = Vec::new();
    for (name, prop) in props {
        let doc = prop
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .split("\n\n")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let sub = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let value = resolve(prop, defs);
        let items = value.get("items").map(|i| resolve(i, defs));
        let per_id = value
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .map(|a| resolve(a, defs));
        let is_table = if has_properties(value) {
            walk(value, defs, sub, TableKind::Fixed, out);
            true
        } else if let Some(items) = items.filter(|i| has_properties(i)) {
            walk(items, defs, sub, TableKind::Array, out);
            true
        } else if let Some(entry) = per_id {
            if has_properties(entry) {
                walk(entry, defs, format!("{sub}.<id>"), TableKind::PerId, out);
            } else {
                walk(entry, defs, sub, TableKind::FreeForm, out);
            }
            true
        } else {
            false
        };
        keys.push(Key {
            name: name.clone(),
            doc,
            is_table,
        });
    }
    // Fields in declaration order: schemars keeps it (serde_json's preserve_order) or sorts;
    // either way the catalog is stable.
    if let Some(table) = out.get_mut(index) {
        table.keys = keys;
    }
}

/// 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |t| t.bytes().filter(|b| *b == b'\n').count())
        + 1
}

/// The line of the last `[header]` / `[[header]]` at or above `line` (1-based), if any.
fn header_line_above(text: &str, line: usize) -> Option<usize> {
    text.lines()
        .take(line)
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with('['))
        .map(|(i, _)| i + 1)
        .last()
}

/// Checks every key of `text` against [`catalog`]. A TOML syntax error is left to the
/// deserializer (it reports it with its own line and column).
pub fn check(text: &str) -> Result<(), Box<ConfigKeyError>> {
    let Ok(doc) = DeTable::parse(text) else {
        return Ok(());
    };
    let tables = catalog();
    check_table(text, &tables, "", "", doc.get_ref())
}

/// `[path]` as written (`[providers.local]`), or `the top level`.
fn written(path: &str, kind: TableKind) -> String {
    match (path, kind) {
        ("", _) => "the top level".into(),
        (p, TableKind::Array) => format!("[[{p}]]"),
        (p, _) => format!("[{p}]"),
    }
}

fn find<'a>(tables: &'a [Table], path: &str) -> Option<&'a Table> {
    tables.iter().find(|t| t.path == path)
}

fn check_table(
    text: &str,
    tables: &[Table],
    path: &str,
    actual: &str,
    table: &DeTable<'_>,
) -> Result<(), Box<ConfigKeyError>> {
    let Some(spec) = find(tables, path) else {
        return Ok(());
    };
    if spec.kind == TableKind::FreeForm {
        return Ok(());
    }
    for (key, value) in table.iter() {
        let name: &str = key.get_ref();
        let Some(known) = spec.key(name) else {
            return Err(Box::new(misplaced(text, tables, spec, actual, key)));
        };
        if !known.is_table {
            continue;
        }
        let join = |base: &str| {
            if base.is_empty() {
                name.to_owned()
            } else {
                format!("{base}.{name}")
            }
        };
        check_value(text, tables, &join(path), &join(actual), value)?;
    }
    Ok(())
}

fn check_value(
    text: &str,
    tables: &[Table],
    sub: &str,
    actual: &str,
    value: &Spanned<DeValue<'_>>,
) -> Result<(), Box<ConfigKeyError>> {
    let per_id = format!("{sub}.<id>");
    match value.get_ref() {
        DeValue::Table(inner) if find(tables, &per_id).is_some() => {
            for (id, entry) in inner.iter() {
                if let DeValue::Table(t) = entry.get_ref() {
                    let id: &str = id.get_ref();
                    check_table(text, tables, &per_id, &format!("{actual}.{id}"), t)?;
                }
            }
            Ok(())
        }
        DeValue::Table(inner) => check_table(text, tables, sub, actual, inner),
        DeValue::Array(items) => {
            for item in items.iter() {
                if let DeValue::Table(t) = item.get_ref() {
                    check_table(text, tables, sub, actual, t)?;
                }
            }
            Ok(())
        }
        // A scalar where a table belongs: the deserializer says so.
        _ => Ok(()),
    }
}

fn misplaced(
    text: &str,
    tables: &[Table],
    spec: &Table,
    actual: &str,
    key: &Spanned<std::borrow::Cow<'_, str>>,
) -> ConfigKeyError {
    let here = written(actual, spec.kind);
    let name: &str = key.get_ref();
    let line = line_of(text, key.span().start);
    let homes: Vec<&Table> = tables
        .iter()
        .filter(|t| t.kind != TableKind::FreeForm && t.key(name).is_some())
        .collect();
    if homes.is_empty() {
        return ConfigKeyError::Unknown {
            line,
            key: name.to_owned(),
            place: if actual.is_empty() {
                "at the top level".into()
            } else {
                format!("in {here}")
            },
            table: here,
            known: spec
                .keys
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        };
    }
    let inside = match header_line_above(text, line) {
        Some(h) if !spec.path.is_empty() => format!(" (the table that starts on line {h})"),
        _ => String::new(),
    };
    let belongs = homes
        .iter()
        .map(|t| {
            if t.path.is_empty() {
                "at the top level".to_owned()
            } else {
                format!("in {}", t.header())
            }
        })
        .collect::<Vec<_>>()
        .join(" or ");
    let fix = if homes.iter().any(|t| t.path.is_empty()) {
        "Move it above the first [table] header: every key after a header belongs to that table."
            .to_owned()
    } else {
        format!(
            "Move it under {}.",
            homes.first().map(|t| t.header()).unwrap_or_default()
        )
    };
    ConfigKeyError::WrongTable {
        line,
        key: name.to_owned(),
        table: here,
        inside,
        belongs,
        fix,
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
