//! `knife` / `knife tui`: the interactive terminal (SPEC UX-02), a ratatui full-screen
//! view talking to the knife server like `knife run` (served in-process when none runs).

mod state;
mod view;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures::StreamExt;
use knife_protocol::*;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::text::Line;
use tokio::sync::mpsc;

use crate::app::InProcessServer;
use crate::client::{ApiClient, ThreadMessage, find_server};
use crate::config::Config;
use state::ThreadView;

/// Flags of `knife tui` (also of `knife` alone).
#[derive(Args, Clone, Default)]
pub struct TuiArgs {
    /// Project folder (default: the current directory).
    #[arg(long)]
    pub project: Option<PathBuf>,
    /// Open this thread (its id or a unique prefix) instead of a new one.
    #[arg(long)]
    pub thread: Option<String>,
    /// Open the project's most recent thread.
    #[arg(long, conflicts_with = "thread")]
    pub last: bool,
    /// Server to use (default: the one holding the data directory, else the configured
    /// listen address); served in-process when none answers.
    #[arg(long, env = "KNIFE_SERVER")]
    pub server: Option<String>,
    /// Data directory for an in-process server.
    #[arg(long, env = "KNIFE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// What the screen shows over the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    None,
    /// The thread picker; row 0 is "new thread", row n the thread `n - 1`.
    Picker {
        selected: usize,
    },
    Help,
}

/// The interactive session's state.
pub struct App {
    view: ThreadView,
    /// The project's threads, newest activity first.
    threads: Vec<Thread>,
    project: Project,
    input: String,
    /// Cursor position in `input`, in characters.
    cursor: usize,
    overlay: Overlay,
    /// The footer's message (errors, what happened); empty shows the keys.
    status: String,
    /// Rows scrolled up from the bottom; `None` follows the stream.
    scroll: Option<usize>,
    show_reasoning: bool,
    /// `/model`: the model of the next messages.
    model: Option<String>,
    /// Messages typed while a run works, sent when it ends (`/queue`).
    queue: VecDeque<String>,
    /// Output of commands (`/diff`, `/queue`, …) shown after the transcript.
    notes: Vec<Vec<Line<'static>>>,
    ticks: u64,
    quit: bool,
    /// Whether the screen gets colours: `NO_COLOR` and `TERM=dumb` turn them off and keep
    /// bold, dim and reversed text (`render::colour_for`).
    colour: bool,
}

/// What wakes the loop.
enum Msg {
    Key(KeyEvent),
    Redraw,
    Thread(ThreadId, ThreadMessage),
    Lost(ThreadId, String),
}

/// Opens the interactive terminal; exit code 0 on quit.
///
/// Errors: no terminal (use `knife run` in scripts), the config, the server.
pub async fn tui(config_path: Option<&Path>, args: TuiArgs) -> anyhow::Result<ExitCode> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        anyhow::bail!(
            "the interactive view needs a terminal; in scripts and pipes use `knife run \"…\"`"
        );
    }
    let config = Config::load(config_path)?;
    if let Some(client) =
        find_server(&config, args.server.as_deref(), args.data_dir.as_deref()).await?
    {
        return session(&client, &args).await;
    }
    let data_dir = config.data_dir(args.data_dir.as_deref())?;
    let server = InProcessServer::start(&config, &data_dir).await?;
    let code = session(&server.client()?, &args).await;
    server.stop().await?;
    code
}

async fn session(client: &ApiClient, args: &TuiArgs) -> anyhow::Result<ExitCode> {
    let project = project(client, args.project.as_deref()).await?;
    let mut app = App {
        view: ThreadView::default(),
        threads: Vec::new(),
        project,
        input: String::new(),
        cursor: 0,
        overlay: Overlay::None,
        status: String::new(),
        scroll: None,
        show_reasoning: false,
        model: None,
        queue: VecDeque::new(),
        notes: Vec::new(),
        ticks: 0,
        quit: false,
        colour: crate::render::colour_for(&std::io::stdout()),
    };
    app.refresh_threads(client).await;
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut follower: Option<tokio::task::JoinHandle<()>> = None;
    let open = match (&args.thread, args.last) {
        (Some(given), _) => Some(crate::thread_ids::resolve(client, given).await?),
        (None, true) => Some(crate::thread_ids::last(
            &app.threads,
            app.project.id.as_str(),
            &app.project.root,
        )?),
        (None, false) => None,
    };
    if let Some(id) = open {
        follower = Some(app.open(client, &id, &tx).await?);
    }
    let mut terminal = ratatui::try_init().context("cannot switch the terminal to full screen")?;
    keys(tx.clone());
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    let result: anyhow::Result<()> = async {
        while !app.quit {
            terminal.draw(|f| view::draw(f, &app))?;
            let msg = tokio::select! {
                Some(msg) = rx.recv() => msg,
                _ = tick.tick() => {
                    app.ticks += 1;
                    if app.ticks.is_multiple_of(25) {
                        app.refresh_threads(client).await;
                    }
                    continue;
                }
            };
            match msg {
                Msg::Key(key) => {
                    if let Some(f) = app.key(key, client, &tx).await
                        && let Some(old) = follower.replace(f)
                    {
                        old.abort();
                    }
                }
                Msg::Redraw => {}
                Msg::Thread(id, message) => {
                    if app.view.thread.as_ref().is_some_and(|t| t.id == id) {
                        app.message(message, client).await;
                    }
                }
                Msg::Lost(id, why) => {
                    if app.view.thread.as_ref().is_some_and(|t| t.id == id) {
                        app.status = why;
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    ratatui::restore();
    if let Some(f) = follower {
        f.abort();
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Reads the keyboard on a thread of its own (crossterm's reads block).
fn keys(tx: mpsc::UnboundedSender<Msg>) {
    std::thread::spawn(move || {
        loop {
            let msg = match event::read() {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => Msg::Key(k),
                Ok(_) => Msg::Redraw,
                Err(_) => return,
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
    });
}

/// Follows `thread`'s events after `after` into the loop.
fn follow(
    client: &ApiClient,
    thread: ThreadId,
    after: u64,
    tx: mpsc::UnboundedSender<Msg>,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    tokio::spawn(async move {
        let stream = match client.events(&thread, after).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Msg::Lost(thread, format!("{e:#}")));
                return;
            }
        };
        let mut stream = Box::pin(stream);
        while let Some(m) = stream.next().await {
            let msg = match m {
                Ok(m) => Msg::Thread(thread.clone(), m),
                Err(e) => Msg::Lost(thread.clone(), format!("{e:#}")),
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        let _ = tx.send(Msg::Lost(
            thread.clone(),
            crate::client::server_lost(client.base()),
        ));
    })
}

/// The project of `dir` (default: the current directory), registered if new.
async fn project(client: &ApiClient, dir: Option<&Path>) -> anyhow::Result<Project> {
    let dir = match dir {
        Some(p) => p.to_owned(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let root = std::fs::canonicalize(&dir).with_context(|| {
        format!(
            "project folder {} does not exist; pass an existing folder to --project",
            dir.display()
        )
    })?;
    let req = CreateProjectRequest {
        root: root.display().to_string(),
        name: None,
    };
    client.post("/api/projects", &req).await
}

impl App {
    async fn refresh_threads(&mut self, client: &ApiClient) {
        if let Ok(mut threads) = client.get::<Vec<Thread>>("/api/threads").await {
            threads.retain(|t| t.project_id == self.project.id);
            threads.sort_by_key(|t| std::cmp::Reverse(t.updated_at));
            self.threads = threads;
        }
    }

    /// Shows thread `id` and follows it.
    async fn open(
        &mut self,
        client: &ApiClient,
        id: &ThreadId,
        tx: &mpsc::UnboundedSender<Msg>,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let p: ThreadProjection = client.get(&format!("/api/threads/{id}")).await?;
        self.view = ThreadView::from_projection(p);
        self.notes.clear();
        self.scroll = None;
        Ok(follow(client, id.clone(), self.view.after, tx.clone()))
    }

    /// A message of the open thread's stream.
    async fn message(&mut self, message: ThreadMessage, client: &ApiClient) {
        match message {
            ThreadMessage::Event(e) => {
                let ended = matches!(&e.event.body,
                    EventBody::RunUpdated(r) if r.status.is_terminal());
                self.view.apply(&e);
                if ended && self.status == "interrupting…" {
                    self.status.clear();
                }
                if ended && self.view.active_run().is_none() {
                    self.send_queued(client).await;
                }
            }
            ThreadMessage::Delta(d) => self.view.delta(&d),
            ThreadMessage::Reset(r) => self.view.reset(&r),
        }
    }

    async fn send_queued(&mut self, client: &ApiClient) {
        if let Some(next) = self.queue.pop_front()
            && let Some(thread) = self.view.thread.as_ref().map(|t| t.id.clone())
        {
            self.post(client, &thread, next).await;
        }
    }

    async fn post(&mut self, client: &ApiClient, thread: &ThreadId, text: String) {
        let req = PostMessageRequest {
            text,
            model: self.model.clone(),
            mode: Default::default(),
        };
        match client
            .post::<_, PostMessageResponse>(&format!("/api/threads/{thread}/messages"), &req)
            .await
        {
            Ok(_) => self.status.clear(),
            Err(e) => self.status = format!("not sent: {e:#}"),
        }
        self.scroll = None;
    }

    /// One key press; returns a new follower when another thread was opened.
    async fn key(
        &mut self,
        key: KeyEvent,
        client: &ApiClient,
        tx: &mpsc::UnboundedSender<Msg>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match (&self.overlay, key.code) {
            (_, KeyCode::Char('c')) if ctrl => {
                self.quit = true;
                return None;
            }
            (Overlay::Help, _) => {
                self.overlay = Overlay::None;
                return None;
            }
            (Overlay::Picker { selected }, code) => {
                let selected = *selected;
                let rows = self.threads.len() + 1;
                match code {
                    KeyCode::Esc => self.overlay = Overlay::None,
                    KeyCode::Up => {
                        self.overlay = Overlay::Picker {
                            selected: selected.saturating_sub(1),
                        }
                    }
                    KeyCode::Down => {
                        self.overlay = Overlay::Picker {
                            selected: (selected + 1).min(rows - 1),
                        }
                    }
                    KeyCode::Enter => {
                        self.overlay = Overlay::None;
                        return match selected.checked_sub(1).and_then(|i| self.threads.get(i)) {
                            Some(t) => {
                                let id = t.id.clone();
                                match self.open(client, &id, tx).await {
                                    Ok(f) => Some(f),
                                    Err(e) => {
                                        self.status = format!("{e:#}");
                                        None
                                    }
                                }
                            }
                            None => {
                                self.new_thread();
                                None
                            }
                        };
                    }
                    _ => {}
                }
                return None;
            }
            (Overlay::None, _) => {}
        }
        let pending = self.view.pending_request().cloned();
        match key.code {
            KeyCode::Char('t') if ctrl => {
                self.overlay = Overlay::Picker { selected: 0 };
                self.refresh_threads(client).await;
            }
            KeyCode::Char('r') if ctrl => self.show_reasoning = !self.show_reasoning,
            KeyCode::Char(c @ ('y' | 'a' | 'n')) if self.input.is_empty() && pending.is_some() => {
                if let Some(request) = pending {
                    let decision = match c {
                        'y' => ApprovalDecision::AllowOnce,
                        'a' => ApprovalDecision::AllowAlways,
                        _ => ApprovalDecision::Deny,
                    };
                    self.answer(client, &request, decision).await;
                }
            }
            KeyCode::Esc => self.interrupt(client).await,
            KeyCode::Enter => return self.enter(client, tx).await,
            KeyCode::Char(c) if !ctrl => {
                let at = self.byte_at(self.cursor);
                self.input.insert(at, c);
                self.cursor += 1;
                self.status.clear();
            }
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                let at = self.byte_at(self.cursor);
                self.input.remove(at);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.input.chars().count()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => {
                self.cursor = self.input.chars().count();
                self.scroll = None;
            }
            KeyCode::PageUp => self.scroll = Some(self.scroll.unwrap_or(0) + 10),
            KeyCode::PageDown => {
                self.scroll = self
                    .scroll
                    .and_then(|s| s.checked_sub(10))
                    .filter(|s| *s > 0)
            }
            _ => {}
        }
        None
    }

    fn byte_at(&self, chars: usize) -> usize {
        self.input
            .char_indices()
            .nth(chars)
            .map(|(i, _)| i)
            .unwrap_or(self.input.len())
    }

    fn new_thread(&mut self) {
        self.view = ThreadView::default();
        self.notes.clear();
        self.status = "new thread: your next message starts it".into();
    }

    async fn answer(
        &mut self,
        client: &ApiClient,
        request: &RuntimeRequest,
        decision: ApprovalDecision,
    ) {
        let answer = RequestAnswer {
            decision,
            message: None,
        };
        let path = format!("/api/threads/{}/requests/{}", request.thread_id, request.id);
        match client.post::<_, RuntimeRequest>(&path, &answer).await {
            Ok(r) => {
                // The event stream brings the same; applying it now hides the panel at once.
                if let Some(x) = self.view.requests.iter_mut().find(|x| x.id == r.id) {
                    *x = r;
                }
                self.status = decision.described().to_owned();
            }
            Err(e) => self.status = format!("could not answer: {e:#}"),
        }
    }

    async fn interrupt(&mut self, client: &ApiClient) {
        let Some(thread) = self.view.thread.as_ref().map(|t| t.id.clone()) else {
            return;
        };
        if self.view.active_run().is_none() {
            self.status = "nothing to interrupt".into();
            return;
        }
        self.queue.clear();
        match client
            .post::<_, InterruptResponse>(
                &format!("/api/threads/{thread}/interrupt"),
                &serde_json::json!({}),
            )
            .await
        {
            Ok(_) => self.status = "interrupting…".into(),
            Err(e) => self.status = format!("could not interrupt: {e:#}"),
        }
    }

    /// Enter: a command, or the message (to a new thread when none is open; queued while
    /// a run works).
    async fn enter(
        &mut self,
        client: &ApiClient,
        tx: &mpsc::UnboundedSender<Msg>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let text = std::mem::take(&mut self.input).trim().to_owned();
        self.cursor = 0;
        if text.is_empty() {
            return None;
        }
        if let Some(command) = text.strip_prefix('/') {
            self.command(command, client).await;
            return None;
        }
        let thread = match self.view.thread.as_ref() {
            Some(t) => t.id.clone(),
            None => {
                let req = CreateThreadRequest {
                    project_id: self.project.id.clone(),
                    title: Some(text.chars().take(60).collect()),
                    provider_instance_id: None,
                    model: self.model.clone(),
                    parent_thread_id: None,
                    worktree: None,
                };
                let thread: Thread = match client.post("/api/threads", &req).await {
                    Ok(t) => t,
                    Err(e) => {
                        self.status = format!("cannot start a thread: {e:#}");
                        return None;
                    }
                };
                let follower = match self.open(client, &thread.id, tx).await {
                    Ok(f) => f,
                    Err(e) => {
                        self.status = format!("{e:#}");
                        return None;
                    }
                };
                self.post(client, &thread.id, text).await;
                self.refresh_threads(client).await;
                return Some(follower);
            }
        };
        if self.view.active_run().is_some() {
            self.queue.push_back(text);
            self.status = format!(
                "queued ({} waiting): sent when the run ends; /queue shows them",
                self.queue.len()
            );
            return None;
        }
        self.post(client, &thread, text).await;
        None
    }

    async fn command(&mut self, command: &str, client: &ApiClient) {
        let (name, arg) = match command.split_once(' ') {
            Some((n, a)) => (n, a.trim()),
            None => (command, ""),
        };
        let thread = self.view.thread.as_ref().map(|t| t.id.clone());
        match (name, thread) {
            ("help", _) => self.overlay = Overlay::Help,
            ("quit" | "exit", _) => self.quit = true,
            ("threads", _) => {
                self.refresh_threads(client).await;
                self.overlay = Overlay::Picker { selected: 0 };
            }
            ("new", _) => self.new_thread(),
            ("model", _) => {
                self.model = (!arg.is_empty()).then(|| arg.to_owned());
                self.status = match &self.model {
                    Some(m) => format!("next messages use model {m}"),
                    None => "next messages use the thread's model".into(),
                };
            }
            ("queue", _) if arg == "clear" => {
                self.queue.clear();
                self.status = "queue cleared".into();
            }
            ("queue", _) => {
                let mut note = vec![Line::styled(
                    format!(
                        "queue: {} message(s) wait for the run to end",
                        self.queue.len()
                    ),
                    ratatui::style::Style::new().add_modifier(ratatui::style::Modifier::BOLD),
                )];
                for (i, m) in self.queue.iter().enumerate() {
                    note.push(Line::raw(format!("  {}. {m}", i + 1)));
                }
                self.notes.push(note);
            }
            ("diff" | "revert", None) => self.status = "no thread is open".into(),
            ("diff", Some(thread)) => self.diff(client, &thread, arg).await,
            ("revert", Some(thread)) => self.revert(client, &thread, arg).await,
            (other, _) => self.status = format!("unknown command /{other}: /help lists them"),
        }
        self.scroll = None;
    }

    async fn diff(&mut self, client: &ApiClient, thread: &ThreadId, arg: &str) {
        let run = match arg.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match self.view.last_run() {
                Some(r) => r.ordinal,
                None => {
                    self.status = "the thread has no runs yet".into();
                    return;
                }
            },
        };
        match client
            .get::<RunDiff>(&format!("/api/threads/{thread}/runs/{run}/diff"))
            .await
        {
            Ok(diff) => {
                let text = crate::changes::render(&diff, false, false);
                let note = text
                    .lines()
                    .take(400)
                    .map(|l| {
                        let style = if l.starts_with('+') && !l.starts_with("+++") {
                            ratatui::style::Style::new().fg(ratatui::style::Color::Green)
                        } else if l.starts_with('-') && !l.starts_with("---") {
                            ratatui::style::Style::new().fg(ratatui::style::Color::Red)
                        } else {
                            ratatui::style::Style::new()
                        };
                        Line::styled(l.to_owned(), style)
                    })
                    .collect();
                self.notes.push(note);
            }
            Err(e) => self.status = format!("{e:#}"),
        }
    }

    async fn revert(&mut self, client: &ApiClient, thread: &ThreadId, arg: &str) {
        let Ok(run) = arg.parse::<u32>() else {
            self.status = "name the run to revert: /revert RUN".into();
            return;
        };
        match client
            .post::<_, Revert>(
                &format!("/api/threads/{thread}/runs/{run}/revert"),
                &RevertRequest { force: false },
            )
            .await
        {
            Ok(r) => {
                let mut note = vec![Line::raw(format!(
                    "reverted {} to their state before run {}:",
                    crate::human::count(r.files.len(), "file"),
                    r.run_ordinal
                ))];
                note.extend(r.files.iter().map(|f| Line::raw(format!("  {f}"))));
                self.notes.push(note);
            }
            Err(e) => self.status = format!("{e:#}"),
        }
    }
}
