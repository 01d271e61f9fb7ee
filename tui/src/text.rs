//! Turning snapshot values into short, safe strings for the screen.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Longest prefix of a text that one-line previews look at, so that a megabyte answer costs
/// no more per frame than a short one.
const PREVIEW_SCAN: usize = 4096;

/// Replaces control characters by spaces. Model output and user-given names reach the terminal
/// through this: an escape sequence in an answer must not be able to drive the terminal.
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// One line of a text: newlines and runs of whitespace become single spaces.
pub fn one_line(s: &str) -> String {
    let head = match s.char_indices().nth(PREVIEW_SCAN) {
        Some((i, _)) => &s[..i],
        None => s,
    };
    let mut out = String::with_capacity(head.len());
    for word in head.split(|c: char| c.is_whitespace() || c.is_control()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    if head.len() < s.len() {
        out.push('…');
    }
    out
}

/// Cuts a one-line text to `width` columns, ending it with `…` when cut.
pub fn truncate(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width - 1 {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// Word-wraps a text to `width` columns, keeping its line breaks; words longer than a line are
/// broken. Done here rather than by the paragraph widget so that the popup knows exactly how
/// many lines it can scroll.
pub fn wrap(s: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    for raw in s.split('\n') {
        let raw = clean(raw.strip_suffix('\r').unwrap_or(raw));
        let mut line = String::new();
        let mut used = 0;
        for word in raw.split(' ') {
            let w = word.width();
            let gap = usize::from(used > 0);
            if used + gap + w <= width {
                if gap == 1 {
                    line.push(' ');
                }
                line.push_str(word);
                used += gap + w;
                continue;
            }
            if used > 0 {
                lines.push(std::mem::take(&mut line));
                used = 0;
            }
            for c in word.chars() {
                let cw = c.width().unwrap_or(0);
                if used + cw > width && used > 0 {
                    lines.push(std::mem::take(&mut line));
                    used = 0;
                }
                line.push(c);
                used += cw;
            }
        }
        lines.push(line);
    }
    lines
}

/// `42s`, `12m03s`, `3h04m`; `—` when unknown.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "—".into();
    }
    // Saturating float-to-int cast: absurd values print as a large number, never panic.
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..360_000 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d", s / 86_400),
    }
}

/// `999`, `12.3k`, `4.56M`.
pub fn count(n: u64) -> String {
    let f = n as f64;
    match n {
        0..1_000 => n.to_string(),
        1_000..10_000 => format!("{:.2}k", f / 1e3),
        10_000..1_000_000 => format!("{:.1}k", f / 1e3),
        1_000_000..1_000_000_000 => format!("{:.2}M", f / 1e6),
        _ => format!("{:.2}G", f / 1e9),
    }
}

/// `$0.0123`, `$12.34`; `—` when unknown.
pub fn money(usd: f64) -> String {
    if !usd.is_finite() {
        "—".into()
    } else if usd == 0.0 {
        // Local models cost nothing; `$0.0000` would read as a rounding.
        "$0".into()
    } else if usd.abs() < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

/// A reward or score as `0.62`; `  —  ` when it is not a number.
pub fn score(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "  —".into()
    }
}

/// A rate as `230.5`, `—` when unknown.
pub fn rate(x: f64) -> String {
    if !x.is_finite() || x < 0.0 {
        "—".into()
    } else if x < 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_flattens_whitespace_and_controls() {
        assert_eq!(one_line("  a\n\tb \x1b[31mc  "), "a b [31mc");
        assert_eq!(one_line(""), "");
        let long = "x ".repeat(PREVIEW_SCAN);
        assert!(one_line(&long).ends_with('…'));
    }

    #[test]
    fn truncate_respects_display_width() {
        assert_eq!(truncate("hello", 5), "hello");
        assert_eq!(truncate("hello", 4), "hel…");
        assert_eq!(truncate("日本語です", 5), "日本…");
        assert_eq!(truncate("abc", 0), "");
    }

    #[test]
    fn wrap_breaks_words_and_long_words() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("abcdefgh", 3), ["abc", "def", "gh"]);
        assert_eq!(wrap("a\n\nb", 10), ["a", "", "b"]);
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap("日本語", 1), ["日", "本", "語"]);
    }

    #[test]
    fn numbers_format_compactly() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(723.0), "12m03s");
        assert_eq!(duration(11_040.0), "3h04m");
        assert_eq!(duration(f64::NAN), "—");
        assert_eq!(duration(1e300), format!("{}d", u64::MAX / 86_400));
        assert_eq!(count(999), "999");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(count(4_560_000), "4.56M");
        assert_eq!(money(0.01234), "$0.0123");
        assert_eq!(money(12.345), "$12.35");
        assert_eq!(score(f64::NAN), "  —");
        assert_eq!(rate(230.46), "230");
    }
}
