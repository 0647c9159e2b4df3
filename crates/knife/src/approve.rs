//! Answering tool approvals from the terminal: `knife approve` (another terminal,
//! any client) and the interactive prompt of `knife run` (y / n / a).

use std::collections::HashSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use clap::{ArgGroup, Args};
use knife_protocol::*;
use tokio::sync::{mpsc, watch};

use crate::client::{ApiClient, find_server};
use crate::config::Config;

/// Flags of `knife approve`.
#[derive(Args)]
#[command(group(ArgGroup::new("decision").args(["allow", "always", "deny"])))]
pub struct ApproveArgs {
    /// The thread whose run asks: its id or a unique prefix of one.
    pub thread: String,
    /// The request to answer; without it, the thread's pending requests are listed.
    pub request: Option<String>,
    /// Run this call once.
    #[arg(long)]
    pub allow: bool,
    /// Run it, and every call of the same tool on the same path or command for the
    /// rest of the thread's session, without asking.
    #[arg(long)]
    pub always: bool,
    /// Do not run it; the agent reads the denial (and --message).
    #[arg(long)]
    pub deny: bool,
    /// Words for the agent with the answer (why, or what to do instead).
    #[arg(long, short)]
    pub message: Option<String>,
    /// Server to use (default: the one holding the data directory, else the
    /// configured listen address).
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory whose server to use.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The command line that answers `request` of `thread`.
pub fn approve_hint(thread: &ThreadId, request: &RuntimeRequestId) -> String {
    format!("knife approve {thread} {request} --allow|--always|--deny [--message TEXT]")
}

/// One line describing what a request asks, e.g. `bash: cargo test (the default rule)`.
pub fn describe(request: &RuntimeRequest) -> String {
    match &request.tool_approval {
        Some(t) => format!("{}: {} ({})", t.tool, t.subject, t.rule),
        None => request
            .prompt
            .clone()
            .unwrap_or_else(|| format!("{:?}", request.kind).to_lowercase()),
    }
}

/// Most diff lines a terminal prompt shows; the rest is summarised in one line.
const DIFF_LINES_SHOWN: usize = 200;

/// The proposed change of a `write` / `edit` / codex file-change request as an
/// indented unified diff (CHG-05), coloured (added green, removed red, hunks cyan)
/// when `colour`; `None` when the request carries no diff.
pub fn diff_block(request: &RuntimeRequest, colour: bool) -> Option<String> {
    let diff = request.tool_approval.as_ref()?.diff.as_deref()?;
    let paint = |code: &str, line: &str| {
        if colour {
            format!("\x1b[{code}m{line}\x1b[0m")
        } else {
            line.to_owned()
        }
    };
    let lines: Vec<&str> = diff.lines().collect();
    let mut out = String::new();
    for line in lines.iter().take(DIFF_LINES_SHOWN) {
        let shown = if line.starts_with("+++") || line.starts_with("---") {
            paint("1", line)
        } else if line.starts_with('+') {
            paint("32", line)
        } else if line.starts_with('-') {
            paint("31", line)
        } else if line.starts_with("@@") {
            paint("36", line)
        } else {
            (*line).to_owned()
        };
        out.push_str("  ");
        out.push_str(&shown);
        out.push('\n');
    }
    if lines.len() > DIFF_LINES_SHOWN {
        out.push_str(&format!(
            "  … {} more diff lines (`knife approve {} ` lists the request; GET /api/threads/{}/requests/{} has all)\n",
            lines.len() - DIFF_LINES_SHOWN,
            request.thread_id,
            request.thread_id,
            request.id
        ));
    }
    Some(out)
}

/// Whether stderr gets colour: a terminal, and `NO_COLOR` unset.
pub fn colour_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// `knife approve`: answers a pending request on the running server, or lists the
/// thread's pending requests when no request is named.
///
/// Errors: no server answers (approvals live in the server whose run asked); the
/// server's 404 / 409 (unknown, already answered, expired) with its message.
pub async fn approve(config_path: Option<&Path>, args: ApproveArgs) -> anyhow::Result<ExitCode> {
    let config = Config::load(config_path)?;
    let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    else {
        anyhow::bail!(
            "no knife server is running; a request can only be answered by the server whose \
             run asked (start `knife serve`, or pass --server URL)"
        );
    };
    let threads: Vec<Thread> = client.get("/api/threads?archived=true").await?;
    let thread = crate::thread_ids::pick(&threads, &args.thread)?;
    let Some(request) = args.request.as_deref() else {
        let requests: Vec<RuntimeRequest> = client
            .get(&format!("/api/threads/{thread}/requests"))
            .await?;
        let pending: Vec<_> = requests
            .iter()
            .filter(|r| r.status == RuntimeRequestStatus::Pending)
            .collect();
        if pending.is_empty() {
            println!("thread {thread} has no pending requests");
        }
        for r in pending {
            println!("{}  {}", r.id, describe(r));
            if let Some(diff) = diff_block(
                r,
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            ) {
                print!("{diff}");
            }
            println!("  answer: {}", approve_hint(&thread, &r.id));
        }
        return Ok(ExitCode::SUCCESS);
    };
    let decision = match (args.allow, args.always, args.deny) {
        (true, _, _) => ApprovalDecision::AllowOnce,
        (_, true, _) => ApprovalDecision::AllowAlways,
        (_, _, true) => ApprovalDecision::Deny,
        _ => anyhow::bail!("say how to answer: --allow, --always or --deny"),
    };
    let answer = RequestAnswer {
        decision,
        message: args.message.clone(),
    };
    let resolved =
        answer_request(&client, &thread, &RuntimeRequestId::from(request), &answer).await?;
    let how = match (resolved.status, resolved.decision) {
        (RuntimeRequestStatus::Resolved, Some(decision)) => decision.described(),
        (RuntimeRequestStatus::Resolved, None) => "resolved",
        (RuntimeRequestStatus::Pending, _) => "pending",
        (RuntimeRequestStatus::Expired, _) => "expired",
        (RuntimeRequestStatus::Cancelled, _) => "cancelled",
    };
    println!("request {} {how}: {}", resolved.id, describe(&resolved));
    Ok(ExitCode::SUCCESS)
}

async fn answer_request(
    client: &ApiClient,
    thread: &ThreadId,
    request: &RuntimeRequestId,
    answer: &RequestAnswer,
) -> anyhow::Result<RuntimeRequest> {
    client
        .post(&format!("/api/threads/{thread}/requests/{request}"), answer)
        .await
}

/// The interactive side of `knife run`: requests of the run are queued here by the
/// renderer; one task asks on the terminal and posts the answers. A request settled
/// meanwhile (answered from another terminal, expired) stops being asked.
pub struct Prompter {
    requests: mpsc::UnboundedSender<RuntimeRequest>,
    settled: watch::Sender<Settled>,
    shared: Arc<Mutex<Asking>>,
}

/// What the prompt task did with each request, for the renderer to word the outcome.
#[derive(Default)]
struct Asking {
    /// Requests whose question was printed.
    shown: HashSet<RuntimeRequestId>,
    /// Requests answered from this terminal.
    answered: HashSet<RuntimeRequestId>,
}

/// Requests no longer pending, as seen on the event stream.
type Settled = HashSet<RuntimeRequestId>;

/// What one prompt ended with.
#[derive(Debug, PartialEq)]
enum Asked {
    Answer(RequestAnswer),
    /// The request was settled elsewhere while asking.
    Settled,
    /// stdin closed.
    Closed,
}

impl Prompter {
    /// A prompter when stdin and stderr are terminals, else `None` (the renderer
    /// then prints how to answer with `knife approve`).
    pub fn start(client: ApiClient, thread: ThreadId) -> Option<Self> {
        if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
            return None;
        }
        let (requests, mut rx) = mpsc::unbounded_channel::<RuntimeRequest>();
        let (settled, settled_rx) = watch::channel(Settled::new());
        let mut lines = stdin_lines();
        let shared = Arc::new(Mutex::new(Asking::default()));
        let task_shared = shared.clone();
        tokio::spawn(async move {
            while let Some(request) = rx.recv().await {
                let shown = || {
                    if let Ok(mut s) = task_shared.lock() {
                        s.shown.insert(request.id.clone());
                    }
                };
                match ask(&request, &mut lines, settled_rx.clone(), shown).await {
                    Asked::Answer(answer) => {
                        if let Ok(mut s) = task_shared.lock() {
                            s.answered.insert(request.id.clone());
                        }
                        if let Err(e) = answer_request(&client, &thread, &request.id, &answer).await
                        {
                            eprintln!("  could not answer: {e:#}");
                        }
                    }
                    // The renderer prints how it was settled.
                    Asked::Settled => {}
                    Asked::Closed => return,
                }
            }
        });
        Some(Self {
            requests,
            settled,
            shared,
        })
    }

    /// How `request` was left on this terminal: `None` when its question was never
    /// shown, `Some(true)` when answered here, `Some(false)` when the question is
    /// still open (settled elsewhere, or cancelled).
    pub fn answered_here(&self, request: &RuntimeRequestId) -> Option<bool> {
        let s = self.shared.lock().ok()?;
        s.shown
            .contains(request)
            .then(|| s.answered.contains(request))
    }

    /// Queues `request` to be asked.
    pub fn ask(&self, request: &RuntimeRequest) {
        let _ = self.requests.send(request.clone());
    }

    /// `request` is no longer pending: stop asking it (or do not start).
    pub fn settled(&self, request: &RuntimeRequestId) {
        self.settled.send_modify(|s| {
            s.insert(request.clone());
        });
    }
}

/// Asks one request on the terminal: `y` once, `a` always, `n` deny (then an
/// optional message). Stops when the request shows up in `settled`.
async fn ask(
    request: &RuntimeRequest,
    lines: &mut mpsc::UnboundedReceiver<String>,
    mut settled: watch::Receiver<Settled>,
    shown: impl FnOnce(),
) -> Asked {
    let question = |text: &str| {
        eprint!("{text}");
        let _ = std::io::stderr().flush();
    };
    if settled.borrow().contains(&request.id) {
        return Asked::Settled;
    }
    let diff = diff_block(request, colour_stderr()).unwrap_or_default();
    question(&format!(
        "? allow {}\n{diff}  [y] once, [a] always, [n] no: ",
        describe(request)
    ));
    shown();
    let mut next_line = async || {
        tokio::select! {
            line = lines.recv() => line.map(Ok),
            _ = settled.wait_for(|s| s.contains(&request.id)) => Some(Err(())),
        }
    };
    loop {
        let line = match next_line().await {
            Some(Ok(line)) => line,
            Some(Err(())) => return Asked::Settled,
            None => return Asked::Closed,
        };
        let decision = match line.trim().to_lowercase().as_str() {
            "y" | "yes" => ApprovalDecision::AllowOnce,
            "a" | "always" => ApprovalDecision::AllowAlways,
            "n" | "no" => ApprovalDecision::Deny,
            _ => {
                question("  answer y, a or n: ");
                continue;
            }
        };
        let message = if decision == ApprovalDecision::Deny {
            question("  message for the agent (optional, Enter to skip): ");
            match next_line().await {
                Some(Ok(text)) => Some(text.trim().to_owned()).filter(|t| !t.is_empty()),
                Some(Err(())) => return Asked::Settled,
                None => None,
            }
        } else {
            None
        };
        return Asked::Answer(RequestAnswer { decision, message });
    }
}

/// Lines of stdin, read on a plain thread (a blocked read must not keep the async
/// runtime from shutting down when the run ends).
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn request() -> RuntimeRequest {
        RuntimeRequest {
            id: RuntimeRequestId::from("request_1"),
            thread_id: ThreadId::from("thread_1"),
            run_id: None,
            node_id: NodeId::from("node:request_1"),
            provider_turn_id: None,
            kind: RuntimeRequestKind::Command,
            status: RuntimeRequestStatus::Pending,
            response_capability: ResponseCapability::NotResumable { reason: "x".into() },
            prompt: Some("bash: ls".into()),
            created_at: chrono::Utc::now(),
            resolved_at: None,
            decision: None,
            tool_approval: Some(ToolApproval {
                call_id: "call_1".into(),
                tool: "bash".into(),
                subject: "ls".into(),
                input: serde_json::json!({"command": "ls"}),
                rule: "the default rule".into(),
                message: None,
                diff: None,
            }),
        }
    }

    async fn answers(lines: &[&str]) -> Option<RequestAnswer> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for line in lines {
            tx.send((*line).to_owned()).unwrap();
        }
        drop(tx);
        let (_settled, settled_rx) = watch::channel(Settled::new());
        match ask(&request(), &mut rx, settled_rx, || {}).await {
            Asked::Answer(a) => Some(a),
            Asked::Closed => None,
            Asked::Settled => panic!("settled"),
        }
    }

    #[tokio::test]
    async fn approvals_a_request_answered_elsewhere_stops_being_asked() {
        let (_lines_tx, mut lines) = mpsc::unbounded_channel::<String>();
        let (settled, settled_rx) = watch::channel(Settled::new());
        let asking =
            tokio::spawn(async move { ask(&request(), &mut lines, settled_rx, || {}).await });
        tokio::task::yield_now().await;
        settled.send_modify(|s| {
            s.insert(RuntimeRequestId::from("request_1"));
        });
        assert_eq!(asking.await.unwrap(), Asked::Settled);
    }

    #[tokio::test]
    async fn approvals_the_prompt_maps_y_a_n_and_asks_again_otherwise() {
        let once = answers(&["y"]).await.unwrap();
        assert_eq!(
            (once.decision, once.message),
            (ApprovalDecision::AllowOnce, None)
        );
        let always = answers(&["maybe", " A "]).await.unwrap();
        assert_eq!(always.decision, ApprovalDecision::AllowAlways);
        let no = answers(&["n", "use make instead"]).await.unwrap();
        assert_eq!(no.decision, ApprovalDecision::Deny);
        assert_eq!(no.message.as_deref(), Some("use make instead"));
        let bare_no = answers(&["no", ""]).await.unwrap();
        assert_eq!(bare_no.message, None);
        assert_eq!(answers(&[]).await, None, "closed stdin answers nothing");
    }

    #[test]
    fn chg_05_the_prompt_shows_the_diff_coloured_on_a_terminal() {
        let mut r = request();
        assert_eq!(diff_block(&r, true), None);
        if let Some(t) = r.tool_approval.as_mut() {
            t.diff = Some("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n ctx\n".into());
        }
        assert_eq!(
            diff_block(&r, false).unwrap(),
            "  --- a/x\n  +++ b/x\n  @@ -1 +1 @@\n  -old\n  +new\n   ctx\n"
        );
        let coloured = diff_block(&r, true).unwrap();
        assert!(coloured.contains("\x1b[31m-old\x1b[0m"), "{coloured:?}");
        assert!(coloured.contains("\x1b[32m+new\x1b[0m"), "{coloured:?}");
        assert!(
            coloured.contains("\x1b[36m@@ -1 +1 @@\x1b[0m"),
            "{coloured:?}"
        );
        let long: String = (0..500).map(|i| format!("+line {i}\n")).collect();
        if let Some(t) = r.tool_approval.as_mut() {
            t.diff = Some(long);
        }
        let cut = diff_block(&r, false).unwrap();
        assert_eq!(cut.lines().count(), DIFF_LINES_SHOWN + 1);
        assert!(cut.contains("300 more diff lines"), "{cut}");
    }

    #[test]
    fn approvals_hint_and_description_name_the_call() {
        let r = request();
        assert_eq!(describe(&r), "bash: ls (the default rule)");
        assert_eq!(
            approve_hint(&r.thread_id, &r.id),
            "knife approve thread_1 request_1 --allow|--always|--deny [--message TEXT]"
        );
    }
}
