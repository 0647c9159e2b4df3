// The outside programs some knife tests need (the Python MCP SDK, Node + playwright-core +
// Chromium, the codex peer and the other peers, PostgreSQL, bubblewrap): where each is found,
// and the `knife_has_*` / `knife_peer_*` cfg flags a test crate's build script emits for them.

//! Test prerequisites (SPEC UX-01): a test that needs an outside program is compiled with
//! `#[cfg_attr(not(knife_has_<thing>), ignore = "needs …: run scripts/test")]`, so where the
//! program is missing it reports as `ignored` with that reason, never as `ok`; where it is
//! present (or required, see below) it runs for real, without `--include-ignored`.
//!
//! * [`Prereq`] names each prerequisite; [`Prereq::detect`] finds it now (env var, default
//!   install place, a probe run) and says why not ([`Missing`]). The typed finders
//!   ([`python_mcp`], [`browser`], [`peer_bin`], [`postgres_bin`], [`bwrap`]) are what a test
//!   calls at run time; a test panics with the [`Missing`] message when its finder fails
//!   (it only runs then when the prerequisite was required or `--include-ignored` was given).
//! * [`build::emit`] (from a crate's `build.rs`) runs the same detection at build time and
//!   emits `cargo::rustc-cfg=knife_has_<name>` for each one present or *required*, plus the
//!   `rustc-check-cfg` and `rerun-if-*` lines. Required = named by `KNIFE_TEST_REQUIRE`
//!   (`all`, or a comma/space list of [`Prereq::name`]s; `scripts/test` sets `all`), or, for
//!   codex, selected by `KNIFE_PEERS`. A required prerequisite that is missing still gets its
//!   cfg, so its tests run and fail saying what to install.
//! * [`build::emit_peers`] emits `knife_peer_<name>` for each peer that is installed or that
//!   `KNIFE_PEERS` selects (the peer suite).
//! * The `knife-prereqs check` program (`src/main.rs`) prints what is found and what is not;
//!   `scripts/test` runs it after installing and stops when something is still missing.
//!
//! The decision and how to add a prerequisite: `docs/2026-12-01-test-prerequisites.md`.

#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One outside prerequisite of the test suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prereq {
    /// A Python that can `import mcp` (`KNIFE_TEST_PYTHON`, else the venv `scripts/test` makes
    /// at `~/.cache/knife-py-mcp`, else `python3`). cfg `knife_has_python_mcp`.
    PythonMcp,
    /// Node (`KNIFE_NODE` or `node`), playwright-core (`KNIFE_UI_NODE_MODULES`, else
    /// `~/.cache/knife-ui-node/node_modules`) and Chromium (`KNIFE_CHROMIUM`, else
    /// `/usr/bin/chromium`). cfg `knife_has_browser`.
    Browser,
    /// The pinned codex peer ([`peer_bin`]`("codex")`). cfg `knife_has_codex`.
    Codex,
    /// PostgreSQL's server binaries: the folder holding `initdb` (`KNIFE_PG_BIN`, else the
    /// highest `/usr/lib/postgresql/<N>/bin`). cfg `knife_has_postgres`.
    Postgres,
    /// bubblewrap on `PATH` (or `KNIFE_BWRAP`), able to run `bwrap --ro-bind / / true`.
    /// cfg `knife_has_bwrap`.
    Bwrap,
}

/// Why a prerequisite is not usable here, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is missing: {reason}. Run scripts/test (it installs it), or {hint}")]
pub struct Missing {
    /// The prerequisite, in words (`the Python MCP SDK`).
    pub what: &'static str,
    /// What was looked for and not found (`/usr/bin/chromium does not exist`).
    pub reason: String,
    /// The manual fix (`apt-get install chromium, or set KNIFE_CHROMIUM`).
    pub hint: &'static str,
}

/// The three pieces the browser tests need ([`browser`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Browser {
    /// The Node program (a path, or a name found on `PATH`).
    pub node: PathBuf,
    /// The `node_modules` folder holding `playwright-core`.
    pub node_modules: PathBuf,
    /// The Chromium executable.
    pub chromium: PathBuf,
}

impl Prereq {
    /// Every prerequisite.
    pub const ALL: &'static [Prereq] = &[
        Prereq::PythonMcp,
        Prereq::Browser,
        Prereq::Codex,
        Prereq::Postgres,
        Prereq::Bwrap,
    ];

    /// The short name used in `KNIFE_TEST_REQUIRE` and in the cfg (`python_mcp`, `browser`,
    /// `codex`, `postgres`, `bwrap`).
    pub fn name(self) -> &'static str {
        match self {
            Prereq::PythonMcp => "python_mcp",
            Prereq::Browser => "browser",
            Prereq::Codex => "codex",
            Prereq::Postgres => "postgres",
            Prereq::Bwrap => "bwrap",
        }
    }

    /// The cfg a build script emits when the prerequisite is present or required
    /// (`knife_has_python_mcp`, …).
    pub fn cfg(self) -> String {
        format!("knife_has_{}", self.name())
    }

    /// Finds the prerequisite now. `Ok` holds the files it was found at (a build script
    /// watches them); `Err` says what is missing.
    pub fn detect(self) -> Result<Vec<PathBuf>, Missing> {
        match self {
            Prereq::PythonMcp => python_mcp().map(|p| vec![p]),
            Prereq::Browser => browser().map(|b| {
                vec![
                    b.node,
                    b.node_modules.join("playwright-core/package.json"),
                    b.chromium,
                ]
            }),
            Prereq::Codex => peer_bin("codex").map(|p| vec![p]),
            Prereq::Postgres => postgres_bin().map(|d| vec![d.join("initdb")]),
            Prereq::Bwrap => bwrap().map(|p| vec![p]),
        }
    }

    /// Whether this run requires the prerequisite: `KNIFE_TEST_REQUIRE` names it (or is
    /// `all`), or, for [`Prereq::Codex`], `KNIFE_PEERS` selects codex.
    pub fn required(self) -> bool {
        let listed = list_names(&env_string("KNIFE_TEST_REQUIRE"), self.name());
        listed || (self == Prereq::Codex && peer_selected("codex"))
    }

    /// The env vars [`Prereq::detect`] and [`Prereq::required`] read (for
    /// `rerun-if-env-changed`; each change rebuilds the crate, so only these).
    pub fn env_vars(self) -> &'static [&'static str] {
        match self {
            Prereq::PythonMcp => &["KNIFE_TEST_PYTHON", "HOME", "PATH"],
            Prereq::Browser => &[
                "KNIFE_NODE",
                "KNIFE_UI_NODE_MODULES",
                "KNIFE_CHROMIUM",
                "HOME",
                "PATH",
            ],
            Prereq::Codex => &[
                "KNIFE_PEER_CODEX_BIN",
                "KNIFE_PEERS_DIR",
                "KNIFE_PEERS",
                "HOME",
            ],
            Prereq::Postgres => &["KNIFE_PG_BIN"],
            Prereq::Bwrap => &["KNIFE_BWRAP", "PATH"],
        }
    }
}

fn env_string(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// `list` (comma or space separated, or `1`/`all` for everything) names `name`.
fn list_names(list: &str, name: &str) -> bool {
    let list = list.trim();
    if list == "1" || list.eq_ignore_ascii_case("all") {
        return true;
    }
    list.split([',', ' '])
        .map(str::trim)
        .any(|item| !item.is_empty() && item == name)
}

/// `$HOME/.cache/<sub>` (`/root/.cache/<sub>` without `HOME`): where `scripts/test` installs.
pub fn cache_dir(sub: &str) -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join(sub)
}

/// `program` if it is a path to a file, else the first match on `PATH`.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// Runs `program args…` with no input and output; true when it exits 0.
fn runs_ok(program: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("`{}` could not be started: {e}", program.display()))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!(
        "`{} {}` failed ({}): {}",
        program.display(),
        args.join(" "),
        out.status,
        last.trim()
    ))
}

/// The Python interpreter that can `import mcp` ([`Prereq::PythonMcp`]).
pub fn python_mcp() -> Result<PathBuf, Missing> {
    let missing = |reason: String| Missing {
        what: "the Python MCP SDK",
        reason,
        hint: "pip install mcp==2.3.0 into a venv and set KNIFE_TEST_PYTHON to its python",
    };
    let python = match std::env::var_os("KNIFE_TEST_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = cache_dir("knife-py-mcp/bin/python");
            if venv.is_file() {
                venv
            } else {
                PathBuf::from("python3")
            }
        }
    };
    let found = find_program(&python)
        .ok_or_else(|| missing(format!("no Python at `{}`", python.display())))?;
    runs_ok(&found, &["-c", "import mcp"]).map_err(missing)?;
    Ok(found)
}

/// Node, playwright-core and Chromium for the browser tests ([`Prereq::Browser`]).
pub fn browser() -> Result<Browser, Missing> {
    let missing = |reason: String, hint: &'static str| Missing {
        what: "the browser test tools (Node, playwright-core, Chromium)",
        reason,
        hint,
    };
    let node = std::env::var_os("KNIFE_NODE")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("node"), PathBuf::from);
    let node = find_program(&node).ok_or_else(|| {
        missing(
            format!("no Node at `{}`", node.display()),
            "apt-get install nodejs npm, or set KNIFE_NODE",
        )
    })?;
    runs_ok(&node, &["--version"])
        .map_err(|r| missing(r, "apt-get install nodejs npm, or set KNIFE_NODE"))?;
    let node_modules = std::env::var_os("KNIFE_UI_NODE_MODULES")
        .filter(|p| !p.is_empty())
        .map_or_else(|| cache_dir("knife-ui-node/node_modules"), PathBuf::from);
    if !node_modules.join("playwright-core/package.json").is_file() {
        return Err(missing(
            format!("no playwright-core in {}", node_modules.display()),
            "copy crates/knife/tests/ui/package*.json to ~/.cache/knife-ui-node and run \
             `npm ci` there, or set KNIFE_UI_NODE_MODULES",
        ));
    }
    let chromium = std::env::var_os("KNIFE_CHROMIUM")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    if !chromium.is_file() {
        return Err(missing(
            format!("{} does not exist", chromium.display()),
            "apt-get install chromium, or set KNIFE_CHROMIUM",
        ));
    }
    Ok(Browser {
        node,
        node_modules,
        chromium,
    })
}

/// The env var that overrides a peer's binary (`KNIFE_PEER_CLAUDE_AGENT_ACP_BIN` for
/// `claude-agent-acp`).
pub fn peer_bin_env(name: &str) -> String {
    format!(
        "KNIFE_PEER_{}_BIN",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// Where `scripts/install-peers.sh` installs: `KNIFE_PEERS_DIR`, else
/// `~/.cache/knife-peers`.
pub fn peers_dir() -> PathBuf {
    std::env::var_os("KNIFE_PEERS_DIR")
        .filter(|p| !p.is_empty())
        .map_or_else(|| cache_dir("knife-peers"), PathBuf::from)
}

/// An installed peer's binary (`codex`, `claude-agent-acp`, `gemini`, `opencode`): its
/// [`peer_bin_env`] variable when set (it must name a file), else
/// `<peers dir>/<name>/node_modules/.bin/<name>`.
pub fn peer_bin(name: &str) -> Result<PathBuf, Missing> {
    let env = peer_bin_env(name);
    let path = std::env::var_os(&env)
        .filter(|p| !p.is_empty())
        .map_or_else(
            || peers_dir().join(name).join("node_modules/.bin").join(name),
            PathBuf::from,
        );
    if path.is_file() {
        return Ok(path);
    }
    Err(Missing {
        what: "a peer program",
        reason: format!("{name}: {} does not exist", path.display()),
        hint: "run scripts/install-peers.sh --only <name>, or set KNIFE_PEER_<NAME>_BIN",
    })
}

/// Whether `KNIFE_PEERS` selects the peer: `1` or `all` selects every peer, a comma list
/// (`codex,gemini`) those named; unset, empty or `0` none.
pub fn peer_selected(name: &str) -> bool {
    let setting = env_string("KNIFE_PEERS");
    let setting = setting.trim();
    setting != "0" && list_names(setting, name)
}

/// The folder holding PostgreSQL's `initdb`, `postgres`, `pg_ctl` ([`Prereq::Postgres`]):
/// `KNIFE_PG_BIN`, else the highest-numbered `/usr/lib/postgresql/<N>/bin`.
pub fn postgres_bin() -> Result<PathBuf, Missing> {
    let missing = |reason: String| Missing {
        what: "PostgreSQL",
        reason,
        hint: "apt-get install postgresql, or set KNIFE_PG_BIN to the folder holding initdb",
    };
    if let Some(dir) = std::env::var_os("KNIFE_PG_BIN").filter(|p| !p.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").is_file() {
            return Ok(dir);
        }
        return Err(missing(format!(
            "KNIFE_PG_BIN={} holds no initdb",
            dir.display()
        )));
    }
    let root = Path::new("/usr/lib/postgresql");
    let best = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v);
    best.map(|(_, bin)| bin)
        .ok_or_else(|| missing("no /usr/lib/postgresql/<N>/bin/initdb".into()))
}

/// bubblewrap, checked by running `bwrap --ro-bind / / true` ([`Prereq::Bwrap`]).
pub fn bwrap() -> Result<PathBuf, Missing> {
    let missing = |reason: String| Missing {
        what: "bubblewrap",
        reason,
        hint: "apt-get install bubblewrap (and allow unprivileged user namespaces), or set \
               KNIFE_BWRAP",
    };
    let program = std::env::var_os("KNIFE_BWRAP")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("bwrap"), PathBuf::from);
    let found = find_program(&program)
        .ok_or_else(|| missing(format!("no `{}` on PATH", program.display())))?;
    runs_ok(&found, &["--ro-bind", "/", "/", "true"]).map_err(missing)?;
    Ok(found)
}

/// What a crate's `build.rs` calls (with `knife-prereqs` as a build-dependency):
///
/// ```no_run
/// // in build.rs's `fn main`:
/// knife_prereqs::build::emit(&[knife_prereqs::Prereq::Postgres]);
/// ```
pub mod build {
    use std::path::PathBuf;

    use super::{Missing, Prereq};

    /// The names of the peers of `scripts/install-peers.sh` (cfg `knife_peer_<name with _>`).
    pub const PEERS: &[&str] = &["codex", "claude-agent-acp", "gemini", "opencode"];

    /// One cfg flag and whether to set it.
    #[derive(Debug, Clone)]
    pub struct Gate {
        /// The cfg name (`knife_has_postgres`).
        pub cfg: String,
        /// Detection's answer: the files found (watched for changes) or why not.
        pub detected: Result<Vec<PathBuf>, Missing>,
        /// Set the cfg even when missing (the tests then run and fail).
        pub required: bool,
        /// Env vars whose change should re-run the build script.
        pub env_vars: Vec<&'static str>,
    }

    impl Gate {
        /// The gate of a [`Prereq`], detected now.
        pub fn of(prereq: Prereq) -> Gate {
            Gate {
                cfg: prereq.cfg(),
                detected: prereq.detect(),
                required: prereq.required(),
                env_vars: prereq.env_vars().to_vec(),
            }
        }

        /// A gate that is never open (for tests of the mechanism itself).
        pub fn never(cfg: &str) -> Gate {
            Gate {
                cfg: cfg.to_owned(),
                detected: Err(Missing {
                    what: "a prerequisite that never exists",
                    reason: "it is a probe".into(),
                    hint: "nothing to do",
                }),
                required: false,
                env_vars: Vec::new(),
            }
        }

        /// Whether the cfg is set: found, or required.
        pub fn open(&self) -> bool {
            self.detected.is_ok() || self.required
        }
    }

    /// Prints the `cargo::` lines for one gate.
    pub fn emit_gate(gate: &Gate) {
        println!("cargo::rustc-check-cfg=cfg({})", gate.cfg);
        for var in &gate.env_vars {
            println!("cargo::rerun-if-env-changed={var}");
        }
        match &gate.detected {
            // Watch only files that exist: a missing path makes cargo re-run the build
            // script (and rebuild the crate) on every build. An install is noticed through
            // the env vars (`scripts/test` sets KNIFE_TEST_REQUIRE) or `cargo clean -p`.
            Ok(files) => {
                for f in files.iter().filter(|f| f.is_file()) {
                    println!("cargo::rerun-if-changed={}", f.display());
                }
            }
            Err(missing) if gate.required => {
                println!(
                    "cargo::warning={} is required (KNIFE_TEST_REQUIRE / KNIFE_PEERS) but {missing}",
                    gate.cfg
                );
            }
            Err(_) => {}
        }
        if gate.open() {
            println!("cargo::rustc-cfg={}", gate.cfg);
        }
    }

    fn emit_common() {
        println!("cargo::rerun-if-env-changed=KNIFE_TEST_REQUIRE");
    }

    /// Emits the gates of `prereqs` (`knife_has_<name>`). Only these cfg names are declared
    /// to rustc, so a test naming another one is an `unexpected_cfgs` warning.
    pub fn emit(prereqs: &[Prereq]) {
        emit_common();
        for p in prereqs {
            emit_gate(&Gate::of(*p));
        }
    }

    /// Emits `knife_peer_<name>` (dashes as underscores) for each peer that is installed
    /// ([`super::peer_bin`]) or selected by `KNIFE_PEERS` (then a missing one fails its tests).
    pub fn emit_peers() {
        emit_common();
        for var in ["KNIFE_PEERS", "KNIFE_PEERS_DIR", "HOME"] {
            println!("cargo::rerun-if-env-changed={var}");
        }
        for name in PEERS {
            let cfg = format!("knife_peer_{}", name.replace('-', "_"));
            println!("cargo::rustc-check-cfg=cfg({cfg})");
            println!("cargo::rerun-if-env-changed={}", super::peer_bin_env(name));
            let found = super::peer_bin(name);
            if let Ok(bin) = &found {
                println!("cargo::rerun-if-changed={}", bin.display());
            }
            if found.is_ok() || super::peer_selected(name) {
                println!("cargo::rustc-cfg={cfg}");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lists_name_items_all_and_one() {
        assert!(list_names("all", "codex"));
        assert!(list_names("1", "bwrap"));
        assert!(list_names("codex, gemini", "gemini"));
        assert!(list_names("postgres bwrap", "bwrap"));
        assert!(!list_names("", "codex"));
        assert!(!list_names("codexx", "codex"));
    }

    #[test]
    fn peer_env_var_names() {
        assert_eq!(
            peer_bin_env("claude-agent-acp"),
            "KNIFE_PEER_CLAUDE_AGENT_ACP_BIN"
        );
        assert_eq!(Prereq::Postgres.cfg(), "knife_has_postgres");
    }

    #[test]
    fn a_missing_program_says_what_and_how() {
        let err = runs_ok(Path::new("/nonexistent/knife-probe"), &[]).unwrap_err();
        assert!(err.contains("could not be started"), "{err}");
        let err = runs_ok(Path::new("false"), &[]).unwrap_err();
        assert!(err.contains("failed"), "{err}");
    }
}
