//! What the stages propose: ops on the library, with the evidence behind them.

use serde::{Deserialize, Serialize};

use crate::library::{Evidence, ExperienceId};
use crate::rollout::RolloutGroup;

/// One change a stage proposes. Unlike [`crate::library::Change`] it names no domain or
/// confidence: the model is only asked for the text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum ProposedOp {
    /// A new experience.
    Add {
        /// `When <condition>, <strategy>.`
        text: String,
        /// The kind of situation it covers, in a few words ("remainders", "percent change"):
        /// it becomes the experience's domain, and near-duplicates are looked for among
        /// lessons of the same topic first. Absent in journals written before topics.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        topic: Option<String>,
    },
    /// A new text for an active experience.
    Update {
        /// Which experience.
        id: ExperienceId,
        /// Its new text.
        text: String,
    },
    /// Remove an active experience.
    Delete {
        /// Which experience.
        id: ExperienceId,
    },
}

impl ProposedOp {
    /// A new experience without a topic.
    pub fn add(text: impl Into<String>) -> Self {
        Self::Add {
            text: text.into(),
            topic: None,
        }
    }

    /// The topic of an add.
    pub fn topic(&self) -> Option<&str> {
        match self {
            Self::Add { topic, .. } => topic.as_deref(),
            _ => None,
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

    /// The experience the op touches; adds have none yet.
    pub fn id(&self) -> Option<ExperienceId> {
        match self {
            Self::Add { .. } => None,
            Self::Update { id, .. } | Self::Delete { id } => Some(*id),
        }
    }

    /// The text the op writes; deletes write none.
    pub fn text(&self) -> Option<&str> {
        match self {
            Self::Add { text, .. } | Self::Update { text, .. } => Some(text),
            Self::Delete { .. } => None,
        }
    }

    /// One line for prompts and logs: `add: When …`, `update E0003: When …`, `delete E0003`.
    pub fn describe(&self) -> String {
        match self {
            Self::Add { text, .. } => format!("add: {text}"),
            Self::Update { id, text } => format!("update {id}: {text}"),
            Self::Delete { id } => format!("delete {id}"),
        }
    }
}

/// A proposed op and the groups that led to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub op: ProposedOp,
    /// Query ids and group rewards behind the op.
    #[serde(default, skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
}

impl Proposal {
    /// `op`, as proposed from `group`.
    pub fn from_group(op: ProposedOp, group: &RolloutGroup) -> Self {
        Self {
            op,
            evidence: group_evidence(group),
        }
    }
}

/// The evidence one group gives: its query id and its answers' rewards.
pub fn group_evidence(group: &RolloutGroup) -> Evidence {
    Evidence {
        query_ids: vec![group.sample_id.clone()],
        group_rewards: group.rewards().collect(),
    }
}

/// Adds `other` to `into`. Evidence lists rewards flat, per group, so a group whose queries are
/// all there already is not added twice (two ops from one group carry the same evidence).
pub fn union_evidence(into: &mut Evidence, other: &Evidence) {
    let new: Vec<&String> = other
        .query_ids
        .iter()
        .filter(|id| !into.query_ids.contains(id))
        .collect();
    if new.is_empty() && !other.query_ids.is_empty() {
        return;
    }
    if new.is_empty() && into == other {
        return;
    }
    into.query_ids.extend(new.into_iter().cloned());
    into.group_rewards.extend_from_slice(&other.group_rewards);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(ids: &[&str], rewards: &[f64]) -> Evidence {
        Evidence {
            query_ids: ids.iter().map(|&id| id.to_owned()).collect(),
            group_rewards: rewards.to_vec(),
        }
    }

    #[test]
    fn ops_serialize_tagged_and_read_back() {
        let id = ExperienceId::new(3).unwrap();
        let ops = [
            ProposedOp::Add {
                text: "When a, b.".into(),
                topic: None,
            },
            ProposedOp::Update {
                id,
                text: "When c, d.".into(),
            },
            ProposedOp::Delete { id },
        ];
        let json = serde_json::to_string(&ops).unwrap();
        assert_eq!(
            json,
            r#"[{"op":"add","text":"When a, b."},{"op":"update","id":"E0003","text":"When c, d."},{"op":"delete","id":"E0003"}]"#
        );
        let back: Vec<ProposedOp> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ops);
        assert_eq!(ops[1].describe(), "update E0003: When c, d.");
        assert_eq!((ops[2].kind(), ops[2].text()), ("delete", None));
    }

    #[test]
    fn evidence_of_one_group_is_counted_once() {
        let mut into = evidence(&["q1"], &[1.0, 0.0]);
        union_evidence(&mut into, &evidence(&["q1"], &[1.0, 0.0]));
        assert_eq!(into, evidence(&["q1"], &[1.0, 0.0]));
        union_evidence(&mut into, &evidence(&["q2"], &[0.0, 1.0]));
        assert_eq!(into, evidence(&["q1", "q2"], &[1.0, 0.0, 0.0, 1.0]));
        let mut empty = Evidence::default();
        union_evidence(&mut empty, &evidence(&["q3"], &[1.0]));
        assert_eq!(empty, evidence(&["q3"], &[1.0]));
    }
}
