//! Terminal rendering of a run: streams assistant text to stdout as it grows (Markdown
//! rendered, line by line, on a colour terminal: UX-03), prints reasoning dimmed and tool
//! calls with an output preview to stderr, shows a spinner while waiting, and hands the
//! run's approval requests to the terminal prompt (or prints how to answer them).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::time::Duration;

use anstyle::{AnsiColor, Effects, Style};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use knife_protocol::*;

use crate::approve::{Prompter, approve_hint, describe};
use crate::client::ApiClient;
use crate::markdown::MarkdownStream;

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
    /// Transcript positions of the tool calls not finished yet.
    open_tools: HashMap<TurnItemId, u64>,
    /// Live text of items after an unfinished tool call: deltas overtake the durable
    /// tool result, so they wait for it to keep the transcript's order.
    held: Vec<ItemDelta>,
    /// Running tool calls: their name and the end of the output they streamed so far
    /// (LIVE-02), whose last line the spinner shows (`running bash… │ line`).
    running: HashMap<TurnItemId, (String, String)>,
    /// The spinner, on stderr, only while nothing is printed on the current line and
    /// no approval is being asked: it redraws its line with `\r` + clear-line, which
    /// would wipe streamed text or a prompt.
    spinner: Option<ProgressBar>,
    /// What the spinner says (kept while it is hidden).
    message: String,
    /// The terminal's cursor is after text of stdout's on its line: only when stdout is
    /// a terminal (`out_open` there). A line printed on stderr ends stdout's first.
    mid_line: bool,
    /// stdout's last text did not end its line, terminal or not: a discarded attempt's
    /// retry, and the end of the run, start a new line. Redirected output gets no other
    /// line breaks (a status line on stderr must not split the answer in a file).
    out_open: bool,
    /// stdout is a terminal.
    stdout_tty: bool,
    /// The answer item printed last as plain text.
    last_answer: Option<TurnItemId>,
    prompter: Option<&'p Prompter>,
    /// Requests already shown as pending / as settled.
    asked: HashSet<RuntimeRequestId>,
    settled: HashSet<RuntimeRequestId>,
    /// The last retry attempt printed on a line of its own.
    retry_shown: u32,
    /// Colour and rendered Markdown on stdout / colour and reasoning on stderr (a
    /// terminal without NO_COLOR; anstream's rules).
    colour_out: bool,
    colour_err: bool,
    /// Reasoning is shown on stderr: on a terminal, with or without colour (NO_COLOR
    /// removes the colour, not the `┊` lines), or when colour is forced.
    show_reasoning: bool,
    /// Answers being rendered as Markdown (only with `colour_out`).
    markdown: HashMap<TurnItemId, MarkdownStream>,
    /// Reasoning text waiting for the end of its line (only with `show_reasoning`).
    reasoning: HashMap<TurnItemId, String>,
}

/// True when `stream` gets colour: a terminal, and neither `NO_COLOR` nor `TERM=dumb`
/// (anstream's rules; `CLICOLOR_FORCE` forces it on).
pub fn colour_for(stream: &impl anstream::stream::RawStream) -> bool {
    anstream::AutoStream::choice(stream) != anstream::ColorChoice::Never
}

impl<'p> RunView<'p> {
    fn new() -> Self {
        let mut view = Self {
            printed: HashMap::new(),
            tools: HashMap::new(),
            open_tools: HashMap::new(),
            held: Vec::new(),
            running: HashMap::new(),
            spinner: None,
            message: WAITING.to_owned(),
            mid_line: false,
            out_open: false,
            stdout_tty: std::io::IsTerminal::is_terminal(&std::io::stdout()),
            last_answer: None,
            prompter: None,
            asked: HashSet::new(),
            settled: HashSet::new(),
            retry_shown: 0,
            colour_out: colour_for(&std::io::stdout()),
            colour_err: colour_for(&std::io::stderr()),
            show_reasoning: colour_for(&std::io::stderr())
                || std::io::IsTerminal::is_terminal(&std::io::stderr()),
            markdown: HashMap::new(),
            reasoning: HashMap::new(),
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
        self.flush_text();
        self.hide_spinner();
        self.end_terminal_line();
        eprintln!("{line}");
    }

    /// `text` in `style` on stderr when it has colour, else plain.
    fn paint(&self, style: Style, text: &str) -> String {
        if self.colour_err {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_owned()
        }
    }

    /// Prints what the Markdown renderers and the reasoning buffers still hold (a
    /// partial last line); text arriving later for the same item starts afresh.
    fn flush_text(&mut self) {
        let mut out = String::new();
        for stream in self.markdown.values_mut() {
            out.push_str(&std::mem::take(stream).finish());
        }
        let held: Vec<String> = self
            .reasoning
            .values_mut()
            .map(std::mem::take)
            .filter(|l| !l.is_empty())
            .collect();
        if !out.is_empty() {
            self.hide_spinner();
            print!("{out}");
            let _ = std::io::stdout().flush();
        }
        for line in held {
            self.reasoning_line(&line);
        }
    }

    fn reasoning_line(&mut self, line: &str) {
        self.hide_spinner();
        self.end_terminal_line();
        eprintln!("{}", self.paint(DIM_ITALIC, &format!("  ┊ {line}")));
    }

    /// More reasoning of `item`, shown line by line on a terminal (dimmed with colour).
    fn print_reasoning(&mut self, item: &TurnItemId, fresh: &str) {
        if !self.show_reasoning {
            return;
        }
        let buf = self.reasoning.entry(item.clone()).or_default();
        buf.push_str(fresh);
        let mut lines = Vec::new();
        while let Some(at) = buf.find('\n') {
            let line: String = buf.drain(..=at).collect();
            lines.push(line.trim_end().to_owned());
        }
        for line in lines {
            self.reasoning_line(&line);
        }
        self.show_spinner();
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
            self.end_terminal_line();
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
        self.open_tools.clear();
        if let Some(run) = self.held.first().and_then(|d| d.run_id.clone()) {
            self.release_held(Some(run));
        }
        self.flush_text();
        self.hide_spinner();
        if std::mem::take(&mut self.out_open) {
            println!();
        }
        self.mid_line = false;
    }

    /// Ends stdout's line before a line on stderr, when both are on the terminal.
    fn end_terminal_line(&mut self) {
        if std::mem::take(&mut self.mid_line) {
            println!();
            self.out_open = false;
        }
    }

    /// Renders one event; returns the run when this event ends it.
    fn apply(&mut self, event: &StoredEvent, run: &RunId) -> Option<Run> {
        match &event.event.body {
            EventBody::TurnItemUpdated(item) if item.run_id.as_ref() == Some(run) => {
                self.item(item)
            }
            // Appended durable text prints like a delta: only what is new (LIVE-03).
            EventBody::TurnItemAppended(chunk) => self.delta(&chunk.as_delta(), run),
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
                    attempt,
                    message,
                    next,
                    max_attempts,
                } => {
                    let text = retry_text(message, *attempt, *max_attempts, *next);
                    // Said at once, on a line of its own, once per attempt (UX-03): the
                    // spinner alone hides a dead endpoint for minutes.
                    if self.retry_shown < *attempt {
                        self.retry_shown = *attempt;
                        let line = self.paint(YELLOW, &format!("  ⟳ {text}"));
                        self.line(&line);
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
    ///
    /// A tool call's own deltas are not printed (its output is previewed once it
    /// settles; while it runs, the spinner shows its output's last line), but one that
    /// streams before its first durable event (deltas can overtake the log) counts as
    /// open from then on: the text after it waits, so its `→ tool` line prints first (UX-03).
    fn delta(&mut self, delta: &ItemDelta, run: &RunId) {
        if delta.run_id.as_ref() != Some(run) {
            return;
        }
        let text = match delta.field {
            DeltaField::Text => true,
            DeltaField::Reasoning => false,
            DeltaField::Input | DeltaField::Output => {
                if delta.field == DeltaField::Output {
                    self.tool_progress(delta);
                }
                if !self.tools.contains_key(&delta.item_id) {
                    self.open_tools
                        .entry(delta.item_id.clone())
                        .or_insert(delta.ordinal);
                }
                return;
            }
        };
        if self.open_tools.values().any(|at| *at < delta.ordinal) {
            self.held.push(delta.clone());
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
        if text {
            self.print_text(&delta.item_id, fresh);
        } else {
            self.print_reasoning(&delta.item_id, fresh);
        }
    }

    /// More output of a running tool call: the spinner says its last line.
    fn tool_progress(&mut self, delta: &ItemDelta) {
        let Some((tool, tail)) = self.running.get_mut(&delta.item_id) else {
            return;
        };
        tail.push_str(&delta.text);
        // Only the end is needed: the last line, at most 60 characters of it.
        if tail.len() > 1024 {
            let mut cut = tail.len() - 512;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail.drain(..cut);
        }
        let message = match last_line(tail) {
            Some(line) => format!("running {tool}… │ {line}"),
            None => format!("running {tool}…"),
        };
        self.set_message(message);
    }

    /// A discarded attempt: its printed text cannot be taken back, so the retry's
    /// text starts on a new line.
    fn reset(&mut self, reset: &ItemReset) {
        if let Some(done) = self.printed.get_mut(&reset.item_id)
            && *done > 0
        {
            *done = 0;
            self.markdown.remove(&reset.item_id);
            self.reasoning.remove(&reset.item_id);
            if self.out_open {
                self.print_text(&reset.item_id, "\n");
            }
        }
    }

    /// More answer text of `item`: rendered Markdown, a line once it is complete, on a
    /// colour terminal; else printed as it comes.
    fn print_text(&mut self, item: &TurnItemId, fresh: &str) {
        if self.colour_out {
            let out = self.markdown.entry(item.clone()).or_default().push(fresh);
            if !out.is_empty() {
                self.hide_spinner();
                if std::mem::take(&mut self.mid_line) {
                    println!();
                }
                print!("{out}");
                let _ = std::io::stdout().flush();
            }
            self.show_spinner();
            return;
        }
        self.hide_spinner();
        // Another answer than the one printed last: a paragraph of its own (two messages
        // of a run, e.g. before and after a tool call, must not run into one line).
        if self.last_answer.as_ref().is_some_and(|last| last != item) {
            println!("{}", if self.out_open { "\n" } else { "" });
        }
        self.last_answer = Some(item.clone());
        print!("{fresh}");
        let _ = std::io::stdout().flush();
        self.out_open = !fresh.ends_with('\n');
        self.mid_line = self.stdout_tty && self.out_open;
        self.show_spinner();
    }

    fn item(&mut self, item: &TurnItem) {
        match &item.kind {
            TurnItemKind::AssistantMessage { text, .. } | TurnItemKind::Reasoning { text, .. } => {
                let answer = matches!(item.kind, TurnItemKind::AssistantMessage { .. });
                let done = self.printed.entry(item.id.clone()).or_insert(0);
                if text.len() > *done && text.is_char_boundary(*done) {
                    let fresh = text[*done..].to_owned();
                    *done = text.len();
                    if answer {
                        self.print_text(&item.id, &fresh);
                    } else {
                        self.print_reasoning(&item.id, &fresh);
                    }
                }
                if !matches!(
                    item.status,
                    TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
                ) {
                    self.flush_item(&item.id);
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
                if matches!(
                    item.status,
                    TurnItemStatus::Pending | TurnItemStatus::Running | TurnItemStatus::Waiting
                ) {
                    self.open_tools.insert(item.id.clone(), item.ordinal);
                } else {
                    self.open_tools.remove(&item.id);
                }
                let started = matches!(before, None | Some(TurnItemStatus::Pending));
                let mut lines = Vec::new();
                if started && item.status != TurnItemStatus::Pending {
                    lines.push(format!(
                        "{} {}",
                        self.paint(BOLD, &format!("→ {tool}")),
                        compact_input(input)
                    ));
                }
                match item.status {
                    TurnItemStatus::Completed => {
                        let output = output.as_deref().unwrap_or("");
                        lines.push(format!(
                            "  {} {}",
                            self.paint(GREEN, "✓"),
                            self.paint(
                                Style::new(),
                                &format!("{tool}: {}", summarize_output(tool, output))
                            )
                        ));
                        for line in output_preview(tool, output) {
                            lines.push(self.paint(DIM, &format!("    │ {line}")));
                        }
                    }
                    TurnItemStatus::Failed | TurnItemStatus::Interrupted => {
                        lines.push(format!(
                            "  {} {tool}: {}",
                            self.paint(RED, "✗"),
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
                        self.set_message(format!("running {tool}…"));
                        let tail = output.clone().unwrap_or_default();
                        self.running.insert(item.id.clone(), (tool.clone(), tail));
                    }
                    _ => {
                        self.running.remove(&item.id);
                        self.set_message(WAITING)
                    }
                }
                self.release_held(item.run_id.clone());
            }
            TurnItemKind::Error { error } => {
                let text = self.paint(RED, &format!("✗ {} ({})", error.message, error.error_type));
                self.line(&text);
                self.show_spinner();
            }
            TurnItemKind::Compaction { .. } if item.status == TurnItemStatus::Completed => {
                self.line("… history compacted to fit the model's context");
                self.show_spinner();
            }
            _ => {}
        }
    }

    /// Replays the held deltas that no unfinished tool call precedes any more.
    fn release_held(&mut self, run: Option<RunId>) {
        let Some(run) = run else {
            return;
        };
        let held = std::mem::take(&mut self.held);
        for delta in held {
            self.delta(&delta, &run);
        }
    }

    /// Prints what is held of `item`'s text (its partial last line).
    fn flush_item(&mut self, item: &TurnItemId) {
        if let Some(mut stream) = self.markdown.remove(item) {
            let out = stream.finish();
            if !out.is_empty() {
                self.hide_spinner();
                print!("{out}");
                let _ = std::io::stdout().flush();
            }
        }
        if let Some(line) = self.reasoning.remove(item)
            && !line.is_empty()
        {
            self.reasoning_line(&line);
        }
        self.show_spinner();
    }
}

/// What the spinner says while the model is working.
const WAITING: &str = "waiting for the model…";

const DIM: Style = Style::new().effects(Effects::DIMMED);
const DIM_ITALIC: Style = Style::new().effects(Effects::DIMMED.insert(Effects::ITALIC));
const BOLD: Style = Style::new().effects(Effects::BOLD);
const GREEN: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Green)));
const RED: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)));
const YELLOW: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)));

/// A retry as people read it (UX-03): `Could not reach http://…: connection refused;
/// retrying (attempt 2 of 8, next in 2 s)`. `attempt` is the retry number (1 = the
/// first retry), so the next call is `attempt + 1`.
pub fn retry_text(
    message: &str,
    attempt: u32,
    max_attempts: Option<u32>,
    next: Timestamp,
) -> String {
    let call = attempt + 1;
    let of = max_attempts.map(|m| format!(" of {m}")).unwrap_or_default();
    let wait = (next - chrono::Utc::now()).num_milliseconds().max(0);
    let secs = (wait + 500) / 1000;
    format!("{message}; retrying (attempt {call}{of}, next in {secs} s)")
}

/// The line that ends a followed run (UX-03): `run 2 · completed · 3.4s · 1,234 tokens
/// (1,200 in, 34 out)`; the status coloured when `colour`.
pub fn run_summary(run: &Run, colour: bool) -> String {
    // The wire name (`budget_exceeded`), not the Rust one.
    let status = serde_json::to_value(run.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", run.status).to_lowercase());
    let style = match run.status {
        RunStatus::Completed => GREEN,
        RunStatus::Failed => RED,
        _ => YELLOW,
    };
    let status = if colour {
        format!("{}{status}{}", style.render(), style.render_reset())
    } else {
        status
    };
    let mut parts = vec![format!("run {}", run.ordinal), status];
    let from = run.started_at.unwrap_or(run.requested_at);
    if let Some(to) = run.completed_at
        && let Ok(elapsed) = (to - from).to_std()
    {
        parts.push(knife_llm::retry::human_duration(elapsed));
    }
    if let Some(u) = &run.usage {
        let total = if u.total_tokens > 0 {
            u.total_tokens
        } else {
            u.input_tokens + u.output_tokens
        };
        parts.push(format!(
            "{} tokens ({} in, {} out)",
            thousands(total),
            thousands(u.input_tokens),
            thousands(u.output_tokens)
        ));
    }
    parts.join(" · ")
}

/// `1234567` → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

mod tool_text;
pub use tool_text::{compact_input, last_line, output_preview, output_tail, summarize_output};

#[cfg(test)]
mod tests {
    use super::*;

    /// UX-03 (piped output stays plain text): deltas overtake the durable log (LIVE-01),
    /// so a status line (a retry, a compaction) can come while an answer is half
    /// printed. With stdout redirected it goes to stderr alone: no line break lands in
    /// the middle of the answer on stdout. On a terminal stdout's line is ended first,
    /// and the end of the run ends an open line either way.
    #[test]
    fn ux_03_a_status_line_never_splits_redirected_answer_text() {
        let item = TurnItemId::from("item");
        let mut view = RunView::new();
        view.stdout_tty = false;
        view.print_text(&item, "Final");
        assert!(view.out_open && !view.mid_line);
        view.line("… history compacted to fit the model's context");
        assert!(
            view.out_open,
            "stdout's line stays open: no line break was printed"
        );
        view.finish();
        assert!(!view.out_open, "the run's end ends the line");

        let mut view = RunView::new();
        view.stdout_tty = true;
        view.colour_out = false;
        view.print_text(&item, "Final");
        assert!(view.out_open && view.mid_line);
        view.line("… history compacted to fit the model's context");
        assert!(
            !view.out_open && !view.mid_line,
            "the terminal's line was ended first"
        );
        view.hide_spinner();
    }

    /// UX-03: two answers of one run printed as plain text are two paragraphs, not one
    /// glued line ("I will create a file.Wrote hello.txt"); one answer's deltas are not
    /// split.
    #[test]
    fn ux_03_two_answers_of_a_run_are_separate_paragraphs_in_plain_text() {
        let mut view = RunView::new();
        view.stdout_tty = false;
        view.colour_out = false;
        let (first, second) = (TurnItemId::from("a"), TurnItemId::from("b"));
        view.print_text(&first, "I will create ");
        view.print_text(&first, "a file.");
        assert_eq!(view.last_answer.as_ref(), Some(&first));
        assert!(view.out_open, "one answer's deltas stay on its line");
        view.print_text(&second, "Wrote hello.txt.");
        assert_eq!(view.last_answer.as_ref(), Some(&second));
        view.hide_spinner();
    }
}
