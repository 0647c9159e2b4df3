//! Drawing of the interactive terminal (SPEC UX-02) with ratatui: header, transcript
//! (Markdown answers, folded reasoning, tool calls with a preview, run endings), the
//! inline approval with its diff, the prompt, the footer, and the picker / help overlays.

use knife_protocol::*;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph};

use super::state::Entry;
use super::{App, Overlay};

const DIM: Style = Style::new().add_modifier(Modifier::DIM);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Without colour (`NO_COLOR`, `TERM=dumb`: https://no-color.org) every cell keeps its
/// text and modifiers (bold, dim, reversed: the cursor line, the picker's selection) and
/// loses its foreground and background colours.
fn strip_colour(buffer: &mut ratatui::buffer::Buffer) {
    for cell in &mut buffer.content {
        cell.set_fg(Color::Reset).set_bg(Color::Reset);
    }
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let approval = approval_lines(app);
    let approval_height = if approval.is_empty() {
        0
    } else {
        (approval.len() as u16 + 2).min(frame.area().height / 2)
    };
    let [header, body, panel, input, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(approval_height),
        Constraint::Length(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_line(app)), header);
    draw_transcript(frame, app, body);
    if approval_height > 0 {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(Style::new().fg(Color::Yellow))
            .title(" approval needed ");
        frame.render_widget(Paragraph::new(approval).block(block), panel);
    }
    draw_input(frame, app, input);
    frame.render_widget(
        Paragraph::new(Line::from(vec![Span::styled(footer_text(app), DIM)])),
        footer,
    );
    match &app.overlay {
        Overlay::None => {}
        Overlay::Picker { selected } => draw_picker(frame, app, *selected, body),
        Overlay::Help => draw_help(frame, body),
    }
    if !app.colour {
        strip_colour(frame.buffer_mut());
    }
}

fn header_line(app: &App) -> Line<'static> {
    let title = app
        .view
        .thread
        .as_ref()
        .map(|t| t.title.clone())
        .unwrap_or_else(|| "new thread".to_owned());
    let mut spans = vec![
        Span::styled("knife", BOLD.fg(Color::Cyan)),
        Span::raw(" · "),
        Span::styled(title, BOLD),
    ];
    let state = match (app.view.active_run(), &app.view.agent) {
        (Some(_), Some(AgentStatus::Retry { attempt, .. })) => {
            format!("retrying (attempt {})", attempt + 1)
        }
        (Some(_), _) if app.view.pending_request().is_some() => "waiting for approval".into(),
        (Some(_), _) => format!("working {}", spinner(app.ticks)),
        (None, _) => "idle".into(),
    };
    spans.push(Span::styled(format!(" · {state}"), DIM));
    if let Some(model) = &app.model {
        spans.push(Span::styled(format!(" · model {model}"), DIM));
    }
    Line::from(spans)
}

fn spinner(ticks: u64) -> &'static str {
    const FRAMES: [&str; 4] = ["⠋", "⠙", "⠸", "⠴"];
    FRAMES[(ticks % 4) as usize]
}

fn footer_text(app: &App) -> String {
    if !app.status.is_empty() {
        return app.status.clone();
    }
    if app.view.pending_request().is_some() && app.input.is_empty() {
        return "y allow once · a always · n deny · Esc interrupt · Ctrl-C quit".into();
    }
    "Enter send · Esc interrupt · ^T threads · ^R reasoning · /help · ^C quit".into()
}

/// The transcript as unwrapped lines.
pub fn transcript_lines(app: &App) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let entries = app.view.entries();
    for (i, entry) in entries.iter().enumerate() {
        match &entry.kind {
            // An approval sits with the call it gates, before its output (drawn there).
            TurnItemKind::Approval { call_id, .. }
                if gated(entries, entry.run.as_ref(), call_id) => {}
            TurnItemKind::ToolCall { call_id, .. } => {
                let approval = entries.iter().find(|e| {
                    e.run == entry.run
                        && matches!(&e.kind, TurnItemKind::Approval { call_id: c, .. } if c == call_id)
                });
                tool_lines(entry, approval, &mut out);
            }
            _ => entry_lines(entry, app.show_reasoning, &mut out),
        }
        let last_of_run = entries.get(i + 1).is_none_or(|next| next.run != entry.run);
        if last_of_run && let Some(run) = entry.run.as_ref() {
            run_footer(app, run, &mut out);
        }
    }
    for note in &app.notes {
        out.push(Line::default());
        out.extend(note.iter().cloned());
    }
    if app.view.entries().is_empty() && app.notes.is_empty() {
        out.push(Line::styled(
            "Type a message and press Enter. /help lists the commands.",
            DIM,
        ));
    }
    out
}

/// True when a tool call of `run` with `call_id` is in the transcript.
fn gated(entries: &[Entry], run: Option<&RunId>, call_id: &str) -> bool {
    entries.iter().any(|e| {
        e.run.as_ref() == run
            && matches!(&e.kind, TurnItemKind::ToolCall { call_id: c, .. } if c == call_id)
    })
}

/// A tool call: its line, the approval that gated it, then its outcome and preview.
fn tool_lines(entry: &Entry, approval: Option<&Entry>, out: &mut Vec<Line<'static>>) {
    let TurnItemKind::ToolCall {
        tool,
        input,
        output,
        error,
        ..
    } = &entry.kind
    else {
        return;
    };
    out.push(Line::from(vec![
        Span::styled(format!("→ {tool} "), BOLD),
        Span::raw(crate::render::compact_input(input)),
    ]));
    if let Some(approval) = approval {
        entry_lines(approval, false, out);
    }
    match entry.status {
        TurnItemStatus::Completed => {
            let output = output.as_deref().unwrap_or("");
            out.push(Line::from(vec![
                Span::styled("  ✓ ", Style::new().fg(Color::Green)),
                Span::raw(crate::render::summarize_output(tool, output)),
            ]));
            for line in crate::render::output_preview(tool, output) {
                out.push(Line::styled(format!("    │ {line}"), DIM));
            }
        }
        TurnItemStatus::Failed | TurnItemStatus::Interrupted => {
            out.push(Line::styled(
                format!("  ✗ {}", error.as_deref().unwrap_or("failed")),
                Style::new().fg(Color::Red),
            ));
        }
        TurnItemStatus::Cancelled => out.push(Line::styled("  ✗ cancelled", DIM)),
        _ if approval.is_some_and(|a| a.status == TurnItemStatus::Waiting) => {}
        _ => {
            out.push(Line::styled("  … running", DIM));
            // Its output so far, as it streams (LIVE-02): the last lines.
            let output = output.as_deref().unwrap_or("");
            for line in crate::render::output_tail(output) {
                out.push(Line::styled(format!("    │ {line}"), DIM));
            }
        }
    }
}

fn entry_lines(entry: &Entry, show_reasoning: bool, out: &mut Vec<Line<'static>>) {
    match &entry.kind {
        TurnItemKind::UserMessage {
            text, description, ..
        } => {
            out.push(Line::default());
            match description {
                Some(d) => out.push(Line::styled(format!("· {d}"), DIM)),
                None => {
                    for (i, line) in text.lines().enumerate() {
                        let mark = if i == 0 { "› " } else { "  " };
                        out.push(Line::from(vec![
                            Span::styled(mark, BOLD.fg(Color::Cyan)),
                            Span::styled(line.to_owned(), BOLD),
                        ]));
                    }
                }
            }
        }
        TurnItemKind::AssistantMessage { text, .. } => {
            out.push(Line::default());
            for line in crate::markdown::render(text) {
                out.push(Line::from(
                    line.spans
                        .into_iter()
                        .map(|s| Span::styled(s.text, convert(s.style)))
                        .collect::<Vec<_>>(),
                ));
            }
        }
        TurnItemKind::Reasoning { text, .. } => {
            let n = text.lines().count();
            if show_reasoning {
                out.push(Line::styled("▾ thinking", DIM));
                for line in text.lines() {
                    out.push(Line::styled(
                        format!("  ┊ {line}"),
                        DIM.add_modifier(Modifier::ITALIC),
                    ));
                }
            } else if n > 0 {
                let s = if n == 1 { "" } else { "s" };
                out.push(Line::styled(
                    format!("▸ thinking · {n} line{s} (Ctrl-R shows)"),
                    DIM,
                ));
            }
        }
        TurnItemKind::ToolCall { .. } => tool_lines(entry, None, out),
        TurnItemKind::Approval {
            tool,
            subject,
            decision,
            ..
        } => {
            let (text, style) = match decision {
                Some(d @ (ApprovalDecision::AllowOnce | ApprovalDecision::AllowAlways)) => (
                    format!("  ✓ {}", d.described()),
                    Style::new().fg(Color::Green),
                ),
                Some(d) => (
                    format!("  ✗ {}", d.described()),
                    Style::new().fg(Color::Red),
                ),
                None if entry.status == TurnItemStatus::Waiting => (
                    format!("  ? {tool} {subject}: waiting for your answer"),
                    Style::new().fg(Color::Yellow),
                ),
                None => (format!("  ✗ {tool} {subject}: not answered"), DIM),
            };
            out.push(Line::styled(text, style));
        }
        TurnItemKind::Error { error } => out.push(Line::styled(
            format!("✗ {}", error.message),
            Style::new().fg(Color::Red),
        )),
        TurnItemKind::Compaction { .. } => out.push(Line::styled(
            "… history compacted to fit the model's context",
            DIM,
        )),
    }
}

/// How a finished run ended: a neutral `Interrupted`, the error of a failed one, and the
/// time and tokens of each.
fn run_footer(app: &App, run: &RunId, out: &mut Vec<Line<'static>>) {
    let Some(run) = app.view.runs.iter().find(|r| &r.id == run) else {
        return;
    };
    if !run.status.is_terminal() {
        return;
    }
    match run.status {
        RunStatus::Interrupted => out.push(Line::styled(
            "■ Interrupted",
            Style::new().fg(Color::Yellow),
        )),
        RunStatus::Failed | RunStatus::Cancelled => {
            let why = run
                .error
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_else(|| "the run failed".into());
            out.push(Line::styled(
                format!("✗ {why}"),
                Style::new().fg(Color::Red),
            ));
        }
        _ => {}
    }
    out.push(Line::styled(crate::render::run_summary(run, false), DIM));
}

fn convert(style: anstyle::Style) -> Style {
    let mut out = Style::new();
    let effects = style.get_effects();
    if effects.contains(anstyle::Effects::BOLD) {
        out = out.add_modifier(Modifier::BOLD);
    }
    if effects.contains(anstyle::Effects::ITALIC) {
        out = out.add_modifier(Modifier::ITALIC);
    }
    if effects.contains(anstyle::Effects::UNDERLINE) {
        out = out.add_modifier(Modifier::UNDERLINED);
    }
    if effects.contains(anstyle::Effects::DIMMED) {
        out = out.add_modifier(Modifier::DIM);
    }
    if effects.contains(anstyle::Effects::STRIKETHROUGH) {
        out = out.add_modifier(Modifier::CROSSED_OUT);
    }
    if let Some(anstyle::Color::Ansi(c)) = style.get_fg_color() {
        out = out.fg(match c {
            anstyle::AnsiColor::Red => Color::Red,
            anstyle::AnsiColor::Green => Color::Green,
            anstyle::AnsiColor::Yellow => Color::Yellow,
            anstyle::AnsiColor::Blue => Color::Blue,
            anstyle::AnsiColor::Magenta => Color::Magenta,
            anstyle::AnsiColor::Cyan => Color::Cyan,
            _ => Color::Reset,
        });
    }
    out
}

/// `lines` wrapped at `width` columns, at spaces where a word fits, else inside it.
pub fn wrap(lines: &[Line<'static>], width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let mut out = Vec::new();
    for line in lines {
        if line.width() <= width {
            out.push(line.clone());
            continue;
        }
        let mut row: Vec<Span<'static>> = Vec::new();
        let mut used = 0;
        for span in &line.spans {
            for word in span.content.split_inclusive(' ') {
                let w = unicode_width(word);
                if used + w.saturating_sub(usize::from(word.ends_with(' '))) > width && used > 0 {
                    out.push(Line::from(std::mem::take(&mut row)));
                    used = 0;
                }
                if w > width {
                    // A word longer than the line: cut by characters.
                    let mut piece = String::new();
                    for ch in word.chars() {
                        if used + 1 > width {
                            row.push(Span::styled(std::mem::take(&mut piece), span.style));
                            out.push(Line::from(std::mem::take(&mut row)));
                            used = 0;
                        }
                        piece.push(ch);
                        used += 1;
                    }
                    row.push(Span::styled(piece, span.style));
                } else {
                    row.push(Span::styled(word.to_owned(), span.style));
                    used += w;
                }
            }
        }
        if !row.is_empty() {
            out.push(Line::from(row));
        }
    }
    out
}

fn unicode_width(s: &str) -> usize {
    Line::raw(s.to_owned()).width()
}

fn draw_transcript(frame: &mut Frame, app: &App, area: Rect) {
    let lines = wrap(&transcript_lines(app), area.width as usize);
    let height = area.height as usize;
    let bottom = lines.len().saturating_sub(height);
    // `scroll`: rows up from the bottom (None follows the stream).
    let top = bottom.saturating_sub(app.scroll.unwrap_or(0));
    let shown: Vec<Line<'static>> = lines.into_iter().skip(top).take(height).collect();
    frame.render_widget(Paragraph::new(shown), area);
}

/// The pending approval: what is asked, the diff of a file change, the keys.
fn approval_lines(app: &App) -> Vec<Line<'static>> {
    let Some(request) = app.view.pending_request() else {
        return Vec::new();
    };
    let mut lines = vec![Line::styled(crate::approve::describe(request), BOLD)];
    if let Some(diff) = request
        .tool_approval
        .as_ref()
        .and_then(|t| t.diff.as_deref())
    {
        let all: Vec<&str> = diff.lines().collect();
        for line in all.iter().take(8) {
            let style = if line.starts_with('+') && !line.starts_with("+++") {
                Style::new().fg(Color::Green)
            } else if line.starts_with('-') && !line.starts_with("---") {
                Style::new().fg(Color::Red)
            } else {
                DIM
            };
            lines.push(Line::styled((*line).to_owned(), style));
        }
        if all.len() > 8 {
            lines.push(Line::styled(
                format!("… {} more diff lines", all.len() - 8),
                DIM,
            ));
        }
    }
    lines.push(Line::from(vec![
        Span::styled("y", BOLD.fg(Color::Green)),
        Span::raw(" allow once  "),
        Span::styled("a", BOLD.fg(Color::Green)),
        Span::raw(" allow always  "),
        Span::styled("n", BOLD.fg(Color::Red)),
        Span::raw(" deny"),
    ]));
    lines
}

fn draw_input(frame: &mut Frame, app: &App, area: Rect) {
    let block = Block::default().borders(Borders::ALL).border_style(DIM);
    let inner = block.inner(area);
    let width = inner.width.saturating_sub(2) as usize;
    // The end of a long input stays visible.
    let chars: Vec<char> = app.input.chars().collect();
    let start = app.cursor.saturating_sub(width.saturating_sub(1));
    let visible: String = chars.iter().skip(start).take(width).collect();
    let prompt = Line::from(vec![
        Span::styled("› ", BOLD.fg(Color::Cyan)),
        Span::raw(visible),
    ]);
    frame.render_widget(Paragraph::new(prompt).block(block), area);
    if matches!(app.overlay, Overlay::None) {
        frame.set_cursor_position((inner.x + 2 + (app.cursor - start) as u16, inner.y));
    }
}

/// The box of an overlay: centred in the transcript area (never over the input box),
/// with the whole transcript area cleared so no transcript text shows beside it.
fn overlay_area(frame: &mut Frame, body: Rect, width: u16, height: u16) -> Rect {
    frame.render_widget(Clear, body);
    centered(body, width, height)
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
}

fn draw_picker(frame: &mut Frame, app: &App, selected: usize, body: Rect) {
    let area = overlay_area(frame, body, 76, 16);
    let now = chrono::Utc::now();
    let mut items = vec![ListItem::new(Line::styled("+ new thread", BOLD))];
    for t in &app.threads {
        let status = format!("{:?}", t.status).to_lowercase();
        items.push(ListItem::new(Line::from(vec![
            Span::raw(format!("{:<40.40} ", t.title)),
            Span::styled(
                format!("{status:<8} {}", crate::human::when(t.updated_at, now)),
                DIM,
            ),
        ])));
    }
    let list = List::new(items)
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(" threads · Enter open · Esc close "),
        )
        .highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    let mut state = ListState::default().with_selected(Some(selected));
    frame.render_stateful_widget(list, area, &mut state);
}

fn draw_help(frame: &mut Frame, body: Rect) {
    // 15 rows and the border: fits the transcript area of an 80x24 terminal.
    let area = overlay_area(frame, body, 70, 17);
    let rows = [
        ("Enter", "send the message (queued while a run works)"),
        ("Esc", "interrupt the run in progress / close this"),
        ("Ctrl-T", "thread picker"),
        ("Ctrl-R", "show or fold reasoning"),
        ("PgUp PgDn", "scroll the transcript (End follows)"),
        ("y a n", "answer an approval: once, always, deny"),
        ("Ctrl-C", "quit (runs go on in the server)"),
        ("/new", "start a new thread with the next message"),
        (
            "/model [NAME]",
            "model of the next messages (no name: default)",
        ),
        ("/diff [RUN]", "what a run changed (default: the last)"),
        (
            "/revert RUN",
            "put back the files of that run and later ones",
        ),
        ("/queue [clear]", "messages waiting for the run to end"),
        ("/threads", "thread picker"),
        ("/help", "this list"),
        ("/quit", "quit"),
    ];
    let lines: Vec<Line> = rows
        .iter()
        .map(|(k, v)| Line::from(vec![Span::styled(format!("{k:<16}"), BOLD), Span::raw(*v)]))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" help ")),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::buffer::Buffer;

    #[test]
    fn without_colour_cells_keep_their_text_and_modifiers_and_lose_colours() {
        let area = Rect::new(0, 0, 12, 1);
        let mut buffer = Buffer::empty(area);
        buffer.set_line(
            0,
            0,
            &Line::from(vec![
                Span::styled("knife", BOLD.fg(Color::Cyan)),
                Span::styled(" ✓", Style::new().fg(Color::Green).bg(Color::Red)),
            ]),
            12,
        );
        strip_colour(&mut buffer);
        let cells: Vec<_> = buffer.content.iter().take(7).collect();
        let text: String = cells.iter().map(|c| c.symbol()).collect();
        assert_eq!(text, "knife ✓");
        assert!(
            cells
                .iter()
                .all(|c| c.fg == Color::Reset && c.bg == Color::Reset)
        );
        assert!(cells[0].modifier.contains(Modifier::BOLD), "bold stays");
    }
}
