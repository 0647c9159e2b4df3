// `knife doctor` (SPEC UX-09) as a user runs it: the real binary against a broken config,
// a dead endpoint (a loopback port with nothing listening), and a healthy mock LLM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

/// A loopback port that was just free: bound, then closed, so nothing listens on it.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn line<'a>(out: &'a str, start: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_09_doctor_reports_a_broken_config_with_its_line_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("knife.toml");
    std::fs::write(
        &config,
        "[providers.local]\ndriver = \"openai-chat\"\nmodel = \"m\"\ndefault_provider = \"local\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let out = run_cli(
        dir.path(),
        &[
            "doctor",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    let config_line = line(&out.stdout, "FAIL  config");
    assert!(
        config_line.contains("line 4: `default_provider` is not a key of [providers.local]"),
        "{config_line}"
    );
    assert!(
        out.stdout.contains("fix: correct the file"),
        "{}",
        out.stdout
    );
    // The checks that need the config say they were skipped; the others still ran.
    assert!(line(&out.stdout, "skip  providers").contains("the config did not load"));
    assert!(line(&out.stdout, "ok    git").contains("git version"));
    assert!(line(&out.stdout, "ok    data dir").contains("knife serve creates it"));
    assert!(out.stdout.contains("1 problem(s)"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_09_doctor_names_a_dead_endpoint_and_a_missing_peer_program() {
    let port = dead_port();
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("knife.toml");
    std::fs::write(
        &config,
        format!(
            "default_provider = \"up\"\n\
             [providers.up]\ndriver = \"openai-chat\"\nbase_url = \"{}\"\nmodel = \"m\"\n\
             [providers.down]\ndriver = \"openai-chat\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\
             [providers.agent]\ndriver = \"acp\"\ncommand = \"knife-no-such-agent-program\"\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let started = std::time::Instant::now();
    let out = run_cli(
        dir.path(),
        &[
            "doctor",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--timeout-secs",
            "3",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    let down = line(&out.stdout, "FAIL  provider down");
    assert!(
        down.contains(&format!("cannot reach http://127.0.0.1:{port}/v1/models"))
            && down.to_lowercase().contains("connection refused"),
        "{down}"
    );
    assert!(
        out.stdout.contains("correct base_url of [providers.down]"),
        "{}",
        out.stdout
    );
    // The live mock is reachable, and its model list lacks the configured model.
    let up = line(&out.stdout, "warn  provider up");
    assert!(
        up.contains("reachable") && up.contains("model `m` is not among its 1 models"),
        "{up}"
    );
    let agent = line(&out.stdout, "FAIL  provider agent");
    assert!(
        agent.contains("`knife-no-such-agent-program` is not installed"),
        "{agent}"
    );
    assert!(out.stdout.contains("2 problem(s)"), "{}", out.stdout);
    // Refused at once, not after the timeout.
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ux_09_doctor_passes_on_a_working_setup_and_checks_the_database() {
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let mut server = Server::start(&mock.base_url()).await;
    let data = server.data_dir();
    let config = server.path().join("knife.toml");
    // While the server runs, the database is reported in use, not opened.
    let out = run_cli(
        server.path(),
        &[
            "doctor",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        line(&out.stdout, "ok    database").contains("in use"),
        "{}",
        out.stdout
    );
    server.proc.terminate().await;
    let out = run_cli(
        server.path(),
        &[
            "doctor",
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
        ],
    )
    .await;
    let sandbox_ok = !out.stdout.contains("FAIL  sandbox");
    assert!(sandbox_ok, "{}", out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", out.stdout);
    assert!(
        line(&out.stdout, "ok    config").contains("default `mock`"),
        "{}",
        out.stdout
    );
    assert!(line(&out.stdout, "ok    data dir").contains("(writable)"));
    assert!(
        line(&out.stdout, "ok    database").contains("(schema "),
        "{}",
        out.stdout
    );
}
