//! The screen: layout by terminal size, header, gauges, usage, footer and the overlays.
//!
//! Two layouts: a compact one that fits 80×24 (the chart becomes a sparkline, header and usage
//! become status lines) and a wide one from 120×36 up. Below 60×18 the dashboard only says that
//! the terminal is too small.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, LineGauge, Paragraph, Wrap};

use crate::panels;
use crate::text;
use crate::ui::UiState;
use gym_snapshot::{RunState, Snapshot};

/// Smallest terminal the dashboard draws into.
pub const MIN_SIZE: (u16, u16) = (60, 18);
/// Smallest terminal that gets the wide layout.
pub const WIDE_SIZE: (u16, u16) = (120, 36);

/// Draws the dashboard for a snapshot. Never panics, whatever the snapshot or the frame size.
pub fn draw(frame: &mut Frame, snapshot: &Snapshot, ui: &UiState) {
    let area = frame.area();
    if area.width < MIN_SIZE.0 || area.height < MIN_SIZE.1 {
        too_small(frame, area);
        return;
    }
    if area.width >= WIDE_SIZE.0 && area.height >= WIDE_SIZE.1 {
        wide(frame, area, snapshot, ui);
    } else {
        compact(frame, area, snapshot, ui);
    }
    if let Some(detail) = ui.detail() {
        panels::detail(frame, area, detail, ui);
    }
    if ui.help_open() {
        help(frame, area);
    }
}

fn too_small(frame: &mut Frame, area: Rect) {
    let msg = format!(
        "Terminal too small: {}×{}. The dashboard needs {}×{}. q stops the run.",
        area.width, area.height, MIN_SIZE.0, MIN_SIZE.1
    );
    frame.render_widget(
        Paragraph::new(msg)
            .wrap(Wrap { trim: true })
            .centered()
            .yellow(),
        area,
    );
}

fn compact(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    let [head, gauges, trend, middle, log, footer_area] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Fill(1),
        Constraint::Length(5),
        Constraint::Length(1),
    ])
    .areas(area);
    let [head1, head2] = Layout::vertical([Constraint::Length(1); 2]).areas(head);
    frame.render_widget(Paragraph::new(title_line(s)), head1);
    frame.render_widget(Paragraph::new(where_line(s)), head2);
    progress_row(frame, gauges, s);

    let [spark, usage] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .spacing(1)
            .areas(trend);
    panels::sparkline(frame, spark, s);
    frame.render_widget(Paragraph::new(usage_line(s)), usage);

    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(middle);
    let [stage, library] =
        Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)]).areas(right);
    panels::group(frame, left, s, ui);
    panels::stage(frame, stage, s, ui);
    panels::library(frame, library, s, ui);
    panels::log(frame, log, s, ui, true);
    footer(frame, footer_area, s, ui);
}

fn wide(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    // A shorter log below 44 rows leaves room for a whole group of 8 answers.
    let log_height = if area.height >= 44 { 8 } else { 6 };
    let [top, gauges, chart, middle, log, footer_area] = Layout::vertical([
        Constraint::Length(6),
        Constraint::Length(3),
        Constraint::Percentage(28),
        Constraint::Fill(1),
        Constraint::Length(log_height),
        Constraint::Length(1),
    ])
    .areas(area);
    let [header_area, usage_area] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(44)]).areas(top);
    header(frame, header_area, s);
    usage(frame, usage_area, s);

    let block = Block::bordered().title(" Progress ");
    let inner = block.inner(gauges);
    frame.render_widget(block, gauges);
    progress_row(frame, inner, s);

    panels::chart(frame, chart, s);
    let [group, stage, library] = Layout::horizontal([
        Constraint::Percentage(42),
        Constraint::Percentage(28),
        Constraint::Percentage(30),
    ])
    .areas(middle);
    panels::group(frame, group, s, ui);
    panels::stage(frame, stage, s, ui);
    panels::library(frame, library, s, ui);
    panels::log(frame, log, s, ui, false);
    footer(frame, footer_area, s, ui);
}

/// The run state as a coloured badge; a failure's reason is cut to `reason_width` columns.
fn state_span(s: &Snapshot, reason_width: usize) -> Span<'static> {
    let (label, color) = match &s.header.state {
        RunState::Starting => ("◌ starting".to_owned(), Color::Gray),
        RunState::Running => ("● running".to_owned(), Color::Green),
        RunState::Paused => ("‖ paused".to_owned(), Color::Yellow),
        RunState::Stopping => ("◼ stopping".to_owned(), Color::Yellow),
        RunState::Evaluating => (
            match &s.progress.evaluation {
                Some(e) => format!("◉ final evaluation {}/{}", e.done, e.total),
                None => "◉ final evaluation".to_owned(),
            },
            Color::Magenta,
        ),
        RunState::Finished => ("✔ finished".to_owned(), Color::Cyan),
        RunState::Failed { reason } => (
            format!(
                "✖ failed: {}",
                text::truncate(&text::one_line(reason), reason_width)
            ),
            Color::Red,
        ),
        RunState::Unknown => ("? unknown state".to_owned(), Color::Gray),
    };
    Span::styled(label, Style::new().fg(color).add_modifier(Modifier::BOLD))
}

fn or_dash(s: &str) -> String {
    if s.trim().is_empty() {
        "—".into()
    } else {
        text::one_line(s)
    }
}

/// `gym <run> ● running   epoch 1/3 · step 4/20`
fn title_line(s: &Snapshot) -> Line<'static> {
    let h = &s.header;
    Line::from(vec![
        Span::styled("gym ", Style::new().bold().cyan()),
        Span::styled(or_dash(&h.run_id), Style::new().bold()),
        Span::raw("  "),
        state_span(s, 24),
        Span::raw(format!(
            "  epoch {}/{} · step {}/{} · {}",
            h.epoch,
            h.epochs,
            h.step,
            h.steps,
            text::duration(h.elapsed_s),
        )),
        Span::raw(eta(s)),
    ])
}

/// ` · ETA 5m` — none during the final evaluation: the steps' ETA says nothing of it, and it
/// shows its own progress.
fn eta(s: &Snapshot) -> String {
    if s.header.state == RunState::Evaluating {
        return String::new();
    }
    let eta = s.header.eta_s.map_or_else(|| "—".into(), text::duration);
    format!(" · ETA {eta}")
}

/// `SmolLM2 (llama) · library default v12 · 37 experiences`
fn where_line(s: &Snapshot) -> Line<'static> {
    let h = &s.header;
    Line::from(vec![
        Span::styled(or_dash(&h.model), Style::new().bold()),
        Span::raw(format!(" ({})", or_dash(&h.backend))),
        Span::styled(" · library ", Style::new().dark_gray()),
        Span::raw(format!(
            "{} v{} · {} experiences",
            or_dash(&h.library),
            s.library.version,
            s.library.experiences
        )),
    ])
    .dark_gray()
}

fn header(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let h = &s.header;
    let label = |l: &'static str| Span::styled(format!("{l:<9}"), Style::new().dark_gray());
    let lines = vec![
        Line::from(vec![
            Span::styled(or_dash(&h.run_id), Style::new().bold()),
            Span::raw("  "),
            state_span(s, usize::from(area.width).saturating_sub(40)),
        ]),
        Line::from(vec![
            label("model"),
            Span::styled(or_dash(&h.model), Style::new().bold()),
            Span::raw(format!(" on {}", or_dash(&h.backend))),
        ]),
        Line::from(vec![
            label("library"),
            Span::raw(format!(
                "{}  v{} (step reads v{}) · {} experiences",
                or_dash(&h.library),
                s.library.version,
                h.library_version,
                s.library.experiences
            )),
        ]),
        Line::from(vec![
            label("step"),
            Span::raw(format!(
                "{}/{} of epoch {}/{} · elapsed {}{}",
                h.step,
                h.steps,
                h.epoch,
                h.epochs,
                text::duration(h.elapsed_s),
                eta(s)
            )),
        ]),
    ];
    let block = Block::bordered().title(Span::styled(" gym grpo ", Style::new().bold().cyan()));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn usage(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let u = &s.usage;
    let f = &s.failures;
    let label = |l: &'static str| Span::styled(format!("{l:<8}"), Style::new().dark_gray());
    let lines = vec![
        Line::from(vec![
            label("tokens"),
            Span::raw(format!(
                "{} in · {} out",
                text::count(u.tokens_in),
                text::count(u.tokens_out)
            )),
        ]),
        Line::from(vec![
            label("cost"),
            Span::raw(format!(
                "{} · {} tok/s",
                text::money(u.cost_usd),
                text::rate(u.tokens_per_s)
            )),
        ]),
        Line::from(vec![
            label("parse"),
            counter("failures", f.parse_failures, Color::Yellow),
            Span::raw(" · "),
            counter("retries", f.retries, Color::Yellow),
        ]),
        Line::from(vec![
            label("backend"),
            counter("errors", f.backend_errors, Color::Red),
            Span::raw(" · "),
            counter("ops dropped", f.dropped, Color::Yellow),
        ]),
    ];
    let block = Block::bordered().title(" Usage & failures ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// A counter that stands out once it is not zero.
pub(crate) fn counter(what: &str, n: u64, color: Color) -> Span<'static> {
    let style = if n == 0 {
        Style::new().dark_gray()
    } else {
        Style::new().fg(color).bold()
    };
    Span::styled(format!("{what} {n}"), style)
}

/// `12.3k→4.5k tok · $0.0123 · 230 tok/s`
fn usage_line(s: &Snapshot) -> Line<'static> {
    let u = &s.usage;
    Line::from(format!(
        "tok {}→{} · {} · {} tok/s",
        text::count(u.tokens_in),
        text::count(u.tokens_out),
        text::money(u.cost_usd),
        text::rate(u.tokens_per_s)
    ))
}

fn ratio(done: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        (done as f64 / total as f64).clamp(0.0, 1.0)
    }
}

fn gauge(label: String, done: u64, total: u64, color: Color) -> LineGauge<'static> {
    LineGauge::default()
        .ratio(ratio(done, total))
        .label(label)
        .filled_style(Style::new().fg(color))
        .unfilled_style(Style::new().dark_gray())
}

/// Three gauges side by side: steps, rollouts of the current step, the stage in progress.
fn progress_row(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let p = &s.progress;
    let [a, b, c] = Layout::horizontal([Constraint::Ratio(1, 3); 3])
        .spacing(2)
        .areas(area);
    let steps = gauge(
        format!("steps {}/{}", p.steps_done, p.steps_total),
        u64::from(p.steps_done),
        u64::from(p.steps_total),
        Color::Cyan,
    );
    let rollouts = gauge(
        format!("rollouts {}/{}", p.rollouts_done, p.rollouts_total),
        p.rollouts_done,
        p.rollouts_total,
        Color::Blue,
    );
    frame.render_widget(steps, a);
    frame.render_widget(rollouts, b);
    if let Some(e) = &p.evaluation {
        let label = format!("final evaluation {}/{}", e.done, e.total);
        frame.render_widget(gauge(label, e.done, e.total, Color::Magenta), c);
        return;
    }
    match &p.stage {
        Some(st) => frame.render_widget(
            gauge(
                format!("{} {}/{}", or_dash(&st.name), st.done, st.total),
                st.done,
                st.total,
                Color::Magenta,
            ),
            c,
        ),
        None => frame.render_widget(Paragraph::new("no stage running").dark_gray(), c),
    }
}

fn footer(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    let key = |k: &'static str| Span::styled(k, Style::new().bold().cyan());
    let pause = if s.header.state == RunState::Paused {
        " resume  "
    } else {
        " pause  "
    };
    let evaluating = s.header.state == RunState::Evaluating;
    let mut spans = match (ui.stop_requested(), evaluating) {
        (true, false) => vec![
            Span::styled("stopping at the next safe point · ", Style::new().yellow()),
            key("q"),
            Span::styled(" again: leave  ", Style::new().yellow()),
        ],
        (true, true) => vec![
            Span::styled("cancelling the final evaluation · ", Style::new().yellow()),
            key("q"),
            Span::styled(" again: leave  ", Style::new().yellow()),
        ],
        (false, false) => vec![key("q"), Span::raw(" stop  ")],
        (false, true) => vec![key("q"), Span::raw(" cancel the evaluation  ")],
    };
    // Pausing holds the steps' model calls; the final evaluation has none to hold.
    if !evaluating {
        spans.extend([key("p"), Span::raw(pause)]);
    }
    spans.extend([
        key("tab"),
        Span::raw(" focus  "),
        key("↑↓"),
        Span::raw(" scroll  "),
        key("enter"),
        Span::raw(" open  "),
        key("?"),
        Span::raw(" help"),
    ]);
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// A centred rectangle at most `w`×`h`, inside `area`.
pub(crate) fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let [row] = Layout::vertical([Constraint::Length(h.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [cell] = Layout::horizontal([Constraint::Length(w.min(area.width))])
        .flex(Flex::Center)
        .areas(row);
    cell
}

const HELP: &[(&str, &str)] = &[
    (
        "q, ctrl-c",
        "stop the run gracefully; again: leave the dashboard",
    ),
    (
        "q (evaluating)",
        "cancel the final evaluation (the library stays)",
    ),
    ("p", "pause / resume the run"),
    ("tab, shift-tab", "move focus between panels"),
    ("↑ ↓, j k", "move the selection / scroll"),
    ("pgup pgdn", "move by ten"),
    ("home end, g G", "first / last (G: the log follows again)"),
    (
        "enter",
        "open the selected answer, proposal, op or log line",
    ),
    ("esc", "close the popup"),
    ("?", "open / close this help"),
];

fn help(frame: &mut Frame, area: Rect) {
    let popup = centered(area, 72, HELP.len() as u16 + 6);
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, what)| {
            Line::from(vec![
                Span::styled(format!("  {k:<16}"), Style::new().bold().cyan()),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::raw("  library ops: + add  ~ update  - delete").dark_gray());
    let block = Block::bordered()
        .title(" Help ")
        .title_bottom(Line::from(" esc closes ").right_aligned())
        .border_style(Style::new().cyan());
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        popup,
    );
}
