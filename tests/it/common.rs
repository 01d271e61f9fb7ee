//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A scratch directory holding a library directory, removed on drop.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("create a temporary directory"),
        }
    }

    /// The library directory (`--library-dir`).
    pub fn libraries(&self) -> PathBuf {
        self.dir.path().join("experiences")
    }

    /// Runs `gym ARGS…` with the library directory set; returns (status code, stdout, stderr).
    pub fn gym(&self, args: &[&str]) -> (i32, String, String) {
        let output = Command::new(env!("CARGO_BIN_EXE_gym"))
            .args(args)
            .current_dir(self.dir.path())
            .env("GYM_LIBRARY_DIR", self.libraries())
            .env("USER", "tester")
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("run the gym binary");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8(output.stdout).expect("stdout is UTF-8"),
            String::from_utf8(output.stderr).expect("stderr is UTF-8"),
        )
    }

    /// `gym ARGS…` against the default local model, with the library directory set and the
    /// caller's backend, model, distillation and config settings cleared. (`gym grpo` runs its
    /// stages on the 1.5B distiller unless given `--distill-model`: tests that are not about it
    /// pass [`small_distiller`].)
    pub fn model_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gym"));
        command
            .args(args)
            .current_dir(self.dir.path())
            .env("GYM_LIBRARY_DIR", self.libraries())
            .env(
                "GYM_MODELS_DIR",
                model_path().parent().expect("a models folder"),
            )
            .env("USER", "tester")
            .env_remove("GYM_BACKEND")
            .env_remove("GYM_TOP_K")
            .env_remove("GYM_MODEL")
            .env_remove("GYM_CONFIG")
            .env_remove("GYM_DISTILL_MODEL")
            .env_remove("GYM_DISTILL_BACKEND")
            .env_remove("GYM_DISTILL_BASE_URL");
        command
    }

    /// Runs `gym ARGS…` and expects success; returns stdout.
    /// Starts `gym serve ARGS` on a free port; returns the process and its base URL
    /// (`http://127.0.0.1:PORT/v1`), read from the line the server prints when it listens.
    pub fn serve(&self, args: &[&str]) -> (std::process::Child, String) {
        let mut all = vec!["serve", "--listen", "127.0.0.1:0"];
        all.extend(args);
        let mut child = self
            .model_command(&all)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let url = served_url(&mut child);
        (child, url)
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.gym(args);
        assert_eq!(code, 0, "gym {args:?} failed:\n{stderr}");
        stdout
    }

    /// Writes `sevens.jsonl`: `count` queries "What is i + (7 - i)?", all answered 7, for runs
    /// against the fake OpenAI server.
    pub fn write_sevens(&self, count: usize) {
        let lines: String = (0..count)
            .map(|i| {
                format!(
                    "{{\"id\": \"q{i}\", \"question\": \"What is {i} + {}?\", \"answer\": \"7\"}}\n",
                    7 - i
                )
            })
            .collect();
        std::fs::write(self.dir.path().join("sevens.jsonl"), lines).unwrap();
    }

    /// `sevens.jsonl` as [`Self::write_sevens`] writes it, the first `train` questions in the
    /// `train` split and the next `held_out` in `heldout`.
    pub fn write_sevens_split(&self, train: usize, held_out: usize) {
        let lines: String = (0..train + held_out)
            .map(|i| {
                format!(
                    "{{\"id\": \"q{i}\", \"question\": \"What is {i} + {}?\", \"answer\": \"7\", \"split\": \"{}\"}}\n",
                    7 - i as i64,
                    if i < train { "train" } else { "heldout" }
                )
            })
            .collect();
        std::fs::write(self.dir.path().join("sevens.jsonl"), lines).unwrap();
    }

    /// The lines of run `run`'s journal that parse (a torn last line is left out).
    pub fn journal(&self, run: &str) -> Vec<serde_json::Value> {
        let path = self.dir.path().join("runs").join(run).join("journal.jsonl");
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// Every version file of library `library`, oldest first.
    pub fn versions(&self, library: &str) -> Vec<serde_json::Value> {
        let dir = self.libraries().join(library).join("versions");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("read {}: {error}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|path| serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap())
            .collect()
    }

    /// Runs `gym ARGS…` and expects failure; returns stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let (code, stdout, stderr) = self.gym(args);
        assert_ne!(code, 0, "gym {args:?} succeeded:\n{stdout}");
        stderr
    }
}

/// POSTs the JSON `body` to `path` on `address` (`127.0.0.1:PORT`) over a fresh connection and
/// returns the whole raw response (status line, headers and body), waiting up to 300 s.
#[cfg(feature = "llama")]
pub fn post_raw(address: &str, path: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(300)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The base URL (`http://127.0.0.1:PORT/v1`) from the line a `gym serve` started with piped
/// stdout prints when it listens.
pub fn served_url(child: &mut std::process::Child) -> String {
    use std::io::{BufRead, BufReader};

    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout is piped"))
        .read_line(&mut line)
        .unwrap();
    line.split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned()
}

/// The default model fetched by `make setup` (`$GYM_MODELS_DIR`, else `models/` in the checkout).
pub fn model_path() -> PathBuf {
    let dir = std::env::var_os("GYM_MODELS_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"),
        PathBuf::from,
    );
    dir.join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// `--distill-model` flags that keep the distillation stages of `gym grpo` on the small default
/// model, for speed (the default distiller is the 1.5B model).
pub fn small_distiller() -> [String; 2] {
    ["--distill-model".into(), model_path().display().to_string()]
}

/// The Python with the `openai` package (from the venv `make setup` creates).
pub fn python() -> PathBuf {
    let cache = std::env::var_os("GYM_CACHE_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/gym"),
        PathBuf::from,
    );
    let python = cache.join("py/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make setup` (it creates the OpenAI client venv)",
        python.display()
    );
    python
}

/// The Python with the `anthropic` package (from the venv `make setup` creates).
pub fn anthropic_python() -> PathBuf {
    let cache = std::env::var_os("GYM_CACHE_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/gym"),
        PathBuf::from,
    );
    let python = cache.join("py-anthropic/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make setup` (it creates the Anthropic client venv)",
        python.display()
    );
    python
}

/// The Arize Phoenix server (`arize-phoenix`, an OpenTelemetry receiver, from the venv
/// `make setup` creates).
pub fn phoenix() -> PathBuf {
    let cache = std::env::var_os("GYM_CACHE_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/gym"),
        PathBuf::from,
    );
    let phoenix = cache.join("py-phoenix/bin/arize-phoenix");
    assert!(
        phoenix.exists(),
        "{} is missing: run `make setup` (it creates the Phoenix venv)",
        phoenix.display()
    );
    phoenix
}

/// The Python with the official MCP client (`mcp`, from the venv `make setup` creates).
#[cfg(feature = "mcp")]
pub fn mcp_python() -> PathBuf {
    let cache = std::env::var_os("GYM_CACHE_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/gym"),
        PathBuf::from,
    );
    let python = cache.join("py-mcp/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make setup` (it creates the MCP client venv)",
        python.display()
    );
    python
}

/// Every file under `dir` with its bytes, for before/after comparisons.
pub fn snapshot_tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("read a directory") {
            let path = entry.expect("read a directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("read a file");
                files.insert(path, bytes);
            }
        }
    }
    files
}

/// insta filters that hide what changes between runs: times and the scratch directory.
pub fn filters(scratch: &Scratch) -> Vec<(String, &'static str)> {
    vec![
        (
            regex_escape(&scratch.dir.path().display().to_string()),
            "[SCRATCH]",
        ),
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z".to_owned(),
            "[TIME]",
        ),
    ]
}

/// Filters for what a fresh key, ledger or chain makes different on every run: signatures,
/// transaction hashes, addresses and SHA-256 digests (longest first, so a shorter pattern never
/// eats the start of a longer run of hex).
pub const KEY_FILTERS: [(&str, &str); 4] = [
    (r"0x[0-9a-fA-F]{130}\b", "[SIGNATURE]"),
    (r"0x[0-9a-fA-F]{64}\b", "[HASH]"),
    (r"0x[0-9a-fA-F]{40}\b", "[ADDRESS]"),
    (r"\b[0-9a-f]{64}\b", "[SHA256]"),
];

/// Runs `test` (which takes insta snapshots) with the filters CLI snapshots share: first each
/// `(text, name)` of `names` (text replaced literally, so a test can show which voter's address
/// a line names), then the scratch directory and times ([`filters`]), then `extra` regexes
/// (e.g. [`KEY_FILTERS`]).
pub fn redacted(
    scratch: &Scratch,
    names: &[(&str, &str)],
    extra: &[(&str, &str)],
    test: impl FnOnce(),
) {
    let mut settings = insta::Settings::clone_current();
    for (text, name) in names {
        settings.add_filter(&regex_escape(text), *name);
    }
    for (pattern, replacement) in filters(scratch) {
        settings.add_filter(&pattern, replacement);
    }
    for (pattern, replacement) in extra {
        settings.add_filter(pattern, *replacement);
    }
    settings.bind(test);
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = "\\.+*?()|[]{}^$".contains(c);
            escape.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect()
}

/// The real MiniLM embedder, loaded once per test binary; `None` in a build without `embed`.
pub fn embedder() -> Option<std::sync::Arc<dyn gym::embed::Embedder>> {
    #[cfg(feature = "embed")]
    {
        use std::sync::{Arc, OnceLock};
        static EMBEDDER: OnceLock<Arc<gym::embed::minilm::MiniLmEmbedder>> = OnceLock::new();
        let embedder = EMBEDDER.get_or_init(|| {
            let dir = gym::embed::minilm::default_minilm_dir();
            Arc::new(
                gym::embed::minilm::MiniLmEmbedder::load(&dir)
                    .expect("load the MiniLM embedder (run `make setup`)"),
            )
        });
        Some(Arc::clone(embedder) as Arc<dyn gym::embed::Embedder>)
    }
    #[cfg(not(feature = "embed"))]
    None
}

/// A child process killed when dropped, so a failing test does not leave its server running
/// (holding the test's output pipe open).
pub struct Killed(pub std::process::Child);

impl Killed {
    /// SIGTERM, and a successful exit: `gym serve` finishes what is in flight and writes what
    /// its traffic log has queued (a SIGKILL would lose it).
    pub fn stop(mut self) {
        let pid = self.0.id().to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        assert!(self.0.wait().unwrap().success());
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gym serve` in front of `upstream` (the fake OpenAI server) with `--traffic-log
/// traffic.jsonl`; returns the server (killed when dropped), its address (`127.0.0.1:PORT`) and
/// the log's path.
pub fn serve_logged(
    scratch: &Scratch,
    upstream: &crate::fake_openai::FakeOpenAi,
) -> (Killed, String, PathBuf) {
    let upstreams = upstream.upstreams_file(scratch.dir.path());
    let log = scratch.dir.path().join("traffic.jsonl");
    let (server, url) = scratch.serve(&[
        "--upstreams",
        upstreams.to_str().unwrap(),
        "--traffic-log",
        log.to_str().unwrap(),
    ]);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    (Killed(server), address, log)
}

/// The whole response (status line, headers, body) to `GET path` at `address`.
pub fn get_raw(address: &str, path: &str) -> String {
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// The JSON a command printed, after checking it succeeded (the failure shows both streams).
/// Runs the Python script `script` with `args` (a client of `server`), then stops `server`;
/// the JSON the script printed.
pub fn python_client(
    script: &str,
    args: &[&str],
    server: &mut std::process::Child,
) -> serde_json::Value {
    let output = std::process::Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    json_stdout(&output)
}

pub fn json_stdout(output: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The records of a traffic log (its header line left out).
pub fn traffic_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|record| record["kind"] != "header")
        .collect()
}

/// A response read off a raw socket.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub json: serde_json::Value,
}

impl Reply {
    /// The value of header `name` (lowercase), if the response has it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request with exactly `headers` (plus `host: ADDRESS` when they have no
/// host) over a new connection to `address`; returns the status, headers and JSON body (null
/// when the body is not JSON). No HTTP client in between, so a test controls every byte.
pub fn send(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    use std::io::{Read, Write};

    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("host: {address}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    stream.write_all(head.as_bytes()).unwrap();
    // A server may answer (and close) before reading a large body to its end.
    let _ = stream.write_all(body.as_bytes());
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let response = String::from_utf8_lossy(&response);
    let status = response[9..12].parse().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let headers = head
        .lines()
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        json: serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    }
}

/// Library `letters` in `scratch`, version 1 with two lessons: one the letter-counting queries
/// retrieve, one they do not.
#[cfg_attr(not(feature = "llama"), allow(dead_code))]
pub fn letters_library(scratch: &Scratch) -> gym::library::Library {
    use gym::library::{Change, Library, Provenance, Settings};
    let mut library = Library::init(&scratch.libraries(), "letters", Settings::default()).unwrap();
    library
        .commit(
            &[
                Change::add(
                    "When counting a letter in a word, spell the word out letter by letter.",
                ),
                Change::add(
                    "When a recipe is scaled up, multiply every amount by the same factor.",
                ),
            ],
            Provenance::Init,
        )
        .unwrap();
    library
}
