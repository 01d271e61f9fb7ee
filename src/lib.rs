//! # Gym
//!
//! Gym improves a language model on a task without changing its weights (Training-Free GRPO,
//! arXiv 2510.08191) and keeps what it learned as a versioned, Merkle-committed **experience
//! library**.
//!
//! ## The data flow and where each step lives
//!
//! ```text
//! dataset ──► rollout ──► reward ──► group filter ──► summarize ──► extract ──► consolidate ──► library version N+1
//!  data/      rollout/    reward/    rollout/          distill/      distill/     distill/         library/
//! library ──► retrieve/ (catalog of versions, governed heads, embeddings, exact/IVF/Qdrant search)
//!         ──► serve/ (OpenAI-compatible server: injection, upstream failover) and mcp/
//!         ──► gov/   (proposals = diffs between versions, signed votes, on-chain anchor)
//!         ──► finetune/ (LoRA fallback that distils a library into weights)
//! ```
//!
//! | module | status | what it does |
//! |---|---|---|
//! | [`library`] | here | experience records with stable ids, ops, versions, Merkle roots and proofs, diffs, crash-safe files, verification, import/export |
//! | [`backend`] | here | the `Backend` seam: llama.cpp in process (shared-prompt groups, seeded samplers, grammars) and OpenAI-compatible servers (retries, `n`, cost) |
//! | [`data`] | here | JSONL/JSON/CSV datasets with field mapping, built-in verifiable task suites |
//! | [`reward`] | here | the `Verifier` seam: exact, numeric, `\boxed{}`, regex, external command, LLM judge |
//! | [`rollout`] | here | group sampling and scoring, the solver prompt, evaluation (Mean@k, Pass@k, confidence intervals) |
//! | [`distill`] | here | the three LLM stages (summarize, extract, consolidate) with tolerant parsing of model output, and the deterministic op resolution |
//! | [`embed`] | here | the `Embedder` seam: MiniLM sentence embeddings in process (ONNX Runtime), cosine, near-duplicate detection |
//! | [`run`] | here | a Training-Free GRPO run: the session (steps, final evaluation, closing files), the step loop and its one journaled stage helper, the append-only journal and resume, typed run events |
//! | [`retrieve`] | here | which experiences a question gets: the catalog of library versions with the governed heads of a ledger, the embedding and query caches, the `VectorIndex` seam with exact, IVF and Qdrant indexes, and a blocking searcher (embeddings or BM25) for the MCP tools |
//! | [`serve`] | here | the OpenAI-compatible server, an HTTP shell over [`retrieve`]: library selection and injection, upstream failover, HLLM figures and escalation, library API with API keys |
//! | [`gov`] | here | proposals over library diffs with a reviewer's rendering and provenance, EIP-191 signed votes, 66% tally and quorum, an append-only hash-chained ledger that survives kill -9 with a signed genesis and signed executions that commit the votes they counted, execution to a governed head; the contracts in `contracts/` deployed, voted and read through `alloy` (feature `chain`); `/v1/gov` routes |
//! | [`pack`] | here | library packs: a version's files, its held-out results (model and data hashes, decoding, Mean@k with intervals and seeds) and an EIP-191 signed receipt in one archive; verification from the bytes alone, bounded for untrusted packs; import with history |
//! | [`web`] | here | the voters' web app at `/gov` (proposals, reviews with word diffs and provenance, voting through an EIP-1193 wallet or a pasted ballot) and the library browser at `/libraries` (versions, diffs, histories, proof downloads): embedded HTML, CSS and JavaScript under a strict Content-Security-Policy |
//! | `finetune` | here (feature `finetune`) | LoRA SFT in candle on a run's solved rollouts |
//! | `candle` | here (feature `finetune`) | the candle backend: a base model with a fine-tune (LoRA adapter or weight delta) merged, behind the `Backend` seam |
//! | [`tools`] | here | the `Tool` seam and `Toolbox` (argument checks, timeouts, errors as observations): a calculator, a sandboxed Python, MCP servers (feature `mcp`) |
//! | [`agent`] | here | agent rollouts: a ReAct loop over the backend seam with a bounded number of tool rounds, trajectories recorded in the journal |
//! | `mcp` | here (feature `mcp`) | the experience library as Model Context Protocol tools (`gym library mcp-serve`): search (through [`retrieve`]), get, show_version, diff, and opt-in propose_change |
//! | [`telemetry`] | here | OpenTelemetry GenAI spans out over OTLP/HTTP (`--otlp-endpoint`; the exporter with feature `otlp`): a span per served request and per rollout and stage call of a run, a bounded queue that never blocks, dropped spans counted |
//! | [`delta`] | here | BitDelta 1-bit deltas, DeltaSoup robust aggregation with differential privacy (files with `finetune`) |
//!
//! The `gym` binary's command-line interface lives in `src/cli/` (one file per subcommand).
//! The library store is synchronous and pure: async code only ever sits at the edges.
//!
//! For a newcomer: `docs/architecture.md` in the repository has the module map, the data flow
//! of a run and of a served request, the layering rule, and where the one implementation of
//! each shared piece lives.

pub mod agent;
pub mod backend;
#[cfg(feature = "finetune")]
pub mod candle;
pub mod data;
pub mod delta;
pub mod distill;
pub mod durable;
pub mod embed;
#[cfg(feature = "finetune")]
pub mod finetune;
pub mod gov;
pub mod library;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod pack;
pub mod retrieve;
pub mod reward;
pub mod rollout;
pub mod run;
pub mod serve;
pub mod telemetry;
pub mod tools;
pub mod web;
