// `knife-prereqs check [NAME…]`: prints, for each test prerequisite, where it was found or
// why not; exits 1 when one is missing (scripts/test runs it after installing).
use std::process::ExitCode;

use knife_prereqs::Prereq;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("check") {
        eprintln!("usage: knife-prereqs check [python_mcp|browser|codex|postgres|bwrap]…");
        return ExitCode::from(2);
    }
    let names = &args[1..];
    let allowed = std::env::var("KNIFE_TEST_ALLOW_MISSING").unwrap_or_default();
    let mut failed = false;
    for prereq in Prereq::ALL {
        if !names.is_empty() && !names.iter().any(|n| n == prereq.name()) {
            continue;
        }
        match prereq.detect() {
            Ok(files) => {
                let first = files
                    .first()
                    .map(|f| f.display().to_string())
                    .unwrap_or_default();
                println!("ok       {:<11} {first}", prereq.name());
            }
            Err(missing) => {
                let allow = allowed
                    .split([',', ' '])
                    .any(|a| a == prereq.name() || a == "all");
                println!(
                    "{}  {:<11} {missing}",
                    if allow { "allowed" } else { "MISSING" },
                    prereq.name()
                );
                failed |= !allow;
            }
        }
    }
    if failed {
        eprintln!(
            "knife-prereqs: a test prerequisite is missing (above); fix it, or set \
             KNIFE_TEST_ALLOW_MISSING=<name>,… to run with its tests ignored"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
