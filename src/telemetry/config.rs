//! Where spans go and how: the endpoint from `--otlp-endpoint` or the standard OpenTelemetry
//! environment, the headers, protocol, timeout and queue sizes, each checked here so a bad
//! value is an error at start naming the flag or variable, never a silent loss of spans.
//!
//! | setting | from, first found | default |
//! |---|---|---|
//! | endpoint | `--otlp-endpoint URL` (`URL/v1/traces`; a URL already ending in `/v1/traces` as it is), `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as it is), `OTEL_EXPORTER_OTLP_ENDPOINT` (`URL/v1/traces`) | none: no export |
//! | headers | `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,…`, values percent-encoded | none |
//! | protocol | `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` or `http/json` | `http/protobuf` |
//! | timeout | `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds) | 10000 |
//! | queue | `OTEL_BSP_MAX_QUEUE_SIZE` spans waiting, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` per request, `OTEL_BSP_SCHEDULE_DELAY` ms before a partial batch goes | 2048, 512, 5000 |
//!
//! `OTEL_SDK_DISABLED=true` turns export off whatever else is set. An empty variable counts
//! as unset, as the specification says.

use std::time::Duration;

use super::TelemetryError;

/// The wire format of the export requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `http/protobuf`: what every receiver takes.
    Protobuf,
    /// `http/json`.
    Json,
}

/// Everything the exporter needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    /// Request headers (names checked, values valid header text).
    pub headers: Vec<(String, String)>,
    pub protocol: Protocol,
    /// How long one export request may take, retries included.
    pub timeout: Duration,
    /// Spans waiting to be exported before new ones are dropped.
    pub queue: usize,
    /// Most spans in one export request.
    pub batch: usize,
    /// How long a partial batch waits for more spans.
    pub delay: Duration,
    /// Prompts and answers go into the spans.
    pub content: bool,
}

/// The signal path appended to a base endpoint.
const TRACES_PATH: &str = "v1/traces";

impl Config {
    /// The configuration of `--otlp-endpoint` (`flag`) and the environment (`env`), or `None`
    /// when neither names an endpoint (or `OTEL_SDK_DISABLED` is true).
    pub fn resolve(
        flag: Option<&str>,
        content: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TelemetryError> {
        let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let disabled = var("OTEL_SDK_DISABLED");
        if disabled
            .as_deref()
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            return Ok(None);
        }
        let flag = flag.filter(|value| !value.trim().is_empty());
        let endpoint = if let Some(url) = flag {
            Some(traces_url(url, "--otlp-endpoint", true)?)
        } else if let Some(url) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(traces_url(
                &url,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                false,
            )?)
        } else if let Some(url) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(traces_url(&url, "OTEL_EXPORTER_OTLP_ENDPOINT", true)?)
        } else {
            None
        };
        let Some(endpoint) = endpoint else {
            if content {
                return Err(TelemetryError::Config {
                    setting: "--otlp-content".into(),
                    why: "there is no endpoint to send spans to: give --otlp-endpoint or set \
                          OTEL_EXPORTER_OTLP_ENDPOINT"
                        .into(),
                });
            }
            return Ok(None);
        };
        let either = |specific: &'static str, general: &'static str| {
            var(specific)
                .map(|value| (specific, value))
                .or_else(|| var(general).map(|value| (general, value)))
        };
        let headers = match either(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ) {
            Some((name, value)) => parse_headers(name, &value)?,
            None => Vec::new(),
        };
        let protocol = match either(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ) {
            None => Protocol::Protobuf,
            Some((name, value)) => match value.trim() {
                "http/protobuf" => Protocol::Protobuf,
                "http/json" => Protocol::Json,
                other => {
                    return Err(TelemetryError::Config {
                        setting: name.into(),
                        why: format!(
                            "`{other}` is not a protocol Gym exports with: use http/protobuf \
                                 or http/json (Gym speaks OTLP over HTTP only, to the receiver's \
                                 HTTP port, usually 4318)"
                        ),
                    });
                }
            },
        };
        let millis = |specific: &'static str, general: Option<&'static str>, default: u64| {
            let found = match general {
                Some(general) => either(specific, general),
                None => var(specific).map(|value| (specific, value)),
            };
            match found {
                None => Ok(default),
                Some((name, value)) => whole(name, &value),
            }
        };
        let timeout = millis(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            Some("OTEL_EXPORTER_OTLP_TIMEOUT"),
            10_000,
        )?;
        let queue = millis("OTEL_BSP_MAX_QUEUE_SIZE", None, 2048)?;
        let batch = millis("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", None, 512)?;
        let delay = millis("OTEL_BSP_SCHEDULE_DELAY", None, 5000)?;
        for (name, value) in [
            ("OTEL_EXPORTER_OTLP_TIMEOUT", timeout),
            ("OTEL_BSP_MAX_QUEUE_SIZE", queue),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", batch),
        ] {
            if value == 0 {
                return Err(TelemetryError::Config {
                    setting: name.into(),
                    why: "must be at least 1".into(),
                });
            }
        }
        let queue = usize::try_from(queue).unwrap_or(usize::MAX);
        Ok(Some(Self {
            endpoint,
            headers,
            protocol,
            timeout: Duration::from_millis(timeout),
            queue,
            batch: usize::try_from(batch).unwrap_or(usize::MAX).min(queue),
            delay: Duration::from_millis(delay),
            content,
        }))
    }

    /// The endpoint with any user name and password left out, to print.
    pub fn shown_endpoint(&self) -> String {
        match reqwest::Url::parse(&self.endpoint) {
            Ok(mut url) => {
                let _ = url.set_username("");
                let _ = url.set_password(None);
                url.to_string()
            }
            Err(_) => self.endpoint.clone(),
        }
    }
}

fn whole(name: &str, value: &str) -> Result<u64, TelemetryError> {
    value.trim().parse().map_err(|_| TelemetryError::Config {
        setting: name.into(),
        why: format!("`{}` is not a whole number", value.trim()),
    })
}

/// The URL spans are posted to: `url` checked (http or https, with a host), with `v1/traces`
/// appended when `append` (unless it already ends so).
fn traces_url(url: &str, setting: &str, append: bool) -> Result<String, TelemetryError> {
    let bad = |why: String| TelemetryError::Config {
        setting: setting.into(),
        why,
    };
    let trimmed = url.trim();
    let parsed = reqwest::Url::parse(trimmed)
        .map_err(|error| bad(format!("`{trimmed}` is not a URL ({error})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!(
            "`{trimmed}` is not an http:// or https:// URL (Gym exports over OTLP/HTTP)"
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad(format!("`{trimmed}` has no host")));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad(format!(
            "`{trimmed}` has a query or fragment; give the receiver's base URL"
        )));
    }
    if !append || parsed.path().trim_end_matches('/').ends_with("/v1/traces") {
        return Ok(trimmed.to_owned());
    }
    Ok(if trimmed.ends_with('/') {
        format!("{trimmed}{TRACES_PATH}")
    } else {
        format!("{trimmed}/{TRACES_PATH}")
    })
}

/// `key=value,key=value` (W3C baggage style, values percent-decoded), each checked as an HTTP
/// header. Errors name the variable and the entry, never a value (they are often API keys).
fn parse_headers(name: &str, value: &str) -> Result<Vec<(String, String)>, TelemetryError> {
    let bad = |why: String| TelemetryError::Config {
        setting: name.into(),
        why,
    };
    let mut headers = Vec::new();
    for (index, entry) in value.split(',').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((key, raw)) = entry.split_once('=') else {
            return Err(bad(format!(
                "entry {} has no `=`: headers are written key=value,key=value",
                index + 1
            )));
        };
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(is_token_byte) {
            return Err(bad(format!(
                "entry {} (`{key}`) is not a valid header name",
                index + 1
            )));
        }
        let decoded = percent_decode(raw.trim()).ok_or_else(|| {
            bad(format!(
                "the value of `{key}` has a bad percent-encoding (%XX with two hex digits, UTF-8)"
            ))
        })?;
        if decoded
            .bytes()
            .any(|b| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            return Err(bad(format!(
                "the value of `{key}` holds control characters, which a header cannot"
            )));
        }
        headers.push((key.to_owned(), decoded));
    }
    Ok(headers)
}

/// The characters of an HTTP token (a header name), RFC 9110.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resolve(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Config>, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::resolve(flag, false, &|name| vars.get(name).cloned()).map_err(|e| e.to_string())
    }

    fn endpoint(flag: Option<&str>, vars: &[(&str, &str)]) -> Option<String> {
        resolve(flag, vars).unwrap().map(|c| c.endpoint)
    }

    #[test]
    fn off_unless_an_endpoint_is_named() {
        assert_eq!(resolve(None, &[]).unwrap(), None);
        assert_eq!(
            resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).unwrap(),
            None
        );
        assert_eq!(
            resolve(
                Some("http://127.0.0.1:4318"),
                &[("OTEL_SDK_DISABLED", "TRUE")]
            )
            .unwrap(),
            None
        );
        let error = Config::resolve(None, true, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--otlp-content"), "{error}");
    }

    #[test]
    fn endpoints_follow_the_specification() {
        assert_eq!(
            endpoint(Some("http://127.0.0.1:4318"), &[]).unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint(Some("http://collector:4318/base/"), &[]).unwrap(),
            "http://collector:4318/base/v1/traces"
        );
        assert_eq!(
            endpoint(Some("http://127.0.0.1:6006/v1/traces"), &[]).unwrap(),
            "http://127.0.0.1:6006/v1/traces",
            "a traces URL given whole is not doubled"
        );
        let both = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom",
            ),
        ];
        assert_eq!(endpoint(None, &both).unwrap(), "http://traces:4318/custom");
        assert_eq!(
            endpoint(None, &both[..1]).unwrap(),
            "http://general:4318/v1/traces"
        );
        assert_eq!(
            endpoint(Some("https://flag:4318"), &both).unwrap(),
            "https://flag:4318/v1/traces",
            "the flag wins"
        );
    }

    #[test]
    fn bad_endpoints_are_named() {
        for (flag, vars, names) in [
            (Some("not a url"), vec![], "--otlp-endpoint"),
            (Some("ftp://host:21"), vec![], "--otlp-endpoint"),
            (Some("http://host:4318/?x=1"), vec![], "--otlp-endpoint"),
            (
                None,
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (
                None,
                vec![("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "grpc://x")],
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            ),
        ] {
            let error = resolve(flag, &vars).unwrap_err();
            assert!(error.contains(names), "{flag:?} {vars:?}: {error}");
        }
    }

    #[test]
    fn headers_are_parsed_and_bad_ones_named_without_their_values() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let config = resolve(
            None,
            &[
                base,
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "authorization=Bearer%20s3cret, x-tenant = a%2Cb ,",
                ),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            config.headers,
            [
                ("authorization".to_string(), "Bearer s3cret".to_string()),
                ("x-tenant".to_string(), "a,b".to_string())
            ]
        );
        let specific = resolve(
            None,
            &[
                base,
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(specific.headers, [("b".to_string(), "2".to_string())]);
        for (value, expected) in [
            ("api-key", "entry 1 has no `=`"),
            ("ok=1,bad name=s3cret", "entry 2 (`bad name`)"),
            ("key=s3cret%zz", "bad percent-encoding"),
            ("key=s3cret%0A", "control characters"),
        ] {
            let error = resolve(None, &[base, ("OTEL_EXPORTER_OTLP_HEADERS", value)]).unwrap_err();
            assert!(
                error.contains("OTEL_EXPORTER_OTLP_HEADERS") && error.contains(expected),
                "{value}: {error}"
            );
            assert!(!error.contains("s3cret"), "a value was shown: {error}");
        }
    }

    #[test]
    fn protocol_timeout_and_queue() {
        let base = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        let config = resolve(None, &[base]).unwrap().unwrap();
        assert_eq!(config.protocol, Protocol::Protobuf);
        assert_eq!(config.timeout, Duration::from_secs(10));
        assert_eq!((config.queue, config.batch), (2048, 512));
        let config = resolve(
            None,
            &[
                base,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.protocol, Protocol::Json);
        assert_eq!(config.timeout, Duration::from_millis(1500));
        assert_eq!(
            (config.queue, config.batch),
            (8, 8),
            "a batch fits the queue"
        );
        assert_eq!(config.delay, Duration::from_millis(100));
        for (name, value, expected) in [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTLP over HTTP only"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "http",
                "not a protocol",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "not a whole number"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "at least 1"),
        ] {
            let error = resolve(None, &[base, (name, value)]).unwrap_err();
            assert!(
                error.contains(name) && error.contains(expected),
                "{name}={value}: {error}"
            );
        }
    }

    #[test]
    fn a_printed_endpoint_hides_credentials() {
        let config = resolve(Some("https://user:pw@host:4318"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(config.shown_endpoint(), "https://host:4318/v1/traces");
    }
}
