//! Why a stage's output could not be read.

/// Why a model's output yielded nothing usable. Every variant names enough to tell a person what
/// the model did wrong, since these reasons end up in run journals and dashboards.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing but whitespace.
    #[error("the output is empty")]
    Empty,

    /// No `{` or `[` that starts a readable JSON value.
    #[error("no JSON object or array in the output")]
    NoJson,

    /// JSON that could not be repaired.
    #[error("unreadable JSON at byte {at}: found `{found}`, expected {expected}")]
    Syntax {
        /// Byte offset of the offending character in the output.
        at: usize,
        /// The offending character.
        found: char,
        /// What would have made sense there.
        expected: &'static str,
    },

    /// Nesting deeper than any answer needs: a model stuck repeating `[`.
    #[error("JSON nested deeper than {limit} levels")]
    TooDeep {
        /// The deepest nesting accepted.
        limit: usize,
    },

    /// Valid JSON of a shape no stage asks for.
    #[error("the JSON holds no list of ops (found {found})")]
    NoOps {
        /// A short description of what was there.
        found: String,
    },

    /// Every item the model gave was unusable; the reasons are in the stage's `dropped`.
    #[error("all {count} items were dropped")]
    AllDropped {
        /// How many items there were.
        count: usize,
    },

    /// Consolidation kept none of the proposals it was given.
    #[error("the model kept none of the {proposals} proposals")]
    NothingKept {
        /// How many proposals it was given.
        proposals: usize,
    },

    /// No decision (add, update or same) where stage 4 asks for one.
    #[error("no decision (add, update or same) in the output (found {found})")]
    NoDecision {
        /// What was there instead.
        found: String,
    },

    /// No summary text in the output.
    #[error("no summary in the output")]
    NoSummary,

    /// The output repeats the prompt instead of answering it.
    #[error("the output copies the prompt")]
    CopiedPrompt,
}

impl ParseError {
    /// Whether the output was read but everything in it failed the checks (instance-bound,
    /// copied or over-long lessons; nothing kept), as opposed to an output that could not be
    /// read at all. Runs count the two apart: a rejection is the checks working, a parse
    /// failure is the model or the grammar failing.
    pub fn is_rejection(&self) -> bool {
        matches!(
            self,
            Self::AllDropped { .. } | Self::NothingKept { .. } | Self::CopiedPrompt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_went_wrong() {
        let error = ParseError::Syntax {
            at: 12,
            found: '@',
            expected: "a value",
        };
        assert_eq!(
            error.to_string(),
            "unreadable JSON at byte 12: found `@`, expected a value"
        );
        assert_eq!(
            ParseError::AllDropped { count: 3 }.to_string(),
            "all 3 items were dropped"
        );
        assert!(ParseError::AllDropped { count: 1 }.is_rejection());
        assert!(ParseError::NothingKept { proposals: 2 }.is_rejection());
        assert!(!ParseError::NoJson.is_rejection());
        assert!(
            !ParseError::NoOps {
                found: "a number".into()
            }
            .is_rejection()
        );
    }
}
