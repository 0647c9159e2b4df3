// SPEC UX-01 for the real prerequisites: each `knife_has_*` gate this crate's build script
// set matches what is installed now, and a gated test runs when present, else is ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use knife_prereqs::Prereq;

macro_rules! probes {
    ($($name:ident => $prereq:expr, $cfg:meta;)*) => {$(
        /// Probe: gated on the real prerequisite; passes only when it is found.
        #[test]
        #[cfg_attr(not($cfg), ignore = "prerequisite missing (probe for ux_01)")]
        fn $name() {
            if let Err(missing) = $prereq.detect() {
                panic!("{missing}");
            }
        }
    )*};
}

probes! {
    probe_python_mcp => Prereq::PythonMcp, knife_has_python_mcp;
    probe_browser => Prereq::Browser, knife_has_browser;
    probe_codex => Prereq::Codex, knife_has_codex;
    probe_postgres => Prereq::Postgres, knife_has_postgres;
    probe_bwrap => Prereq::Bwrap, knife_has_bwrap;
}

#[test]
fn ux_01_each_prerequisite_runs_when_present_and_is_ignored_when_missing() {
    for prereq in Prereq::ALL {
        let name = format!("probe_{}", prereq.name());
        let out = Command::new(std::env::current_exe().unwrap())
            .args([name.as_str(), "--exact", "--test-threads=1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("test {name} ...")))
            .unwrap_or_else(|| panic!("no result line for {name}:\n{text}"));
        let present = prereq.detect().is_ok();
        let expected = if present {
            format!("test {name} ... ok")
        } else if prereq.required() {
            // Required but missing: it runs and fails, naming what to install.
            format!("test {name} ... FAILED")
        } else {
            format!("test {name} ... ignored, prerequisite missing (probe for ux_01)")
        };
        assert_eq!(
            line, expected,
            "{prereq:?} (present now: {present}):\n{text}"
        );
    }
}
