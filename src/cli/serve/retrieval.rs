//! What `gym serve` retrieves with: the query embedder (MiniLM, the static table, or an
//! embeddings endpoint) and the vector index (in process, or a Qdrant server).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use gym::retrieve::{IvfConfig, IvfIndex, Retriever};

use super::{QueryEmbedder, ServeArgs};
use crate::cli::args::backend::load_embedder;

impl ServeArgs {
    /// The retriever over the embedder and index the flags name (`None` without an embedder:
    /// every active experience is injected).
    pub(super) fn retriever(
        &self,
        runtime: &tokio::runtime::Runtime,
    ) -> anyhow::Result<Option<Arc<Retriever>>> {
        let embedder: Option<Arc<dyn gym::embed::Embedder>> = match &self.embeddings_url {
            Some(url) => {
                let embedder = runtime
                    .block_on(gym::embed::openai::OpenAiEmbedder::connect(
                        url,
                        &self.embeddings_model,
                        std::env::var(&self.embeddings_api_key_env).ok(),
                        Duration::from_secs(60),
                    ))
                    .with_context(|| format!("the embeddings endpoint {url}"))?;
                Some(Arc::new(embedder))
            }
            None => match self.query_embedder {
                QueryEmbedder::Minilm => load_embedder()?,
                QueryEmbedder::Static => Some(self.static_embedder()?),
            },
        };
        let index = self.vector_index(runtime)?;
        Ok(embedder.map(|embedder| {
            Arc::new(Retriever::with_query_cache(
                embedder,
                index,
                self.query_cache,
            ))
        }))
    }

    /// The static embedder from --static-model.
    #[cfg(feature = "embed")]
    fn static_embedder(&self) -> anyhow::Result<Arc<dyn gym::embed::Embedder>> {
        let dir = self
            .static_model
            .clone()
            .unwrap_or_else(gym::embed::lookup::default_static_dir);
        let embedder = gym::embed::lookup::StaticEmbedder::load(&dir).with_context(|| {
            format!(
                "loading the static embedder from {} (build it with `gym embed distill`)",
                dir.display()
            )
        })?;
        // On stderr: the first line on stdout is the one that says where the server listens.
        eprintln!(
            "gym serve: questions and experiences embedded by the static table {} (sha256 {})",
            dir.display(),
            embedder.manifest().table_sha256
        );
        Ok(Arc::new(embedder))
    }

    #[cfg(not(feature = "embed"))]
    fn static_embedder(&self) -> anyhow::Result<Arc<dyn gym::embed::Embedder>> {
        anyhow::bail!("--query-embedder static needs the `embed` feature")
    }

    /// The in-process index, or the Qdrant server named by --qdrant-url (checked reachable now,
    /// so a wrong URL fails at start and not on the first request).
    fn vector_index(
        &self,
        runtime: &tokio::runtime::Runtime,
    ) -> anyhow::Result<Arc<dyn gym::retrieve::VectorIndex>> {
        #[cfg(feature = "qdrant")]
        if let Some(url) = &self.qdrant_url {
            let _guard = runtime.enter();
            let index = gym::retrieve::qdrant::QdrantIndex::connect(
                url,
                std::env::var(&self.qdrant_api_key_env).ok(),
                Duration::from_secs(30),
            )?;
            let version = runtime
                .block_on(index.ensure_reachable())
                .with_context(|| format!("the Qdrant server at {url}"))?;
            println!("gym serve: experience vectors in Qdrant {version} at {url}");
            return Ok(Arc::new(index));
        }
        #[cfg(not(feature = "qdrant"))]
        let _ = runtime;
        Ok(Arc::new(IvfIndex::new(IvfConfig {
            exact_below: self.approximate_above,
            probes: self.ivf_probes,
            capacity: self.index_capacity,
            ..IvfConfig::default()
        })))
    }
}
