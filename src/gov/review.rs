//! A proposal as a reviewer reads it: each added, updated (old → new) or deleted experience,
//! with the versions, runs and steps that changed it, the queries and group rewards behind
//! each change, how often it was injected and how it fared, and its measured credit.

use std::fmt::Write as _;

use serde::Serialize;

use super::error::GovError;
use super::governance::{Governance, Tracked};
use super::tally::{ProposalState, Tally};
use crate::library::{Evidence, ExperienceId, Library, Op, Usage};

/// One experience's content on one side of the diff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Content {
    /// The text.
    pub text: String,
    /// The domain.
    pub domain: String,
    /// The confidence.
    pub confidence: f64,
}

/// One version between the base and the proposal that touched the experience.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// The version.
    pub version: u64,
    /// `add`, `update` or `delete`.
    pub op: &'static str,
    /// Who or what made it (`run R epoch E step S`, `manual by …`, `import …`).
    pub source: String,
    /// The queries and group rewards behind the op.
    #[serde(skip_serializing_if = "Evidence::is_empty")]
    pub evidence: Evidence,
    /// A delete's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One experience the proposal changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    /// The experience.
    pub id: ExperienceId,
    /// `add`, `update` or `delete`.
    pub change: &'static str,
    /// Before (absent for an add).
    pub old: Option<Content>,
    /// After (absent for a delete).
    pub new: Option<Content>,
    /// The versions in the proposal's range that touched it, oldest first.
    pub history: Vec<Step>,
    /// How it has fared in use so far, with its credit once measured.
    pub usage: Usage,
}

/// A proposal with its tally and items.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Review {
    /// The proposal id.
    pub id: u64,
    /// The library.
    pub library: String,
    /// Title.
    pub title: String,
    /// Rationale.
    pub rationale: String,
    /// Author.
    pub author: String,
    /// Base version and root.
    pub base_version: u64,
    /// Base root.
    pub base_root: String,
    /// Proposed version.
    pub new_version: u64,
    /// Proposed root.
    pub new_root: String,
    /// Deadline (RFC 3339).
    pub deadline: String,
    /// State now.
    pub state: ProposalState,
    /// Votes so far.
    pub tally: Tally,
    /// The changed experiences.
    pub items: Vec<Item>,
}

fn content(text: &str, domain: &str, confidence: f64) -> Content {
    Content {
        text: text.to_owned(),
        domain: domain.to_owned(),
        confidence,
    }
}

/// Builds the review of `tracked` from the library it changes, at `now`.
pub fn review(
    governance: &Governance,
    tracked: &Tracked,
    library: &Library,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Review, GovError> {
    let proposal = &tracked.proposal;
    let before = library.checkout(proposal.base_version)?;
    let mut items = Vec::new();
    for op in &proposal.ops {
        let id = op.id();
        let old = before
            .get_active(id)
            .map(|e| content(&e.text, &e.domain, e.confidence));
        let new = match op {
            Op::Add {
                text,
                domain,
                confidence,
                ..
            }
            | Op::Update {
                text,
                domain,
                confidence,
                ..
            } => Some(content(text, domain, *confidence)),
            Op::Delete { .. } => None,
        };
        let history = library
            .history(id)
            .into_iter()
            .filter(|(version, _)| {
                version.version > proposal.base_version && version.version <= proposal.new_version
            })
            .map(|(version, op)| Step {
                version: version.version,
                op: op.kind(),
                source: version.provenance.summary(),
                evidence: match op {
                    Op::Add { evidence, .. } | Op::Update { evidence, .. } => evidence.clone(),
                    Op::Delete { .. } => Evidence::default(),
                },
                reason: match op {
                    Op::Delete { reason, .. } => reason.clone(),
                    _ => None,
                },
            })
            .collect();
        items.push(Item {
            id,
            change: op.kind(),
            old,
            new,
            history,
            usage: library.usage().get(&id).copied().unwrap_or_default(),
        });
    }
    let time =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Ok(Review {
        id: proposal.id,
        library: proposal.library.clone(),
        title: proposal.title.clone(),
        rationale: proposal.rationale.clone(),
        author: proposal.author.clone(),
        base_version: proposal.base_version,
        base_root: proposal.base_root.to_hex(),
        new_version: proposal.new_version,
        new_root: proposal.new_root.to_hex(),
        deadline: time(proposal.deadline),
        state: governance.state(tracked, now),
        tally: Governance::tally(tracked),
        items,
    })
}

fn line(out: &mut String, text: std::fmt::Arguments<'_>) {
    out.write_fmt(text).expect("writing to a String");
    out.push('\n');
}

/// The review as text for the terminal.
pub fn render(review: &Review) -> String {
    let mut out = String::new();
    let count = |kind: &str| review.items.iter().filter(|i| i.change == kind).count();
    line(
        &mut out,
        format_args!("Proposal {}: {}", review.id, review.title),
    );
    line(
        &mut out,
        format_args!(
            "  library `{}` v{} ({}) → v{} ({})",
            review.library,
            review.base_version,
            short(&review.base_root),
            review.new_version,
            short(&review.new_root)
        ),
    );
    line(
        &mut out,
        format_args!(
            "  by {}; {}; voting until {}",
            review.author,
            review.state.as_str(),
            review.deadline
        ),
    );
    let t = &review.tally;
    line(
        &mut out,
        format_args!(
            "  votes: yes {} / no {} of {} ({:.1}% yes of cast; needs 66%, quorum {})",
            t.yes,
            t.no,
            t.total,
            t.yes_percent(),
            t.quorum
        ),
    );
    if !review.rationale.is_empty() {
        line(&mut out, format_args!("  rationale: {}", review.rationale));
    }
    line(
        &mut out,
        format_args!(
            "{} added, {} updated, {} deleted",
            count("add"),
            count("update"),
            count("delete")
        ),
    );
    for item in &review.items {
        let side = |c: &Content| format!("[{}] ({:.2}) {}", c.domain, c.confidence, c.text);
        match (&item.old, &item.new) {
            (None, Some(new)) => line(&mut out, format_args!("+ {} {}", item.id, side(new))),
            (Some(old), Some(new)) => {
                line(&mut out, format_args!("~ {} {}", item.id, side(old)));
                line(&mut out, format_args!("  {:>5} → {}", "", side(new)));
            }
            (Some(old), None) => line(&mut out, format_args!("- {} {}", item.id, side(old))),
            (None, None) => line(&mut out, format_args!("? {}", item.id)),
        }
        for step in &item.history {
            let mut text = format!("v{} {} by {}", step.version, step.op, step.source);
            if !step.evidence.query_ids.is_empty() {
                write!(text, "; queries {}", step.evidence.query_ids.join(", ")).ok();
            }
            if !step.evidence.group_rewards.is_empty() {
                let rewards: Vec<String> = step
                    .evidence
                    .group_rewards
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect();
                write!(text, "; group rewards {}", rewards.join(" ")).ok();
            }
            if let Some(reason) = &step.reason {
                write!(text, "; reason: {reason}").ok();
            }
            line(&mut out, format_args!("    {text}"));
        }
        let u = item.usage;
        line(
            &mut out,
            format_args!(
                "    injected {} times, helpful {}, harmful {}{}",
                u.injected,
                u.helpful,
                u.harmful,
                if u.served_good + u.served_bad > 0 {
                    format!(
                        "; served feedback good {}, bad {}",
                        u.served_good, u.served_bad
                    )
                } else {
                    String::new()
                }
            ),
        );
        // Its own measured effect, once measured (`gym library credit`).
        if let Some(credit) = &u.credit {
            line(&mut out, format_args!("    {}", credit.summary()));
        }
    }
    out
}

fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}
