use std::path::PathBuf;

/// Why texts could not be embedded or compared.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A file of the embedding model is not there.
    #[error("embedding model file {} is missing (run `make setup` to fetch the models)", path.display())]
    MissingFile { path: PathBuf },

    /// A file of the embedding model is there but cannot be used.
    #[error("embedding model file {} cannot be used: {message}", path.display())]
    BadFile { path: PathBuf, message: String },

    /// The ONNX Runtime library is not at the path Gym looked at.
    #[error(
        "ONNX Runtime library {} not found; set ORT_DYLIB_PATH to libonnxruntime.so \
         (`make setup` puts it in models/onnxruntime/)",
        path.display()
    )]
    OnnxRuntimeMissing { path: PathBuf },

    /// The ONNX Runtime library is there but could not be loaded.
    #[error("ONNX Runtime library {} could not be loaded (check ORT_DYLIB_PATH): {message}", path.display())]
    OnnxRuntimeLoad { path: PathBuf, message: String },

    /// ONNX Runtime or the tokenizer refused the model files.
    #[error("embedding model in {} could not be loaded: {message}", dir.display())]
    ModelLoad { dir: PathBuf, message: String },

    /// Running the model failed.
    #[error("embedding failed: {0}")]
    Inference(String),

    /// The embedder answered with the wrong number or size of vectors.
    #[error("the embedder returned {got} for {expected}")]
    BadOutput { expected: String, got: String },

    /// A similarity threshold that no cosine can be meaningfully compared with.
    #[error("similarity threshold {threshold} is not a number between -1 and 1")]
    InvalidThreshold { threshold: f32 },
}

impl From<EmbedError> for crate::backend::BackendError {
    fn from(error: EmbedError) -> Self {
        Self::Embed(Box::new(error))
    }
}
