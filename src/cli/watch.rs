//! `gym watch URL`: the dashboard of a run served by `gym serve --runs-dir` on another machine,
//! drawn from its snapshot stream (`GET /v1/runs/{id}/dashboard`, server-sent events). Watching
//! is read-only: `q` leaves, the run goes on.
//!
//! Everything the server sends is untrusted text: the dashboard draws it through gym-tui's own
//! cleaning, and every remote string printed here goes through
//! [`strip_terminal_controls`] first, so a hostile server cannot drive the terminal.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use eventsource_stream::{EventStreamError, Eventsource as _};
use futures::{Stream, StreamExt as _};
use gym_tui::{RunState, SharedSnapshot, Snapshot, SnapshotSource as _, strip_terminal_controls};

use super::args::backend::runtime;

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// The run's dashboard stream, `http://HOST:PORT/v1/runs/RUN/dashboard` (a URL ending at
    /// the run, `…/v1/runs/RUN`, works too).
    url: String,

    /// Plain log lines instead of the dashboard (the default when stdout is not a terminal).
    #[arg(long, env = "GYM_NO_TUI")]
    no_tui: bool,

    /// Seconds between reconnection attempts after the stream drops.
    #[arg(long, default_value_t = 2.0)]
    retry: f64,

    /// Environment variable holding one of the server's API keys, sent as a bearer token when
    /// set: runs that learned from served traffic or imported traces need it.
    #[arg(long, default_value = "GYM_API_KEY")]
    api_key_env: String,
}

/// The dashboard URL for what the user typed.
fn stream_url(url: &str) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(url).with_context(|| format!("`{url}` is not a URL"))?;
    anyhow::ensure!(
        matches!(url.scheme(), "http" | "https"),
        "`{url}` is not an http(s) URL"
    );
    if !url.path().trim_end_matches('/').ends_with("/dashboard") {
        let path = format!("{}/dashboard", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    anyhow::ensure!(
        url.path().contains("/v1/runs/"),
        "`{url}` is not a run's stream: expected http://HOST:PORT/v1/runs/RUN/dashboard"
    );
    Ok(url)
}

/// The `data` of each `snapshot` event of a server-sent event byte stream, in order.
fn snapshots<S, B, E>(bytes: S) -> impl Stream<Item = Result<String, EventStreamError<E>>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    bytes.eventsource().filter_map(|event| {
        futures::future::ready(match event {
            Ok(event) if event.event == "snapshot" => Some(Ok(event.data)),
            Ok(_) => None,
            Err(error) => Some(Err(error)),
        })
    })
}

enum Streamed {
    /// The server ended the stream after the run's last event.
    Ended,
    /// The connection failed or dropped.
    Lost(String),
}

async fn stream_once(
    client: &reqwest::Client,
    url: &reqwest::Url,
    publish: &mut impl FnMut(Snapshot),
    closed: &dyn Fn() -> bool,
) -> Result<Streamed, anyhow::Error> {
    let response = match client
        .get(url.clone())
        .header("accept", "text/event-stream")
        .send()
        .await
    {
        Ok(response) => response,
        Err(error) => return Ok(Streamed::Lost(error.to_string())),
    };
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        // A wrong run or URL will not fix itself: stop instead of retrying.
        anyhow::bail!(
            "{url} answered {status}: {}",
            strip_terminal_controls(body.trim())
        );
    }
    let mut events = std::pin::pin!(snapshots(response.bytes_stream()));
    loop {
        // Wake up now and then so leaving the dashboard does not wait for the next event.
        let Ok(next) = tokio::time::timeout(Duration::from_millis(200), events.next()).await else {
            if closed() {
                return Ok(Streamed::Ended);
            }
            continue;
        };
        let data = match next {
            None => break,
            Some(Ok(data)) => data,
            Some(Err(EventStreamError::Transport(error))) => {
                return Ok(Streamed::Lost(error.to_string()));
            }
            // Not UTF-8 or not an event stream: reconnecting would get the same.
            Some(Err(error)) => {
                let error = error.to_string();
                anyhow::bail!(
                    "{url} sent something that is not a server-sent event stream: {}",
                    strip_terminal_controls(&error[..error.floor_char_boundary(200)])
                );
            }
        };
        match serde_json::from_str::<Snapshot>(&data) {
            Ok(snapshot) => publish(snapshot),
            // serde quotes the offending value, which came from the server.
            Err(error) => eprintln!(
                "gym watch: skipped an unreadable snapshot: {}",
                strip_terminal_controls(&error.to_string())
            ),
        }
    }
    Ok(Streamed::Ended)
}

/// Prints to `out` the log lines of `snapshot` that `printed` has not seen (plain mode).
fn print_new_lines(snapshot: &Snapshot, printed: &mut Vec<String>, out: &mut impl Write) {
    let log: Vec<String> = snapshot.log.iter().map(|l| l.text.clone()).collect();
    // The log is a bounded window: find where the lines already printed end in it.
    let overlap = (0..=log.len().min(printed.len()))
        .rev()
        .find(|n| printed[printed.len() - n..] == log[..*n])
        .unwrap_or(0);
    for line in &log[overlap..] {
        // A closed stdout ends nothing here: the stream loop stops on its own.
        let _ = writeln!(out, "{}", strip_terminal_controls(line));
    }
    *printed = log;
}

impl WatchArgs {
    pub fn run(self) -> anyhow::Result<ExitCode> {
        let url = stream_url(&self.url)?;
        let dashboard = !self.no_tui
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
            && std::io::IsTerminal::is_terminal(&std::io::stdin());
        let shared = SharedSnapshot::new();
        let screen = dashboard.then(|| {
            let shared = shared.clone();
            // Read-only: the first `q` leaves (the run is not ours to stop or pause).
            std::thread::spawn(move || {
                let source = shared.clone();
                gym_tui::run_dashboard(&source, &|command| {
                    if command == gym_tui::Command::Stop {
                        shared.close();
                    }
                })
            })
        });
        let rt = runtime()?;
        // rustls needs a process-wide crypto provider (for https URLs); a second install is a
        // harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut headers = reqwest::header::HeaderMap::new();
        if let Ok(key) = std::env::var(&self.api_key_env) {
            let mut value =
                reqwest::header::HeaderValue::from_str(&format!("Bearer {}", key.trim()))
                    .with_context(|| format!("{} is not a valid API key", self.api_key_env))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .default_headers(headers)
            .build()
            .context("building the HTTP client")?;
        let mut printed = Vec::new();
        let result = rt.block_on(async {
            let mut finished = false;
            loop {
                let mut publish = |snapshot: Snapshot| {
                    finished = matches!(snapshot.header.state, RunState::Finished);
                    if dashboard {
                        shared.publish(snapshot);
                    } else {
                        print_new_lines(&snapshot, &mut printed, &mut std::io::stdout().lock());
                    }
                };
                let outcome = stream_once(&client, &url, &mut publish, &|| shared.closed()).await?;
                if shared.closed() {
                    return anyhow::Ok(());
                }
                match outcome {
                    Streamed::Ended => return Ok(()),
                    Streamed::Lost(_) if finished => return Ok(()),
                    Streamed::Lost(why) => {
                        if !dashboard {
                            let why = strip_terminal_controls(&why);
                            eprintln!("gym watch: {url}: {why}; retrying");
                        }
                        tokio::time::sleep(Duration::from_secs_f64(self.retry.max(0.1))).await;
                        if shared.closed() {
                            return Ok(());
                        }
                    }
                }
            }
        });
        if result.is_err() {
            shared.close();
        } else if dashboard && !shared.closed() {
            // The run ended: its last snapshot stays on screen until the user leaves with `q`.
            shared.update(|snapshot| {
                snapshot.log.push(gym_tui::LogLine {
                    level: gym_tui::LogLevel::Info,
                    text: "the stream ended; q leaves".into(),
                });
            });
        }
        if let Some(screen) = screen {
            match screen.join() {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => eprintln!("the dashboard failed: {error}"),
                Err(_) => eprintln!("the dashboard thread panicked"),
            }
        }
        result?;
        Ok(ExitCode::SUCCESS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_completed_to_the_dashboard_stream() {
        assert_eq!(
            stream_url("http://gpu:8080/v1/runs/r1").unwrap().as_str(),
            "http://gpu:8080/v1/runs/r1/dashboard"
        );
        assert_eq!(
            stream_url("http://gpu:8080/v1/runs/r1/dashboard")
                .unwrap()
                .as_str(),
            "http://gpu:8080/v1/runs/r1/dashboard"
        );
        assert!(stream_url("gpu:8080").is_err());
        assert!(stream_url("http://gpu:8080/").is_err());
    }

    /// The snapshot events of `chunks`, or the first error as text.
    fn snapshots_of(chunks: &[&'static [u8]]) -> Vec<Result<String, String>> {
        let bytes = futures::stream::iter(chunks.iter().map(Ok::<_, std::convert::Infallible>));
        futures::executor::block_on(
            snapshots(bytes)
                .map(|event| event.map_err(|e| e.to_string()))
                .collect(),
        )
    }

    #[test]
    fn events_split_across_chunks_are_put_back_together() {
        assert_eq!(
            snapshots_of(&[
                b"event: snapshot\r\nid: 3\r\ndata: {\"a\"",
                b":1}\r\n\r\n: keep-alive\n\n",
                b"event: other\ndata: x\n\nevent: snapshot\ndata: y\n",
                b"data: z\n\ndata: unnamed\n\n",
                // A character split across chunks stays whole.
                b"event: snapshot\ndata: \xe2\x82",
                b"\xac\n\n",
            ]),
            [
                Ok(r#"{"a":1}"#.to_owned()),
                Ok("y\nz".to_owned()),
                Ok("\u{20ac}".to_owned())
            ]
        );
    }

    #[test]
    fn a_stream_that_is_not_utf8_is_an_error() {
        let events = snapshots_of(&[b"event: snapshot\ndata: \xff\n\n"]);
        assert!(
            matches!(&events[..], [Err(e)] if e.contains("UTF8")),
            "{events:?}"
        );
    }

    #[test]
    fn plain_mode_prints_each_log_line_once() {
        let mut printed = Vec::new();
        let mut snapshot = Snapshot::default();
        for text in ["a", "b"] {
            snapshot.log.push(gym_tui::LogLine {
                level: gym_tui::LogLevel::Info,
                text: text.into(),
            });
        }
        print_new_lines(&snapshot, &mut printed, &mut std::io::sink());
        assert_eq!(printed, ["a", "b"]);
        snapshot.log.remove(0);
        snapshot.log.push(gym_tui::LogLine {
            level: gym_tui::LogLevel::Info,
            text: "c".into(),
        });
        print_new_lines(&snapshot, &mut printed, &mut std::io::sink());
        assert_eq!(printed, ["b", "c"]);
    }

    /// A hostile server's log lines reach stdout without their escape sequences.
    #[test]
    fn remote_log_lines_lose_their_terminal_controls() {
        let mut snapshot = Snapshot::default();
        for text in [
            "step 1\x1b]0;pwned\x07 done",
            "\x1b[2Jcleared\r\x07",
            "ok\tfine",
        ] {
            snapshot.log.push(gym_tui::LogLine {
                level: gym_tui::LogLevel::Info,
                text: text.into(),
            });
        }
        let mut out = Vec::new();
        print_new_lines(&snapshot, &mut Vec::new(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "step 1 done\ncleared\nok\tfine\n"
        );
    }
}
