// The sandbox of model-run commands through the real binary (SPEC.md SEC-01, SEC-02):
// knife serve, as whatever user the suite runs as (root in CI), with fake provider
// keys, GitHub and AWS secrets in its environment, a key in knife.toml and a
// ~/.aws/credentials; one `bash` call probes what it can reach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use knife_protocol::*;

const ENV_SECRETS: &[(&str, &str)] = &[
    ("OPENAI_API_KEY", "sk-fake-openai-SECRET1"),
    ("GITHUB_TOKEN", "ghp_fake-github-SECRET2"),
    ("AWS_SECRET_ACCESS_KEY", "fake-aws-SECRET3"),
];
const TOML_SECRET: &str = "sk-in-knife-toml-SECRET4";
const HOME_SECRET: &str = "aws-credentials-file-SECRET5";

/// Whether bubblewrap works here (CI installs it; scripts/test too).
fn bwrap_works() -> bool {
    std::process::Command::new("bwrap")
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--proc",
            "/proc",
            "--",
            "true",
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// What the command prints, one probe per line. `write-usr` tries to create a new
/// file in /usr (only where a sandbox is expected: unsandboxed as root it would).
fn probe_script(port: u16, try_usr: bool) -> String {
    let usr = if try_usr {
        r#"echo "write-usr: $(mkdir /usr/.knife-escape-probe-$$ 2>/dev/null && echo ESCAPED || echo refused)""#
    } else {
        ""
    };
    format!(
        r#"echo "write-root: $(echo ok > inside.txt && cat inside.txt)"
{usr}
echo x > ../escape.txt 2>/dev/null
echo "data-dir: $(ls ../data 2>/dev/null | wc -l)"
echo "config: $(cat ../knife.toml 2>/dev/null | grep -c SECRET4)"
echo "env-secrets: $(env | grep -c SECRET)"
echo "proc-secrets: $(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c SECRET)"
echo "procs: $(ls -d /proc/[0-9]* | wc -l)"
echo "home: $(cat $HOME/.aws/credentials 2>/dev/null | grep -c SECRET5)"
echo "tcp: $( (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED || echo refused)"
echo "python: $(python3 -m unittest -q 2>&1 | tail -1)"
"#
    )
}

fn mock_script(command: &str) -> String {
    format!(
        "[[response]]\n[[response.tool_calls]]\nname = \"bash\"\narguments = {{ command = '''{command}''' }}\n\n\
         [[response]]\ntext = \"done\"\n"
    )
}

async fn serve_with_secrets(dir: &Path, config: &str, extra_env: &[(&str, &str)]) -> Proc {
    std::fs::write(dir.join("knife.toml"), config).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_secret_access_key = {HOME_SECRET}\n"),
    )
    .unwrap();
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("test_small.py"),
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1 + 1, 2)\n",
    )
    .unwrap();
    let mut cmd = knife_command(dir);
    cmd.arg("serve")
        .arg("--config")
        .arg(dir.join("knife.toml"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("data"))
        .env("HOME", &home)
        .envs(ENV_SECRETS.iter().copied())
        .envs(extra_env.iter().copied());
    Proc::spawn("knife serve", cmd).await
}

async fn probe(config_extra: &str, extra_env: &[(&str, &str)]) -> (String, tempfile::TempDir) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let try_usr = !config_extra.contains("sandbox = \"off\"");
    let mock = MockLlm::script(&mock_script(&probe_script(port, try_usr)), &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "# a key someone pasted here: {TOML_SECRET}\n{}\n[[permissions]]\ntool = \"bash\"\naction = \"allow\"\n{config_extra}",
        config_toml(&mock.base_url())
    );
    let proc = serve_with_secrets(dir.path(), &config, extra_env).await;
    let api = Api::new(&proc.url());
    let project = api.create_project(&dir.path().join("project")).await;
    let thread = api.create_thread(&project).await;
    let run = api.post_message(&thread, "probe").await;
    let (_, done) = api.follow_run(&thread, &run, 0).await;
    assert_eq!(done.status, RunStatus::Completed, "run: {done:?}");
    let p = api.projection(&thread).await;
    let output = p
        .turn_items
        .iter()
        .find_map(|i| match &i.kind {
            TurnItemKind::ToolCall { output, error, .. } => {
                Some(output.clone().or(error.clone()).unwrap_or_default())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool item: {:#?}", p.turn_items));
    eprintln!("probe output:\n{output}");
    drop(listener);
    (output, dir)
}

fn line<'a>(output: &'a str, key: &str) -> &'a str {
    output
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")))
        .unwrap_or_else(|| panic!("no {key} line in {output}"))
}

#[cfg_attr(not(knife_has_bwrap), ignore = "needs bubblewrap: run scripts/test")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_01_bash_runs_in_bubblewrap_confined_to_the_project() {
    assert!(
        bwrap_works(),
        "bubblewrap is needed for this test (apt-get install bubblewrap; scripts/test installs it)"
    );
    let (out, dir) = probe("", &[]).await;
    assert_eq!(line(&out, "write-root"), "ok", "{out}");
    assert_eq!(line(&out, "write-usr"), "refused", "{out}");
    assert!(
        !dir.path().join("escape.txt").exists(),
        "a write outside the root reached the disk"
    );
    assert_eq!(
        line(&out, "data-dir"),
        "0",
        "knife's data dir is hidden: {out}"
    );
    assert_eq!(line(&out, "config"), "0", "knife.toml is hidden: {out}");
    let procs: u32 = line(&out, "procs").trim().parse().unwrap();
    assert!(procs < 10, "own PID namespace: {procs} processes visible");
    assert_eq!(line(&out, "tcp"), "refused", "no network: {out}");
    assert_eq!(
        line(&out, "python"),
        "OK",
        "a small Python project's tests run: {out}"
    );
    assert!(dir.path().join("project/inside.txt").is_file());
    assert!(!out.contains("without a sandbox"), "{out}");
}

#[cfg_attr(not(knife_has_bwrap), ignore = "needs bubblewrap: run scripts/test")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_02_no_secret_reaches_bash_by_env_proc_files_or_home() {
    assert!(bwrap_works(), "bubblewrap is needed for this test");
    let (out, _dir) = probe("", &[]).await;
    assert_eq!(line(&out, "env-secrets"), "0", "environment: {out}");
    assert_eq!(line(&out, "proc-secrets"), "0", "/proc: {out}");
    assert_eq!(line(&out, "config"), "0", "knife.toml: {out}");
    assert_eq!(line(&out, "home"), "0", "~/.aws/credentials: {out}");
    for (_, secret) in ENV_SECRETS {
        assert!(!out.contains(secret), "{secret} leaked: {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_01_landlock_fallback_confines_writes_reads_and_tcp() {
    if knife_landlock_unavailable() {
        panic!("the kernel does not enforce Landlock here; this test needs it");
    }
    let (out, dir) = probe("", &[("KNIFE_SANDBOX_BACKEND", "landlock")]).await;
    assert_eq!(line(&out, "write-root"), "ok", "{out}");
    assert_eq!(line(&out, "write-usr"), "refused", "{out}");
    assert!(!dir.path().join("escape.txt").exists(), "{out}");
    assert_eq!(line(&out, "data-dir"), "0", "{out}");
    assert_eq!(line(&out, "config"), "0", "{out}");
    assert_eq!(line(&out, "home"), "0", "{out}");
    assert_eq!(line(&out, "env-secrets"), "0", "{out}");
    assert_eq!(line(&out, "tcp"), "refused", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_01_sandbox_off_is_an_explicit_warned_opt_out() {
    let (out, _dir) = probe(
        "\n[[projects]]\nroot = \"project\"\nsandbox = \"off\"\n",
        &[],
    )
    .await;
    assert!(
        out.contains("ran without a sandbox"),
        "warned on the thread: {out}"
    );
    assert_eq!(line(&out, "tcp"), "CONNECTED", "unsandboxed: {out}");
    // Still a clean environment (SEC-02 holds without the sandbox).
    assert_eq!(line(&out, "env-secrets"), "0", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sec_01_doctor_and_healthz_detail_name_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli(dir.path(), &["doctor"]).await;
    let sandbox_line = out
        .stdout
        .lines()
        .find(|l| l.contains("sandbox"))
        .unwrap_or_else(|| panic!("no sandbox line: {}", out.stdout));
    if bwrap_works() {
        assert!(sandbox_line.contains("bubblewrap ("), "{sandbox_line}");
    }
    let mock = MockLlm::script("[[response]]\ntext = \"hi\"\n", &[]).await;
    let server = Server::start(&mock.base_url()).await;
    let detail: serde_json::Value = reqwest::get(format!("{}/healthz/detail", server.proc.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kind = detail["sandbox"]["kind"].as_str().unwrap();
    assert!(
        ["bubblewrap", "landlock", "none"].contains(&kind),
        "{detail}"
    );
    if bwrap_works() {
        assert_eq!(kind, "bubblewrap", "{detail}");
    }
}

fn knife_landlock_unavailable() -> bool {
    // /sys/kernel/security/lsm lists the active LSMs where securityfs is mounted;
    // elsewhere, trust the kernel version (Landlock since 5.13) and let the test speak.
    std::fs::read_to_string("/sys/kernel/security/lsm").is_ok_and(|l| !l.contains("landlock"))
}
