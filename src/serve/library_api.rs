//! The library API: reading is open, writing needs an API key.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/libraries` | every library: head version, root, active experiences |
//! | `GET /v1/libraries/{name}` | its versions (number, root, parent root, time, provenance, counts) |
//! | `GET /v1/libraries/{name}/versions/{version}` | one version: its record and its active experiences |
//! | `GET /v1/libraries/{name}/diff?from=A&to=B` | the composed ops from A to B |
//! | `GET /v1/libraries/{name}/proof/{id}?version=V` | a Merkle inclusion proof (default: the head) |
//! | `POST /v1/libraries/{name}/changes` | commit `{"changes": [...]}` as one version; `Authorization: Bearer KEY` |

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::error::ApiError;
use crate::library::{Change, ExperienceId, Library, LibraryError, Provenance, list_libraries};

/// Runs blocking library work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LibraryError> + Send + 'static,
) -> Result<T, ApiError> {
    Ok(tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::ShuttingDown)??)
}

fn version_summary(version: &crate::library::Version) -> Value {
    json!({
        "version": version.version,
        "root": version.root,
        "parent_root": version.parent_root,
        "created_at": version.created_at,
        "provenance": version.provenance,
        "count": version.count,
        "ops": version.ops.len(),
    })
}

pub async fn list(State(app): State<AppState>) -> Result<Json<Value>, ApiError> {
    let catalog = Arc::clone(&app.catalog);
    let libraries = blocking(move || {
        let mut out = Vec::new();
        for name in list_libraries(catalog.root())? {
            let head = catalog.read(&name, |library: &Library| {
                Ok(version_summary(library.head_record()))
            })?;
            out.push(json!({"name": name, "head": head}));
        }
        Ok(out)
    })
    .await?;
    Ok(Json(json!({"object": "list", "data": libraries})))
}

pub async fn versions(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let catalog = Arc::clone(&app.catalog);
    let versions = blocking(move || {
        catalog.read(&name, |library| {
            Ok(json!({
                "name": library.name(),
                "settings": {"max_words": library.settings().max_words},
                "versions": library.versions().iter().map(version_summary).collect::<Vec<_>>(),
            }))
        })
    })
    .await?;
    Ok(Json(versions))
}

pub async fn version(
    State(app): State<AppState>,
    path: Result<Path<(String, u64)>, axum::extract::rejection::PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let Path((name, number)) =
        path.map_err(|e| ApiError::bad(None, format!("a version is a number: {e}")))?;
    let catalog = Arc::clone(&app.catalog);
    let (record, snapshot) = blocking(move || {
        let record = catalog.read(&name, |library| Ok(library.version(number)?.clone()))?;
        let snapshot = catalog.get(&name, Some(number))?;
        Ok((record, snapshot))
    })
    .await?;
    let experiences: Vec<_> = snapshot.state.active().collect();
    Ok(Json(json!({
        "version": record,
        "experiences": experiences,
    })))
}

#[derive(Deserialize)]
pub struct DiffQuery {
    from: u64,
    to: u64,
}

pub async fn diff(
    State(app): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<DiffQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(DiffQuery { from, to }) =
        query.map_err(|e| ApiError::bad(None, format!("diff needs ?from=A&to=B: {e}")))?;
    let catalog = Arc::clone(&app.catalog);
    let ops = blocking(move || catalog.read(&name, |library| library.diff(from, to))).await?;
    Ok(Json(json!({"from": from, "to": to, "ops": ops})))
}

#[derive(Deserialize)]
pub struct ProofQuery {
    version: Option<u64>,
}

pub async fn proof(
    State(app): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    query: Result<Query<ProofQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(ProofQuery { version }) =
        query.map_err(|e| ApiError::bad(None, format!("bad query: {e}")))?;
    let id: ExperienceId = id
        .parse()
        .map_err(|e| ApiError::bad(None, format!("`{id}` is not an experience id: {e}")))?;
    let catalog = Arc::clone(&app.catalog);
    let proof = blocking(move || catalog.read(&name, |library| library.prove(id, version))).await?;
    Ok(Json(serde_json::to_value(proof).unwrap_or_default()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangesBody {
    changes: Vec<Change>,
}

pub async fn commit(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let author = app.keys.require(&headers, "writing to a library")?;
    let ChangesBody { changes } = serde_json::from_slice(&body).map_err(|error| {
        ApiError::bad(
            None,
            format!("the body must be {{\"changes\": [...]}} of library changes: {error}"),
        )
    })?;
    let provenance = Provenance::Manual {
        author: Some(author.to_owned()),
    };
    let catalog = Arc::clone(&app.catalog);
    let (version, governed) = tokio::task::spawn_blocking(move || {
        let version = catalog.commit(&name, &changes, provenance)?;
        Ok::<_, ApiError>((version, catalog.governed_head(&name)?))
    })
    .await
    .map_err(|_| ApiError::ShuttingDown)??;
    let mut summary = version_summary(&version);
    // A write bypasses the vote: say that it is not what requests get.
    if let Some(head) = governed {
        summary["served"] = json!(false);
        summary["governed_head"] = json!(head);
        summary["note"] = json!(format!(
            "this library is governed: requests get its governed head v{head} until `gym gov propose` puts v{} to a vote and `gym gov execute` adopts it",
            version.version
        ));
    }
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}
