//! Terminal rendering of a run: streams assistant text to stdout as it grows,
//! prints tool calls compactly to stderr, shows a spinner while waiting, and hands
//! the run's approval requests to the terminal prompt (or prints how to answer them).

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use knife_protocol::*;

use crate::approve::{Prompter, approve_hint, describe};
use crate::client::ApiClient;

/// Follows `thread`'s events after `after` until `run` reaches a terminal status,
/// rendering as it goes. A pending approval request of the run goes to `prompter`
/// when given, else the `knife approve` line that answers it is printed. Returns
/// the final run.
pub async fn follow_run(
    client: &ApiClient,
    thread: &ThreadId,
    run: &RunId,
    after: u64,
    prompter: Option<&Prompter>,
) -> anyhow::Result<Run> {
    follow_run_from(client, thread, run, after, prompter, None).await
}

/// [`follow_run`] for a run already under way (`knife attach`, UX-04): what `seed` (a
/// projection read at sequence `after`) holds of `run` is rendered first (its turn
/// items and pending requests), then the live events after it.
pub async fn follow_run_from(
    client: &ApiClient,
    thread: &ThreadId,
    run: &RunId,
    after: u64,
    prompter: Option<&Prompter>,
    seed: Option<&ThreadProjection>,
) -> anyhow::Result<Run> {
    let mut events = Box::pin(client.events(thread, after).await?);
    let mut view = RunView::new();
    view.prompter = prompter;
    if let Some(seed) = seed {
        for item in seed
            .turn_items
            .iter()
            .filter(|i| i.run_id.as_ref() == Some(run))
        {
            view.item(item);
        }
        for request in seed
            .runtime_requests
            .iter()
            .filter(|r| r.run_id.as_ref() == Some(run))
        {
            view.request(request);
        }
        if let Some(done) = seed
            .runs
            .iter()
            .find(|r| &r.id == run && r.status.is_terminal())
        {
            view.finish();
            return Ok(done.clone());
        }
    }
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                // Ends a partial answer's line before the error is printed.
                view.finish();
                return Err(e);
            }
        };
        let event = match event {
            crate::client::ThreadMessage::Event(event) => event,
            crate::client::ThreadMessage::Delta(delta) => {
                view.delta(&delta, run);
                continue;
            }
            crate::client::ThreadMessage::Reset(reset) => {
                view.reset(&reset);
                continue;
            }
        };
        if let Some(done) = view.apply(&event, run) {
            view.finish();
            return Ok(done);
        }
    }
    view.finish();
    anyhow::bail!(
        "{} (it closed the event stream before run {run} finished)",
        crate::client::server_lost(client.base())
    )
}

/// Incremental renderer of turn items.
pub struct RunView<'p> {
    printed: HashMap<TurnItemId, usize>,
    tools: HashMap<TurnItemId, TurnItemStatus>,
    /// The spinner, on stderr, only while nothing is printed on the current line and
    /// no approval is being asked: it redraws its line with `\r` + clear-line, which
    /// would wipe streamed text or a prompt.
    spinner: Option<ProgressBar>,
    /// What the spinner says (kept while it is hidden).
    message: String,
    mid_line: bool,
    prompter: Option<&'p Prompter>,
    /// Requests already shown as pending / as settled.
    asked: HashSet<RuntimeRequestId>,
    settled: HashSet<RuntimeRequestId>,
    /// The last retry attempt printed on a line of its own (no terminal).
    retry_shown: u32,
}

impl<'p> RunView<'p> {
    fn new() -> Self {
        let mut view = Self {
            printed: HashMap::new(),
            tools: HashMap::new(),
            spinner: None,
            message: WAITING.to_owned(),
            mid_line: false,
            prompter: None,
            asked: HashSet::new(),
            settled: HashSet::new(),
            retry_shown: 0,
        };
        view.show_spinner();
        view
    }

    /// Approval requests asked and not settled yet.
    fn asking(&self) -> bool {
        self.asked.difference(&self.settled).next().is_some()
    }

    /// Starts the spinner when the cursor is at the start of a line and no
    /// approval is waiting for an answer.
    fn show_spinner(&mut self) {
        if self.spinner.is_some() || self.mid_line || self.asking() {
            return;
        }
        let spinner = ProgressBar::new_spinner();
        spinner.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        spinner.set_message(self.message.clone());
        spinner.enable_steady_tick(Duration::from_millis(100));
        self.spinner = Some(spinner);
    }

    /// Stops the spinner and clears its line (nothing is left behind).
    fn hide_spinner(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }

    /// Sets what the spinner says, showing it when it may be shown.
    fn set_message(&mut self, message: impl Into<String>) {
        self.message = message.into();
        match &self.spinner {
            Some(spinner) => spinner.set_message(self.message.clone()),
            None => self.show_spinner(),
        }
    }

    /// Prints `line` to stderr on a line of its own (ending a streamed line first),
    /// with the spinner out of the way.
    fn line(&mut self, line: &str) {
        self.hide_spinner();
        if std::mem::take(&mut self.mid_line) {
            println!();
        }
        eprintln!("{line}");
    }

    /// A runtime request of the run: pending → hide the spinner and ask (or print
    /// how to answer); settled → show the outcome and bring the spinner back.
    fn request(&mut self, request: &RuntimeRequest) {
        let pending = request.status == RuntimeRequestStatus::Pending;
        if pending {
            if !self.asked.insert(request.id.clone()) {
                return;
            }
            self.hide_spinner();
            if std::mem::take(&mut self.mid_line) {
                println!();
            }
            match self.prompter {
                Some(prompter) => prompter.ask(request),
                None => eprintln!(
                    "? approval needed: {}\n{}  answer with: {}",
                    describe(request),
                    crate::approve::diff_block(request, crate::approve::colour_stderr())
                        .unwrap_or_default(),
                    approve_hint(&request.thread_id, &request.id)
                ),
            }
            return;
        }
        if !self.settled.insert(request.id.clone()) || !self.asked.contains(&request.id) {
            return;
        }
        if let Some(prompter) = self.prompter {
            prompter.settled(&request.id);
        }
        // A question still open on this terminal: end its line, and say who answered.
        let open = self
            .prompter
            .and_then(|p| p.answered_here(&request.id))
            .is_some_and(|here| !here);
        if open {
            eprintln!();
        }
        let elsewhere = if open { " (answered elsewhere)" } else { "" };
        let outcome = match (request.status, request.decision) {
            (
                RuntimeRequestStatus::Resolved,
                Some(d @ (ApprovalDecision::AllowOnce | ApprovalDecision::AllowAlways)),
            ) => format!("✓ {}{elsewhere}", d.described()),
            (RuntimeRequestStatus::Resolved, _) => {
                format!("✗ {}{elsewhere}", ApprovalDecision::Deny.described())
            }
            (RuntimeRequestStatus::Cancelled, _) => {
                "✗ request cancelled: the run was interrupted".to_owned()
            }
            (RuntimeRequestStatus::Expired, _) => {
                "✗ request expired: the session that asked is gone".to_owned()
            }
            (status, _) => format!("✗ request {}", format!("{status:?}").to_lowercase()),
        };
        self.line(&format!("  {outcome}"));
        self.set_message(WAITING);
    }

    fn finish(&mut self) {
        self.hide_spinner();
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    /// Renders one event; returns the run when this event ends it.
    fn apply(&mut self, event: &StoredEvent, run: &RunId) -> Option<Run> {
        match &event.event.body {
            EventBody::TurnItemUpdated(item) if item.run_id.as_ref() == Some(run) => {
                self.item(item)
            }
            EventBody::RuntimeRequestUpdated(r) if r.run_id.as_ref() == Some(run) => {
                self.request(r)
            }
            EventBody::RunUpdated(r) if &r.id == run && r.status.is_terminal() => {
                return Some(r.clone());
            }
            EventBody::ThreadStatusChanged {
                run_id: Some(r),
                status,
                ..
            } if r == run => match status {
                AgentStatus::Retry {
                    attempt, message, ..
                } => {
                    let text = format!("{message}; retrying (attempt {attempt})…");
                    // Without a terminal there is no spinner: say it on a line of its
                    // own, once per attempt, so a stuck-looking run shows why.
                    if !std::io::stderr().is_terminal() && self.retry_shown < *attempt {
                        self.retry_shown = *attempt;
                        self.line(&format!("  {text}"));
                    }
                    self.set_message(text);
                }
                AgentStatus::Busy => self.set_message(WAITING),
                AgentStatus::Idle => {}
            },
            _ => {}
        }
        None
    }

    /// Prints an answer's live text as it arrives (LIVE-01); the durable snapshots
    /// then add nothing already printed.
    fn delta(&mut self, delta: &ItemDelta, run: &RunId) {
        if delta.field != DeltaField::Text || delta.run_id.as_ref() != Some(run) {
            return;
        }
        let done = self.printed.entry(delta.item_id.clone()).or_insert(0);
        let done_at = *done as u64;
        if delta.end() <= done_at || delta.offset > done_at {
            return;
        }
        let skip = (done_at - delta.offset) as usize;
        let Some(fresh) = delta.text.get(skip..) else {
            return;
        };
        *done += fresh.len();
        self.print_text(fresh);
    }

    /// A discarded attempt: its printed text cannot be taken back, so the retry's
    /// text starts on a new line.
    fn reset(&mut self, reset: &ItemReset) {
        if let Some(done) = self.printed.get_mut(&reset.item_id)
            && *done > 0
        {
            *done = 0;
            if self.mid_line {
                self.print_text("\n");
            }
        }
    }

    fn print_text(&mut self, fresh: &str) {
        self.hide_spinner();
        print!("{fresh}");
        let _ = std::io::stdout().flush();
        self.mid_line = !fresh.ends_with('\n');
        self.show_spinner();
    }

    fn item(&mut self, item: &TurnItem) {
        match &item.kind {
            TurnItemKind::AssistantMessage { text, .. } => {
                let done = self.printed.entry(item.id.clone()).or_insert(0);
                if text.len() > *done && text.is_char_boundary(*done) {
                    let fresh = text[*done..].to_owned();
                    *done = text.len();
                    self.print_text(&fresh);
                }
            }
            TurnItemKind::ToolCall {
                tool,
                input,
                output,
                error,
                ..
            } => {
                let before = self.tools.insert(item.id.clone(), item.status);
                if before == Some(item.status) {
                    return;
                }
                let started = matches!(before, None | Some(TurnItemStatus::Pending));
                let mut lines = Vec::new();
                if started && item.status != TurnItemStatus::Pending {
                    lines.push(format!("→ {tool} {}", compact(input)));
                }
                match item.status {
                    TurnItemStatus::Completed => {
                        lines.push(format!(
                            "  ✓ {tool}: {}",
                            summarize_output(tool, output.as_deref().unwrap_or(""))
                        ));
                    }
                    TurnItemStatus::Failed | TurnItemStatus::Interrupted => {
                        lines.push(format!(
                            "  ✗ {tool}: {}",
                            error.as_deref().unwrap_or("failed")
                        ));
                    }
                    _ => {}
                }
                let line = (!lines.is_empty()).then(|| lines.join("\n"));
                if let Some(line) = line {
                    self.line(&line);
                }
                match item.status {
                    TurnItemStatus::Pending => {}
                    TurnItemStatus::Running | TurnItemStatus::Waiting => {
                        self.set_message(format!("running {tool}…"))
                    }
                    _ => self.set_message(WAITING),
                }
            }
            TurnItemKind::Error { error } => {
                self.line(&format!("✗ {} ({})", error.message, error.error_type));
                self.show_spinner();
            }
            TurnItemKind::Compaction { .. } if item.status == TurnItemStatus::Completed => {
                self.line("… history compacted to fit the model's context");
                self.show_spinner();
            }
            _ => {}
        }
    }
}

/// What the spinner says while the model is working.
const WAITING: &str = "waiting for the model…";

/// A short summary of a tool's output: its line count, and for `bash` the exit
/// status it ends with (`no output, exit code 0`, `3 lines, exit code 1`).
pub fn summarize_output(tool: &str, output: &str) -> String {
    let mut lines: Vec<&str> = output.lines().collect();
    let mut status = None;
    if tool == "bash" {
        if let Some(last) = lines.last()
            && (last.starts_with("(exit ") || last.starts_with("(killed by signal"))
        {
            status = Some(last.trim_start_matches('(').trim_end_matches(')'));
            lines.pop();
        }
        // Lines the bash tool adds about the output rather than output itself.
        lines.retain(|l| {
            *l != "(no output)" && !l.starts_with("(background processes it left running")
        });
    }
    let count = match lines.len() {
        0 => "no output".to_owned(),
        1 => "1 line".to_owned(),
        n => format!("{n} lines"),
    };
    match status {
        Some(status) => format!("{count}, {status}"),
        None => count,
    }
}

/// A one-line, at most 120-char rendering of a tool input.
fn compact(input: &serde_json::Value) -> String {
    let text = match input {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(119).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::summarize_output;

    #[test]
    fn bash_output_is_summarised_with_its_exit_status() {
        assert_eq!(
            summarize_output("bash", "(no output)\n(exit code 0)"),
            "no output, exit code 0"
        );
        assert_eq!(
            summarize_output("bash", "a\nb\nc\n(exit code 1)"),
            "3 lines, exit code 1"
        );
        assert_eq!(summarize_output("read", "one\n"), "1 line");
        assert_eq!(summarize_output("list", ""), "no output");
    }
}
