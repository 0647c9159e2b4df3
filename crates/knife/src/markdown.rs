//! Markdown of assistant text as styled terminal lines (SPEC UX-02, UX-03): parsed with
//! pulldown-cmark, shared by `knife run` (ANSI, line by line as it streams) and `knife tui`.

use anstyle::{AnsiColor, Effects, Style};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A run of text in one style.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub style: Style,
}

/// One terminal line: its spans in order (no newline inside).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line {
    pub spans: Vec<Span>,
}

impl Line {
    /// The line's text without styles.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn plain(&self) -> String {
        self.spans.iter().map(|s| s.text.as_str()).collect()
    }
}

/// Styles of the rendered elements.
const HEADING: Style = Style::new()
    .effects(Effects::BOLD)
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));
const CODE: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Yellow)));
const CODE_BLOCK: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Green)));
const DIM: Style = Style::new().effects(Effects::DIMMED);
const LINK: Style = Style::new()
    .effects(Effects::UNDERLINE)
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Blue)));

/// Renders `text` (CommonMark + strikethrough and task lists) to lines: headings bold,
/// `**strong**` bold, `*emphasis*` italic, `code` coloured, fenced code kept verbatim
/// between dimmed fences, list items with `•` / `1.` and indentation, quotes behind `│`,
/// links underlined with their address, a blank line between blocks. Soft line breaks
/// stay line breaks, so a source line that is complete renders the same once more text
/// follows (what lets `knife run` print finished lines while the answer streams).
pub fn render(text: &str) -> Vec<Line> {
    let mut r = Renderer::default();
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        if let Event::End(TagEnd::CodeBlock) = event {
            // An unclosed fence (the answer is still streaming) gets no closing line,
            // so the code lines that follow are not printed after one.
            r.end_code_block(fence_closed(text.get(range).unwrap_or("")));
            continue;
        }
        r.event(event);
    }
    r.end_line();
    r.lines
}

/// Lines as text with ANSI escapes (`colour`) or plain, each ending in `\n`.
pub fn to_ansi(lines: &[Line], colour: bool) -> String {
    let mut out = String::new();
    for line in lines {
        for span in &line.spans {
            if colour && span.style != Style::new() {
                out.push_str(&format!(
                    "{}{}{}",
                    span.style.render(),
                    span.text,
                    span.style.render_reset()
                ));
            } else {
                out.push_str(&span.text);
            }
        }
        out.push('\n');
    }
    out
}

/// Streaming Markdown for a terminal: text goes in as it arrives, finished lines come
/// out (UX-03). A line is printed once its source line is complete; the partial last
/// line waits for its newline or [`MarkdownStream::finish`].
#[derive(Debug, Default)]
pub struct MarkdownStream {
    text: String,
    emitted: usize,
}

impl MarkdownStream {
    /// Adds `fresh` text; returns the rendered lines it completed (ANSI, `\n`-ended).
    pub fn push(&mut self, fresh: &str) -> String {
        self.text.push_str(fresh);
        match self.text.rfind('\n') {
            Some(end) => {
                let lines = render(&self.text[..end]);
                self.take(&lines)
            }
            None => String::new(),
        }
    }

    /// The lines not yet returned, the partial last one included.
    pub fn finish(&mut self) -> String {
        let lines = render(&self.text);
        self.take(&lines)
    }

    fn take(&mut self, lines: &[Line]) -> String {
        let fresh = lines.get(self.emitted..).unwrap_or(&[]);
        self.emitted = self.emitted.max(lines.len());
        to_ansi(fresh, true)
    }
}

/// True when the source of a fenced code block ends with its closing fence (an indented
/// block counts as closed).
fn fence_closed(source: &str) -> bool {
    let source = source.trim_end_matches('\n');
    let mut lines = source.lines();
    let Some(first) = lines.next() else {
        return true;
    };
    let opening = first.trim_start();
    let fence = if opening.starts_with("```") {
        '`'
    } else if opening.starts_with("~~~") {
        '~'
    } else {
        return true;
    };
    match lines.last() {
        Some(last) => {
            let last = last.trim();
            last.len() >= 3 && last.chars().all(|c| c == fence)
        }
        None => false,
    }
}

#[derive(Default)]
struct Renderer {
    lines: Vec<Line>,
    current: Vec<Span>,
    /// Inline styles in force (innermost last).
    styles: Vec<Style>,
    /// Open lists: the next number of an ordered one, `None` for bullets.
    lists: Vec<Option<u64>>,
    /// A list item whose first line has not started (it gets the bullet).
    item_start: bool,
    quote: usize,
    code_block: bool,
    /// A block ended: the next block starts after a blank line.
    gap: bool,
    /// A link's address, shown after its text when it differs.
    link: Option<String>,
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles.iter().fold(Style::new(), |acc, s| {
            let mut out = acc.effects(acc.get_effects() | s.get_effects());
            if let Some(c) = s.get_fg_color() {
                out = out.fg_color(Some(c));
            }
            out
        })
    }

    /// The indentation, quote bar and (on an item's first line) bullet of a new line.
    fn prefix(&mut self) -> Vec<Span> {
        let mut spans = Vec::new();
        if self.quote > 0 {
            spans.push(Span {
                text: "│ ".repeat(self.quote),
                style: DIM,
            });
        }
        let depth = self.lists.len();
        if depth > 0 {
            let indent = "  ".repeat(depth - 1);
            let marker = if std::mem::take(&mut self.item_start) {
                match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let m = format!("{n}. ");
                        *n += 1;
                        m
                    }
                    _ => "• ".to_owned(),
                }
            } else {
                "  ".to_owned()
            };
            spans.push(Span {
                text: format!("{indent}{marker}"),
                style: Style::new(),
            });
        }
        spans
    }

    fn push(&mut self, text: &str, style: Style) {
        if text.is_empty() {
            return;
        }
        if self.current.is_empty() {
            self.current = self.prefix();
        }
        self.current.push(Span {
            text: text.to_owned(),
            style,
        });
    }

    /// Ends the current line (nothing when it is empty).
    fn end_line(&mut self) {
        if !self.current.is_empty() {
            let spans = std::mem::take(&mut self.current);
            self.lines.push(Line { spans });
        }
    }

    /// A new block starts: a blank line after the previous one.
    fn block(&mut self) {
        self.end_line();
        if std::mem::take(&mut self.gap) && !self.lines.is_empty() {
            let mut line = Line::default();
            if self.quote > 0 {
                line.spans.push(Span {
                    text: "│".repeat(self.quote),
                    style: DIM,
                });
            }
            self.lines.push(line);
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) if self.code_block => {
                for piece in text.split_inclusive('\n') {
                    let content = piece.strip_suffix('\n').unwrap_or(piece);
                    if self.current.is_empty() {
                        self.current = self.prefix();
                    }
                    self.push(content, CODE_BLOCK);
                    if piece.ends_with('\n') {
                        // Blank code lines are kept.
                        let spans = std::mem::take(&mut self.current);
                        self.lines.push(Line { spans });
                    }
                }
            }
            Event::Text(text) => {
                let style = self.style();
                self.push(&text, style);
            }
            Event::Code(code) => self.push(&code, CODE),
            Event::InlineMath(m) | Event::DisplayMath(m) => self.push(&m, CODE),
            Event::Html(html) | Event::InlineHtml(html) => {
                for (i, piece) in html.trim_end_matches('\n').split('\n').enumerate() {
                    if i > 0 {
                        self.end_line();
                    }
                    self.push(piece, DIM);
                }
            }
            Event::SoftBreak | Event::HardBreak => self.end_line(),
            Event::Rule => {
                self.block();
                self.push("────────────────────────", DIM);
                self.end_line();
                self.gap = true;
            }
            Event::TaskListMarker(done) => {
                self.push(if done { "[x] " } else { "[ ] " }, Style::new())
            }
            Event::FootnoteReference(name) => self.push(&format!("[^{name}]"), DIM),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.block(),
            Tag::Heading { level, .. } => {
                self.block();
                let style = if level == HeadingLevel::H1 {
                    HEADING.effects(Effects::BOLD | Effects::UNDERLINE)
                } else {
                    HEADING
                };
                self.styles.push(style);
            }
            Tag::BlockQuote(_) => {
                self.block();
                self.quote += 1;
                self.styles.push(Style::new().effects(Effects::ITALIC));
            }
            Tag::CodeBlock(kind) => {
                self.block();
                let lang = match kind {
                    CodeBlockKind::Fenced(lang) => lang.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.push(&format!("```{lang}"), DIM);
                self.end_line();
                self.code_block = true;
            }
            Tag::List(first) => {
                if self.lists.is_empty() {
                    self.block();
                } else {
                    self.end_line();
                }
                self.lists.push(first);
            }
            Tag::Item => {
                self.end_line();
                self.item_start = true;
            }
            Tag::Emphasis => self.styles.push(Style::new().effects(Effects::ITALIC)),
            Tag::Strong => self.styles.push(Style::new().effects(Effects::BOLD)),
            Tag::Strikethrough => self
                .styles
                .push(Style::new().effects(Effects::STRIKETHROUGH)),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.styles.push(LINK);
                self.link = Some(dest_url.to_string());
            }
            _ => {}
        }
    }

    fn end_code_block(&mut self, closed: bool) {
        self.end_line();
        self.code_block = false;
        if closed {
            self.push("```", DIM);
            self.end_line();
        }
        self.gap = true;
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.end_line();
                self.gap = true;
            }
            TagEnd::Heading(_) => {
                self.styles.pop();
                self.end_line();
                self.gap = true;
            }
            TagEnd::BlockQuote(_) => {
                self.end_line();
                self.styles.pop();
                self.quote = self.quote.saturating_sub(1);
                self.gap = true;
            }
            TagEnd::List(_) => {
                self.end_line();
                self.lists.pop();
                if self.lists.is_empty() {
                    self.gap = true;
                }
            }
            TagEnd::Item => {
                self.end_line();
                // A loose item's paragraph asked for a gap; the next item decides.
                if !self.lists.is_empty() {
                    self.gap = false;
                }
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.styles.pop();
            }
            TagEnd::Link | TagEnd::Image => {
                self.styles.pop();
                if let Some(url) = self.link.take() {
                    let shown = self.current.last().map(|s| s.text.clone());
                    if shown.as_deref() != Some(url.as_str()) && !url.is_empty() {
                        self.push(&format!(" ({url})"), DIM);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plain(text: &str) -> Vec<String> {
        render(text).iter().map(Line::plain).collect()
    }

    #[test]
    fn ux_03_markdown_renders_to_styled_lines_without_its_markup() {
        let text = "# Title\n\nSome **bold** and *it* and `code`.\n\n- one\n- two\n  1. sub\n\n\
                    ```rust\nfn main() {}\n```\n\n> quoted\n\nSee [docs](https://x.y/z).";
        assert_eq!(
            plain(text),
            vec![
                "Title",
                "",
                "Some bold and it and code.",
                "",
                "• one",
                "• two",
                "  1. sub",
                "",
                "```rust",
                "fn main() {}",
                "```",
                "",
                "│ quoted",
                "",
                "See docs (https://x.y/z).",
            ]
        );
        let lines = render(text);
        let bold = lines[2].spans.iter().find(|s| s.text == "bold").unwrap();
        assert!(bold.style.get_effects().contains(Effects::BOLD));
        let code = lines[2].spans.iter().find(|s| s.text == "code").unwrap();
        assert_eq!(code.style, CODE);
        let ansi = to_ansi(&lines[..3], true);
        assert!(ansi.contains("\u{1b}["), "{ansi:?}");
        assert!(!to_ansi(&lines, false).contains('\u{1b}'));
    }

    #[test]
    fn ux_03_streamed_markdown_prints_each_line_once_and_in_order() {
        let text = "Intro line\nsecond line\n\n```sh\nls -la\n\npwd\n```\n- a\n- b **c**\nend";
        let mut stream = MarkdownStream::default();
        let mut out = String::new();
        // Byte by byte: the worst split a stream can have.
        for ch in text.chars() {
            out.push_str(&stream.push(&ch.to_string()));
        }
        out.push_str(&stream.finish());
        assert_eq!(out, to_ansi(&render(text), true));
        assert!(stream.finish().is_empty());
    }
}
