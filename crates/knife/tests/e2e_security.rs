// Process tests of knife's hardening against the real binary (SPEC.md SEC): API
// tokens for non-loopback listens, and the server's logged limits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_05_a_weak_token_is_refused_for_a_non_loopback_listen_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let new = run_cli(dir.path(), &["token", "new"]).await;
    assert!(new.status.success());
    let strong = new.stdout.trim().to_owned();
    assert_eq!(strong.len(), 43, "32 random bytes, base64url: {strong}");
    let again = run_cli(dir.path(), &["token", "new"]).await;
    assert_ne!(again.stdout.trim(), strong, "every token is new");

    for weak in ["x", "s3cret-token", "0123456789abcdef0123456789abcdef"] {
        let mut cmd = knife_command(dir.path());
        cmd.args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .env("KNIFE_API_TOKEN", weak)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let out = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{weak}: {stderr}");
        assert!(
            stderr.contains("knife token new") && stderr.contains("32 random bytes"),
            "{weak}: {stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening on"),
            "never listened"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_04_serve_raises_the_open_file_limit_and_logs_it() {
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let server = Server::start_with(&mock.base_url(), "max_connections = 1500").await;
    let stderr = server.proc.stderr();
    assert!(
        stderr.contains("open file limit (RLIMIT_NOFILE)")
            && stderr.contains("max_connections=1500"),
        "{stderr}"
    );
    assert!(server.api.healthy().await);
}
