//! Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (vLLM, TEI, hosted APIs),
//! for servers that already run an embedding model next to the chat model.
//!
//! [`Embedder`] is synchronous; this one blocks on the Tokio runtime it was created in, so call
//! it from `spawn_blocking` or a plain thread, never from inside an async task.

use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use serde::Deserialize;
use serde_json::json;

use super::{EmbedError, Embedder};
use crate::backend::openai::http_client;

/// Texts per request.
const BATCH: usize = 128;

pub struct OpenAiEmbedder {
    client: Client<OpenAIConfig>,
    model: String,
    dimensions: usize,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

impl OpenAiEmbedder {
    /// Connects to `base_url` (with its `/v1`) and embeds one probe text to learn the
    /// dimensions, so a wrong URL or model fails here rather than on the first request.
    pub async fn connect(
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Result<Self, EmbedError> {
        let mut embedder = Self {
            client: http_client(base_url.trim_end_matches('/'), api_key),
            model: model.to_owned(),
            dimensions: 0,
            timeout,
            runtime: tokio::runtime::Handle::current(),
        };
        let probe = embedder.request(&["dimension probe".to_owned()]).await?;
        embedder.dimensions = probe.first().map_or(0, Vec::len);
        if embedder.dimensions == 0 {
            return Err(EmbedError::Inference(format!(
                "{base_url}/embeddings returned an empty vector for model `{model}`"
            )));
        }
        Ok(embedder)
    }

    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = json!({"model": self.model, "input": texts});
        let embeddings = self.client.embeddings();
        let call = embeddings.create_byot::<_, Response>(body);
        let response = tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| {
                EmbedError::Inference(format!(
                    "no answer from the embeddings endpoint within {:.1} s",
                    self.timeout.as_secs_f64()
                ))
            })?
            .map_err(|e| EmbedError::Inference(format!("the embeddings endpoint failed: {e}")))?;
        let mut data = response.data;
        if data.len() != texts.len() {
            return Err(EmbedError::Inference(format!(
                "the embeddings endpoint returned {} vectors for {} texts",
                data.len(),
                texts.len()
            )));
        }
        data.sort_by_key(|d| d.index.unwrap_or(usize::MAX));
        Ok(data.into_iter().map(|d| d.embedding).collect())
    }
}

impl Embedder for OpenAiEmbedder {
    fn dimensions(&self) -> usize {
        self.dimensions
    }

    /// The model's name and the width the endpoint answers with: an endpoint that serves the
    /// same model name gives the same vectors (a shortened `dimensions` variant differs in width).
    fn space(&self) -> String {
        super::space_name(&format!("openai-{}-{}", self.model, self.dimensions))
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let vectors = self.runtime.block_on(self.request(batch))?;
            if let Some(bad) = vectors.iter().find(|v| v.len() != self.dimensions) {
                return Err(EmbedError::Inference(format!(
                    "the embeddings endpoint returned a vector of {} dimensions, not {}",
                    bad.len(),
                    self.dimensions
                )));
            }
            out.extend(vectors);
        }
        Ok(out)
    }
}
