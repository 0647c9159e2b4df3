// Locating and loading the shared LLM streaming fixtures (`fixtures/streams`).
// Owns the fixtures directory lookup (env override, then the workspace's sibling `shared/`).

use std::path::{Path, PathBuf};

/// Environment variable that overrides [`fixtures_dir`].
pub const FIXTURES_DIR_ENV: &str = "KNIFE_FIXTURES_DIR";

/// The streaming fixtures folder: `$KNIFE_FIXTURES_DIR` when set and non-empty,
/// else `<workspace root>/../shared/fixtures/streams`, where the workspace root
/// is two levels above this crate's `CARGO_MANIFEST_DIR` (so `/work/shared/fixtures/streams`
/// for a workspace at `/work/main`). Canonicalised when it exists (so messages show
/// a plain path); not checked for existence otherwise.
pub fn fixtures_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(FIXTURES_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/streams");
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// The bytes of fixture `rel` (e.g. `"sse/chat-completions/text-markdown.sse"`),
/// or the I/O error with the full path in its message.
pub fn try_fixture(rel: impl AsRef<Path>) -> std::io::Result<Vec<u8>> {
    let path = fixtures_dir().join(rel.as_ref());
    std::fs::read(&path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot read fixture {}: {e} (set {FIXTURES_DIR_ENV} to the fixtures/streams folder)",
                path.display()
            ),
        )
    })
}

/// The bytes of fixture `rel`, for tests.
///
/// # Panics
/// When the file cannot be read; the message has the full path and the env override.
pub fn fixture(rel: impl AsRef<Path>) -> Vec<u8> {
    match try_fixture(rel) {
        Ok(bytes) => bytes,
        Err(e) => panic!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixtures_dir_is_a_plain_path_to_the_shared_streams() {
        let dir = fixtures_dir();
        if dir.exists() {
            assert!(
                !dir.components()
                    .any(|c| c == std::path::Component::ParentDir)
            );
            assert!(
                dir.ends_with("shared/fixtures/streams"),
                "{}",
                dir.display()
            );
        }
    }
}
