//! Stage 4: one lesson the step keeps, and the library's lessons about the same situation →
//! add it, update one of them with it, or it is the same as one of them.
//!
//! This is the reference method's per-experience decision (add / modify / none), and ACE's
//! merge-instead-of-drop. Before it, a new lesson whose embedding was within 0.9 of an
//! existing one was silently dropped, even when it said something the existing one lacked;
//! now such a near-duplicate can only refine the lesson it repeats (`update`) or confirm it
//! (`same`, recorded as an evidence-only update), and a lesson with no related lesson in the
//! library is added without asking the model.
//!
//! Which lessons are related is decided here from similarities the caller measures (MiniLM
//! cosine where an embedder is loaded, [`word_similarity`] otherwise): lessons of the same
//! topic, and lessons of any topic that are close ([`neighbours`]). A near-duplicate is one
//! within the duplicate threshold, whatever its topic. The rewrites this stage writes are
//! checked the same way after it (`run/distinct.rs`).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::DistillConfig;
use super::attempt::Call;
use super::error::ParseError;
use super::extract::CHARS_PER_WORD;
use super::json::extract_json;
use super::ops::{Rules, parse_id, read_ops};
use super::outcome::StageOutcome;
use super::prompt::{INTEGRATE, render};
use super::proposal::ProposedOp;
use super::text::normalize;
use crate::backend::Backend;
use crate::library::{DEFAULT_DOMAIN, ExperienceId, State};

/// Most related lessons shown with one candidate: enough to find the one it repeats, few
/// enough for a small model to compare.
pub const MOST_NEIGHBOURS: usize = 4;

/// Most characters of the `relation` the model writes before deciding.
const RELATION_MAX_CHARS: usize = 400;

/// A lesson of the library related to a candidate lesson.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    pub id: ExperienceId,
    pub text: String,
    /// Its domain, which for learned lessons is the topic they were learned under.
    pub topic: String,
    /// Cosine (or word) similarity to the candidate, in [-1, 1].
    pub similarity: f32,
    /// Whether it has the candidate's topic.
    pub same_topic: bool,
    /// Whether it is close enough to be the same lesson (see [`neighbours`]).
    pub near_duplicate: bool,
}

/// What stage 4 decided for one lesson.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Decision {
    /// A new lesson, as proposed.
    Add,
    /// Refine `id`: its new text keeps what both said.
    Update { id: ExperienceId, text: String },
    /// `id` already says it: its evidence grows, its text stays.
    Same { id: ExperienceId },
}

/// The lessons of `library` related to a candidate of `topic`, most similar first, at most
/// [`MOST_NEIGHBOURS`]. `similarities` gives each active lesson's similarity to the candidate,
/// in the order of `library.active()`.
///
/// Related: the same topic, or a similarity of at least `related`. A near-duplicate: a
/// similarity of at least `duplicate`, whatever the topics (see
/// [`crate::embed::DEFAULT_DUPLICATE_THRESHOLD`] for why a topic label cannot gate it).
pub fn neighbours(
    library: &State,
    topic: Option<&str>,
    similarities: &[f32],
    related: f32,
    duplicate: f32,
) -> Vec<Neighbour> {
    let topic = topic.map(normalize);
    let mut found: Vec<Neighbour> = library
        .active()
        .zip(similarities)
        .filter_map(|(experience, &similarity)| {
            let same_topic = topic
                .as_deref()
                .is_some_and(|t| normalize(&experience.domain) == t);
            let near_duplicate = is_near_duplicate(similarity, duplicate);
            (same_topic || similarity >= related).then(|| Neighbour {
                id: experience.id,
                text: experience.text.clone(),
                topic: experience.domain.clone(),
                similarity,
                same_topic,
                near_duplicate,
            })
        })
        .collect();
    found.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    // The near-duplicates always stay in view, whatever the cap.
    found.truncate(MOST_NEIGHBOURS.max(found.iter().filter(|n| n.near_duplicate).count()));
    found
}

/// Whether a lesson at `similarity` is the same lesson: at least `duplicate`, in any topic.
pub fn is_near_duplicate(similarity: f32, duplicate: f32) -> bool {
    similarity >= duplicate
}

/// Similarity of two texts by their words, for runs without an embedder: the Jaccard index of
/// their sets of normalized words of three letters or more, in [0, 1].
pub fn word_similarity(a: &str, b: &str) -> f32 {
    let words = |text: &str| -> std::collections::BTreeSet<String> {
        normalize(text)
            .split(' ')
            .filter(|w| w.chars().count() >= 3 && *w != "when")
            .map(str::to_owned)
            .collect()
    };
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f32 / union as f32
}

/// Decides what happens to `candidate` (an add) given its `neighbours`. With no neighbour the
/// answer is [`Decision::Add`] without a call. A reply that names a lesson not shown, or adds a
/// near-duplicate, is read as the closest sensible decision and the reason kept in `dropped`;
/// an unreadable reply is retried, and when every attempt fails the value is `None` (the caller
/// then adds the lesson, or confirms the near-duplicate it repeats).
pub async fn integrate(
    backend: &dyn Backend,
    candidate: &ProposedOp,
    neighbours: &[Neighbour],
    library: &State,
    cfg: &DistillConfig,
) -> StageOutcome<Decision> {
    if neighbours.is_empty() {
        return StageOutcome {
            value: Some(Decision::Add),
            ..StageOutcome::default()
        };
    }
    let call = Call {
        backend,
        prompt: integrate_prompt(candidate, neighbours, cfg),
        schema: integrate_schema(neighbours, cfg),
        sampling: cfg.sampling.clone(),
        attempts: cfg.attempts,
        salt: format!("integrate/{}", candidate.describe()),
    };
    let rules = Rules {
        library,
        max_words: cfg.max_words,
        template: INTEGRATE,
        problem: None,
        first_sentence: true,
    };
    call.run(|output, dropped| read_decision(output, neighbours, &rules, dropped))
        .await
}

fn read_decision(
    output: &str,
    neighbours: &[Neighbour],
    rules: &Rules<'_>,
    dropped: &mut Vec<String>,
) -> Result<Decision, ParseError> {
    let value = extract_json(output)?.value;
    let Some(map) = value.as_object() else {
        return Err(ParseError::NoDecision {
            found: "no object".into(),
        });
    };
    let word = ["decision", "op", "action", "choice"]
        .iter()
        .find_map(|key| map.get(*key).and_then(Value::as_str))
        .map(normalize)
        .unwrap_or_default();
    let named = ["id", "target", "lesson"]
        .iter()
        .find_map(|key| map.get(*key))
        .and_then(|id| match id {
            Value::String(text) => parse_id(text),
            Value::Number(n) => n.as_u64().and_then(|n| ExperienceId::new(n as u32)),
            _ => None,
        });
    let shown = |id: ExperienceId| neighbours.iter().any(|n| n.id == id);
    // The lesson a reply means when it names none, or one it was not shown: the closest.
    let closest = neighbours[0].id;
    let target = match named {
        Some(id) if shown(id) => id,
        Some(id) => {
            dropped.push(format!(
                "names {id}, which was not shown; read as {closest}"
            ));
            closest
        }
        None => closest,
    };
    let near_duplicate = neighbours.iter().any(|n| n.near_duplicate);
    match word.split(' ').next().unwrap_or_default() {
        "add" | "new" | "keep" | "different" => {
            if near_duplicate {
                let twin = neighbours.iter().find(|n| n.near_duplicate).map(|n| n.id);
                let twin = twin.unwrap_or(closest);
                dropped.push(format!(
                    "add of a near-duplicate of {twin}; read as the same as {twin}"
                ));
                Ok(Decision::Same { id: twin })
            } else {
                Ok(Decision::Add)
            }
        }
        "same" | "none" | "duplicate" | "covered" | "skip" | "nothing" => {
            Ok(Decision::Same { id: target })
        }
        "update" | "merge" | "refine" | "modify" | "edit" | "rewrite" => {
            let mut op = map.clone();
            op.insert("op".into(), json!("update"));
            op.insert("id".into(), json!(target.to_string()));
            let read = read_ops(&Value::Object(op).to_string(), rules, false, dropped)?;
            match read.items.into_iter().next().map(|item| item.op) {
                Some(ProposedOp::Update { id, text }) => Ok(Decision::Update { id, text }),
                _ => Err(ParseError::AllDropped { count: 1 }),
            }
        }
        other => Err(ParseError::NoDecision {
            found: if other.is_empty() {
                "no decision".to_owned()
            } else {
                format!("the decision `{other}`")
            },
        }),
    }
}

/// The stage 4 prompt: the candidate, then its neighbours as `[E0003] (topic) text` lines.
pub fn integrate_prompt(
    candidate: &ProposedOp,
    neighbours: &[Neighbour],
    cfg: &DistillConfig,
) -> String {
    let topic = candidate.topic().unwrap_or(DEFAULT_DOMAIN);
    let text = candidate.text().unwrap_or_default();
    let listed: Vec<String> = neighbours
        .iter()
        .map(|n| format!("[{}] (topic: {}) {}", n.id, n.topic, n.text))
        .collect();
    render(
        INTEGRATE,
        &[
            ("candidate", &format!("(topic: {topic}) {text}")),
            ("neighbours", &listed.join("\n")),
            ("max_words", &cfg.max_words.to_string()),
        ],
    )
}

/// `{"relation": "…", "decision": "add"}`, `{"relation", "decision": "update", "id", "when",
/// "do"}` or `{"relation", "decision": "same", "id"}`, where ids are the neighbours'. `add` is
/// not offered when a neighbour is a near-duplicate: such a lesson refines or confirms the
/// lesson it repeats, and is never dropped.
pub fn integrate_schema(neighbours: &[Neighbour], cfg: &DistillConfig) -> Value {
    let ids: Vec<String> = neighbours.iter().map(|n| n.id.to_string()).collect();
    let relation = json!({"type": "string", "minLength": 5, "maxLength": RELATION_MAX_CHARS});
    let part = |share: usize| {
        json!({
            "type": "string",
            "minLength": 5,
            "maxLength": cfg.max_words.max(1) * CHARS_PER_WORD * share / 4
        })
    };
    let variant = |decision: &str, with_id: bool, with_text: bool| {
        // The grammar writes required keys in this order: the relation, the decision, then
        // what the decision needs.
        let mut properties = serde_json::Map::new();
        let mut required = vec!["relation", "decision"];
        properties.insert("relation".into(), relation.clone());
        properties.insert("decision".into(), json!({"const": decision}));
        if with_id {
            properties.insert("id".into(), json!({"enum": ids}));
            required.push("id");
        }
        if with_text {
            properties.insert("when".into(), part(2));
            properties.insert("do".into(), part(3));
            required.extend(["when", "do"]);
        }
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        })
    };
    let mut variants = Vec::new();
    if !neighbours.iter().any(|n| n.near_duplicate) {
        variants.push(variant("add", false, false));
    }
    variants.push(variant("update", true, true));
    variants.push(variant("same", true, false));
    json!({"anyOf": variants})
}

#[cfg(test)]
#[path = "integrate_tests.rs"]
mod tests;
