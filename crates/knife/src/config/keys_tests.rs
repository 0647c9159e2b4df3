//! Tests of [`super`]: the key catalog against docs/config.md, and the errors for keys in
//! the wrong table (SPEC UX-08).
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::collections::BTreeMap;

use super::*;
use crate::config::Config;

/// docs/config.md's tables: `## [server]` (or `## The top level`) → the keys of its rows.
fn documented() -> BTreeMap<String, Vec<String>> {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md"))
            .unwrap();
    let mut tables = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = match heading {
                "The top level" => Some("the top level".to_owned()),
                h if h.starts_with('[') => Some(h.to_owned()),
                _ => None,
            };
            if let Some(c) = &current {
                tables.insert(c.clone(), Vec::new());
            }
        } else if let (Some(c), Some(row)) = (&current, line.strip_prefix("| `")) {
            let key = row.split('`').next().unwrap_or_default().to_owned();
            tables.get_mut(c).unwrap().push(key);
        }
    }
    tables
}

#[test]
fn ux_08_docs_config_md_lists_exactly_the_keys_of_the_config_types() {
    let docs = documented();
    let types: BTreeMap<String, Vec<String>> = catalog()
        .into_iter()
        .map(|t| {
            let mut keys: Vec<String> = if t.kind == TableKind::FreeForm {
                Vec::new()
            } else {
                t.keys.iter().map(|k| k.name.clone()).collect()
            };
            keys.sort();
            (t.header(), keys)
        })
        .collect();
    let mut problems = Vec::new();
    for (table, keys) in &types {
        match docs.get(table) {
            None => problems.push(format!("docs/config.md has no `## {table}` section")),
            Some(documented) => {
                let mut documented = documented.clone();
                documented.sort();
                for k in keys.iter().filter(|k| !documented.contains(k)) {
                    problems.push(format!("{table} `{k}` is not documented"));
                }
                for k in documented.iter().filter(|k| !keys.contains(k)) {
                    problems.push(format!("{table} `{k}` is documented but not a config key"));
                }
            }
        }
    }
    for table in docs.keys().filter(|t| !types.contains_key(*t)) {
        problems.push(format!(
            "docs/config.md documents {table}, which is no config table"
        ));
    }
    assert!(
        problems.is_empty(),
        "docs/config.md drifted from the config types:\n{}",
        problems.join("\n")
    );
    // The catalog itself is read from the types: a known key of each kind is there.
    assert!(types["the top level"].contains(&"default_provider".to_owned()));
    assert!(types["[providers.<id>]"].contains(&"driver".to_owned()));
    assert!(types["[[projects.permissions]]"].contains(&"action".to_owned()));
}

fn parse(toml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(&path, toml).unwrap();
    format!("{:#}", Config::parse_file(&path).unwrap_err())
}

#[test]
fn ux_08_a_top_level_key_after_a_table_is_reported_with_its_line_and_where_it_belongs() {
    let err = parse(
        "[providers.local]\n\
         driver = \"openai-chat\"\n\
         model = \"qwen3\"\n\
         \n\
         default_provider = \"local\"\n",
    );
    assert!(err.contains("knife.toml"), "{err}");
    assert!(
        err.contains(
            "line 5: `default_provider` is not a key of [providers.local] (the table that \
             starts on line 1); it belongs at the top level. Move it above the first [table] \
             header"
        ),
        "{err}"
    );
    // The same key where it belongs is fine.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        "default_provider = \"local\"\n[providers.local]\ndriver = \"openai-chat\"\nmodel = \"q\"\n",
    )
    .unwrap();
    assert_eq!(
        Config::parse_file(&path)
            .unwrap()
            .default_instance()
            .unwrap(),
        "local"
    );
}

#[test]
fn ux_08_a_key_of_another_table_names_that_table() {
    let err = parse("[server]\nlisten = \"127.0.0.1:1\"\nturn_stall_timeout_secs = 5\n");
    assert!(
        err.contains(
            "line 3: `turn_stall_timeout_secs` is not a key of [server] (the table that starts \
             on line 1); it belongs in [sessions]. Move it under [sessions]."
        ),
        "{err}"
    );
    // A key two tables have names both.
    let err = parse("[server]\nidle_timeout_secs = 5\n");
    assert!(
        err.contains("it belongs in [sessions] or in [providers.<id>]")
            || err.contains("it belongs in [providers.<id>] or in [sessions]"),
        "{err}"
    );
    // In an array of tables.
    let err = parse("[[permissions]]\ntool = \"bash\"\naction = \"allow\"\nroot = \"/w\"\n");
    assert!(
        err.contains("line 4: `root` is not a key of [[permissions]]")
            && err.contains("it belongs in [[projects]]"),
        "{err}"
    );
}

#[test]
fn ux_08_a_key_no_table_has_lists_what_the_table_takes() {
    let err = parse("[server]\nlisten_addr = \"127.0.0.1:1\"\n");
    assert!(
        err.contains(
            "line 2: unknown key `listen_addr` in [server]; [server] takes: api_token_env, \
             data_dir, header_read_timeout_secs, listen, max_connections, max_resume_attempts"
        ),
        "{err}"
    );
    let err = parse("[provider.local]\ndriver = \"openai-chat\"\n");
    assert!(
        err.contains("line 1: unknown key `provider` at the top level"),
        "{err}"
    );
    // Free-form tables take any key.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("knife.toml");
    std::fs::write(
        &path,
        "[providers.c]\ndriver = \"codex\"\n[providers.c.env]\nCODEX_HOME = \"/x\"\n",
    )
    .unwrap();
    Config::parse_file(&path).unwrap();
}
