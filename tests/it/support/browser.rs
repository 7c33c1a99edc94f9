//! A headless Chromium driven over the DevTools protocol (CDP), for the web console's tests.
//!
//! Why a client of our own: the tests need five things of the browser (navigate, evaluate a
//! script, click, type, take a screenshot) and the CDP crates (`chromiumoxide`,
//! `headless_chrome`) bring hundreds of generated protocol types and a long compile for them.
//! This client is a plain JSON-over-WebSocket loop on `tungstenite`.
//!
//! It is **blocking** on purpose: the tests run the server on a runtime of its own and drive the
//! browser from the test's thread, so a wait never holds up the server it waits for, and `Drop`
//! can still take a screenshot when a test panics anywhere (an async client could not, from
//! `drop`).
//!
//! Chromium is found as `chromium` or `chromium-browser` on `PATH`; without it the test fails
//! and says that `./scripts/test.sh` installs it. Every failure through [`Page::fail`] (and any
//! other panic while a [`Page`] is alive) keeps a screenshot and the page's HTML under
//! `target/console-artifacts/<test>.{png,html}`.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long one protocol command may take before the test fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// What [`Page::wait_for`] is usually given.
pub const WAIT: Duration = Duration::from_secs(30);

/// Where failing tests keep their screenshot and HTML: `target/console-artifacts`.
pub fn artifacts_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory holds target/tmp")
        .join("console-artifacts")
}

fn find_chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "the web console's browser tests need headless Chromium, and neither `chromium` nor \
         `chromium-browser` is on PATH: ./scripts/test.sh installs it (Debian package \
         `chromium`), or run `apt-get install chromium`"
    );
}

/// One Chromium process with one page, attached to over CDP.
pub struct Page {
    /// The test's name: the artifacts' file name.
    name: String,
    child: Killed,
    ws: WebSocket<TcpStream>,
    session: String,
    next_id: u64,
    /// Uncaught exceptions, `console.error` calls and failed loads the page reported.
    console_errors: Vec<String>,
    /// How many of `console_errors` are uncaught exceptions.
    pub exceptions: usize,
    /// Chromium's last lines on stderr, for a browser that will not start or dies.
    stderr: Arc<Mutex<VecDeque<String>>>,
    artifacts_saved: bool,
    _profile: tempfile::TempDir,
}

impl Page {
    /// Starts Chromium with a `width` × `height` window and attaches to its page.
    pub fn launch(name: &str, width: u32, height: u32) -> Page {
        let binary = find_chromium();
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut child = Killed(
            Command::new(&binary)
                .args([
                    "--headless=new",
                    // CI runs as root, where Chromium's sandbox refuses to start.
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--hide-scrollbars",
                    "--remote-debugging-port=0",
                    &format!("--user-data-dir={}", profile.path().display()),
                    &format!("--window-size={width},{height}"),
                    "about:blank",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display())),
        );

        // Chromium says where it listens on stderr; the rest of stderr is kept for failures
        // (and must be drained, or Chromium blocks on a full pipe).
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = mpsc::channel();
        let lines = BufReader::new(child.0.stderr.take().unwrap());
        let kept = stderr.clone();
        std::thread::spawn(move || {
            for line in lines.lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(url.trim().to_owned());
                }
                let mut kept = kept.lock().unwrap();
                kept.push_back(line);
                if kept.len() > 50 {
                    kept.pop_front();
                }
            }
        });
        let url = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
            let tail: Vec<String> = stderr.lock().unwrap().iter().cloned().collect();
            panic!(
                "{} did not open its DevTools port; stderr:\n{}",
                binary.display(),
                tail.join("\n")
            )
        });

        let host = url.strip_prefix("ws://").and_then(|rest| rest.split('/').next()).unwrap();
        let stream = TcpStream::connect(host).expect("connect to the DevTools port");
        stream.set_nodelay(true).unwrap();
        // The handshake blocks (a timeout would interrupt it half-way); afterwards reads time
        // out every 200 ms, so a command without an answer fails at its deadline.
        stream.set_read_timeout(Some(COMMAND_TIMEOUT)).unwrap();
        let (ws, _) = tungstenite::client(url.as_str(), stream).expect("DevTools handshake");
        ws.get_ref().set_read_timeout(Some(Duration::from_millis(200))).unwrap();

        let mut page = Page {
            name: name.to_owned(),
            child,
            ws,
            session: String::new(),
            next_id: 1,
            console_errors: Vec::new(),
            exceptions: 0,
            stderr,
            artifacts_saved: false,
            _profile: profile,
        };
        let targets = page.command(None, "Target.getTargets", json!({}));
        let target = match targets["targetInfos"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["type"] == "page")
        {
            Some(t) => t["targetId"].as_str().unwrap().to_owned(),
            None => {
                page.command(None, "Target.createTarget", json!({"url": "about:blank"}))["targetId"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            }
        };
        let attached = page.command(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        page.session = attached["sessionId"].as_str().unwrap().to_owned();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({}));
        }
        page.set_viewport(width, height, false);
        page
    }

    /// Sends one command (to the browser when `session` is `None`) and returns its result;
    /// events that arrive meanwhile are recorded.
    fn try_command(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        self.ws
            .send(Message::Text(message.to_string().into()))
            .map_err(|e| format!("{method}: send: {e}"))?;
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            match self.ws.read() {
                Ok(Message::Text(text)) => {
                    let v: Value = serde_json::from_str(&text)
                        .map_err(|e| format!("{method}: bad message {e}: {text}"))?;
                    if v["id"] == id {
                        return match v.get("error") {
                            Some(error) => Err(format!("{method}: {error}")),
                            None => Ok(v["result"].clone()),
                        };
                    }
                    self.on_event(&v);
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() > deadline {
                        return Err(format!("{method}: no answer within {COMMAND_TIMEOUT:?}"));
                    }
                }
                Err(e) => return Err(format!("{method}: {e} (Chromium: {})", self.stderr_tail())),
            }
        }
    }

    fn command(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_command(session, method, params)
            .unwrap_or_else(|e| panic!("DevTools command failed: {e}"))
    }

    /// A command to the page.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        match self.try_command(Some(&session), method, params) {
            Ok(result) => result,
            Err(e) => self.fail(&format!("DevTools command failed: {e}")),
        }
    }

    fn on_event(&mut self, v: &Value) {
        if v["sessionId"] != self.session.as_str() {
            return;
        }
        let params = &v["params"];
        match v["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                let details = &params["exceptionDetails"];
                let text = details["exception"]["description"]
                    .as_str()
                    .or(details["text"].as_str())
                    .unwrap_or("?");
                self.exceptions += 1;
                self.console_errors.push(format!("uncaught: {text}"));
            }
            Some("Runtime.consoleAPICalled") if params["type"] == "error" => {
                let args: Vec<String> = params["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|a| match a.get("value") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => a["description"].as_str().unwrap_or("?").to_owned(),
                    })
                    .collect();
                self.console_errors.push(format!("console.error: {}", args.join(" ")));
            }
            Some("Log.entryAdded") if params["entry"]["level"] == "error" => {
                let entry = &params["entry"];
                self.console_errors.push(format!(
                    "{}: {} {}",
                    entry["source"].as_str().unwrap_or("log"),
                    entry["text"].as_str().unwrap_or("?"),
                    entry["url"].as_str().unwrap_or("")
                ));
            }
            _ => {}
        }
    }

    /// Every error the page reported so far (events still in flight are collected first).
    pub fn console_errors(&mut self) -> Vec<String> {
        let session = self.session.clone();
        let _ = self.try_command(Some(&session), "Runtime.evaluate", json!({"expression": "0"}));
        self.console_errors.clone()
    }

    fn stderr_tail(&self) -> String {
        self.stderr
            .lock()
            .unwrap()
            .iter()
            .rev()
            .take(10)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Viewport size; `mobile` emulates a phone (the page's `<meta name="viewport">` applies).
    pub fn set_viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }

    /// Opens `url` and waits until its document has loaded. The fragment is left out of the
    /// comparison: a page may rewrite it as soon as it runs (the console records the chosen
    /// sensor there), and on a busy machine the first look can come after that, when the
    /// address no longer equals `url` although its document loaded. So a second navigation
    /// to the document already shown would not wait for the reload; no test makes one.
    pub fn navigate(&mut self, url: &str) {
        let result = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = result["errorText"].as_str() {
            self.fail(&format!("navigating to {url}: {error}"));
        }
        let document = url.split('#').next().unwrap_or(url);
        self.wait_for(
            &format!(
                "location.href.split('#')[0] === {} && document.readyState === 'complete'",
                js_string(document)
            ),
            WAIT,
        );
    }

    /// Evaluates `expression` (awaiting a promise) and returns its value as JSON.
    pub fn try_eval(&mut self, expression: &str) -> Result<Value, String> {
        let session = self.session.clone();
        let result = self.try_command(
            Some(&session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        )?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str())
                .unwrap_or("exception");
            return Err(text.to_owned());
        }
        Ok(result["result"].get("value").cloned().unwrap_or(Value::Null))
    }

    /// Like [`Page::try_eval`]; an exception fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        match self.try_eval(expression) {
            Ok(v) => v,
            Err(e) => self.fail(&format!("evaluating `{expression}` threw: {e}")),
        }
    }

    /// Polls `expression` every 50 ms until it is `true`; after `timeout` the test fails with
    /// the expression, a screenshot, the page's HTML and its console errors.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let last = loop {
            let last = match self.try_eval(expression) {
                Ok(Value::Bool(true)) => return,
                Ok(v) => v,
                // A page between documents has no context to evaluate in: not yet.
                Err(e) => Value::String(format!("threw {e}")),
            };
            if Instant::now() > deadline {
                break last;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.fail(&format!(
            "timed out after {timeout:?} waiting until `{expression}` (last value: {last})"
        ))
    }

    /// Clicks the middle of the first element matching `selector` with real mouse events, after
    /// scrolling it into view: what is on top of it there gets the click, as for a user.
    pub fn click(&mut self, selector: &str) {
        let center = self.eval(&format!(
            "(() => {{ const el = document.querySelector({s}); if (!el) return null; \
             el.scrollIntoView({{block: 'center', inline: 'center'}}); \
             const r = el.getBoundingClientRect(); \
             return r.width > 0 && r.height > 0 ? [r.left + r.width / 2, r.top + r.height / 2] : 'hidden'; }})()",
            s = js_string(selector)
        ));
        let (x, y) = match center.as_array().map(|a| (a[0].as_f64(), a[1].as_f64())) {
            Some((Some(x), Some(y))) => (x, y),
            _ => self.fail(&format!("cannot click `{selector}`: {center}")),
        };
        let mut event = json!({"type": "mouseMoved", "x": x, "y": y});
        self.call("Input.dispatchMouseEvent", event.clone());
        event["button"] = "left".into();
        event["clickCount"] = 1.into();
        for kind in ["mousePressed", "mouseReleased"] {
            event["type"] = kind.into();
            self.call("Input.dispatchMouseEvent", event.clone());
        }
    }

    /// Focuses `selector`, clears it and types `text` into it as keyboard input would.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let focused = self.eval(&format!(
            "(() => {{ const el = document.querySelector({s}); if (!el) return false; \
             el.focus(); el.value = ''; return document.activeElement === el; }})()",
            s = js_string(selector)
        ));
        if focused != Value::Bool(true) {
            self.fail(&format!("cannot focus `{selector}` to type into it"));
        }
        self.call("Input.insertText", json!({"text": text}));
    }

    /// A PNG of the viewport.
    pub fn screenshot(&mut self) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .expect("the screenshot is base64")
    }

    /// Saves a screenshot and the page's HTML under [`artifacts_dir`]; returns the PNG's path.
    fn save_artifacts(&mut self) -> PathBuf {
        self.artifacts_saved = true;
        let dir = artifacts_dir();
        let _ = std::fs::create_dir_all(&dir);
        let png = dir.join(format!("{}.png", self.name));
        let session = self.session.clone();
        if let Ok(shot) =
            self.try_command(Some(&session), "Page.captureScreenshot", json!({"format": "png"}))
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD
                .decode(shot["data"].as_str().unwrap_or_default())
        {
            let _ = std::fs::write(&png, bytes);
        }
        if let Ok(Value::String(html)) = self.try_eval("document.documentElement.outerHTML") {
            let _ = std::fs::write(dir.join(format!("{}.html", self.name)), html);
        }
        png
    }

    /// Fails the test with `message`, keeping a screenshot and the page's HTML and listing the
    /// page's console errors.
    pub fn fail(&mut self, message: &str) -> ! {
        let png = self.save_artifacts();
        let errors = self.console_errors();
        panic!(
            "{message}\n  screenshot: {}\n  page HTML: {}\n  console errors ({}):\n    {}",
            png.display(),
            png.with_extension("html").display(),
            errors.len(),
            errors.join("\n    ")
        );
    }

    /// Fails the test (as [`Page::fail`]) unless `ok`.
    pub fn check(&mut self, ok: bool, message: impl FnOnce() -> String) {
        if !ok {
            self.fail(&message());
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.artifacts_saved {
            let png = self.save_artifacts();
            eprintln!("console test failed: screenshot kept at {}", png.display());
        }
        // Closing through the protocol lets Chromium take its helper processes down with it.
        let _ = self.try_command(None, "Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Still running: `Killed` ends it.
    }
}

/// The Chromium process, killed when dropped: also when the test fails before the page is
/// attached, so no browser outlives its test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// `s` as a JavaScript string literal.
pub fn js_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
