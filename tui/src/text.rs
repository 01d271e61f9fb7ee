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

/// Removes from a text everything that could drive a terminal, for text printed as plain lines
/// rather than drawn by the dashboard (a remote run's log lines in `gym watch --no-tui`):
/// escape sequences whole (CSI `ESC [ … final`; OSC, DCS, SOS, PM and APC strings up to their
/// terminator; two-character escapes), their 8-bit C1 forms, and every other control character
/// (C0, DEL, C1) except newline and tab. Removing a sequence whole, not just its `ESC`, keeps
/// its payload (`]0;title`) out of the output.
pub fn strip_terminal_controls(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.peek().copied() {
                Some('[') => {
                    chars.next();
                    skip_csi(&mut chars);
                }
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    skip_control_string(&mut chars);
                }
                // nF escapes: intermediate bytes, then one final byte.
                Some(' '..='/') => {
                    while chars.next_if(|c| (' '..='/').contains(c)).is_some() {}
                    chars.next_if(|c| ('0'..='~').contains(c));
                }
                // Two-character escapes (`ESC 7`, `ESC c`, …).
                Some('0'..='~') => {
                    chars.next();
                }
                // A lone ESC: terminals drop it and read on.
                _ => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_control_string(&mut chars),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// Skips the rest of a CSI sequence: parameter and intermediate bytes, then the final byte.
/// Anything else ends it as a terminal would, and is left for the caller.
fn skip_csi(chars: &mut Chars<'_>) {
    while chars.next_if(|c| (' '..='?').contains(c)).is_some() {}
    chars.next_if(|c| ('@'..='~').contains(c));
}

/// Skips the rest of an OSC/DCS/SOS/PM/APC string: up to BEL or ST (`ESC \` or 8-bit), or CAN
/// or SUB (which cancel it), or the end of the text. Another `ESC` starts a new sequence, left
/// for the caller.
fn skip_control_string(chars: &mut Chars<'_>) {
    while let Some(&c) = chars.peek() {
        match c {
            '\x07' | '\u{9c}' | '\x18' | '\x1a' => {
                chars.next();
                return;
            }
            '\x1b' => {
                let mut ahead = chars.clone();
                ahead.next();
                if ahead.peek() == Some(&'\\') {
                    chars.next();
                    chars.next();
                }
                return;
            }
            _ => {
                chars.next();
            }
        }
    }
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
    fn terminal_controls_are_stripped_with_their_payload() {
        // A window-title change (OSC, BEL-terminated) and a screen clear (CSI).
        assert_eq!(strip_terminal_controls("a\x1b]0;pwned\x07b"), "ab");
        assert_eq!(strip_terminal_controls("\x1b[2Jcleared"), "cleared");
        assert_eq!(strip_terminal_controls("\x1b[31;1mred\x1b[0m!"), "red!");
        // OSC 8 hyperlink, ST-terminated; DCS; 8-bit CSI and OSC.
        assert_eq!(
            strip_terminal_controls("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"),
            "link"
        );
        assert_eq!(strip_terminal_controls("\x1bP1$r0m\x1b\\x"), "x");
        assert_eq!(strip_terminal_controls("\u{9b}2Jx\u{9d}0;t\u{9c}y"), "xy");
        // Two-character and nF escapes, a lone ESC, an unterminated string.
        assert_eq!(strip_terminal_controls("\x1b7a\x1bcb\x1b(Bc\x1b"), "abc");
        assert_eq!(strip_terminal_controls("ok \x1b]0;title"), "ok ");
        // Other C0, DEL and C1 go; newline, tab and printable Unicode stay.
        assert_eq!(
            strip_terminal_controls("a\r\x00\x08\x7f\u{85}b\n\tc é日本"),
            "ab\n\tc é日本"
        );
    }

    proptest::proptest! {
        #[test]
        fn no_control_character_but_newline_and_tab_survives(s in "\\PC*|[\\x00-\\x{a0}]*") {
            let out = strip_terminal_controls(&s);
            proptest::prop_assert!(
                out.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'),
                "{:?} -> {:?}", s, out
            );
        }
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
