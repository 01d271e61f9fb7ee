//! `--otlp-endpoint` and `--otlp-content`: OpenTelemetry spans out, flattened into `gym serve`
//! and `gym grpo`. The endpoint may also come from the standard `OTEL_EXPORTER_OTLP_*`
//! variables (`gym::telemetry::config` reads and checks them all).

use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use gym::telemetry::{Config, Telemetry};

#[derive(Debug, Clone, Args)]
pub struct OtlpArgs {
    /// Export OpenTelemetry spans (GenAI semantic conventions) over OTLP/HTTP to this receiver:
    /// its base URL, spans go to URL/v1/traces (a URL ending in /v1/traces is used as it is).
    /// Without it, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; the
    /// other OTEL_EXPORTER_OTLP_* variables (headers, protocol, timeout) apply. Off when none
    /// is set.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// Put prompts and answers into the spans (gen_ai.input.messages and
    /// gen_ai.output.messages), as the traffic log would: answered requests only, at most
    /// 256 KiB per span. Off: spans carry ids, models, libraries and tokens, no message text.
    #[arg(long, env = "GYM_OTLP_CONTENT")]
    pub otlp_content: bool,
}

impl OtlpArgs {
    /// Starts the exporter when an endpoint is set (`label`, `gym serve`, prefixes its lines),
    /// saying where spans go; `None` when export is off.
    pub fn start(&self, label: &str) -> anyhow::Result<Option<Arc<Telemetry>>> {
        let env = |name: &str| std::env::var(name).ok();
        let Some(config) = Config::resolve(self.otlp_endpoint.as_deref(), self.otlp_content, &env)
            .context("OpenTelemetry export")?
        else {
            return Ok(None);
        };
        let telemetry = Telemetry::start(config, label).context("OpenTelemetry export")?;
        eprintln!(
            "{label}: exporting OpenTelemetry spans to {} ({})",
            telemetry.config().shown_endpoint(),
            if telemetry.content() {
                "with prompts and answers"
            } else {
                "no message content"
            }
        );
        Ok(Some(Arc::new(telemetry)))
    }
}
