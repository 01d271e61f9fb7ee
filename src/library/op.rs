//! Library ops: what a version records (`Op`) and what a caller asks for (`Change`).

use serde::{Deserialize, Serialize};

use super::error::OpError;
use super::id::ExperienceId;
use super::record::Evidence;

/// One recorded change to a library, as stored in a version file.
///
/// Every op names its experience by id and carries the full new content, so a version can be
/// replayed, diffed and reviewed without looking anything else up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// A new experience (or, in a diff that goes backwards, one that comes back).
    Add {
        /// Id assigned by the library.
        id: ExperienceId,
        /// Text of the experience.
        text: String,
        /// Domain tag.
        domain: String,
        /// Confidence in `0..=1`.
        confidence: f64,
        /// Why it was added.
        #[serde(default, skip_serializing_if = "Evidence::is_empty")]
        evidence: Evidence,
    },
    /// New content for an existing experience.
    Update {
        /// The experience changed.
        id: ExperienceId,
        /// Its new text.
        text: String,
        /// Its new domain.
        domain: String,
        /// Its new confidence.
        confidence: f64,
        /// Why it was changed.
        #[serde(default, skip_serializing_if = "Evidence::is_empty")]
        evidence: Evidence,
    },
    /// The experience leaves the library; its id is never reused.
    Delete {
        /// The experience removed.
        id: ExperienceId,
        /// Why it was removed, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Op {
    /// The experience the op touches.
    pub fn id(&self) -> ExperienceId {
        match self {
            Self::Add { id, .. } | Self::Update { id, .. } | Self::Delete { id, .. } => *id,
        }
    }

    /// Checks the content of a recorded op against `limits`, as [`Change`]s are checked; texts
    /// and domains must already be trimmed.
    pub fn check_content(&self, limits: Limits) -> Result<(), OpError> {
        match self {
            Self::Add {
                text,
                domain,
                confidence,
                ..
            }
            | Self::Update {
                text,
                domain,
                confidence,
                ..
            } => {
                if limits.check_text(text)? != *text {
                    return Err(OpError::Untrimmed { field: "text" });
                }
                if check_domain(domain)? != *domain {
                    return Err(OpError::Untrimmed { field: "domain" });
                }
                check_confidence(*confidence).map(drop)
            }
            Self::Delete { .. } => Ok(()),
        }
    }

    /// `add`, `update` or `delete`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Add { .. } => "add",
            Self::Update { .. } => "update",
            Self::Delete { .. } => "delete",
        }
    }
}

/// A change a caller asks the library to make; the library turns it into an [`Op`].
///
/// `Add` carries no id (the library assigns the next one); `Update` may leave fields out to keep
/// their current value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// Add a new experience.
    Add {
        /// Its text.
        text: String,
        /// Its domain (default `general`).
        #[serde(default)]
        domain: Option<String>,
        /// Its confidence (default 0.5).
        #[serde(default)]
        confidence: Option<f64>,
        /// Why.
        #[serde(default)]
        evidence: Evidence,
    },
    /// Change an active experience.
    Update {
        /// Which one.
        id: ExperienceId,
        /// New text, or keep the current one.
        #[serde(default)]
        text: Option<String>,
        /// New domain, or keep the current one.
        #[serde(default)]
        domain: Option<String>,
        /// New confidence, or keep the current one.
        #[serde(default)]
        confidence: Option<f64>,
        /// Why.
        #[serde(default)]
        evidence: Evidence,
    },
    /// Remove an active experience.
    Delete {
        /// Which one.
        id: ExperienceId,
        /// Why.
        #[serde(default)]
        reason: Option<String>,
    },
}

impl Change {
    /// Add `text` with the default domain and confidence.
    pub fn add(text: impl Into<String>) -> Self {
        Self::Add {
            text: text.into(),
            domain: None,
            confidence: None,
            evidence: Evidence::default(),
        }
    }

    /// Replace the text of `id`.
    pub fn update_text(id: ExperienceId, text: impl Into<String>) -> Self {
        Self::Update {
            id,
            text: Some(text.into()),
            domain: None,
            confidence: None,
            evidence: Evidence::default(),
        }
    }

    /// Delete `id`.
    pub fn delete(id: ExperienceId) -> Self {
        Self::Delete { id, reason: None }
    }

    /// The experience an update or delete acts on (`None` for an add).
    pub fn target(&self) -> Option<ExperienceId> {
        match self {
            Self::Add { .. } => None,
            Self::Update { id, .. } | Self::Delete { id, .. } => Some(*id),
        }
    }
}

/// Limits the library enforces on the content of ops it is asked to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most words in an experience's text.
    pub max_words: usize,
}

/// Longest domain tag, in characters.
pub const MAX_DOMAIN_CHARS: usize = 64;

impl Limits {
    /// Checks a text and returns it with surrounding whitespace removed.
    ///
    /// A text over the limit is an error, never truncated: a cut-off experience can say the
    /// opposite of what was meant.
    pub fn check_text(&self, text: &str) -> Result<String, OpError> {
        let text = one_line("text", text, OpError::EmptyText)?;
        let words = text.split_whitespace().count();
        if words > self.max_words {
            return Err(OpError::TextTooLong {
                words,
                max_words: self.max_words,
                text: text.to_owned(),
            });
        }
        Ok(text.to_owned())
    }
}

/// Trims `value` and checks it is a non-empty single line.
fn one_line<'a>(field: &'static str, value: &'a str, empty: OpError) -> Result<&'a str, OpError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(empty);
    }
    match value.chars().find(|c| c.is_control()) {
        Some(character) => Err(OpError::ControlCharacter { field, character }),
        None => Ok(value),
    }
}

/// Checks a domain tag and returns it trimmed.
pub fn check_domain(domain: &str) -> Result<String, OpError> {
    let domain = one_line("domain", domain, OpError::EmptyDomain)?;
    let chars = domain.chars().count();
    if chars > MAX_DOMAIN_CHARS {
        return Err(OpError::DomainTooLong {
            chars,
            max_chars: MAX_DOMAIN_CHARS,
        });
    }
    Ok(domain.to_owned())
}

/// Checks a confidence value.
pub fn check_confidence(confidence: f64) -> Result<f64, OpError> {
    if confidence.is_finite() && (0.0..=1.0).contains(&confidence) {
        Ok(confidence)
    } else {
        Err(OpError::ConfidenceOutOfRange { confidence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_words: 5 };

    #[test]
    fn text_at_the_limit_passes_trimmed() {
        assert_eq!(
            LIMITS.check_text("  one two three four five \n").unwrap(),
            "one two three four five"
        );
    }

    #[test]
    fn text_over_the_limit_is_an_error_not_a_truncation() {
        let error = LIMITS
            .check_text("one two three four five six")
            .unwrap_err();
        assert!(matches!(
            error,
            OpError::TextTooLong {
                words: 6,
                max_words: 5,
                ..
            }
        ));
        assert!(error.to_string().contains("6 words"), "{error}");
    }

    #[test]
    fn empty_and_multi_line_texts_are_errors() {
        assert!(matches!(LIMITS.check_text("   "), Err(OpError::EmptyText)));
        assert!(matches!(
            LIMITS.check_text("line one\nline two"),
            Err(OpError::ControlCharacter { field: "text", .. })
        ));
    }

    #[test]
    fn confidence_must_be_a_probability() {
        assert!(check_confidence(0.0).is_ok() && check_confidence(1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(check_confidence(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ops_serialize_with_a_tag_and_without_empty_fields() {
        let op = Op::Delete {
            id: ExperienceId::new(3).unwrap(),
            reason: None,
        };
        assert_eq!(
            serde_json::to_string(&op).unwrap(),
            r#"{"op":"delete","id":"E0003"}"#
        );
    }

    #[test]
    fn unknown_fields_in_ops_are_rejected() {
        let parsed: Result<Op, _> =
            serde_json::from_str(r#"{"op":"delete","id":"E0003","extra":1}"#);
        assert!(parsed.is_err());
    }
}
