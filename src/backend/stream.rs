//! Token streaming: the pieces of text a backend sends while it samples, and the bookkeeping that
//! makes them safe to send early.
//!
//! The contract of [`Backend::generate_streaming`](super::Backend::generate_streaming): the
//! pieces sent for completion `i`, joined, are a prefix of that completion's final text. A
//! backend that cannot stream sends nothing and the caller sends the finished text; one that
//! streams may leave a tail (a held-back partial stop string) for the caller to send from the
//! final text.

use tokio::sync::mpsc;

/// New text of completion `index` of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta {
    pub index: usize,
    pub text: String,
}

/// Where a streaming backend sends its [`Delta`]s. A closed channel means nobody listens any
/// more, and a backend may stop sampling.
pub type DeltaSender = mpsc::UnboundedSender<Delta>;

/// Releases a growing completion text in pieces that stay a prefix of the final text.
///
/// Stop strings are cut from the final text, so the last `longest stop − 1` bytes are held back
/// until they can no longer be the start of one: a stop string that has begun but not completed
/// is shorter than itself.
#[derive(Debug, Clone, Default)]
pub struct TextRelease {
    sent: usize,
    holdback: usize,
}

impl TextRelease {
    pub fn new(stops: &[String]) -> Self {
        Self {
            sent: 0,
            holdback: stops
                .iter()
                .map(String::len)
                .max()
                .unwrap_or(0)
                .saturating_sub(1),
        }
    }

    /// Bytes released so far.
    pub fn sent(&self) -> usize {
        self.sent
    }

    /// The piece of `text` (the whole text so far) that can be sent now, if any.
    pub fn next<'t>(&mut self, text: &'t str) -> Option<&'t str> {
        let safe = text.floor_char_boundary(text.len().saturating_sub(self.holdback));
        self.release(text, safe)
    }

    /// What is left to send of the final `text`.
    pub fn finish<'t>(&mut self, text: &'t str) -> Option<&'t str> {
        self.release(text, text.len())
    }

    fn release<'t>(&mut self, text: &'t str, end: usize) -> Option<&'t str> {
        if end <= self.sent || !text.is_char_boundary(self.sent) {
            return None;
        }
        let piece = &text[self.sent..end];
        self.sent = end;
        Some(piece)
    }
}

/// The length of `bytes` without a UTF-8 character that has started but not yet ended (a token
/// can end in the middle of one; the next token completes it).
///
/// Hand-written: std's `Utf8Error::valid_up_to` stops at the first invalid byte anywhere, and
/// the bytes here may hold invalid sequences earlier on (they are decoded lossily).
pub fn complete_utf8_len(bytes: &[u8]) -> usize {
    // A character is at most 4 bytes: look for the lead byte of the last one.
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte
        }
        let width = match byte {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1, // not a lead byte: invalid, and replaced the same way whatever follows
        };
        return if width > back {
            bytes.len() - back
        } else {
            bytes.len()
        };
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_partial_stop_string_is_held_back_until_it_cannot_be_one() {
        let mut release = TextRelease::new(&["\n\nQ".to_string()]);
        assert_eq!(release.next("The answer"), Some("The answ"));
        // Two bytes stay back: with them, a stop string could have begun.
        assert_eq!(release.next("The answer is 4.\n"), Some("er is 4"));
        assert_eq!(release.next("The answer is 4.\n\n"), Some("."));
        // The stop string completed: the final text is cut before it.
        assert_eq!(release.finish("The answer is 4."), None);
        assert_eq!(release.sent(), "The answer is 4.".len());

        let mut release = TextRelease::new(&[]);
        assert_eq!(release.next("abc"), Some("abc"));
        assert_eq!(release.finish("abcd"), Some("d"));
    }

    #[test]
    fn an_unfinished_character_waits_for_its_last_byte() {
        let euro = "€".as_bytes();
        assert_eq!(complete_utf8_len(&euro[..2]), 0);
        assert_eq!(complete_utf8_len(euro), 3);
        assert_eq!(complete_utf8_len(b"ab\xc3"), 2);
        assert_eq!(complete_utf8_len(b"ab\xff"), 3);
        assert_eq!(complete_utf8_len(b""), 0);
    }

    proptest! {
        /// Whatever the tokens and stop strings, the pieces sent join to the final text.
        #[test]
        fn pieces_join_to_the_final_text(
            tokens in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..4), 0..30),
            stops in proptest::collection::vec("[ab\n]{1,3}", 0..3),
        ) {
            let mut release = TextRelease::new(&stops);
            let matcher = crate::backend::StopMatcher::new(&stops);
            let mut bytes = Vec::new();
            let mut sent = String::new();
            let mut cut = None;
            for token in &tokens {
                bytes.extend_from_slice(token);
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if let Some(at) = matcher.find(&text, token.len()) {
                    cut = Some(at);
                    break;
                }
                let streamable = String::from_utf8_lossy(&bytes[..complete_utf8_len(&bytes)]);
                if let Some(piece) = release.next(&streamable) {
                    sent.push_str(piece);
                }
            }
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if let Some(cut) = cut {
                text.truncate(cut);
            }
            if let Some(rest) = release.finish(&text) {
                sent.push_str(rest);
            }
            prop_assert_eq!(sent, text);
        }
    }
}
