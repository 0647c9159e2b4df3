// Pseudo-terminal harness for the terminal surfaces (UX-02, UX-03): runs the real `knife`
// binary on a portable-pty terminal, parses its screen with vt100, waits for text on it.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};

/// What the reader thread collected: the parsed screen, every byte, and whether the
/// terminal closed.
struct Seen {
    parser: vt100::Parser,
    raw: Vec<u8>,
    closed: bool,
}

/// `knife ARGS` on a pseudo-terminal of `rows`×`cols`; killed when dropped.
pub struct Pty {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    seen: Arc<Mutex<Seen>>,
    master: Box<dyn portable_pty::MasterPty + Send>,
    label: String,
}

/// Env vars of the developer's setup kept away from the binary (as in common::knife_command).
const SCRUBBED_ENV: &[&str] = &[
    "KNIFE_CONFIG",
    "KNIFE_LISTEN",
    "KNIFE_DATA_DIR",
    "KNIFE_SERVER",
    "KNIFE_API_TOKEN",
    "KNIFE_DEFAULT_PROVIDER",
    "KNIFE_MODEL",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "RUST_LOG",
    "NO_COLOR",
    "CLICOLOR_FORCE",
];

impl Pty {
    /// Starts the binary at `bin` with `args` in `cwd` on an xterm-256color terminal,
    /// plus `env` (e.g. `NO_COLOR=1`).
    pub fn spawn(
        bin: &Path,
        cwd: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        rows: u16,
        cols: u16,
    ) -> Pty {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pseudo-terminal");
        let mut cmd = CommandBuilder::new(bin);
        cmd.args(args);
        cmd.cwd(cwd);
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        cmd.env("TERM", "xterm-256color");
        cmd.env("XDG_CONFIG_HOME", cwd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair
            .slave
            .spawn_command(cmd)
            .expect("spawn knife on the pty");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().unwrap();
        let writer = pair.master.take_writer().unwrap();
        let seen = Arc::new(Mutex::new(Seen {
            parser: vt100::Parser::new(nz(rows), nz(cols), 0),
            raw: Vec::new(),
            closed: false,
        }));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut s = sink.lock().unwrap();
                        s.parser.process(&buf[..n]);
                        s.raw.extend_from_slice(&buf[..n]);
                    }
                }
            }
            sink.lock().unwrap().closed = true;
        });
        Pty {
            child,
            writer,
            seen,
            master: pair.master,
            label: format!("knife {}", args.join(" ")),
        }
    }

    /// The screen's text now, rows joined by `\n` (trailing blanks trimmed).
    pub fn screen(&self) -> String {
        self.seen.lock().unwrap().parser.screen().contents()
    }

    /// Every byte written to the terminal so far, escapes included.
    pub fn raw(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap().raw).into_owned()
    }

    /// The screen cell at `row`, `col` (0-based): its text and whether it is bold.
    pub fn cell(&self, row: u16, col: u16) -> Option<(String, bool)> {
        let seen = self.seen.lock().unwrap();
        seen.parser
            .screen()
            .cell(row, col)
            .map(|c| (c.contents().to_string(), c.bold()))
    }

    /// Waits until the screen shows `text` (polling every 50 ms); returns the screen.
    /// Panics with the screen after `timeout`.
    pub fn wait_for(&self, text: &str, timeout: Duration) -> String {
        self.wait_until(&format!("`{text}` on the screen"), timeout, |s| {
            s.contains(text)
        })
    }

    /// Waits until `check(screen)` holds; returns the screen. Panics after `timeout`.
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] timed out after {timeout:?} waiting for {what}; the screen:\n{screen}\n--- raw tail:\n{:?}",
                self.label,
                tail(&self.raw(), 2000)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `bytes` (keys: `\r` Enter, `\x1b` Esc, `\x03` Ctrl-C).
    pub fn send(&mut self, bytes: &str) {
        self.writer.write_all(bytes.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Resizes the terminal.
    pub fn resize(&self, rows: u16, cols: u16) {
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        self.seen
            .lock()
            .unwrap()
            .parser
            .set_size(nz(rows), nz(cols));
    }

    /// Waits for the process to exit (and its output to be read); returns its exit code.
    /// Panics (after killing it) when it runs past `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> u32 {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "[{}] did not exit within {timeout:?}; the screen:\n{}",
                    self.label,
                    self.screen()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let drained = Instant::now() + Duration::from_secs(2);
        while !self.seen.lock().unwrap().closed && Instant::now() < drained {
            std::thread::sleep(Duration::from_millis(20));
        }
        status.exit_code()
    }

    /// Saves the screen as text under `<target tmp>/ux-captures/<name>.txt` and returns
    /// the path (the captures a reviewer reads).
    pub fn save(&self, name: &str) -> PathBuf {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ux-captures");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(&path, self.screen()).unwrap();
        eprintln!("screen capture: {}", path.display());
        path
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn nz(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).expect("a terminal size above 0")
}

fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// True when `text` holds an SGR (colour/style) escape sequence: `ESC [ … m`.
pub fn has_sgr(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == 0x1b && bytes[i + 1] == b'[' {
            let mut j = i + 2;
            while j < bytes.len() && (bytes[j].is_ascii_digit() || bytes[j] == b';') {
                j += 1;
            }
            if j < bytes.len() && bytes[j] == b'm' {
                return true;
            }
            i = j;
        } else {
            i += 1;
        }
    }
    false
}
