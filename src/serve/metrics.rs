//! Counters the server keeps and exports in the Prometheus text format at `GET /metrics`.
//!
//! Besides Gym's own `gym_*` families, the serving figures vLLM and llama.cpp servers export
//! are here under the names vLLM gives them, with the `gym:` prefix in place of `vllm:`
//! (`gym:time_to_first_token_seconds`, `gym:time_per_output_token_seconds`,
//! `gym:e2e_request_latency_seconds`, `gym:prompt_tokens_total`,
//! `gym:generation_tokens_total`, `gym:prefix_cache_queries_total`,
//! `gym:prefix_cache_hits_total`, `gym:num_requests_running`, `gym:num_requests_waiting`),
//! so dashboards built for those servers read Gym's too. `gym:kv_cache_bytes` is Gym's own:
//! vLLM reports its cache as a fraction of a pool fixed at start, while Gym's grows with the
//! rounds, so it is reported in bytes.
//!
//! Written here rather than with `prometheus-client`: that crate has no summary type, which the
//! `gym_hllm_*` families are, and most families are read at scrape time from counters other
//! modules own (router, traffic log, usage.json), so the crate would only re-wrap those values.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the request-latency histogram buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A label value as the text exposition format writes it: backslash, double quote and line feed
/// escaped, so that no name (an upstream's, a model's, a route's) can end the label or the line
/// and forge a sample of its own.
struct LabelValue<'a>(&'a str);

impl std::fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bound, count) in BUCKETS.iter().zip(&mut self.counts) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }
}

#[derive(Default)]
struct Inner {
    /// (route, status) → requests.
    requests: BTreeMap<(String, u16), u64>,
    /// route → latency.
    latency: BTreeMap<String, Histogram>,
    /// (library, version) → (requests served with it, experiences injected).
    injections: BTreeMap<(String, u64), (u64, u64)>,
    retrieval: Histogram,
    /// (library, version) → sums of Θ, Ψ, κ and the number of answers measured.
    hllm: BTreeMap<(String, String), [f64; 4]>,
    /// (from model, to model) → escalations.
    escalations: BTreeMap<(String, String), u64>,
    prompt_tokens: u64,
    completion_tokens: u64,
    /// Prompt tokens the model took from KV cells of an earlier prompt.
    cached_prompt_tokens: u64,
    /// model → time to the first streamed text.
    first_token: BTreeMap<String, Histogram>,
    /// model → mean time per output token after the first, of streamed answers.
    per_output_token: BTreeMap<String, Histogram>,
    /// model → time from the request's arrival to its last token.
    end_to_end: BTreeMap<String, Histogram>,
}

/// How long one answer took.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// From the request's arrival to its last token.
    pub end_to_end: Duration,
    /// From the request's arrival to its first text; known for streamed answers only.
    pub first_token: Option<Duration>,
    /// Tokens generated (all choices).
    pub tokens: u64,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        self.with(|m| {
            *m.requests.entry((route.to_owned(), status)).or_default() += 1;
            m.latency
                .entry(route.to_owned())
                .or_default()
                .observe(elapsed.as_secs_f64());
        });
    }

    pub fn injected(&self, library: &str, version: u64, experiences: usize, retrieval: Duration) {
        self.with(|m| {
            let entry = m
                .injections
                .entry((library.to_owned(), version))
                .or_default();
            entry.0 += 1;
            entry.1 += experiences as u64;
            m.retrieval.observe(retrieval.as_secs_f64());
        });
    }

    pub fn hllm(&self, library: &str, version: &str, figures: super::uncertainty::Figures) {
        self.with(|m| {
            let sums = m
                .hllm
                .entry((library.to_owned(), version.to_owned()))
                .or_default();
            sums[0] += figures.theta;
            sums[1] += figures.psi;
            sums[2] += figures.kappa;
            sums[3] += 1.0;
        });
    }

    pub fn escalated(&self, from: &str, to: &str) {
        self.with(|m| {
            *m.escalations
                .entry((from.to_owned(), to.to_owned()))
                .or_default() += 1;
        });
    }

    /// Tokens a model call consumed (an escalated request counts both calls).
    pub fn tokens(&self, usage: crate::backend::Usage) {
        self.with(|m| {
            m.prompt_tokens += usage.prompt_tokens;
            m.completion_tokens += usage.completion_tokens;
            m.cached_prompt_tokens += usage.cached_prompt_tokens;
        });
    }

    /// The latencies of one answered request to `model`.
    pub fn latency(&self, model: &str, latency: Latency) {
        self.with(|m| {
            let total = latency.end_to_end.as_secs_f64();
            m.end_to_end
                .entry(model.to_owned())
                .or_default()
                .observe(total);
            if let Some(first) = latency.first_token {
                let first = first.as_secs_f64();
                m.first_token
                    .entry(model.to_owned())
                    .or_default()
                    .observe(first);
                if latency.tokens > 1 {
                    m.per_output_token
                        .entry(model.to_owned())
                        .or_default()
                        .observe((total - first).max(0.0) / (latency.tokens - 1) as f64);
                }
            }
        });
    }

    /// Everything, in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        self.with(|m| {
            let mut out = String::new();
            let _ = writeln!(out, "# HELP gym_requests_total HTTP requests by route and status.");
            let _ = writeln!(out, "# TYPE gym_requests_total counter");
            for ((route, status), count) in &m.requests {
                let route = LabelValue(route);
                let _ = writeln!(
                    out,
                    "gym_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}"
                );
            }
            let _ = writeln!(out, "# HELP gym_request_duration_seconds Request latency by route.");
            let _ = writeln!(out, "# TYPE gym_request_duration_seconds histogram");
            for (route, histogram) in &m.latency {
                let route = LabelValue(route);
                histogram_lines(
                    &mut out,
                    "gym_request_duration_seconds",
                    &format!("route=\"{route}\","),
                    histogram,
                );
            }
            let _ = writeln!(
                out,
                "# HELP gym_retrieval_duration_seconds Retrieval and injection time per request."
            );
            let _ = writeln!(out, "# TYPE gym_retrieval_duration_seconds histogram");
            histogram_lines(&mut out, "gym_retrieval_duration_seconds", "", &m.retrieval);
            let _ = writeln!(
                out,
                "# HELP gym_library_requests_total Requests served with a library version."
            );
            let _ = writeln!(out, "# TYPE gym_library_requests_total counter");
            for ((library, version), (requests, _)) in &m.injections {
                let library = LabelValue(library);
                let _ = writeln!(
                    out,
                    "gym_library_requests_total{{library=\"{library}\",version=\"{version}\"}} {requests}"
                );
            }
            let _ = writeln!(
                out,
                "# HELP gym_experiences_injected_total Experiences injected into prompts."
            );
            let _ = writeln!(out, "# TYPE gym_experiences_injected_total counter");
            for ((library, version), (_, injected)) in &m.injections {
                let library = LabelValue(library);
                let _ = writeln!(
                    out,
                    "gym_experiences_injected_total{{library=\"{library}\",version=\"{version}\"}} {injected}"
                );
            }
            for (index, (name, help)) in [
                ("gym_hllm_theta", "Mean per-token entropy of answers (nats)"),
                ("gym_hllm_psi", "Summed confidence of the injected experiences"),
                ("gym_hllm_kappa", "Psi times theta"),
            ]
            .into_iter()
            .enumerate()
            {
                let _ = writeln!(out, "# HELP {name} {help}, summed over answers; see _count.");
                let _ = writeln!(out, "# TYPE {name} summary");
                for ((library, version), sums) in &m.hllm {
                    let (library, version) = (LabelValue(library), LabelValue(version));
                    let labels = format!("library=\"{library}\",version=\"{version}\"");
                    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", sums[index]);
                    let _ = writeln!(out, "{name}_count{{{labels}}} {}", sums[3]);
                }
            }
            let _ = writeln!(
                out,
                "# HELP gym_escalations_total Answers asked again of a stronger model."
            );
            let _ = writeln!(out, "# TYPE gym_escalations_total counter");
            for ((from, to), count) in &m.escalations {
                let (from, to) = (LabelValue(from), LabelValue(to));
                let _ = writeln!(
                    out,
                    "gym_escalations_total{{from=\"{from}\",to=\"{to}\"}} {count}"
                );
            }
            let _ = writeln!(out, "# HELP gym_tokens_total Tokens processed by the models.");
            let _ = writeln!(out, "# TYPE gym_tokens_total counter");
            let _ = writeln!(out, "gym_tokens_total{{kind=\"prompt\"}} {}", m.prompt_tokens);
            let _ = writeln!(
                out,
                "gym_tokens_total{{kind=\"completion\"}} {}",
                m.completion_tokens
            );
            serving_lines(&mut out, m);
            out
        })
    }
}

/// The vLLM-named families (`gym:` for `vllm:`).
fn serving_lines(out: &mut String, m: &Inner) {
    for (name, help, value) in [
        (
            "gym:prompt_tokens_total",
            "Prompt tokens processed.",
            m.prompt_tokens,
        ),
        (
            "gym:generation_tokens_total",
            "Generation tokens processed.",
            m.completion_tokens,
        ),
        (
            "gym:prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            m.prompt_tokens,
        ),
        (
            "gym:prefix_cache_hits_total",
            "Prompt tokens found in the prefix cache (not evaluated again).",
            m.cached_prompt_tokens,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} counter");
        let _ = writeln!(out, "{name} {value}");
    }
    for (name, help, histograms) in [
        (
            "gym:time_to_first_token_seconds",
            "Time to the first token, of streamed requests.",
            &m.first_token,
        ),
        (
            "gym:time_per_output_token_seconds",
            "Mean time per output token after the first, of streamed requests.",
            &m.per_output_token,
        ),
        (
            "gym:e2e_request_latency_seconds",
            "Time from a generation request's arrival to its last token.",
            &m.end_to_end,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (model, histogram) in histograms {
            let model = LabelValue(model);
            histogram_lines(out, name, &format!("model_name=\"{model}\","), histogram);
        }
    }
}

/// `gym:num_requests_running` and `gym:num_requests_waiting` per model: requests holding one
/// of an upstream's slots, and those waiting for a slot or in the local model's queue (which
/// hold a slot but are not decoding yet); and `gym:kv_cache_bytes`, the KV cache a local
/// model's thread holds now (it grows to the largest round, up to `--max-context`, and stays).
pub fn model_lines(router: &super::upstream::Router) -> String {
    use std::sync::atomic::Ordering::Relaxed;

    let mut by_model: BTreeMap<String, [u64; 3]> = BTreeMap::new();
    for upstream in router.upstreams() {
        let stats = upstream.backend.stats();
        let queued = stats.queued_requests;
        let running = upstream.stats.running.load(Relaxed);
        let entry = by_model
            .entry(upstream.backend.model().to_owned())
            .or_default();
        entry[0] += running.saturating_sub(queued);
        entry[1] += upstream.stats.waiting.load(Relaxed) + queued.min(running);
        entry[2] += stats.kv_cache_bytes;
    }
    let mut out = String::new();
    for (index, (name, help)) in [
        (
            "gym:num_requests_running",
            "Requests the model is working on.",
        ),
        (
            "gym:num_requests_waiting",
            "Requests waiting for the model.",
        ),
        (
            "gym:kv_cache_bytes",
            "Bytes of KV cache the local model holds (0 for a remote one).",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (model, values) in &by_model {
            let model = LabelValue(model);
            let _ = writeln!(out, "{name}{{model_name=\"{model}\"}} {}", values[index]);
        }
    }
    out
}

/// Each experience's usage counts (`usage.json` of the libraries the server has opened:
/// injections in training and served answers, helpful and harmful paired verdicts), and the
/// served injections not yet written there.
pub fn usage_lines(
    libraries: &[(
        String,
        BTreeMap<crate::library::ExperienceId, crate::library::Usage>,
    )],
    pending: u64,
) -> String {
    let mut out = String::new();
    for (name, help, count) in [
        (
            "gym_experience_injected",
            "Answers given with the experience in the prompt (usage.json)",
            (|u: &crate::library::Usage| u.injected) as fn(&crate::library::Usage) -> u64,
        ),
        (
            "gym_experience_helpful",
            "Paired comparisons the experience won (usage.json)",
            |u| u.helpful,
        ),
        (
            "gym_experience_harmful",
            "Paired comparisons the experience lost (usage.json)",
            |u| u.harmful,
        ),
        (
            "gym_experience_served_good",
            "Served answers with the experience that got good feedback (usage.json)",
            |u| u.served_good,
        ),
        (
            "gym_experience_served_bad",
            "Served answers with the experience that got bad feedback (usage.json)",
            |u| u.served_bad,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}.");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (library, usage) in libraries {
            let library = LabelValue(library);
            for (id, uses) in usage {
                let _ = writeln!(
                    out,
                    "{name}{{library=\"{library}\",experience=\"{id}\"}} {}",
                    count(uses)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP gym_experience_injections_pending Served injections not yet written to usage.json."
    );
    let _ = writeln!(out, "# TYPE gym_experience_injections_pending gauge");
    let _ = writeln!(out, "gym_experience_injections_pending {pending}");
    out
}

/// The router's per-upstream counters.
pub fn upstream_lines(router: &super::upstream::Router) -> String {
    use std::sync::atomic::Ordering::Relaxed;

    use super::upstream::Upstream;
    type Value = fn(&Upstream) -> f64;
    let families: [(&str, &str, &str, Value); 8] = [
        (
            "gym_upstream_requests_total",
            "counter",
            "Requests sent to an upstream.",
            |u| u.stats.requests.load(Relaxed) as f64,
        ),
        (
            "gym_upstream_failures_total",
            "counter",
            "Requests an upstream failed.",
            |u| u.stats.failures.load(Relaxed) as f64,
        ),
        (
            "gym_upstream_failovers_total",
            "counter",
            "Requests moved on to another upstream.",
            |u| u.stats.failovers.load(Relaxed) as f64,
        ),
        (
            "gym_upstream_latency_seconds_total",
            "counter",
            "Time spent in an upstream's calls.",
            |u| u.stats.latency_micros.load(Relaxed) as f64 / 1e6,
        ),
        (
            "gym_upstream_busy_total",
            "counter",
            "Requests refused with 429 because an upstream's queue was full.",
            |u| u.stats.busy.load(Relaxed) as f64,
        ),
        (
            "gym_upstream_generated_tokens_total",
            "counter",
            "Tokens an upstream sampled, including those of answers nobody waited for (local model only).",
            |u| u.backend.stats().generated_tokens as f64,
        ),
        (
            "gym_upstream_abandoned_total",
            "counter",
            "Requests whose client left or timed out before the answer; their decoding stopped (local model only).",
            |u| u.backend.stats().abandoned_requests as f64,
        ),
        (
            "gym_upstream_up",
            "gauge",
            "1 when an upstream takes traffic, 0 while it cools down.",
            |u| f64::from(u8::from(u.is_up())),
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for upstream in router.upstreams() {
            let _ = writeln!(
                out,
                "{name}{{upstream=\"{}\"}} {}",
                LabelValue(&upstream.name),
                value(upstream)
            );
        }
    }
    out
}

fn histogram_lines(out: &mut String, name: &str, labels: &str, histogram: &Histogram) {
    for (bound, count) in BUCKETS.iter().zip(&histogram.counts) {
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}le=\"+Inf\"}} {}",
        histogram.count
    );
    let labels = labels.trim_end_matches(',');
    let braces = |s: &str| {
        if s.is_empty() {
            String::new()
        } else {
            format!("{{{s}}}")
        }
    };
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels), histogram.sum);
    let _ = writeln!(out, "{name}_count{} {}", braces(labels), histogram.count);
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
