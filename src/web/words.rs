//! A word diff between an experience's old and new text, for the review and library pages.
//!
//! Words are runs of non-whitespace; the diff is the longest common subsequence of words,
//! emitted as runs of kept, removed and inserted words. The work is bounded: texts over
//! [`MAX_WORDS`] words on either side are shown as one removal and one insertion.

use serde::Serialize;

/// The most words per side the diff aligns (a library's texts are 32 words by default).
pub const MAX_WORDS: usize = 2_000;

/// What a run of words is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// In both texts.
    Same,
    /// Only in the old text.
    Removed,
    /// Only in the new text.
    Added,
}

/// A run of consecutive words of one kind, joined by single spaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Kept, removed or added.
    pub kind: Kind,
    /// The words.
    pub text: String,
}

fn push(out: &mut Vec<Segment>, kind: Kind, word: &str) {
    match out.last_mut() {
        Some(last) if last.kind == kind => {
            last.text.push(' ');
            last.text.push_str(word);
        }
        _ => out.push(Segment {
            kind,
            text: word.to_owned(),
        }),
    }
}

/// The word diff from `old` to `new`.
pub fn diff(old: &str, new: &str) -> Vec<Segment> {
    let a: Vec<&str> = old.split_whitespace().collect();
    let b: Vec<&str> = new.split_whitespace().collect();
    let mut out = Vec::new();
    if a.len() > MAX_WORDS || b.len() > MAX_WORDS {
        for word in &a {
            push(&mut out, Kind::Removed, word);
        }
        for word in &b {
            push(&mut out, Kind::Added, word);
        }
        return out;
    }
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let width = b.len() + 1;
    let mut lcs = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            push(&mut out, Kind::Same, a[i]);
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * width + j] >= lcs[i * width + j + 1] {
            push(&mut out, Kind::Removed, a[i]);
            i += 1;
        } else {
            push(&mut out, Kind::Added, b[j]);
            j += 1;
        }
    }
    for word in &a[i..] {
        push(&mut out, Kind::Removed, word);
    }
    for word in &b[j..] {
        push(&mut out, Kind::Added, word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(segments: &[Segment]) -> String {
        segments
            .iter()
            .map(|s| match s.kind {
                Kind::Same => s.text.clone(),
                Kind::Removed => format!("[-{}-]", s.text),
                Kind::Added => format!("{{+{}+}}", s.text),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn changed_words_are_marked_and_the_rest_kept() {
        let d = diff(
            "When a problem says each, multiply before adding.",
            "When a problem says each, multiply first.",
        );
        assert_eq!(
            show(&d),
            "When a problem says each, multiply [-before adding.-] {+first.+}"
        );
    }

    #[test]
    fn empty_and_equal_sides() {
        assert_eq!(show(&diff("", "a b")), "{+a b+}");
        assert_eq!(show(&diff("a b", "")), "[-a b-]");
        assert_eq!(show(&diff("a  b", "a b")), "a b");
        assert!(diff("", "").is_empty());
    }

    #[test]
    fn huge_texts_are_not_aligned() {
        let long = "w ".repeat(MAX_WORDS + 1);
        let d = diff(&long, "w");
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].kind, d[1].kind), (Kind::Removed, Kind::Added));
    }
}
