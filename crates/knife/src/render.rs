//! Terminal rendering of a run: streams assistant text to stdout as it grows,
//! prints tool calls compactly to stderr, shows a spinner while waiting, and hands
//! the run's approval requests to the terminal prompt (or prints how to answer them).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
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
    let mut events = Box::pin(client.events(thread, after).await?);
    let mut view = RunView::new();
    view.prompter = prompter;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                // Ends a partial answer's line before the error is printed.
                view.finish();
                return Err(e);
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
    spinner: ProgressBar,
    mid_line: bool,
    prompter: Option<&'p Prompter>,
    /// Requests already shown as pending / as settled.
    asked: HashSet<RuntimeRequestId>,
    settled: HashSet<RuntimeRequestId>,
}

impl<'p> RunView<'p> {
    fn new() -> Self {
        let spinner = ProgressBar::new_spinner();
        spinner.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        spinner.set_message("waiting for the model…");
        spinner.enable_steady_tick(Duration::from_millis(100));
        Self {
            printed: HashMap::new(),
            tools: HashMap::new(),
            spinner,
            mid_line: false,
            prompter: None,
            asked: HashSet::new(),
            settled: HashSet::new(),
        }
    }

    /// A runtime request of the run: pending → hide the spinner and ask (or print
    /// how to answer); settled → show the outcome and bring the spinner back.
    fn request(&mut self, request: &RuntimeRequest) {
        let pending = request.status == RuntimeRequestStatus::Pending;
        if pending {
            if !self.asked.insert(request.id.clone()) {
                return;
            }
            self.spinner.set_draw_target(ProgressDrawTarget::hidden());
            if std::mem::take(&mut self.mid_line) {
                println!();
            }
            match self.prompter {
                Some(prompter) => prompter.ask(request),
                None => eprintln!(
                    "? approval needed: {}
  answer with: {}",
                    describe(request),
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
        let outcome = match (request.status, request.decision) {
            (RuntimeRequestStatus::Resolved, Some(ApprovalDecision::AllowOnce)) => {
                "✓ allowed once".to_owned()
            }
            (RuntimeRequestStatus::Resolved, Some(ApprovalDecision::AllowAlways)) => {
                "✓ allowed always".to_owned()
            }
            (RuntimeRequestStatus::Resolved, _) => "✗ denied".to_owned(),
            (status, _) => format!("✗ request {}", format!("{status:?}").to_lowercase()),
        };
        eprintln!("  {outcome}");
        self.spinner.set_draw_target(ProgressDrawTarget::stderr());
    }

    fn finish(&mut self) {
        self.spinner.finish_and_clear();
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
                } => self
                    .spinner
                    .set_message(format!("{message}; retrying (attempt {attempt})…")),
                AgentStatus::Busy => self.spinner.set_message("waiting for the model…"),
                AgentStatus::Idle => {}
            },
            _ => {}
        }
        None
    }

    fn item(&mut self, item: &TurnItem) {
        match &item.kind {
            TurnItemKind::AssistantMessage { text, .. } => {
                let done = self.printed.entry(item.id.clone()).or_insert(0);
                if text.len() > *done && text.is_char_boundary(*done) {
                    let fresh = &text[*done..];
                    self.spinner.suspend(|| {
                        print!("{fresh}");
                        let _ = std::io::stdout().flush();
                    });
                    *done = text.len();
                    self.mid_line = !text.ends_with('\n');
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
                    self.spinner.set_message(format!("running {tool}…"));
                    lines.push(format!("→ {tool} {}", compact(input)));
                }
                match item.status {
                    TurnItemStatus::Completed => {
                        let n = output.as_deref().map(|o| o.lines().count()).unwrap_or(0);
                        lines.push(format!(
                            "  ✓ {tool}: {n} line{}",
                            if n == 1 { "" } else { "s" }
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
                    let mid = std::mem::take(&mut self.mid_line);
                    self.spinner.suspend(|| {
                        if mid {
                            println!();
                        }
                        eprintln!("{line}");
                    });
                    self.spinner.set_message("waiting for the model…");
                }
            }
            TurnItemKind::Error { error } => {
                self.spinner
                    .suspend(|| eprintln!("✗ {} ({})", error.message, error.error_type));
            }
            TurnItemKind::Compaction { .. } if item.status == TurnItemStatus::Completed => {
                let mid = std::mem::take(&mut self.mid_line);
                self.spinner.suspend(|| {
                    if mid {
                        println!();
                    }
                    eprintln!("… history compacted to fit the model's context");
                });
            }
            _ => {}
        }
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
