//! A real headless browser for the console's tests: Debian's chromium,
//! driven through its chromedriver (WebDriver) with `fantoccini`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver and one headless chromium session; both stop when
/// dropped (call [`Browser::close`] first to end the session cleanly).
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub async fn start() -> Browser {
        for path in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                std::path::Path::new(path).exists(),
                "{path} is missing: the console's tests need Debian's chromium and chromium-driver (./test.sh installs them)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().unwrap();
        // As root, without the sandbox; without the background traffic a
        // closed network refuses (the machine notes on this kind).
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            &format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": CHROMIUM, "args": args }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("chromedriver started a chromium session");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// Waits (10 s at most) for an element matching `css`.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
    }

    /// Waits (10 s at most) until the element matching `css` says `text`.
    pub async fn wait_for_text(&self, css: &str, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if now.contains(text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css} says {now:?}, not {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs `script` (a function body that returns a value) in the page
    /// until `done` accepts its answer (15 s at most, else fails with
    /// `what`); returns that answer.
    pub async fn wait_for_js<T: serde::de::DeserializeOwned + std::fmt::Debug>(
        &self,
        what: &str,
        script: &str,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let answer = self.client.execute(script, vec![]).await.unwrap();
            let answer: T = serde_json::from_value(answer).unwrap();
            if done(&answer) {
                return answer;
            }
            assert!(Instant::now() < deadline, "{what}: {answer:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn click(&self, css: &str) {
        self.wait_for(css).await.click().await.unwrap();
    }

    /// The page's text.
    pub async fn text(&self) -> String {
        self.wait_for("body").await.text().await.unwrap()
    }

    /// Saves a screenshot of the page as `docs/console/{name}.png`, where
    /// `docs/console.md` shows it.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir: PathBuf = crate::harness::crate_dir().join("../../docs/console");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Logs in on the console at `url` with `token`.
    pub async fn log_in(&self, url: &str, token: &str) {
        self.client
            .goto(&format!("{url}/console/#/login"))
            .await
            .unwrap();
        self.wait_for("#token")
            .await
            .send_keys(token)
            .await
            .unwrap();
        self.click("#login").await;
        self.wait_for("#logout").await;
    }

    /// Ends the session (chromium exits); the driver stops on drop.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
