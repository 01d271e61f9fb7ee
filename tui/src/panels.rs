//! The panels: reward chart and sparkline, group, stage, library, log, and the detail popup.

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, BorderType, Chart, Clear, Dataset, GraphType, HighlightSpacing, List, ListItem,
    ListState, Paragraph, Sparkline,
};

use crate::draw::{centered, counter};
use crate::text;
use crate::ui::{Detail, Panel, UiState};
use gym_snapshot::{ExperienceUsage, LogLevel, OpKind, Snapshot};

/// Columns the list highlight symbol takes.
const MARK: u16 = 2;

fn block(title: Line<'static>, focused: bool) -> Block<'static> {
    let block = Block::bordered().title(title);
    if focused {
        // Thick as well as coloured, so that focus shows on a monochrome terminal too.
        block
            .border_type(BorderType::Thick)
            .border_style(Style::new().cyan().bold())
            .title_style(Style::new().cyan().bold())
    } else {
        block
    }
}

fn placeholder(frame: &mut Frame, area: Rect, msg: &str) {
    frame.render_widget(Paragraph::new(msg.to_owned()).dark_gray().italic(), area);
}

/// A list in a panel. The selection keeps its place when the panel loses focus, marked but not
/// highlighted, so that tabbing around does not scroll anything.
fn list(
    frame: &mut Frame,
    area: Rect,
    items: Vec<ListItem<'static>>,
    selected: Option<usize>,
    focused: bool,
) {
    let mut state = ListState::default().with_selected(selected);
    let highlight = if focused {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new()
    };
    let list = List::new(items)
        .highlight_symbol("› ")
        .highlight_spacing(HighlightSpacing::Always)
        .highlight_style(highlight);
    frame.render_stateful_widget(list, area, &mut state);
}

fn finite(points: &[(u32, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|&(step, v)| (f64::from(step), v))
        .collect()
}

fn latest(points: &[(u32, f64)]) -> Option<f64> {
    points.iter().rev().map(|p| p.1).find(|v| v.is_finite())
}

fn reward_style(r: f64) -> Style {
    if !r.is_finite() {
        Style::new().dark_gray()
    } else if r >= 0.999 {
        Style::new().green()
    } else if r <= 0.001 {
        Style::new().red()
    } else {
        Style::new().yellow()
    }
}

/// Mean reward per step, and the held-out score where the run was evaluated.
pub fn chart(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let rewards = finite(&s.rewards);
    let held_out = finite(&s.held_out);
    let mut title = vec![Span::raw(" Mean reward per step ")];
    if let Some(r) = latest(&s.rewards) {
        title.push(Span::styled(
            format!("{} ", text::score(r)),
            reward_style(r),
        ));
    }
    if let Some(h) = latest(&s.held_out) {
        title.push(Span::styled(
            format!("· held-out {} ", text::score(h)),
            Style::new().magenta(),
        ));
    }
    let block = Block::bordered().title(Line::from(title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if rewards.is_empty() && held_out.is_empty() {
        placeholder(frame, inner, "no finished step yet");
        return;
    }
    // The chart widget needs room for its axes and labels; a thin pane gets the sparkline.
    if inner.width < 24 || inner.height < 5 {
        sparkline(frame, inner, s);
        return;
    }
    let all = rewards.iter().chain(&held_out);
    let x_lo = all
        .clone()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .min(1.0);
    let x_hi = all
        .clone()
        .map(|p| p.0)
        .fold(f64::from(s.header.steps), f64::max)
        .max(x_lo + 1.0);
    let y_lo = all.clone().map(|p| p.1).fold(0.0, f64::min);
    let y_hi = all.map(|p| p.1).fold(1.0, f64::max);
    let datasets = vec![
        Dataset::default()
            .name("mean reward")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().cyan())
            .data(&rewards),
        Dataset::default()
            .name("held-out")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().magenta())
            .data(&held_out),
    ];
    let x_labels = [x_lo, (x_lo + x_hi) / 2.0, x_hi].map(|x| format!("{x:.0}"));
    let y_labels = [y_lo, (y_lo + y_hi) / 2.0, y_hi].map(|y| format!("{y:.2}"));
    let chart = Chart::new(datasets)
        .x_axis(
            Axis::default()
                .title("step")
                .bounds([x_lo, x_hi])
                .labels(x_labels)
                .style(Style::new().dark_gray()),
        )
        .y_axis(
            Axis::default()
                .bounds([y_lo, y_hi])
                .labels(y_labels)
                .style(Style::new().dark_gray()),
        )
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)));
    frame.render_widget(chart, inner);
}

/// One line: `reward ▂▃▅▆ 0.62 · held-out 0.58`, the newest steps that fit.
pub fn sparkline(frame: &mut Frame, area: Rect, s: &Snapshot) {
    let mut values = String::new();
    if let Some(r) = latest(&s.rewards) {
        values.push_str(&text::score(r));
    }
    if let Some(h) = latest(&s.held_out) {
        values.push_str(&format!(" · held-out {}", text::score(h)));
    }
    let [label, bars, value] = Layout::horizontal([
        Constraint::Length(7),
        Constraint::Fill(1),
        Constraint::Length(values.chars().count() as u16 + 1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new("reward").dark_gray(), label);
    frame.render_widget(
        Paragraph::new(values).alignment(Alignment::Right).magenta(),
        value,
    );
    if s.rewards.is_empty() {
        placeholder(frame, bars, "no finished step yet");
        return;
    }
    let skip = s.rewards.len().saturating_sub(usize::from(bars.width));
    let data: Vec<Option<u64>> = s.rewards[skip..]
        .iter()
        // Rewards are 0..1; as whole percents they fit the widget's integer bars.
        .map(|&(_, v)| {
            v.is_finite()
                .then(|| (v.clamp(0.0, 1.0) * 100.0).round() as u64)
        })
        .collect();
    let spark = Sparkline::default()
        .data(data)
        .max(100)
        .style(Style::new().cyan())
        .absent_value_symbol("·");
    frame.render_widget(spark, bars);
}

/// The current group: the query, then one line per answer with its reward.
pub fn group(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    let focused = ui.focus() == Panel::Group;
    let Some(g) = &s.group else {
        let block = block(Line::from(" Group "), focused);
        let inner = block.inner(area);
        frame.render_widget(block, area);
        placeholder(frame, inner, "waiting for the first rollouts");
        return;
    };
    let scored: Vec<f64> = g
        .answers
        .iter()
        .map(|a| a.reward)
        .filter(|r| r.is_finite())
        .collect();
    let mean = if scored.is_empty() {
        f64::NAN
    } else {
        scored.iter().sum::<f64>() / scored.len() as f64
    };
    let title = format!(
        " Group {} · {} answers · mean {} ",
        text::truncate(&text::one_line(&g.query_id), 24),
        g.answers.len(),
        text::score(mean).trim()
    );
    let block = block(Line::from(title), focused);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [query, answers] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(inner);
    let width = usize::from(inner.width);
    frame.render_widget(
        Paragraph::new(text::truncate(&text::one_line(&g.query), width)).italic(),
        query,
    );
    // Index, reward, then as much of the answer as fits after the highlight mark.
    let room = width.saturating_sub(usize::from(MARK) + 9);
    let items = g
        .answers
        .iter()
        .enumerate()
        .map(|(i, a)| {
            // An agent answer shows its tool steps first (`⚒ calc → 42 · calc → 7`), so a
            // reader sees how it got there.
            let steps = tool_steps(&a.tools);
            let room = room.saturating_sub(steps.chars().count());
            ListItem::new(Line::from(vec![
                Span::styled(format!("{:>2} ", i + 1), Style::new().dark_gray()),
                Span::styled(
                    format!("{:>4}  ", text::score(a.reward)),
                    reward_style(a.reward),
                ),
                Span::styled(steps, Style::new().yellow()),
                Span::raw(text::truncate(&text::one_line(&a.text), room)),
            ]))
        })
        .collect();
    list(frame, answers, items, ui.selected(Panel::Group, s), focused);
}

/// `⚒ calc → 42 · python → 7 │ ` for an answer with tool calls, empty without; each step is
/// the tool's name and what came back, cut short.
fn tool_steps(tools: &[String]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let steps: Vec<String> = tools
        .iter()
        .map(|line| {
            let name = line.split('(').next().unwrap_or(line);
            let result = line.rsplit(" → ").next().unwrap_or("");
            if line.contains("→ failed:") {
                format!("{name} ✗")
            } else {
                format!("{name} → {}", text::truncate(&text::one_line(result), 12))
            }
        })
        .collect();
    format!("⚒ {} │ ", steps.join(" · "))
}

fn diff_line(
    kind: OpKind,
    id: &str,
    version: Option<&str>,
    body: &str,
    width: usize,
) -> Line<'static> {
    let (sign, color) = match kind {
        OpKind::Add => ("+", Color::Green),
        OpKind::Update => ("~", Color::Yellow),
        OpKind::Delete => ("-", Color::Red),
        OpKind::Unknown => ("?", Color::Gray),
    };
    let mut head = format!("{sign} {}", text::truncate(&text::one_line(id), 12));
    if let Some(version) = version {
        head.push(' ');
        head.push_str(version);
    }
    head.push(' ');
    let room = width.saturating_sub(usize::from(MARK) + head.chars().count());
    let body_style = if kind == OpKind::Delete {
        Style::new().fg(color).add_modifier(Modifier::CROSSED_OUT)
    } else {
        Style::new().fg(color)
    };
    Line::from(vec![
        Span::styled(head, Style::new().fg(color).bold()),
        Span::styled(text::truncate(&text::one_line(body), room), body_style),
    ])
}

/// The stage in progress and the ops it proposes, as a diff.
pub fn stage(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    let focused = ui.focus() == Panel::Stage;
    let title = match &s.stage {
        Some(st) => format!(
            " Stage {} · {} ",
            text::truncate(&text::one_line(&st.name), 16),
            text::truncate(&text::one_line(&st.key), 24)
        ),
        None => " Stage ".to_owned(),
    };
    let block = block(Line::from(title), focused);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(st) = &s.stage else {
        placeholder(frame, inner, "no stage running");
        return;
    };
    if st.proposals.is_empty() {
        placeholder(frame, inner, "no proposals yet");
        return;
    }
    let width = usize::from(inner.width);
    let items = st
        .proposals
        .iter()
        .map(|op| {
            ListItem::new(diff_line(
                op.kind,
                op.id.as_deref().unwrap_or("new"),
                None,
                &op.text,
                width,
            ))
        })
        .collect();
    list(frame, inner, items, ui.selected(Panel::Stage, s), focused);
}

/// The latest committed ops, newest first, as a diff, with the library's size.
pub fn library(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState) {
    let focused = ui.focus() == Panel::Library;
    let lib = &s.library;
    let mut title = format!(
        " Library v{} · {} experiences ",
        lib.version, lib.experiences
    );
    if !lib.usage.is_empty() {
        let total = |count: fn(&ExperienceUsage) -> u64| lib.usage.iter().map(count).sum::<u64>();
        // Paired comparisons in use: ✓ the prompt with the experience scored higher, ✗ lower.
        title.push_str(&format!(
            "· ✓{} ✗{} ",
            total(|u| u.helpful),
            total(|u| u.harmful)
        ));
        // Feedback on served answers, once there is any: good / bad.
        let (good, bad) = (total(|u| u.served_good), total(|u| u.served_bad));
        if good + bad > 0 {
            title.push_str(&format!("· served +{good} -{bad} "));
        }
    }
    let block = block(Line::from(title), focused);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if lib.recent_ops.is_empty() {
        placeholder(frame, inner, "no ops committed yet");
        return;
    }
    let width = usize::from(inner.width);
    let items = lib
        .recent_ops
        .iter()
        .map(|op| {
            // An op on an experience still active carries its record in use: ✓ helped, ✗ hurt.
            let mut version = format!("v{}", op.version);
            if let Some(u) = lib.usage.iter().find(|u| u.id == op.id) {
                version.push_str(&format!(" ✓{} ✗{}", u.helpful, u.harmful));
                // Its own measured effect on the mean reward, once measured.
                if let Some(c) = u.credit {
                    version.push_str(&format!(" Δ{:+.2}", c.delta));
                }
            }
            ListItem::new(diff_line(op.kind, &op.id, Some(&version), &op.text, width))
        })
        .collect();
    list(frame, inner, items, ui.selected(Panel::Library, s), focused);
}

/// The log, following its newest line unless the user moved in it. `failures` puts the failure
/// counters in the title, for the compact layout that has no usage panel.
pub fn log(frame: &mut Frame, area: Rect, s: &Snapshot, ui: &UiState, failures: bool) {
    let focused = ui.focus() == Panel::Log;
    let mut title = vec![Span::raw(" Log ")];
    if failures {
        let f = &s.failures;
        title.extend([
            Span::raw("· "),
            counter("parse failures", f.parse_failures, Color::Yellow),
            Span::raw(" · "),
            counter("retries", f.retries, Color::Yellow),
            Span::raw(" · "),
            counter("errors", f.backend_errors, Color::Red),
            Span::raw(" · "),
            counter("dropped", f.dropped, Color::Yellow),
            Span::raw(" "),
        ]);
    }
    let block = block(Line::from(title), focused);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if s.log.is_empty() {
        placeholder(frame, inner, "nothing logged yet");
        return;
    }
    let room = usize::from(inner.width).saturating_sub(usize::from(MARK) + 6);
    let selected = ui.selected(Panel::Log, s);
    // Following: render only the tail, so a long log costs nothing per frame.
    let first = match selected {
        Some(_) => 0,
        None => s.log.len().saturating_sub(usize::from(inner.height)),
    };
    let items = s.log[first..]
        .iter()
        .map(|l| {
            let (tag, style) = match l.level {
                LogLevel::Info => ("info ", Style::new().dark_gray()),
                LogLevel::Warn => ("warn ", Style::new().yellow()),
                LogLevel::Error => ("error", Style::new().red().bold()),
                LogLevel::Unknown => ("?    ", Style::new().dark_gray()),
            };
            ListItem::new(Line::from(vec![
                Span::styled(format!("{tag} "), style),
                Span::raw(text::truncate(&text::one_line(&l.text), room)),
            ]))
        })
        .collect();
    list(frame, inner, items, selected, focused);
}

/// The full text of one item, over everything else: at most 100 columns wide (longer lines
/// read badly) and as tall as the text, up to most of the screen.
pub fn detail(frame: &mut Frame, area: Rect, d: &Detail, ui: &UiState) {
    let width = (area.width.saturating_mul(9) / 10).clamp(20, 100);
    let lines = text::wrap(&d.body, usize::from(width.saturating_sub(2)));
    let tallest = (area.height.saturating_mul(8) / 10).max(6);
    let height = u16::try_from(lines.len() + 2)
        .unwrap_or(u16::MAX)
        .clamp(6, tallest);
    let popup = centered(area, width, height);
    let probe = Block::bordered();
    let inner = probe.inner(popup);
    ui.popup_size.set((inner.width, inner.height));
    // Only a screen narrower than the popup's least width makes these differ.
    let lines = if inner.width == width.saturating_sub(2) {
        lines
    } else {
        text::wrap(&d.body, usize::from(inner.width))
    };
    let height = usize::from(inner.height);
    let scroll = d.scroll.min(lines.len().saturating_sub(height));
    let shown = &lines[scroll..lines.len().min(scroll + height)];
    let position = format!(
        " lines {}–{} of {} · ↑↓ scroll · esc closes ",
        scroll + 1,
        scroll + shown.len(),
        lines.len()
    );
    let title = text::truncate(&d.title, usize::from(inner.width).saturating_sub(2));
    let block = probe
        .title(Span::styled(format!(" {title} "), Style::new().bold()))
        .title_bottom(Line::from(position).right_aligned())
        .border_style(Style::new().cyan());
    frame.render_widget(Clear, popup);
    let body: Vec<Line> = shown.iter().map(|l| Line::raw(l.clone())).collect();
    frame.render_widget(Paragraph::new(body).block(block), popup);
}
