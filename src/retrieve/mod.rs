//! Retrieval: which experiences of which library version a question gets. The libraries a
//! reader opens once (the catalog, with the governed heads a ledger decides), the embedding of
//! questions and experiences, and the search over their vectors: exact or IVF in this process,
//! or in a Qdrant server. `gym serve` injects what it finds; the MCP `search` tool returns it.
//!
//! | module | what |
//! |---|---|
//! | [`catalog`] | libraries opened once, new commits noticed, versions checked out, the governed version served |
//! | [`governed`] | which version a governed library serves: the governed head of the ledger in `--gov-dir` |
//! | [`index`] | the [`VectorIndex`] seam: store a version's vectors, find the nearest to a query |
//! | [`ivf`] | the in-process index: exact search, and inverted lists over k-means centroids for large libraries |
//! | `qdrant` | the index in a Qdrant server (`--qdrant-url`, feature `qdrant`) |
//! | [`retriever`] | the [`Retriever`]: embedding cache, query cache, and where a version's vectors are kept ([`Keep`]) |
//! | [`search`] | one version searched from synchronous code: by meaning through a [`Retriever`], or by words (BM25) |
//!
//! Layering: this module reads libraries ([`crate::library`]), the governance ledger
//! ([`crate::gov`]) and embeds with [`crate::embed`]; it knows nothing of HTTP, so `serve`
//! and `mcp` both sit on top of it. A run's measurements rank a few hundred experiences per
//! question with [`crate::rollout::retrieval`], which ranks the same way (a test here holds
//! the two to the same experiences in the same order).

pub mod catalog;
pub mod governed;
pub mod index;
pub mod ivf;
#[cfg(feature = "qdrant")]
pub mod qdrant;
pub mod retriever;
pub mod search;

pub use catalog::{Catalog, Snapshot};
pub use governed::NotServed;
pub use index::{Hit, IndexError, VectorIndex};
pub use ivf::{IvfConfig, IvfIndex};
pub use retriever::{DEFAULT_QUERY_CACHE, Keep, RetrieveError, Retriever};
pub use search::{Found, Searcher};
