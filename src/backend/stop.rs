/// Finds the earliest stop string in generated text.
///
/// Text arrives a token at a time, so a stop string can straddle tokens; the matcher re-scans only
/// the tail that could contain a newly completed match.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    longest: usize,
}

impl StopMatcher {
    pub fn new(stops: &[String]) -> Self {
        Self {
            longest: stops.iter().map(String::len).max().unwrap_or(0),
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
        }
    }

    /// The byte offset where `text` must be cut, if a stop string ends within its last
    /// `appended` bytes.
    pub fn find(&self, text: &str, appended: usize) -> Option<usize> {
        if self.stops.is_empty() {
            return None;
        }
        let from = text.floor_char_boundary(text.len().saturating_sub(appended + self.longest));
        let window = &text[from..];
        self.stops
            .iter()
            .filter_map(|stop| window.find(stop.as_str()))
            .min()
            .map(|at| from + at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_stop_string_split_across_pieces() {
        let m = StopMatcher::new(&["\n\nQuestion".to_string(), "###".to_string()]);
        let mut text = String::new();
        let mut cut = None;
        for piece in ["The answer is 4.", "\n", "\nQues", "tion: what"] {
            text.push_str(piece);
            cut = m.find(&text, piece.len());
            if cut.is_some() {
                break;
            }
        }
        assert_eq!(cut, Some("The answer is 4.".len()));
    }

    #[test]
    fn earliest_stop_wins_and_no_stops_never_match() {
        let m = StopMatcher::new(&["b".to_string(), "a".to_string()]);
        assert_eq!(m.find("xxab", 4), Some(2));
        assert_eq!(StopMatcher::new(&[]).find("anything", 8), None);
    }

    #[test]
    fn multibyte_text_does_not_panic() {
        let m = StopMatcher::new(&["ü".to_string()]);
        assert_eq!(m.find("ééü", 2), Some(4));
    }
}
