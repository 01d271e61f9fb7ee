//! The governance JSON that the `/v1/gov` routes and the web pages' data routes (`web::data`)
//! share, built here once: a governed head, a proposal's row in a list, a tally as the pages
//! show it, the words for a proposal's state, and the ledger's work run on the blocking pool
//! with its errors answered in HTTP.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::gov::{Governance, Governed, ProposalState, SUPERMAJORITY_PERCENT, Tally, Tracked};
use crate::serve::ApiError;

/// `work` (reading the ledger or a library) on the blocking pool; its error answered as
/// [`ApiError`] says for it.
pub async fn blocking<T: Send + 'static, E: Into<ApiError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::ShuttingDown)?
        .map_err(Into::into)
}

/// A library's governed head: its version, root and the proposal that adopted it.
pub fn governed(head: &Governed) -> Value {
    json!({"version": head.version, "root": head.root, "proposal": head.proposal})
}

/// What every list of proposals says of one: who proposed what change of which library, until
/// when, and its state at `now`.
pub fn proposal_row(governance: &Governance, tracked: &Tracked, now: DateTime<Utc>) -> Value {
    let p = &tracked.proposal;
    json!({
        "id": p.id,
        "title": p.title,
        "library": p.library,
        "author": p.author,
        "base_version": p.base_version,
        "new_version": p.new_version,
        "deadline": p.deadline,
        "state": governance.state(tracked, now),
    })
}

/// The words the pages show for a state: open, accepted, rejected, executed, stale.
pub fn status_label(state: ProposalState) -> &'static str {
    match state {
        ProposalState::Active => "open",
        ProposalState::Succeeded => "accepted",
        ProposalState::Defeated => "rejected",
        ProposalState::Executed => "executed",
        ProposalState::Stale => "stale",
    }
}

/// A tally with what the pages draw from it: votes cast, the percentage for, and whether the
/// quorum and the 66 % rule are met.
pub fn tally(tally: Tally) -> Value {
    json!({
        "yes": tally.yes,
        "no": tally.no,
        "cast": tally.cast(),
        "total": tally.total,
        "quorum": tally.quorum,
        "yes_percent": tally.yes_percent(),
        "needed_percent": SUPERMAJORITY_PERCENT,
        "quorum_met": tally.cast() >= tally.quorum,
        "passes": tally.accepted(),
    })
}
