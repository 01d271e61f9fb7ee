//! What the answer path tells the traffic middleware (`serve::traffic`) about a response:
//! which model answered and the tokens it took, through the response's extensions, so no
//! route reports anything itself.

use std::sync::Arc;

use axum::response::Response;

/// Which model answered a request and the tokens it took. A streamed answer's is set when the stream ends; a stream the client
/// left early has none.
#[derive(Debug, Clone, Default)]
pub struct Answered(Arc<std::sync::OnceLock<(String, crate::backend::Usage)>>);

impl Answered {
    /// Records the model and tokens (the first record stays).
    pub fn set(&self, model: &str, usage: crate::backend::Usage) {
        let _ = self.0.set((model.to_owned(), usage));
    }

    /// The model and tokens, once known.
    pub fn get(&self) -> Option<&(String, crate::backend::Usage)> {
        self.0.get()
    }

    /// A response answered whole by `model` with `usage`: the record in its extensions.
    pub fn attach(response: &mut Response, model: &str, usage: crate::backend::Usage) {
        let answered = Self::default();
        answered.set(model, usage);
        response.extensions_mut().insert(answered);
    }
}
