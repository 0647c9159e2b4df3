//! `knife doctor` (SPEC UX-09): checks the config, the data dir, each provider instance (one
//! cheap request), the peer programs, git, the sandbox and the database, and says what to fix.

mod checks;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;

/// `knife doctor` flags.
#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Data directory to check (default: the config's, else $XDG_DATA_HOME/knife).
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Seconds each network check may take (connect + answer).
    #[arg(long, default_value_t = 5)]
    pub timeout_secs: u64,
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Works.
    Ok,
    /// Works with a caveat, or a feature that is off; not counted as broken.
    Warn,
    /// Broken: `knife doctor` exits non-zero.
    Fail,
    /// Not checked because an earlier check failed (e.g. no config).
    Skip,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Skip => "skip",
        }
    }
}

/// One line of the report: what was checked, the outcome, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was checked (`config`, `provider local`, `sandbox`, …).
    pub subject: String,
    /// The outcome.
    pub status: Status,
    /// What was found (`reachable, model gpt-4o-mini listed`, `connection refused`, …).
    pub detail: String,
    /// What to do about it (for `Warn` and `Fail`).
    pub fix: Option<String>,
}

impl Finding {
    /// A working item.
    pub fn ok(subject: impl Into<String>, detail: impl Into<String>) -> Finding {
        Finding {
            subject: subject.into(),
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A caveat.
    pub fn warn(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            subject: subject.into(),
            status: Status::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// A broken item.
    pub fn fail(
        subject: impl Into<String>,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            subject: subject.into(),
            status: Status::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    /// Not checked.
    pub fn skip(subject: impl Into<String>, why: impl Into<String>) -> Finding {
        Finding {
            subject: subject.into(),
            status: Status::Skip,
            detail: why.into(),
            fix: None,
        }
    }
}

/// What every check may look at. `config` is `None` when it did not load (the `config`
/// check reports why).
pub struct Context {
    /// The loaded config (env overrides applied).
    pub config: Option<Config>,
    /// The data directory (from the flag, the config or the default).
    pub data_dir: Option<PathBuf>,
    /// Budget of each network or child-process check.
    pub timeout: Duration,
}

/// `knife doctor`: runs every check of [`checks::CHECKS`] in order, prints one line per
/// finding (and its fix), and exits 1 when one failed.
pub async fn doctor(config_path: Option<&Path>, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let config_file = Config::locate(config_path);
    let loaded = Config::load(config_path);
    let data_dir = match &loaded {
        Ok(c) => c.data_dir(args.data_dir.as_deref()).ok(),
        Err(_) => args.data_dir.clone(),
    };
    let mut findings = vec![checks::config(config_file.as_deref(), &loaded)];
    let cx = Context {
        config: loaded.ok(),
        data_dir,
        timeout: Duration::from_secs(args.timeout_secs.max(1)),
    };
    for (_, check) in checks::CHECKS {
        findings.extend(check(&cx).await);
    }
    print!("{}", report(&findings));
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The printed report: `  ok    config        /x/knife.toml (2 provider instances)`, a
/// `        fix: …` line under each warning and failure, and a summary line.
pub fn report(findings: &[Finding]) -> String {
    let width = findings
        .iter()
        .map(|f| f.subject.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "{:<5} {:<width$}  {}\n",
            f.status.label(),
            f.subject,
            f.detail
        ));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("{:<5} {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    let failed = findings.iter().filter(|f| f.status == Status::Fail).count();
    let warned = findings.iter().filter(|f| f.status == Status::Warn).count();
    out.push_str(&match (failed, warned) {
        (0, 0) => "everything knife needs is in place\n".to_owned(),
        (0, w) => format!("nothing broken; {w} warning(s) above\n"),
        (f, _) => {
            format!("{f} problem(s): fix the FAIL lines above, then run knife doctor again\n")
        }
    });
    out
}
