//! Chromium over WebDriver: finding chromedriver and the browser, a session, waiting for text,
//! screenshots.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

pub const WAIT: Duration = Duration::from_secs(30);

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

/// chromedriver and the browser, or `None` (after saying why) when no Chromium is installed
/// and `GYM_REQUIRE_BROWSER` is unset. A Chromium without its driver is a broken set-up, and
/// fails.
pub fn browser_binaries() -> Option<(PathBuf, Option<PathBuf>)> {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| on_path(name));
    if browser.is_none() {
        assert!(
            std::env::var_os("GYM_REQUIRE_BROWSER").is_none(),
            "GYM_REQUIRE_BROWSER is set but no chromium is on PATH: run scripts/setup (it \
             installs Debian's chromium and chromium-driver)"
        );
        eprintln!(
            "SKIPPED: the browser tests need chromium and chromedriver, and no chromium is on \
             PATH (Debian: apt-get install chromium chromium-driver, as scripts/setup does); set \
             GYM_REQUIRE_BROWSER=1 to make this a failure"
        );
        return None;
    }
    let driver = on_path("chromedriver").expect(
        "chromium is installed but chromedriver is not on PATH: install chromium-driver (scripts/setup does)",
    );
    Some((driver, browser))
}

/// A chromedriver process and a session in headless Chromium; both end on drop.
pub struct Browser {
    driver: Child,
    client: Option<Client>,
    pub downloads: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    pub async fn start(scratch: &Path) -> Option<Self> {
        let (driver_path, browser) = browser_binaries()?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let downloads = scratch.join("downloads");
        std::fs::create_dir_all(&downloads).unwrap();
        let mut options = json!({
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,1800",
                "--no-first-run", "--disable-extensions",
                format!("--user-data-dir={}", scratch.join("chromium-profile").display()),
            ],
            "prefs": {
                "download.default_directory": downloads.display().to_string(),
                "download.prompt_for_download": false,
            },
        });
        if let Some(browser) = browser {
            options["binary"] = json!(browser.display().to_string());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert("goog:chromeOptions".into(), options);
        let mut browser = Self {
            driver,
            client: None,
            downloads,
        };
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(error) if started.elapsed() < WAIT => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => panic!("no WebDriver session from chromedriver: {error}"),
            }
        };
        browser.client = Some(client);
        Some(browser)
    }

    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    pub async fn goto(&self, url: &str) {
        self.client().goto(url).await.unwrap();
    }

    /// The text of the first element matching `css`, once it contains `needle`.
    pub async fn text_with(&self, css: &str, needle: &str) -> String {
        let started = Instant::now();
        let mut last = Value::Null;
        while started.elapsed() < WAIT {
            last = self
                .client()
                .execute(
                    "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                    vec![json!(css)],
                )
                .await
                .unwrap();
            if last.as_str().is_some_and(|text| text.contains(needle)) {
                return last.as_str().unwrap().to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("`{css}` never contained {needle:?}; last text: {last}");
    }

    pub async fn script(&self, script: &str, args: Vec<Value>) -> Value {
        self.client().execute(script, args).await.unwrap()
    }

    /// A screenshot of the page at `width` px wide (and tall enough for most of it), scrolled to
    /// the element `scroll_to` when given. Nothing may be wider than the window: at phone width
    /// the page must not scroll sideways.
    pub async fn screenshot(
        &self,
        name: &str,
        width: u32,
        scroll_to: Option<&str>,
    ) -> (PathBuf, usize) {
        let client = self.client();
        client.set_window_size(width, 1800).await.unwrap();
        let started = Instant::now();
        loop {
            let inner = self.script("return window.innerWidth;", vec![]).await;
            if inner == json!(width) {
                break;
            }
            assert!(
                started.elapsed() < WAIT,
                "the window did not become {width} px wide (innerWidth {inner})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let overflow = self
            .script(
                "return document.documentElement.scrollWidth - window.innerWidth;",
                vec![],
            )
            .await;
        assert_eq!(overflow, json!(0), "{name} scrolls sideways at {width} px");
        let scrolled = match scroll_to {
            Some(css) => self
                .script(
                    "const e = document.querySelector(arguments[0]); if (e) e.scrollIntoView(); return !!e;",
                    vec![json!(css)],
                )
                .await,
            None => self.script("window.scrollTo(0, 0); return true;", vec![]).await,
        };
        assert_eq!(scrolled, json!(true), "{name}: no {scroll_to:?}");
        let png = client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("web-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}-{width}.png"));
        std::fs::write(&path, &png).unwrap();
        eprintln!("screenshot {} ({} bytes)", path.display(), png.len());
        client.set_window_size(1280, 1800).await.unwrap();
        (path, png.len())
    }
}
