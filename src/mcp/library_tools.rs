//! The library tools the MCP server serves (not to be confused with `crate::tools::mcp`, MCP
//! servers used as an agent's tools): their names, descriptions and argument schemas, and what each call does.
//!
//! Every call is synchronous (it reads library files, maybe runs the embedding model); the
//! server runs it off the async threads. Arguments are read with [`Arguments`], which names
//! the argument it refuses; every count a caller can raise is bounded below.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use chrono::Utc;
use serde_json::{Map, Value, json};

use super::args::{ArgumentError, Arguments};
use super::propose::{parse_changes, propose_spec};
use crate::gov::{Draft, GovError, Governance};
use crate::library::{
    Experience, ExperienceId, Library, LibraryError, Op, Provenance, Version, list_libraries,
};
use crate::retrieve::{RetrieveError, Searcher, Snapshot};

/// Most experiences `search` returns.
pub const MAX_K: u64 = 50;
const DEFAULT_K: u64 = 5;
/// Longest `search` query, in characters.
pub const MAX_QUERY_CHARS: usize = 2_000;
/// Most experiences or ops one `show_version` or `diff` result lists.
pub const MAX_LIMIT: u64 = 500;
const DEFAULT_LIMIT: u64 = 100;
/// Most versions of an experience's history `get` lists (the newest).
pub const MAX_HISTORY: usize = 50;
/// Most changes one `propose_change` carries.
pub const MAX_CHANGES: usize = 100;
/// Largest change, as compact JSON: an experience is one sentence, its evidence a few ids.
pub const MAX_CHANGE_BYTES: usize = 8 * 1024;
const MAX_NAME_CHARS: usize = 128;
const MAX_ID_CHARS: usize = 16;
pub(super) const MAX_TITLE_CHARS: usize = 200;
pub(super) const MAX_RATIONALE_CHARS: usize = 10_000;

pub const SEARCH: &str = "search";
pub const GET: &str = "get";
pub const SHOW_VERSION: &str = "show_version";
pub const DIFF: &str = "diff";
pub const PROPOSE_CHANGE: &str = "propose_change";

/// How `propose_change` writes, when the server allows it.
#[derive(Debug, Clone, Default)]
pub struct Writing {
    /// Recorded as the author of commits and proposals (`None`: commits record no author and
    /// proposals `unknown`, as `gym library add` and `gym gov propose` do).
    pub author: Option<String>,
    /// The governance directory: with it each change becomes a proposal too.
    pub gov_dir: Option<PathBuf>,
}

/// One tool as `tools/list` shows it.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: String,
    pub schema: Value,
    pub read_only: bool,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// No tool has this name (or it is `propose_change` on a server that does not write).
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    #[error(transparent)]
    Argument(#[from] ArgumentError),
    #[error(transparent)]
    Library(#[from] LibraryError),
    /// Boxed: a ledger error is large, and every call returns this type.
    #[error(transparent)]
    Gov(Box<GovError>),
    #[error("search failed: {0}")]
    Search(#[from] RetrieveError),
    /// The changes were committed but the ledger refused the proposal.
    #[error(
        "committed the changes as version {version} of `{library}`, but the governance ledger \
         refused the proposal: {source}"
    )]
    NotProposed {
        library: String,
        version: u64,
        source: Box<GovError>,
    },
}

impl From<GovError> for CallError {
    fn from(error: GovError) -> Self {
        Self::Gov(Box::new(error))
    }
}

/// The library tools of one server: its settings, the libraries it opened and its searcher.
pub struct LibraryTools {
    library_dir: PathBuf,
    default_library: Option<String>,
    searcher: Searcher,
    writing: Option<Writing>,
    /// Opened once and refreshed before each use (cheap when nothing changed), so a commit by
    /// a training run or another writer is seen by the next call.
    libraries: Mutex<HashMap<String, Library>>,
}

impl LibraryTools {
    pub fn new(
        library_dir: PathBuf,
        default_library: Option<String>,
        searcher: Searcher,
        writing: Option<Writing>,
    ) -> Self {
        Self {
            library_dir,
            default_library,
            searcher,
            writing,
            libraries: Mutex::default(),
        }
    }

    /// The searcher's method, `embedding` or `lexical`.
    pub fn search_method(&self) -> &'static str {
        self.searcher.method()
    }

    /// Whether `propose_change` is listed and callable.
    pub fn writes(&self) -> bool {
        self.writing.is_some()
    }

    /// The tools this server lists: `propose_change` only when it writes.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let library = match &self.default_library {
            Some(name) => {
                json!({"type": "string", "description": format!("Library name (default: `{name}`).")})
            }
            None => json!({"type": "string", "description": "Library name."}),
        };
        let version = |what: &str| json!({"type": "integer", "minimum": 0, "description": what});
        let limit = json!({"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT,
            "description": "Most items to list."});
        let object = |mut properties: Map<String, Value>, mut required: Vec<&str>| {
            properties.insert("library".into(), library.clone());
            if self.default_library.is_none() {
                required.push("library");
            }
            json!({"type": "object", "properties": properties, "required": required,
                "additionalProperties": false})
        };
        let props = |value: Value| match value {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let mut specs = vec![
            ToolSpec {
                name: SEARCH,
                description: format!(
                    "Find the experiences of a library closest to a text, best first, with \
                     their score ({}). Experiences are rules like \"When <condition>, \
                     <strategy>.\" learned from graded attempts.",
                    match self.searcher.method() {
                        "embedding" => "cosine similarity of MiniLM sentence embeddings",
                        _ => "BM25 over shared words; experiences sharing no word are left out",
                    }
                ),
                schema: object(
                    props(json!({
                        "query": {"type": "string", "maxLength": MAX_QUERY_CHARS,
                            "description": "The text to match, e.g. a task or question."},
                        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": DEFAULT_K,
                            "description": "How many experiences to return."},
                        "version": version("Version to search (default: the latest)."),
                    })),
                    vec!["query"],
                ),
                read_only: true,
            },
            ToolSpec {
                name: GET,
                description: "One experience: its text, domain, confidence, status, the versions \
                    that created and last changed it, provenance (who or which training run), \
                    usage when served (injected, helpful, harmful) and the history of ops that \
                    touched it."
                    .into(),
                schema: object(
                    props(json!({
                        "id": {"type": "string", "pattern": "^[Ee][0-9]{4,}$",
                            "description": "Experience id, like E0007."},
                        "version": version("Version to read it at (default: the latest)."),
                    })),
                    vec!["id"],
                ),
                read_only: true,
            },
            ToolSpec {
                name: SHOW_VERSION,
                description: "A version of a library: its Merkle root, parent root, provenance, \
                    the ops it recorded and its active experiences (paged with offset and limit)."
                    .into(),
                schema: object(
                    props(json!({
                        "version": version("Version to show (default: the latest)."),
                        "offset": {"type": "integer", "minimum": 0, "default": 0,
                            "description": "Experiences to skip."},
                        "limit": limit.clone(),
                    })),
                    vec![],
                ),
                read_only: true,
            },
            ToolSpec {
                name: DIFF,
                description: "The composed changes from one version of a library to another \
                    (either direction): each experience added, updated (with its text before) \
                    or deleted, and both Merkle roots."
                    .into(),
                schema: object(
                    props(json!({
                        "from": version("From this version."),
                        "to": version("To this version."),
                        "limit": limit,
                    })),
                    vec!["from", "to"],
                ),
                read_only: true,
            },
        ];
        if let Some(writing) = &self.writing {
            specs.push(propose_spec(writing, object));
        }
        specs
    }

    /// Runs tool `name`. Blocking.
    pub fn call(
        &self,
        name: &str,
        arguments: Option<Map<String, Value>>,
    ) -> Result<Value, CallError> {
        match name {
            SEARCH => self.search(arguments),
            GET => self.get(arguments),
            SHOW_VERSION => self.show_version(arguments),
            DIFF => self.diff(arguments),
            PROPOSE_CHANGE if self.writes() => self.propose_change(arguments),
            _ => Err(CallError::UnknownTool(
                name.chars().take(MAX_NAME_CHARS).collect(),
            )),
        }
    }

    /// The library the call names, or the default; an unknown name lists the known ones.
    fn library_name(&self, args: &Arguments) -> Result<String, ArgumentError> {
        match args.string("library", MAX_NAME_CHARS)? {
            Some(name) => Ok(name),
            None => self.default_library.clone().ok_or_else(|| {
                ArgumentError::new("library", "is required: this server has no default library")
            }),
        }
    }

    /// Runs `work` on library `name`, opened or refreshed first.
    fn with_library<T>(
        &self,
        name: &str,
        work: impl FnOnce(&mut Library) -> Result<T, CallError>,
    ) -> Result<T, CallError> {
        let mut libraries = self
            .libraries
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let library = match libraries.entry(name.to_owned()) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                let library = entry.into_mut();
                library.refresh()?;
                library
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                match Library::open(&self.library_dir, name) {
                    Ok(library) => entry.insert(library),
                    Err(LibraryError::NotFound { .. }) => {
                        let known = list_libraries(&self.library_dir).unwrap_or_default();
                        let known = if known.is_empty() {
                            "there are none".to_owned()
                        } else {
                            format!("the libraries are {}", known.join(", "))
                        };
                        return Err(ArgumentError::new(
                            "library",
                            format!("no library `{name}` ({known})"),
                        )
                        .into());
                    }
                    Err(error @ LibraryError::InvalidName { .. }) => {
                        return Err(ArgumentError::new("library", error.to_string()).into());
                    }
                    Err(error) => return Err(error.into()),
                }
            }
        };
        work(library)
    }

    fn search(&self, arguments: Option<Map<String, Value>>) -> Result<Value, CallError> {
        let args = Arguments::new(arguments, &["query", "k", "library", "version"])?;
        let query = args.required_string("query", MAX_QUERY_CHARS)?;
        let k = args.integer("k", 1..=MAX_K)?.unwrap_or(DEFAULT_K) as usize;
        let name = self.library_name(&args)?;
        let version = args.integer("version", 0..=u64::MAX)?;
        self.with_library(&name, |library| {
            let version = version.unwrap_or_else(|| library.head_version());
            let state = library.checkout(version)?;
            let snapshot = Snapshot {
                library: library.name().to_owned(),
                version,
                root: library.version(version)?.root,
                state,
            };
            let found = self.searcher.search(&snapshot, &query, k)?;
            let state = &snapshot.state;
            let hits: Vec<Value> = found
                .iter()
                .filter_map(|hit| state.get_active(hit.id).map(|e| (hit, e)))
                .map(|(hit, e)| {
                    json!({"id": e.id, "score": hit.score, "text": e.text, "domain": e.domain,
                        "confidence": e.confidence})
                })
                .collect();
            Ok(json!({"library": library.name(), "version": version,
                "method": self.searcher.method(), "searched": state.active_count(), "hits": hits}))
        })
    }

    fn get(&self, arguments: Option<Map<String, Value>>) -> Result<Value, CallError> {
        let args = Arguments::new(arguments, &["id", "library", "version"])?;
        let text = args.required_string("id", MAX_ID_CHARS)?;
        let id: ExperienceId = text
            .trim()
            .parse()
            .map_err(|error| ArgumentError::new("id", format!("{error}")))?;
        let name = self.library_name(&args)?;
        let version = args.integer("version", 0..=u64::MAX)?;
        self.with_library(&name, |library| {
            let version = version.unwrap_or_else(|| library.head_version());
            let state = library.checkout(version)?;
            let experience = state.get(id).ok_or_else(|| {
                ArgumentError::new(
                    "id",
                    format!("{id} is not in version {version} of `{}`", library.name()),
                )
            })?;
            let history: Vec<(&Version, &Op)> = library
                .history(id)
                .into_iter()
                .filter(|(record, _)| record.version <= version)
                .collect();
            let skipped = history.len().saturating_sub(MAX_HISTORY);
            let history: Vec<Value> = history[skipped..]
                .iter()
                .map(|(record, op)| {
                    json!({"version": record.version, "created_at": record.created_at,
                        "provenance": record.provenance, "op": op})
                })
                .collect();
            Ok(json!({"library": library.name(), "version": version,
                "experience": experience, "history": history,
                "history_omitted": skipped}))
        })
    }

    fn show_version(&self, arguments: Option<Map<String, Value>>) -> Result<Value, CallError> {
        let args = Arguments::new(arguments, &["library", "version", "offset", "limit"])?;
        let name = self.library_name(&args)?;
        let version = args.integer("version", 0..=u64::MAX)?;
        let offset = args.integer("offset", 0..=u64::MAX)?.unwrap_or(0);
        let limit = args
            .integer("limit", 1..=MAX_LIMIT)?
            .unwrap_or(DEFAULT_LIMIT) as usize;
        self.with_library(&name, |library| {
            let version = version.unwrap_or_else(|| library.head_version());
            let state = library.checkout(version)?;
            let record = library.version(version)?;
            let offset = usize::try_from(offset).unwrap_or(usize::MAX);
            let experiences: Vec<&Experience> = state.active().skip(offset).take(limit).collect();
            let ops = &record.ops[..record.ops.len().min(limit)];
            Ok(json!({
                "library": library.name(),
                "version": version,
                "latest": library.head_version(),
                "root": record.root,
                "parent_root": record.parent_root,
                "hash": record.hash,
                "created_at": record.created_at,
                "provenance": record.provenance,
                "count": record.count,
                "ops_total": record.ops.len(),
                "ops": ops,
                "offset": offset,
                "experiences": experiences,
                "more_experiences": state.active_count() > offset.saturating_add(experiences.len()),
            }))
        })
    }

    fn diff(&self, arguments: Option<Map<String, Value>>) -> Result<Value, CallError> {
        let args = Arguments::new(arguments, &["library", "from", "to", "limit"])?;
        let name = self.library_name(&args)?;
        let from = args.required_integer("from", 0..=u64::MAX)?;
        let to = args.required_integer("to", 0..=u64::MAX)?;
        let limit = args
            .integer("limit", 1..=MAX_LIMIT)?
            .unwrap_or(DEFAULT_LIMIT) as usize;
        self.with_library(&name, |library| {
            let before = library.checkout(from)?;
            let ops = library.diff(from, to)?;
            let count = |kind: &str| ops.iter().filter(|op| op.kind() == kind).count();
            let listed: Vec<Value> = ops
                .iter()
                .take(limit)
                .map(|op| {
                    let mut entry = json!(op);
                    // An update or delete also shows what the experience said before it.
                    if let (Some(old), false) =
                        (before.get_active(op.id()), matches!(op, Op::Add { .. }))
                    {
                        entry["before"] = json!({"text": old.text, "domain": old.domain,
                            "confidence": old.confidence});
                    }
                    entry
                })
                .collect();
            Ok(json!({
                "library": library.name(),
                "from": from,
                "to": to,
                "from_root": library.version(from)?.root,
                "to_root": library.version(to)?.root,
                "added": count("add"),
                "updated": count("update"),
                "deleted": count("delete"),
                "ops_total": ops.len(),
                "ops": listed,
            }))
        })
    }

    fn propose_change(&self, arguments: Option<Map<String, Value>>) -> Result<Value, CallError> {
        let writing = self
            .writing
            .as_ref()
            .ok_or_else(|| CallError::UnknownTool(PROPOSE_CHANGE.into()))?;
        let accepted: &[&str] = if writing.gov_dir.is_some() {
            &["library", "changes", "title", "rationale"]
        } else {
            &["library", "changes"]
        };
        let args = Arguments::new(arguments, accepted)?;
        let name = self.library_name(&args)?;
        let changes = parse_changes(args.required_list("changes", MAX_CHANGES)?)?;
        let title = args.string("title", MAX_TITLE_CHARS)?;
        // Checked before anything is written: the ledger would refuse it after the commit.
        if title
            .as_ref()
            .is_some_and(|t| t.trim().is_empty() || t.contains(['\n', '\r']))
        {
            return Err(ArgumentError::new("title", "must be one non-empty line").into());
        }
        let rationale = args
            .string("rationale", MAX_RATIONALE_CHARS)?
            .unwrap_or_default();
        self.with_library(&name, |library| {
            // Open the ledger before committing, so a missing or damaged ledger leaves the
            // library untouched.
            if let Some(gov_dir) = &writing.gov_dir {
                Governance::open(gov_dir)?;
            }
            let provenance = Provenance::Manual {
                author: writing.author.clone(),
            };
            let version = library
                .commit(&changes, provenance)
                .map_err(|error| match error {
                    // The library counts changes from 1; the argument is indexed from 0.
                    LibraryError::Change {
                        number,
                        kind,
                        source,
                    } => CallError::Argument(ArgumentError::new(
                        format!("changes[{}]", number.saturating_sub(1)),
                        format!("{kind}: {source}; nothing was changed"),
                    )),
                    other => other.into(),
                })?
                .clone();
            let mut result = json!({
                "mode": if writing.gov_dir.is_some() { "proposal" } else { "commit" },
                "library": library.name(),
                "version": version.version,
                "root": version.root,
                "parent_root": version.parent_root,
                "count": version.count,
                "ops": version.ops,
            });
            if let Some(gov_dir) = &writing.gov_dir {
                let draft = Draft {
                    library: library.name().to_owned(),
                    from: None,
                    to: Some(version.version),
                    title,
                    rationale,
                    author: writing.author.clone().unwrap_or_else(|| "unknown".into()),
                };
                let proposal = Governance::propose(gov_dir, library, &draft, Utc::now()).map_err(
                    |source| CallError::NotProposed {
                        library: library.name().to_owned(),
                        version: version.version,
                        source: Box::new(source),
                    },
                )?;
                result["proposal"] = json!({
                    "id": proposal.id,
                    "title": proposal.title,
                    "author": proposal.author,
                    "base_version": proposal.base_version,
                    "base_root": proposal.base_root,
                    "new_version": proposal.new_version,
                    "new_root": proposal.new_root,
                    "ops": proposal.ops.len(),
                    "deadline": proposal.deadline,
                });
                // The commit bypasses the vote; `gym serve` with this ledger keeps serving the
                // governed head until the proposal is executed.
                result["served"] = json!(format!(
                    "not yet: servers governed by this ledger inject v{} (the governed head) until proposal {} is executed",
                    proposal.base_version, proposal.id
                ));
            }
            Ok(result)
        })
    }
}

#[cfg(test)]
#[path = "library_tools_tests.rs"]
mod tests;
