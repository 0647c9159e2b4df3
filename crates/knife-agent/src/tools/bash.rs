//! The `bash` tool: runs a shell command in the project root and returns its
//! output and exit status.
//!
//! - The command runs as `bash -c` (`sh -c` without bash) in a session and
//!   process group of its own, stdin `/dev/null`, without knife's secrets in its
//!   environment (every `KNIFE_*` variable and [`ToolPolicy::secret_env_vars`]).
//! - Timeout: [`DEFAULT_TIMEOUT_MS`] (2 min), per call `timeout_ms` up to
//!   [`MAX_TIMEOUT_MS`] (10 min). On timeout the whole group is killed and the
//!   call fails with what it printed so far.
//! - Output: stdout and stderr interleaved, at most [`MAX_OUTPUT_BYTES`] kept —
//!   the first [`HEAD_BYTES`] and the last [`TAIL_BYTES`] — with a note saying
//!   how many bytes were dropped between them. While it runs, the output also goes
//!   to [`ToolContext::emit_output`] as it is read (LIVE-02: the item's live
//!   `output` deltas), whole characters only, its first [`MAX_OUTPUT_BYTES`] at most.
//! - Processes the command leaves running (`server &`) are stopped when the
//!   shell exits: nothing a call starts outlives it.
//! - Abort: when the turn is cancelled (or the call's future dropped) the whole
//!   group gets SIGTERM, [`KILL_GRACE`] later SIGKILL, and is reaped.
//! - Every group is recorded through [`ToolPolicy::process_recorder`].
//!
//! [`ToolPolicy::secret_env_vars`]: super::ToolPolicy::secret_env_vars
//! [`ToolPolicy::process_recorder`]: super::ToolPolicy::process_recorder

use std::collections::VecDeque;
use std::time::Duration;

use knife_llm::ToolSpec;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::process::{Spawned, spawn_shell};
use super::{Tool, ToolContext, ToolError, parse_args};

pub use super::process::KILL_GRACE;

/// Timeout of a call that gives no `timeout_ms` (2 minutes).
pub const DEFAULT_TIMEOUT_MS: u64 = 2 * 60 * 1000;
/// Largest `timeout_ms` a call may ask for (10 minutes); larger values are clamped.
pub const MAX_TIMEOUT_MS: u64 = 10 * 60 * 1000;
/// Most bytes of output returned (30 KiB): [`HEAD_BYTES`] + [`TAIL_BYTES`].
pub const MAX_OUTPUT_BYTES: usize = HEAD_BYTES + TAIL_BYTES;
/// Bytes kept from the start of the output (10 KiB).
pub const HEAD_BYTES: usize = 10 * 1024;
/// Bytes kept from the end of the output (20 KiB).
pub const TAIL_BYTES: usize = 20 * 1024;
/// How long output is still read after the command's group is gone (a process
/// that left the group may hold the pipe open).
const DRAIN_LIMIT: Duration = Duration::from_millis(500);

/// Runs a command: `{"command": str, "timeout_ms"?: int, "description"?: str}` →
/// its output, then `(exit code N)` or `(killed by signal N)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct BashTool;

#[derive(Deserialize)]
struct Args {
    command: String,
    #[serde(default)]
    timeout_ms: Option<u64>,
    // `description` is for the user's eyes (the item's input); not used here.
}

#[async_trait::async_trait]
impl Tool for BashTool {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().to_owned(),
            description: format!(
                "Run a shell command (bash -c) in the project root and return its combined \
                 stdout and stderr plus the exit code. stdin is empty, so interactive prompts \
                 fail. Default timeout {} s, at most {} s via timeout_ms; on timeout every \
                 process the command started is killed. Background processes are stopped when \
                 the command ends. Output over {} KiB keeps its start and end and says how much \
                 was dropped. Use read/list/glob/grep rather than cat/ls/find/grep to look at files.",
                DEFAULT_TIMEOUT_MS / 1000,
                MAX_TIMEOUT_MS / 1000,
                MAX_OUTPUT_BYTES / 1024
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line to run."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS, "description": "Timeout in milliseconds (default 120000)."},
                    "description": {"type": "string", "description": "What the command does, in a few words (shown to the user)."}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn mutating(&self) -> bool {
        true
    }

    fn permission_subject(&self, args: &Value, _ctx: &ToolContext) -> String {
        args.get("command")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = parse_args(self.name(), args)?;
        if args.command.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().to_owned(),
                message: "command is empty".to_owned(),
            });
        }
        let timeout_ms = args
            .timeout_ms
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .clamp(1, MAX_TIMEOUT_MS);
        run(&args.command, timeout_ms, ctx).await
    }
}

/// How the wait for the command ended.
enum End {
    Exited(Option<std::process::ExitStatus>),
    TimedOut,
    Aborted,
}

/// Runs `command` to its end (or timeout / abort); see the module docs.
async fn run(command: &str, timeout_ms: u64, ctx: &ToolContext) -> Result<String, ToolError> {
    let Spawned {
        mut group,
        output: mut pipe,
    } = spawn_shell(command, ctx).await?;
    let pgid = group.pgid();
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let mut out = CappedOutput::default();
    let mut live = LiveOutput::default();
    let (end, leftovers) = {
        let reading = pump(&mut pipe, &mut out, &mut live, ctx);
        tokio::pin!(reading);
        let mut eof = false;
        let end = loop {
            tokio::select! {
                biased;
                () = ctx.cancelled() => break End::Aborted,
                () = tokio::time::sleep_until(deadline) => break End::TimedOut,
                status = group.wait_leader() => break End::Exited(status.ok()),
                _ = &mut reading, if !eof => eof = true,
            }
        };
        // Stop whatever is left of the group while still reading, so members
        // blocked on a full pipe can die and the tail of the output is kept.
        let (ended, _) = tokio::join!(group.terminate(KILL_GRACE), async {
            if !eof {
                let _ = tokio::time::timeout(DRAIN_LIMIT, &mut reading).await;
            }
        });
        (end, ended.had_members)
    };
    tracing::debug!(pgid, "command finished");
    live.finish(ctx);
    let mut text = out.render();
    match end {
        End::Aborted => Err(ToolError::Aborted),
        End::TimedOut => Err(ToolError::CommandTimedOut {
            timeout_ms,
            max_ms: MAX_TIMEOUT_MS,
            output: text,
        }),
        End::Exited(status) => {
            if text.is_empty() {
                text.push_str("(no output)");
            }
            if !text.ends_with('\n') {
                text.push('\n');
            }
            if leftovers {
                text.push_str("(background processes it left running were stopped)\n");
            }
            text.push_str(&describe_status(status));
            if let Some(note) = super::process::sandbox_note(ctx) {
                text.push('\n');
                text.push_str(&note);
            }
            Ok(text)
        }
    }
}

fn describe_status(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("(exit code {code})"),
            (None, Some(signal)) => format!("(killed by signal {signal})"),
            (None, None) => "(exit status unknown)".to_owned(),
        },
        None => "(exit status unknown)".to_owned(),
    }
}

/// Reads `pipe` to EOF into `out`, streaming it through `live` as it comes.
async fn pump(
    pipe: &mut tokio::net::unix::pipe::Receiver,
    out: &mut CappedOutput,
    live: &mut LiveOutput,
    ctx: &ToolContext,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => {
                out.push(&buf[..n]);
                live.push(&buf[..n], ctx);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::debug!("reading the command's output failed: {e}");
                return;
            }
        }
    }
}

/// The output streamed while the command runs (LIVE-02): whole UTF-8 characters (one
/// split across reads waits for its rest; invalid bytes are replaced, as in
/// [`CappedOutput::render`]), the first [`MAX_OUTPUT_BYTES`] at most: the result of
/// a longer output keeps only its start and end anyway.
#[derive(Debug, Default)]
struct LiveOutput {
    pending: Vec<u8>,
    sent: usize,
}

impl LiveOutput {
    fn push(&mut self, data: &[u8], ctx: &ToolContext) {
        if self.sent >= MAX_OUTPUT_BYTES {
            return;
        }
        self.pending.extend_from_slice(data);
        let whole = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete character at the end waits; an invalid one is replaced.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let bytes: Vec<u8> = self.pending.drain(..whole).collect();
        self.send(&String::from_utf8_lossy(&bytes), ctx);
    }

    /// The command ended: what is left (a character cut off) goes out as it is.
    fn finish(&mut self, ctx: &ToolContext) {
        let bytes = std::mem::take(&mut self.pending);
        self.send(&String::from_utf8_lossy(&bytes), ctx);
    }

    fn send(&mut self, text: &str, ctx: &ToolContext) {
        let room = MAX_OUTPUT_BYTES.saturating_sub(self.sent);
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.sent += end;
        ctx.emit_output(&text[..end]);
    }
}

/// Output kept within [`MAX_OUTPUT_BYTES`]: the first [`HEAD_BYTES`], the last
/// [`TAIL_BYTES`] and the count of bytes dropped between them.
#[derive(Debug, Default)]
pub(crate) struct CappedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl CappedOutput {
    pub(crate) fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < HEAD_BYTES {
            let n = (HEAD_BYTES - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= TAIL_BYTES {
            self.dropped += (self.tail.len() + data.len() - TAIL_BYTES) as u64;
            self.tail.clear();
            self.tail.extend(&data[data.len() - TAIL_BYTES..]);
            return;
        }
        self.tail.extend(data);
        if self.tail.len() > TAIL_BYTES {
            let excess = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    /// The kept output as text (invalid UTF-8 replaced), with the drop note.
    pub(crate) fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if self.dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        // The cut may split a character: skip its continuation bytes.
        let start = tail
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        format!(
            "{}\n\n[… {} bytes of output dropped here: only the first {} KiB and the last {} KiB \
             are kept; redirect to a file and read or grep it to see everything …]\n\n{}",
            String::from_utf8_lossy(&self.head),
            self.dropped,
            HEAD_BYTES / 1024,
            TAIL_BYTES / 1024,
            String::from_utf8_lossy(&tail[start..])
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut out = CappedOutput::default();
        out.push(b"hello ");
        out.push("wörld".as_bytes());
        assert_eq!(out.render(), "hello wörld");
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_rest() {
        for chunk in [1usize, 1000, 7 * 1024, 64 * 1024] {
            let mut out = CappedOutput::default();
            let data: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
            for piece in data.chunks(chunk) {
                out.push(piece);
            }
            let text = out.render();
            let dropped = 100_000 - MAX_OUTPUT_BYTES;
            assert!(
                text.contains(&format!("[… {dropped} bytes of output dropped")),
                "chunk {chunk}"
            );
            assert!(text.starts_with(std::str::from_utf8(&data[..HEAD_BYTES]).unwrap()));
            assert!(text.ends_with(std::str::from_utf8(&data[100_000 - TAIL_BYTES..]).unwrap()));
            assert!(text.len() < MAX_OUTPUT_BYTES + 300, "chunk {chunk}");
        }
    }

    #[test]
    fn a_character_split_at_the_cut_is_not_shown_broken() {
        let mut out = CappedOutput::default();
        out.push(&vec![b'x'; HEAD_BYTES]);
        // `é` is two bytes; push so that the tail starts on its second byte.
        let mut data = "é".as_bytes().to_vec();
        data.extend(vec![b'y'; TAIL_BYTES - 1]);
        out.push(b"z");
        out.push(&data);
        let text = out.render();
        assert!(!text.contains('\u{FFFD}'), "replacement char in output");
        assert!(text.ends_with(&"y".repeat(TAIL_BYTES - 1)));
    }
}
