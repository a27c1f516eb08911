//! A small W3C WebDriver client (over ureq) driving Debian's headless
//! Chromium through chromedriver, for the browser tests. `.ci/run`
//! installs the `chromium` and `chromium-driver` packages.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::hooks::KillOnDrop;

use serde_json::{Value, json};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running chromedriver; stopped when dropped.
pub struct Driver {
    _child: KillOnDrop,
    url: String,
}

pub use super::free_port;

impl Driver {
    /// Start chromedriver. Without Chromium the test fails, naming the
    /// install command (`None` only when `TOOLGATE_TEST_SKIP` says
    /// `chromium`).
    pub fn start() -> Option<Self> {
        if !Path::new(CHROMEDRIVER).exists() || !Path::new(CHROMIUM).exists() {
            super::missing::missing(
                "chromium",
                &format!("the browser tests need {CHROMIUM} and {CHROMEDRIVER}"),
                "apt-get install chromium chromium-driver",
            );
            return None;
        }
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Self {
            _child: KillOnDrop(child),
            url: format!("http://127.0.0.1:{port}"),
        };
        super::eventually("chromedriver to answer", || {
            ureq::get(&format!("{}/status", driver.url))
                .call()
                .is_ok_and(|mut r| {
                    r.body_mut()
                        .read_json::<Value>()
                        .is_ok_and(|v| v["value"]["ready"] == true)
                })
        });
        Some(driver)
    }

    /// A new browser with an empty profile.
    pub fn browser(&self, profile: &Path) -> Browser {
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                    "--window-size=1100,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        }}});
        let created = post(&format!("{}/session", self.url), &capabilities);
        let id = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"));
        Browser {
            session: format!("{}/session/{id}", self.url),
        }
    }
}

/// An HTTP client that hands WebDriver's errors (4xx/5xx with a JSON
/// body) back as answers.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn post(url: &str, body: &Value) -> Value {
    let mut response = agent()
        .post(url)
        .send_json(body)
        .expect("chromedriver answers");
    response
        .body_mut()
        .read_json()
        .expect("chromedriver answers JSON")
}

/// One browser session.
pub struct Browser {
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.session).call();
    }
}

impl Browser {
    fn command(&self, path: &str, body: Value) -> Value {
        let answer = post(&format!("{}/{path}", self.session), &body);
        if answer["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    fn get(&self, path: &str) -> Value {
        let mut response = agent()
            .get(&format!("{}/{path}", self.session))
            .call()
            .expect("chromedriver answers");
        let answer: Value = response.body_mut().read_json().unwrap();
        answer["value"].clone()
    }

    /// Navigate to `url`.
    pub fn open(&self, url: &str) {
        self.command("url", json!({"url": url}));
    }

    /// The current page's HTML.
    pub fn source(&self) -> String {
        self.get("source").as_str().unwrap_or_default().to_string()
    }

    /// The page's visible text; empty while a navigation is under way
    /// (no body yet, or one just replaced).
    pub fn text(&self) -> String {
        let found = post(
            &format!("{}/element", self.session),
            &json!({"using": "css selector", "value": "body"}),
        );
        let Some(body) = found["value"][ELEMENT].as_str() else {
            return String::new();
        };
        self.get(&format!("element/{body}/text"))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The current URL.
    pub fn url(&self) -> String {
        self.get("url").as_str().unwrap_or_default().to_string()
    }

    /// The first element matching a CSS selector (panics if none).
    pub fn find(&self, selector: &str) -> String {
        let found = self.command(
            "element",
            json!({"using": "css selector", "value": selector}),
        );
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {selector}: {found}"))
            .to_string()
    }

    /// Click the first element matching a CSS selector, finding it again
    /// if a live update replaced it meanwhile.
    pub fn click(&self, selector: &str) {
        for _ in 0..10 {
            let element = self.find(selector);
            let answer = post(
                &format!("{}/element/{element}/click", self.session),
                &json!({}),
            );
            match answer["value"]["error"].as_str() {
                None => return,
                Some("stale element reference") => continue,
                Some(_) => panic!("WebDriver click {selector}: {}", answer["value"]),
            }
        }
        panic!("{selector} kept being replaced");
    }

    /// Type into the first element matching a CSS selector.
    pub fn type_into(&self, selector: &str, text: &str) {
        let element = self.find(selector);
        self.command(&format!("element/{element}/value"), json!({"text": text}));
    }

    /// Save a PNG screenshot of the page.
    pub fn screenshot(&self, path: &Path) -> PathBuf {
        use base64::Engine as _;
        let data = self.get("screenshot");
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
        path.to_path_buf()
    }
}
