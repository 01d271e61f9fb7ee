//! The JSON the pages draw, assembled from the ledger and the library files.
//!
//! | route | what |
//! |---|---|
//! | `GET /gov/data/proposals` | rules, and every proposal with its status and tally |
//! | `GET /gov/data/proposals/{id}` | the review, word diffs, each touching version's provenance, votes with weights and voter names, the exact messages a vote signs, the chain anchor |
//! | `GET /libraries/data/{name}` | every version with its ops and provenance, every experience ever in it |
//! | `GET /libraries/data/{name}/diff?from=A&to=B` | the composed diff with old and new content and word diffs |
//! | `GET /libraries/data/{name}/experiences/{id}` | one experience's history, version by version |
//!
//! Libraries are read through the server's [`Catalog`](crate::retrieve::Catalog) in its
//! [`AppState`], the ledger in its `--gov-dir`; the JSON of proposals, tallies and governed
//! heads is the one [`view`] the `/v1/gov` routes answer with. Everything here reads files on
//! the blocking pool; every request's work is bounded by the size of the ledger and the
//! library it names.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::words;
use crate::gov::governance::Governance;
use crate::gov::review::review;
use crate::gov::{Choice, ProposalState, SUPERMAJORITY_PERCENT, Tracked};
use crate::library::{ExperienceId, Library, LibraryError, Op, State as LibraryState};
use crate::serve::governance::view::{self, blocking, status_label};
use crate::serve::{ApiError, AppState};

fn gov_open(app: &AppState) -> Result<Governance, ApiError> {
    Ok(Governance::open(&app.config.gov_dir)?)
}

/// `GET /gov/data/proposals`.
pub async fn proposals(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    blocking(move || {
        let governance = gov_open(&app)?;
        let now = Utc::now();
        let genesis = governance.genesis();
        let list: Vec<Value> = governance
            .proposals()
            .rev()
            .map(|tracked| {
                let mut row = view::proposal_row(&governance, tracked, now);
                row["status"] = json!(status_label(governance.state(tracked, now)));
                row["votes"] = json!(tracked.votes.len());
                row["tally"] = view::tally(Governance::tally(tracked));
                row
            })
            .collect();
        Ok::<_, ApiError>(Json(json!({
            "ledger_id": genesis.ledger_id,
            "rules": genesis.rules,
            "supermajority_percent": SUPERMAJORITY_PERCENT,
            "total_weight": governance.total_weight(),
            "voters": genesis.voters.len(),
            "proposals": list,
        })))
    })
    .await
}

/// `GET /gov/data/proposals/{id}`.
pub async fn proposal(
    State(app): State<AppState>,
    path: Result<Path<u64>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path(id) =
        path.map_err(|e| ApiError::bad(None, format!("a proposal id is a number: {e}")))?;
    let blocking_app = app.clone();
    let (mut page, library, governed) = blocking(move || {
        let app = blocking_app;
        let governance = gov_open(&app)?;
        let tracked = governance.proposal(id)?;
        let name = tracked.proposal.library.clone();
        let page = app.catalog.read(&name, |library| {
            Ok(review_page(&governance, tracked, library, Utc::now()))
        })??;
        let governed = governance.governed(&name);
        Ok::<_, ApiError>((page, name, governed))
    })
    .await?;
    page["anchor"] = super::anchor::status(&app.config, &library, governed).await;
    Ok(Json(page))
}

/// The review page's data: the review with word diffs, the provenance of each version it
/// touches, the votes and voters, and the exact messages a vote signs.
fn review_page(
    governance: &Governance,
    tracked: &Tracked,
    library: &Library,
    now: chrono::DateTime<Utc>,
) -> Result<Value, ApiError> {
    let review = review(governance, tracked, library, now)?;
    let mut versions = BTreeMap::new();
    let mut items = Vec::new();
    for item in &review.items {
        for step in &item.history {
            if let Ok(version) = library.version(step.version) {
                versions.insert(
                    step.version,
                    json!({"created_at": version.created_at, "provenance": version.provenance}),
                );
            }
        }
        let mut value = serde_json::to_value(item).expect("an item serializes");
        if let (Some(old), Some(new)) = (&item.old, &item.new) {
            value["words"] = json!(words::diff(&old.text, &new.text));
        }
        items.push(value);
    }
    let names: BTreeMap<_, _> = governance
        .genesis()
        .voters
        .iter()
        .map(|v| (v.address, v))
        .collect();
    let votes: Vec<Value> = tracked
        .votes
        .iter()
        .map(|vote| {
            json!({
                "voter": vote.ballot.voter,
                "name": names.get(&vote.ballot.voter).and_then(|v| v.name.clone()),
                "choice": vote.ballot.choice,
                "weight": vote.weight,
                "received_at": vote.received_at,
                "signature": vote.ballot.signature,
            })
        })
        .collect();
    let voters: Vec<Value> = governance
        .genesis()
        .voters
        .iter()
        .map(|voter| {
            let cast = tracked
                .votes
                .iter()
                .find(|v| v.ballot.voter == voter.address);
            json!({
                "address": voter.address,
                "name": voter.name,
                "weight": voter.weight,
                "voted": cast.map(|v| v.ballot.choice),
            })
        })
        .collect();
    let current = review.state;
    let messages = json!({
        "yes": governance.subject(tracked, Choice::Yes).message(),
        "no": governance.subject(tracked, Choice::No).message(),
    });
    let mut review_value = serde_json::to_value(&review).expect("a review serializes");
    review_value["items"] = Value::Array(items);
    let governed = governance.governed(&tracked.proposal.library);
    Ok(json!({
        "ledger_id": governance.genesis().ledger_id,
        "rules": governance.genesis().rules,
        "review": review_value,
        "status": status_label(current),
        "open": matches!(current, ProposalState::Active | ProposalState::Succeeded)
            && now < tracked.proposal.deadline,
        "tally": view::tally(review.tally),
        "versions": versions,
        "votes": votes,
        "voters": voters,
        "messages": messages,
        "execution": tracked.execution,
        "governed": view::governed(&governed),
    }))
}

/// `GET /libraries/data/{name}`.
pub async fn library(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let governed = {
        let dir = app.config.gov_dir.clone();
        let name = name.clone();
        tokio::task::spawn_blocking(move || Governance::open(&dir).ok().map(|g| g.governed(&name)))
            .await
            .ok()
            .flatten()
    };
    blocking(move || {
        app.catalog.read(&name, |library| {
            let versions: Vec<Value> = library
                .versions()
                .iter()
                .rev()
                .map(|version| {
                    json!({
                        "version": version.version,
                        "created_at": version.created_at,
                        "provenance": version.provenance,
                        "summary": version.provenance.summary(),
                        "ops": version.ops,
                        "count": version.count,
                        "root": version.root,
                        "parent_root": version.parent_root,
                    })
                })
                .collect();
            let experiences: Vec<Value> = library
                .head()
                .all()
                .map(
                    |e| json!({"id": e.id, "text": e.text, "status": e.status, "domain": e.domain}),
                )
                .collect();
            Ok(Json(json!({
                "name": library.name(),
                "head": library.head_version(),
                "max_words": library.settings().max_words,
                "governed": governed.as_ref().map(view::governed),
                "versions": versions,
                "experiences": experiences,
            })))
        })
    })
    .await
}

/// `?from=A&to=B`.
#[derive(Deserialize)]
pub struct DiffQuery {
    from: u64,
    to: u64,
}

fn side(state: &LibraryState, id: ExperienceId) -> Option<Value> {
    state
        .get_active(id)
        .map(|e| json!({"text": e.text, "domain": e.domain, "confidence": e.confidence}))
}

/// `GET /libraries/data/{name}/diff?from=A&to=B`.
pub async fn diff(
    State(app): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<DiffQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(DiffQuery { from, to }) = query.map_err(|e| {
        ApiError::bad(
            None,
            format!("a diff needs ?from=A&to=B (version numbers): {e}"),
        )
    })?;
    blocking(move || {
        app.catalog.read(&name, |library| {
            let before = library.checkout(from)?;
            let after = library.checkout(to)?;
            let (low, high) = (from.min(to), from.max(to));
            let mut items = Vec::new();
            for op in crate::library::diff(&before, &after) {
                let id = op.id();
                let (old, new) = (side(&before, id), side(&after, id));
                let words = match (&old, &new) {
                    (Some(old), Some(new)) => json!(words::diff(
                        old["text"].as_str().unwrap_or_default(),
                        new["text"].as_str().unwrap_or_default()
                    )),
                    _ => Value::Null,
                };
                let reason = library
                    .history(id)
                    .into_iter()
                    .rev()
                    .find(|(v, op)| {
                        v.version > low && v.version <= high && matches!(op, Op::Delete { .. })
                    })
                    .and_then(|(_, op)| match op {
                        Op::Delete { reason, .. } => reason.clone(),
                        _ => None,
                    });
                items.push(json!({
                    "id": id, "change": op.kind(), "old": old, "new": new, "words": words,
                    "reason": if op.kind() == "delete" { json!(reason) } else { Value::Null },
                }));
            }
            Ok(Json(json!({
                "name": library.name(),
                "from": from,
                "to": to,
                "from_root": library.version(from)?.root,
                "to_root": library.version(to)?.root,
                "items": items,
            })))
        })
    })
    .await
}

/// `GET /libraries/data/{name}/experiences/{id}`.
pub async fn experience(
    State(app): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id: ExperienceId = id.parse().map_err(|e| {
        ApiError::bad(
            None,
            format!("`{id}` is not an experience id like E0001: {e}"),
        )
    })?;
    blocking(move || {
        app.catalog.read(&name, |library| {
            let current = library
                .head()
                .get(id)
                .ok_or_else(|| LibraryError::NotActive {
                    library: name.clone(),
                    id,
                    version: library.head_version(),
                })?;
            let mut previous: Option<String> = None;
            let mut last_active = None;
            let mut history = Vec::new();
            for (version, op) in library.history(id) {
                let (text, words) = match op {
                    Op::Add { text, .. } | Op::Update { text, .. } => {
                        let words = previous.as_deref().map(|old| words::diff(old, text));
                        (Some(text.clone()), words)
                    }
                    Op::Delete { .. } => (None, None),
                };
                history.push(json!({
                    "version": version.version,
                    "created_at": version.created_at,
                    "provenance": version.provenance,
                    "summary": version.provenance.summary(),
                    "op": op,
                    "old": previous,
                    "words": words,
                }));
                previous = text;
            }
            if current.is_active() {
                last_active = Some(library.head_version());
            } else if current.updated_in > 0 {
                last_active = Some(current.updated_in - 1);
            }
            Ok(Json(json!({
                "name": library.name(),
                "id": id,
                "experience": current,
                "usage": library.usage().get(&id).copied().unwrap_or_default(),
                "history": history,
                "last_active_version": last_active,
                "head": library.head_version(),
            })))
        })
    })
    .await
}
