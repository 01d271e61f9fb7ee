//! Which backend the distillation stages of `gym grpo` run on.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;

use super::GrpoArgs;
use crate::cli::args::backend::{BackendArgs, BackendKind};

impl GrpoArgs {
    /// Whether the distillation stages run on the default distiller: on llama with no
    /// `--distill-model`, they get the 1.5B model `make setup` fetches, not the rollout model.
    pub(super) fn distill_uses_default_model(&self) -> bool {
        self.distill_backend.unwrap_or(self.backend.backend) == BackendKind::Llama
            && self.distill_model.is_none()
    }

    /// How the distillation stages' backend is reached (`llama`, `openai`, `anthropic`), as
    /// their telemetry names it.
    pub(super) fn distill_backend_label(&self) -> String {
        format!("{:?}", self.distill_backend.unwrap_or(self.backend.backend)).to_lowercase()
    }

    /// The backend flags of the distillation stages, or `None` when they share the rollout
    /// backend (and its loaded model).
    pub(super) fn distill_backend_args(&self) -> Option<BackendArgs> {
        let default_model = self.distill_uses_default_model();
        if !default_model
            && self.distill_model.is_none()
            && self.distill_backend.is_none()
            && self.distill_base_url.is_none()
            && self.distill_api_key_env.is_none()
        {
            return None;
        }
        let mut args = self.backend.clone();
        if let Some(kind) = self.distill_backend {
            if kind != args.backend {
                // A different backend does not inherit a model name or path meant for another.
                args.model = None;
            }
            args.backend = kind;
        }
        if let Some(model) = &self.distill_model {
            args.model = Some(model.clone());
        } else if default_model {
            let path = gym::backend::default_distill_model_path();
            args.model = Some(path.display().to_string());
        }
        if let Some(url) = &self.distill_base_url {
            args.base_url = Some(url.clone());
        }
        if let Some(env) = &self.distill_api_key_env {
            args.api_key_env = Some(env.clone());
        }
        // The same GGUF file as the rollouts: share the loaded model rather than load it twice.
        let local_path = |args: &BackendArgs| {
            args.model
                .as_ref()
                .map_or_else(gym::backend::default_model_path, PathBuf::from)
        };
        if args.backend == BackendKind::Llama
            && self.backend.backend == BackendKind::Llama
            && local_path(&args) == local_path(&self.backend)
        {
            return None;
        }
        Some(args)
    }

    /// The distillation backend: the rollout backend, or one built from the `--distill-*` flags.
    pub(super) fn build_distill_backend(
        &self,
        rollout_backend: &Arc<dyn gym::backend::Backend>,
    ) -> anyhow::Result<Arc<dyn gym::backend::Backend>> {
        match self.distill_backend_args() {
            None => Ok(Arc::clone(rollout_backend)),
            Some(args) => args.build().context("distillation backend"),
        }
    }

    /// Fails, before any model is loaded, when the stages would run on the default distiller
    /// and `make setup` has not fetched it.
    pub(super) fn check_default_distill_model(&self) -> anyhow::Result<()> {
        if self.distill_uses_default_model() {
            let path = gym::backend::default_distill_model_path();
            anyhow::ensure!(
                path.is_file(),
                "the default distillation model {} is missing: run `make setup` to fetch it \
                 (Qwen2.5-Coder-1.5B-Instruct, 1.1 GB), or pass --distill-model PATH (a GGUF \
                 file, e.g. the rollout model) or --distill-backend openai",
                path.display()
            );
        }
        Ok(())
    }
}
