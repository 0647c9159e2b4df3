// The scripted model and sample project of `knife demo`.
// Owns the demo script (list, read, answer) and the bundled sample folder under `sample/`.

use std::path::Path;

use crate::{Script, ScriptResponse};

/// The sample project's files: (relative path, contents). Stored under
/// `crates/knife-mock-llm/sample/` with neutral names (`gitignore.sample`,
/// `Cargo.toml.sample`) so they do not act on this repository.
pub const SAMPLE_FILES: &[(&str, &str)] = &[
    ("README.md", include_str!("../sample/README.md")),
    ("Cargo.toml", include_str!("../sample/Cargo.toml.sample")),
    ("src/main.rs", include_str!("../sample/src/main.rs")),
    (".gitignore", include_str!("../sample/gitignore.sample")),
];

/// The final answer of the demo model (markdown).
pub const DEMO_ANSWER: &str = "## wordcount\n\n\
This folder is a tiny Rust command-line tool, `wordcount`, that counts the \
**lines, words and bytes** of a file or of standard input, like a minimal `wc`.\n\n\
- `src/main.rs` reads the input and computes a `Counts` value (with a unit test).\n\
- `Cargo.toml` declares the package; it has no dependencies.\n\
- `README.md` shows how to run it: `cargo run -- notes.txt`.\n";

/// The scripted model of `knife demo`, three responses:
///
/// 1. a `list` tool call with arguments `{"path":"."}`;
/// 2. a `read` tool call with arguments `{"path":"README.md"}`;
/// 3. the text [`DEMO_ANSWER`], a short markdown summary of the sample project
///    (repeated for any later request: `repeat_last` is true).
pub fn demo_script() -> Script {
    Script::new(vec![
        ScriptResponse {
            text: Some("Let me look at the project files.".to_owned()),
            ..ScriptResponse::tool_call("list", r#"{"path":"."}"#)
        },
        ScriptResponse::tool_call("read", r#"{"path":"README.md"}"#),
        ScriptResponse::text(DEMO_ANSWER),
    ])
    .repeat_last(true)
}

/// Writes the sample project ([`SAMPLE_FILES`]) into `dir`, creating `dir` and
/// sub-folders as needed and overwriting files of the same name.
///
/// Errors: the first I/O error (creating a folder or writing a file).
pub fn write_sample_project(dir: &Path) -> std::io::Result<()> {
    for (rel, contents) in SAMPLE_FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn sample_project_is_written() {
        let dir = tempfile::tempdir().unwrap();
        write_sample_project(dir.path()).unwrap();
        for rel in ["README.md", "Cargo.toml", "src/main.rs", ".gitignore"] {
            assert!(dir.path().join(rel).is_file(), "{rel}");
        }
        let readme = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
        assert!(readme.contains("wordcount"));
    }

    #[test]
    fn demo_script_is_valid() {
        let script = demo_script();
        script.validate_all().unwrap();
        assert_eq!(script.responses.len(), 3);
        assert_eq!(script.responses[0].tool_calls[0].name, "list");
        assert_eq!(
            script.responses[1].tool_calls[0].arguments,
            r#"{"path":"README.md"}"#
        );
    }
}
