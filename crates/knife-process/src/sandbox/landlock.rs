//! The Landlock fallback (SPEC.md SEC-01) where bubblewrap cannot run (user
//! namespaces refused): kernel-enforced file and TCP rules plus no-new-privs,
//! applied to the child between fork and exec.
//!
//! Landlock rules only allow, beneath a path; so hiding knife's data dir and config
//! and the real home means allowing every *other* entry on the way to them
//! ([`read_roots`]). What it cannot do, compared with bubblewrap: a private `/tmp`
//! (writes to the shared `/tmp` are allowed unless a hidden path is inside it), a
//! private `/proc` (knife is non-dumpable, so its `/proc/<pid>/environ` stays unreadable
//! to a non-root user, not to root) and a network namespace (TCP `connect`/`bind` are
//! refused where the kernel has Landlock ABI 4; other protocols are not).

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, path_beneath_rules,
};

use crate::spawn::{Launch, Sandbox, SandboxError};

/// The Landlock ABI knife asks for (best effort below it).
const ABI_WANTED: ABI = ABI::V5;

/// What a Landlock-confined command may touch: plain data, carried in the
/// [`Launch`] and turned into a ruleset right before the spawn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LandlockRules {
    /// Read-write (the project root, its git dirs).
    pub writable: Vec<PathBuf>,
    /// Neither readable nor writable (data dir, config, home).
    pub hidden: Vec<PathBuf>,
    /// Keep TCP.
    pub network: bool,
}

/// The Landlock [`Sandbox`]: puts its [`LandlockRules`] into the launch.
#[derive(Clone, Debug)]
pub struct LandlockSandbox {
    /// The rules every command gets.
    pub rules: LandlockRules,
}

impl Sandbox for LandlockSandbox {
    fn apply(&self, launch: &mut Launch) -> Result<(), SandboxError> {
        launch.landlock = Some(self.rules.clone());
        Ok(())
    }
}

/// `Ok` when the kernel enforces Landlock; else why not.
pub fn landlock_available() -> Result<(), String> {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(landlock::Ruleset::create)
        .map(|_| ())
        .map_err(|e| format!("the kernel does not enforce Landlock ({e})"))
}

/// Every path to allow reading so that all of `/` is readable except `hidden`:
/// `/` itself when nothing is hidden below it; else, recursively, the entries of
/// each folder on the way to a hidden path (the folders on the way are not
/// listable themselves, which Landlock cannot express otherwise).
pub fn read_roots(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    expand(Path::new("/"), hidden, &mut out);
    out
}

fn expand(dir: &Path, hidden: &[PathBuf], out: &mut Vec<PathBuf>) {
    if hidden.iter().any(|h| h == dir) {
        return;
    }
    if !hidden.iter().any(|h| h.starts_with(dir)) {
        out.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            expand(&path, hidden, out);
        } else if !hidden.contains(&path) {
            out.push(path);
        }
    }
}

impl LandlockRules {
    /// The ruleset, created in knife (the parent) so the child only has to call
    /// `restrict_self` (two syscalls, no allocation) between fork and exec.
    ///
    /// Errors: the kernel refused to create the ruleset or a rule.
    pub fn build(&self) -> Result<RulesetCreated, landlock::RulesetError> {
        let read = AccessFs::from_read(ABI_WANTED);
        let all = AccessFs::from_all(ABI_WANTED);
        let mut ruleset = Ruleset::default().handle_access(all)?;
        if !self.network {
            ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
        }
        let mut writable = self.writable.clone();
        // /dev/null, /dev/tty…; and the shared /tmp unless something hidden lives there.
        writable.push(PathBuf::from("/dev"));
        if !self.hidden.iter().any(|h| h.starts_with("/tmp")) {
            writable.push(PathBuf::from("/tmp"));
        }
        ruleset
            .create()?
            .add_rules(path_beneath_rules(read_roots(&self.hidden), read))?
            .add_rules(path_beneath_rules(writable, all))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn read_roots_leave_out_exactly_the_hidden_paths() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(base.join("a/secret")).unwrap();
        std::fs::create_dir_all(base.join("a/open")).unwrap();
        std::fs::write(base.join("a/file"), "x").unwrap();
        let roots = read_roots(&[base.join("a/secret")]);
        assert!(roots.contains(&base.join("a/open")));
        assert!(roots.contains(&base.join("a/file")));
        assert!(!roots.iter().any(|r| base.join("a/secret").starts_with(r)));
        assert!(roots.contains(&PathBuf::from("/usr")));
    }
}
