//! Governance over HTTP, part of [`app`](super::app) (so the routes get the server's metrics,
//! body limit and request ids): proposals of the ledger in `--gov-dir`, their review diffs and
//! votes are readable; signed votes are submitted and verified by the server. Libraries are read
//! through the server's [`Catalog`](crate::retrieve::Catalog), like every other route; `gov` itself knows
//! nothing of HTTP.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/gov` | ledger id and its signed genesis message, rules, voters, governed heads |
//! | `GET /v1/gov/proposals` | every proposal with its state and tally |
//! | `GET /v1/gov/proposals/{id}` | the review: each changed experience with provenance |
//! | `GET /v1/gov/proposals/{id}/votes` | the votes and the execution, with signatures |
//! | `POST /v1/gov/proposals/{id}/votes` | a signed [`Ballot`] (from `gym gov vote --sign-only`) |
//!
//! A vote needs no API key: its EIP-191 signature by a voter is the credential, checked like
//! every other vote (forged, replayed, double, late and non-voter votes get 4xx with the
//! reason, and nothing is written).
//!
//! Execution is not offered over HTTP: it is `gym gov execute ID --key-file FILE` only. An
//! execution is signed by its executor over the ledger's head at the moment it is appended
//! ([`crate::gov::attest`]), so it is signed under the ledger's lock by a key the executing process
//! holds; the server holds no key and takes no unsigned execution.
//!
//! The JSON of a ledger these routes and the web pages' data (`web::data`) share is built once,
//! in [`view`].

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use serde_json::{Value, json};

pub mod view;

use super::{ApiError, AppState};
use crate::gov::review::review;
use crate::gov::{Ballot, GovError, Governance};

/// Ledger work on the blocking pool, its errors answered as [`ApiError`] says for them.
async fn ledger<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, GovError> + Send + 'static,
) -> Result<T, ApiError> {
    view::blocking(work).await
}

/// The governance routes of [`app`](super::app).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/gov", get(summary))
        .route("/v1/gov/proposals", get(list))
        .route("/v1/gov/proposals/{id}", get(show))
        .route("/v1/gov/proposals/{id}/votes", get(votes).post(submit))
}

async fn summary(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    ledger(move || {
        let governance = Governance::open(&app.config.gov_dir)?;
        let mut governed = serde_json::Map::new();
        for tracked in governance.proposals() {
            let library = &tracked.proposal.library;
            governed.insert(
                library.clone(),
                view::governed(&governance.governed(library)),
            );
        }
        let genesis = governance.genesis();
        Ok(Json(json!({
            "ledger_id": genesis.ledger_id,
            "initializer": genesis.initializer,
            "genesis_message": genesis.message(),
            "genesis_signature": genesis.signature,
            "rules": genesis.rules,
            "voters": genesis.voters,
            "total_weight": governance.total_weight(),
            "entries": governance.entries(),
            "head": governance.head_hash(),
            "governed": governed,
        })))
    })
    .await
}

async fn list(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    ledger(move || {
        let governance = Governance::open(&app.config.gov_dir)?;
        let now = Utc::now();
        let data: Vec<Value> = governance
            .proposals()
            .map(|tracked| {
                let mut row = view::proposal_row(&governance, tracked, now);
                row["new_root"] = json!(tracked.proposal.new_root);
                row["tally"] = json!(Governance::tally(tracked));
                row
            })
            .collect();
        Ok(Json(json!({"object": "list", "data": data})))
    })
    .await
}

async fn show(State(app): State<AppState>, Path(id): Path<u64>) -> Result<Json<Value>, ApiError> {
    ledger(move || {
        let governance = Governance::open(&app.config.gov_dir)?;
        let tracked = governance.proposal(id)?;
        let now = Utc::now();
        // Read through the server's catalog, like every other route.
        let review = app.catalog.read(&tracked.proposal.library, |library| {
            Ok(review(&governance, tracked, library, now))
        })??;
        Ok(Json(
            serde_json::to_value(review).expect("a review serializes"),
        ))
    })
    .await
}

async fn votes(State(app): State<AppState>, Path(id): Path<u64>) -> Result<Json<Value>, ApiError> {
    ledger(move || {
        let governance = Governance::open(&app.config.gov_dir)?;
        let tracked = governance.proposal(id)?;
        Ok(Json(json!({
            "proposal": id,
            "tally": Governance::tally(tracked),
            "votes": tracked.votes,
            "execution": tracked.execution,
        })))
    })
    .await
}

async fn submit(
    State(app): State<AppState>,
    Path(id): Path<u64>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let ballot: Ballot = serde_json::from_slice(&body).map_err(|error| {
        ApiError::bad(
            None,
            format!(
                "the body is not a signed ballot (proposal, voter, choice, signature): {error}"
            ),
        )
    })?;
    if ballot.proposal != id {
        return Err(ApiError::bad(
            "proposal",
            format!(
                "the ballot is for proposal {}, posted to proposal {id}",
                ballot.proposal
            ),
        ));
    }
    ledger(move || {
        let voted = Governance::vote(&app.config.gov_dir, &ballot, Utc::now())?;
        Ok((
            StatusCode::CREATED,
            Json(json!({
                "vote": voted.vote,
                "tally": voted.tally,
                "state": voted.state,
            })),
        ))
    })
    .await
}
