// Test support (feature `test-cluster`): one throwaway PostgreSQL cluster per test binary,
// started from the Debian package's own binaries, and a fresh database per test.

//! `cluster().await.fresh_database().await` gives a URL of an empty database on a
//! cluster this test binary started: `initdb` + `postgres` from
//! `/usr/lib/postgresql/<version>/bin` (or `$KNIFE_PG_BIN`), run as the `postgres`
//! user when the tests run as root (PostgreSQL refuses root), with the socket in the
//! cluster's temp dir (`-k`) and TCP on a free loopback port. A watchdog shell stops
//! the server and deletes the temp dir once the test binary's process is gone, so
//! nothing is left running.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::OnceCell;

/// A running throwaway cluster.
#[derive(Debug)]
pub struct TestCluster {
    /// Temp dir: `data/` (the cluster), the socket, `log`.
    pub dir: PathBuf,
    /// TCP port on 127.0.0.1.
    pub port: u16,
}

/// The cluster-wide append lock's advisory key (crate::write::APPEND_LOCK), for tests
/// that hold it from another session.
pub const APPEND_LOCK: i64 = crate::write::APPEND_LOCK;

static CLUSTER: OnceCell<Result<TestCluster, String>> = OnceCell::const_new();
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// The binary's cluster, started on first use. Panics (failing the test) with what to
/// do when PostgreSQL is missing or does not start.
pub async fn cluster() -> &'static TestCluster {
    match CLUSTER.get_or_init(|| async { start().await }).await {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

impl TestCluster {
    /// Connection string of database `db` over the Unix socket.
    pub fn url(&self, db: &str) -> String {
        format!(
            "host={} port={} user=knife dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// The same database over TCP on 127.0.0.1, as a `postgres://` URL.
    pub fn tcp_url(&self, db: &str) -> String {
        format!("postgres://knife@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates an empty database and returns its name.
    pub async fn fresh_database(&self) -> String {
        let name = format!(
            "knife_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let (client, connection) =
            tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
                .await
                .expect("connect to the test cluster");
        let driver = tokio::spawn(connection);
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("CREATE DATABASE");
        drop(client);
        let _ = driver.await;
        name
    }
}

/// The directory holding `initdb` and `postgres`.
pub fn postgres_bin() -> Result<PathBuf, String> {
    // The same lookup as the build script's cfg(knife_has_postgres).
    knife_prereqs::postgres_bin().map_err(|m| m.to_string())
}

async fn start() -> Result<TestCluster, String> {
    start_cluster(false).await
}

/// Starts a new throwaway cluster (initdb, a few seconds) owned by the caller; it stops
/// and its dir is deleted when this process exits. `durable` keeps PostgreSQL's
/// `fsync` on (as in production; `knife bench cluster`), else off (test speed).
pub async fn start_cluster(durable: bool) -> Result<TestCluster, String> {
    let bin = postgres_bin()?;
    let dir = tempfile::Builder::new()
        .prefix("knife-pg-")
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))?
        .keep();
    let started = start_in(&bin, &dir, durable).await;
    if started.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    started.map(|port| TestCluster { dir, port })
}

/// initdb + the watchdog'd postgres in `dir`; returns the port once it accepts.
async fn start_in(bin: &Path, dir: &Path, durable: bool) -> Result<u16, String> {
    let as_root = std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false);
    if as_root {
        let uid = id_of("-u")?;
        let gid = id_of("-g")?;
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))
            .map_err(|e| format!("cannot chown {} to postgres: {e}", dir.display()))?;
    }
    let run = |program: &Path| {
        if as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    let out = run(&bin.join("initdb"))
        .arg("-D")
        .arg(dir.join("data"))
        .args([
            "-U",
            "knife",
            "-A",
            "trust",
            "--no-sync",
            "--locale=C",
            "-E",
            "UTF8",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    // The watchdog: runs postgres, and once this test process is gone (or postgres
    // died) stops it and deletes the temp dir. Bounded by the test binary's life.
    let script = r#"
        "$4/postgres" -D "$1/data" -k "$1" -p "$2" -c listen_addresses=127.0.0.1 \
            -c fsync=$5 -c full_page_writes=$5 -c max_connections=200 >"$1/log" 2>&1 &
        pg=$!
        while [ -d "/proc/$3" ] && kill -0 "$pg" 2>/dev/null; do sleep 0.5; done
        kill -INT "$pg" 2>/dev/null; wait "$pg"; rm -rf "$1"
    "#;
    run(Path::new("sh"))
        .args(["-c", script, "sh"])
        .arg(dir)
        .arg(port.to_string())
        .arg(std::process::id().to_string())
        .arg(bin)
        .arg(if durable { "on" } else { "off" })
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    let url = format!(
        "host={} port={port} user=knife dbname=postgres",
        dir.display()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
            Ok(_) => return Ok(port),
            Err(e) if tokio::time::Instant::now() > deadline => {
                let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
                return Err(format!("postgres did not start within 60 s: {e}\n{log}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn id_of(flag: &str) -> Result<u32, String> {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .map_err(|e| format!("cannot run id: {e}"))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| "no `postgres` user: install Debian's postgresql package".to_owned())
}

/// Creates database `name` on the server of `server_url` (any database of it the user
/// may connect to), with `settings` as its defaults (`ALTER DATABASE … SET`), and
/// returns the key=value URL of the new database.
///
/// Errors: the server cannot be reached, or refuses (a message saying which).
pub async fn create_database(
    server_url: &str,
    name: &str,
    settings: &[(&str, &str)],
) -> Result<String, String> {
    let config = tokio_postgres::Config::from_str(server_url)
        .map_err(|e| format!("not a PostgreSQL URL ({e})"))?;
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", crate::redact(server_url)))?;
    let driver = tokio::spawn(connection);
    let mut done = client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await;
    for (key, value) in settings {
        if done.is_ok() {
            done = client
                .batch_execute(&format!("ALTER DATABASE {name} SET {key} = '{value}'"))
                .await;
        }
    }
    let done = done.map_err(|e| format!("cannot create database {name}: {}", db_message(&e)));
    drop(client);
    let _ = driver.await;
    done?;
    Ok(database_url(&config, name))
}

/// Drops database `name` of `server_url`'s server (best effort: errors are returned as
/// text for the caller to print).
pub async fn drop_database(server_url: &str, name: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(server_url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let driver = tokio::spawn(connection);
    let done = client
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .map_err(|e| format!("cannot drop database {name}: {}", db_message(&e)));
    drop(client);
    let _ = driver.await;
    done
}

/// `config` pointed at database `db`, as a key=value URL.
fn database_url(config: &tokio_postgres::Config, db: &str) -> String {
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut parts = Vec::new();
    if let Some(host) = config.get_hosts().first() {
        let host = match host {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        };
        parts.push(format!("host={}", quote(&host)));
    }
    if let Some(port) = config.get_ports().first() {
        parts.push(format!("port={port}"));
    }
    if let Some(user) = config.get_user() {
        parts.push(format!("user={}", quote(user)));
    }
    if let Some(password) = config.get_password() {
        parts.push(format!(
            "password={}",
            quote(&String::from_utf8_lossy(password))
        ));
    }
    parts.push(format!("dbname={db}"));
    parts.join(" ")
}

/// The server's message of a driver error (its `Display` alone says only "db error").
fn db_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned())
}
