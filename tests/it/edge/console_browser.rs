//! The web console (`/`) in a real browser: headless Chromium, driven over the DevTools
//! protocol by a small blocking client of our own (`support::browser`; why not a CDP crate is
//! said there: the tests need navigate, evaluate, click, type and screenshot, which is a
//! JSON-over-WebSocket loop, not hundreds of generated protocol types to compile).
//!
//! Each test starts the server in process on a runtime of its own (memory store), writes two
//! days of three sensors through the line-protocol API, opens the page and checks it through
//! the DOM contract the page keeps for these tests (ids and `data-*` attributes: the sensor
//! list, the chart's `svg[data-mode][data-from][data-to]` and its `path.line[data-points]` and
//! `path.band`, `#live`, `#token-dialog`). Waits are for states, never for time
//! ([`Page::wait_for`] polls a JavaScript condition every 50 ms).
//!
//! A failing test keeps a screenshot and the page's HTML in `target/console-artifacts/`.
//! Chromium must be installed (`./scripts/test.sh` installs it); the tests fail without it.
//! `BUCKETD_CONSOLE_SCREENSHOT=<path>` makes the first test save a 1400×900 screenshot of a
//! drawn chart there (how `docs/console.png` is made).

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde_json::Value;

use crate::support::browser::{Page, WAIT, js_string};
use crate::support::server::{TestServer, memory_store};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;
const SITES: [&str; 3] = ["a", "b", "c"];
const TOKEN: &str = "console-test-token";
/// The rollup steps the page may choose from (the contract's ladder), in milliseconds.
const STEP_LADDER_MS: [i64; 13] = [
    1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000, 10_800_000,
    21_600_000, 43_200_000, 86_400_000,
];

/// One browser at a time: two Chromiums on a busy two-core machine make the timings
/// meaningless and the waits long.
static BROWSER: Mutex<()> = Mutex::new(());

fn sensor_key(site: &str) -> String {
    format!("env,site={site}")
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The readings' times, the same for every sensor: one every 10 minutes from two days ago,
/// then one a minute for the last two hours, the last at `now`. Two dense hours, so that the
/// sensor's recent rate (the page estimates it from its latest readings) is one a minute
/// however many of them the page looks at: 7 days at that rate are over 5,000 readings, so the
/// 7 d chart is drawn from rollups, while 15 minutes hold 15 or 16 raw readings.
fn timestamps(now: i64) -> Vec<i64> {
    let mut ts: Vec<i64> = (0..)
        .map(|i| now - 2 * DAY + i * 10 * MINUTE)
        .take_while(|t| *t < now - 2 * HOUR)
        .collect();
    ts.extend((0..=120).map(|i| now - 2 * HOUR + i * MINUTE));
    ts
}

/// A line-protocol line of `site` at `t`: temperature and humidity follow the day, the door
/// opens now and then.
fn line(site: &str, t: i64) -> String {
    let phase = site.as_bytes()[0] as f64;
    let day = (t % DAY) as f64 / DAY as f64 * std::f64::consts::TAU;
    let temperature =
        20.0 + phase / 40.0 + 4.0 * (day + phase).sin() + 0.4 * (t as f64 / 7e5).sin();
    let humidity = 55.0 - 12.0 * (day + phase).sin() + 1.5 * (t as f64 / 3.1e5).cos();
    let door = (t / (37 * MINUTE)) % 5 == 0;
    format!("env,site={site} temperature={temperature:.2},humidity={humidity:.1},door={door} {t}\n")
}

/// Writes `body` (line protocol, ms precision) through the HTTP API.
async fn write(server: &TestServer, body: String, token: Option<&str>) {
    let mut request = server
        .client
        .post(server.url("/write?precision=ms"))
        .header("content-type", "text/plain")
        .body(body);
    if let Some(token) = token {
        request = request.header("authorization", format!("Token {token}"));
    }
    let response = request.send().await.expect("write sent");
    let status = response.status();
    assert_eq!(status.as_u16(), 204, "write: {status} {}", response.text().await.unwrap());
}

/// A server on a runtime of its own (so the blocking browser client never holds it up), with
/// two days of the three sensors written; returns the readings' times too.
fn start(args: &[&str], token: Option<&str>) -> (tokio::runtime::Runtime, TestServer, Vec<i64>) {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = rt.block_on(TestServer::start(memory_store(), args));
    let ts = timestamps(now_ms());
    let body: String = SITES.iter().flat_map(|s| ts.iter().map(move |t| line(s, *t))).collect();
    rt.block_on(write(&server, body, token));
    (rt, server, ts)
}

/// Waits until the sensor list shows the three sensors.
fn wait_for_sensors(page: &mut Page) {
    page.wait_for("document.querySelectorAll('#sensor-list li[data-sensor]').length === 3", WAIT);
}

/// The chart as drawn now: the svg's attributes and each line's and band's field.
#[derive(Debug)]
struct Chart {
    mode: String,
    from: i64,
    to: i64,
    step_ms: Option<i64>,
    /// `(field, data-points)` of every `path.line`.
    lines: Vec<(String, i64)>,
    bands: BTreeSet<String>,
    caption: String,
}

const READ_CHART: &str = "(() => {
    const svg = document.querySelector('#chart svg');
    if (!svg) return null;
    return {
        mode: svg.getAttribute('data-mode'),
        from: svg.getAttribute('data-from'),
        to: svg.getAttribute('data-to'),
        step: svg.getAttribute('data-step-ms'),
        lines: [...svg.querySelectorAll('path.line')].map(p => [p.dataset.field, p.dataset.points]),
        bands: [...svg.querySelectorAll('path.band')].map(p => p.dataset.field),
        caption: (document.querySelector('#chart-caption') || {}).textContent || '',
    };
})()";

fn read_chart(page: &mut Page) -> Chart {
    let v = page.eval(READ_CHART);
    let int = |v: &Value| v.as_str().and_then(|s| s.parse::<i64>().ok());
    let chart = (|| {
        Some(Chart {
            mode: v["mode"].as_str()?.to_owned(),
            from: int(&v["from"])?,
            to: int(&v["to"])?,
            step_ms: int(&v["step"]),
            lines: v["lines"]
                .as_array()?
                .iter()
                .map(|l| Some((l[0].as_str()?.to_owned(), int(&l[1])?)))
                .collect::<Option<_>>()?,
            bands: v["bands"]
                .as_array()?
                .iter()
                .filter_map(|b| b.as_str().map(str::to_owned))
                .collect(),
            caption: v["caption"].as_str()?.to_owned(),
        })
    })();
    match chart {
        Some(chart) => chart,
        None => page.fail(&format!("the chart does not keep the contract's attributes: {v}")),
    }
}

/// A JavaScript condition: the chart shows a range of `span_ms` in `mode`, with a line for
/// temperature (and, for rollups, a band).
fn chart_shows(span_ms: i64, mode: &str) -> String {
    let band = if mode == "rollup" {
        " && svg.querySelector('path.band[data-field=\"temperature\"]')"
    } else {
        ""
    };
    format!(
        "(() => {{ const svg = document.querySelector('#chart svg'); \
         return !!(svg && svg.getAttribute('data-mode') === '{mode}' \
         && svg.getAttribute('data-to') - svg.getAttribute('data-from') === {span_ms} \
         && svg.querySelector('path.line[data-field=\"temperature\"][data-points]'){band}); }})()"
    )
}

fn count_in(ts: &[i64], from: i64, to: i64) -> i64 {
    ts.iter().filter(|t| (from..to).contains(*t)).count() as i64
}

/// The page's weight: the bytes of `/`, `/console/app.js` and `/console/app.css` (as served,
/// uncompressed).
fn page_weight(rt: &tokio::runtime::Runtime, server: &TestServer) -> usize {
    rt.block_on(async {
        let mut total = 0;
        for path in ["/", "/console/app.js", "/console/app.css"] {
            let response = server.get(path).await;
            assert!(response.status().is_success(), "GET {path}: {}", response.status());
            let bytes = response.bytes().await.unwrap().len();
            eprintln!("console page weight: {path}: {bytes} bytes");
            total += bytes;
        }
        total
    })
}

/// Nothing sticks out sideways: the document is no wider than the viewport, and no element
/// (outside a horizontally scrollable container) extends past its right edge. (Past the left
/// edge is where visually hidden elements such as a skip link wait; it scrolls nothing.)
const OVERFLOW: &str = "(() => {
    const vw = window.innerWidth;
    const out = [];
    const root = document.documentElement;
    if (root.scrollWidth > vw) out.push('document scrollWidth ' + root.scrollWidth + ' > ' + vw);
    const inScroller = el => {
        for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
            const o = getComputedStyle(p).overflowX;
            if (o === 'auto' || o === 'scroll') return true;
        }
        return false;
    };
    const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
        + (el.classList.length ? '.' + [...el.classList].join('.') : '');
    for (const el of document.body.querySelectorAll('*')) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) continue;
        if (r.right > vw + 0.5 && !inScroller(el))
            out.push(name(el) + ' spans ' + Math.round(r.left) + '..' + Math.round(r.right));
    }
    return out.slice(0, 20);
})()";

fn check_layout(page: &mut Page, width: u32, height: u32, mobile: bool) {
    page.set_viewport(width, height, mobile);
    page.wait_for(&format!("window.innerWidth === {width}"), WAIT);
    // Let a resize-driven redraw settle: the chart is redrawn to the new width.
    page.wait_for(
        "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))",
        WAIT,
    );
    let overflow = page.eval(OVERFLOW);
    page.check(overflow.as_array().is_some_and(Vec::is_empty), || {
        format!("at {width}×{height}, elements overflow the viewport: {overflow}")
    });
}

#[test]
fn console_lists_sensors_draws_raw_and_rollup_charts_and_follows_live_readings() {
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, server, ts) = start(&[], None);

    let weight = page_weight(&rt, &server);
    eprintln!("console page weight: {weight} bytes in all");
    assert!(weight < 200 * 1024, "the console weighs {weight} bytes, over 200 KB");

    let mut page = Page::launch(
        "console_lists_sensors_draws_raw_and_rollup_charts_and_follows_live_readings",
        1400,
        900,
    );
    page.navigate(&server.url("/"));

    // The sensor list names the three sensors, each with its measurement and tag.
    wait_for_sensors(&mut page);
    let listed = page.eval(
        "[...document.querySelectorAll('#sensor-list li[data-sensor]')]\
         .map(li => [li.dataset.sensor, li.textContent])",
    );
    let keys: BTreeSet<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l[0].as_str().map(str::to_owned))
        .collect();
    let expected: BTreeSet<String> = SITES.iter().map(|s| sensor_key(s)).collect();
    page.check(keys == expected, || format!("listed sensors {keys:?}, expected {expected:?}"));
    for entry in listed.as_array().unwrap() {
        let text = entry[1].as_str().unwrap_or_default();
        page.check(text.contains("env") && text.contains("site"), || {
            format!("the entry of {} does not show its measurement and tags: {text:?}", entry[0])
        });
    }

    // Opening a sensor draws a chart.
    let sensor = sensor_key("a");
    page.click(&format!("#sensor-list li[data-sensor={}] button", js_string(&sensor)));
    page.wait_for(
        "!!document.querySelector('#chart svg path.line[data-field=\"temperature\"][data-points]') \
         && !!document.body.dataset.firstChartMs",
        WAIT,
    );
    let first_chart_ms = page.eval("Number(document.body.dataset.firstChartMs)");
    eprintln!("console first chart drawn {first_chart_ms} ms after navigation start");
    let first_chart_ms = first_chart_ms.as_f64().unwrap_or(f64::NAN);
    page.check(first_chart_ms < 5000.0, || {
        format!("the first chart took {first_chart_ms} ms (more than 5 s)")
    });

    // 15 minutes: raw readings, one point per reading written in the range the page asked for.
    page.click("#range-presets button[data-range='15m']");
    page.wait_for(&chart_shows(15 * MINUTE, "raw"), WAIT);
    let chart = read_chart(&mut page);
    page.check(chart.mode == "raw", || format!("15 min chart: {chart:?}"));
    let want = count_in(&ts, chart.from, chart.to);
    page.check((14..=16).contains(&want), || format!("15 minutes hold {want} readings? {chart:?}"));
    for field in ["temperature", "humidity"] {
        let points = chart.lines.iter().find(|(f, _)| f == field).map(|(_, n)| *n);
        page.check(points == Some(want), || {
            format!("15 min raw chart: {field} has {points:?} points, {want} readings were written in [{}, {}): {chart:?}", chart.from, chart.to)
        });
    }
    page.check(!chart.lines.iter().any(|(f, _)| f == "door"), || {
        format!("the boolean field is drawn as a line: {chart:?}")
    });
    page.check(chart.step_ms.is_none() && chart.bands.is_empty(), || {
        format!("a raw chart has a step or bands: {chart:?}")
    });
    page.check(chart.caption.contains("raw"), || {
        format!("raw chart's caption: {:?}", chart.caption)
    });

    // 7 days: rollups with a min–max band, a step from the ladder with at most 2,000 steps,
    // one point per step that holds readings.
    page.click("#range-presets button[data-range='7d']");
    page.wait_for(&chart_shows(7 * DAY, "rollup"), WAIT);
    let chart = read_chart(&mut page);
    page.check(chart.mode == "rollup", || format!("7 d chart: {chart:?}"));
    let step = chart.step_ms.unwrap_or(0);
    page.check(STEP_LADDER_MS.contains(&step) && (chart.to - chart.from) / step <= 2000, || {
        format!("7 d rollup step {step} ms is not on the ladder or gives more than 2,000 steps: {chart:?}")
    });
    let steps: BTreeSet<i64> = ts
        .iter()
        .filter(|t| (chart.from..chart.to).contains(*t))
        .map(|t| t.div_euclid(step))
        .collect();
    for field in ["temperature", "humidity"] {
        let points = chart.lines.iter().find(|(f, _)| f == field).map(|(_, n)| *n);
        page.check(points == Some(steps.len() as i64) && chart.bands.contains(field), || {
            format!("7 d rollup chart: {field} has {points:?} points (expected {}, the steps of {step} ms holding readings) and bands {:?}", steps.len(), chart.bands)
        });
    }
    page.check(chart.caption.contains("rollup"), || {
        format!("rollup chart's caption: {:?}", chart.caption)
    });
    eprintln!("console 7 d chart: step {step} ms, {} points", steps.len());

    if let Some(path) = std::env::var_os("BUCKETD_CONSOLE_SCREENSHOT") {
        page.click("#range-presets button[data-range='24h']");
        page.wait_for(
            "(() => { const svg = document.querySelector('#chart svg'); \
             return !!svg && svg.getAttribute('data-to') - svg.getAttribute('data-from') === 86400000 \
             && !!svg.querySelector('path.line[data-field=\"temperature\"][data-points]'); })()",
            WAIT,
        );
        // The status bar's ingest rate needs two samples of the counter, 2 s apart.
        page.wait_for(
            "!document.querySelector('[data-status=\"ingest-rate\"]').textContent.startsWith('…')",
            WAIT,
        );
        std::fs::write(&path, page.screenshot()).expect("write the console screenshot");
        eprintln!("console screenshot saved to {}", std::path::Path::new(&path).display());
    }

    // Live: the chart follows the last minutes and picks up a reading written after it opened.
    page.click("#live");
    page.wait_for("document.querySelector('#live').checked", WAIT);
    let minutes = page.eval("Number(document.querySelector('#live-minutes').value)");
    let minutes = minutes.as_i64().unwrap_or(0);
    page.check(minutes > 0, || format!("#live-minutes is {minutes}"));
    page.wait_for(&chart_shows(minutes * MINUTE, "raw"), WAIT);
    let before = read_chart(&mut page);
    let fresh = now_ms().max(ts.last().unwrap() + 1);
    rt.block_on(write(&server, line("a", fresh), None));
    let mut all = ts.clone();
    all.push(fresh);
    // Exactly the readings in the window the page drew, the new one among them (the window
    // moves while we wait, so the count is compared with the window of the same drawing).
    let picked_up = format!(
        "(() => {{ const ts = {all:?}; const svg = document.querySelector('#chart svg'); \
         if (!svg) return false; const from = +svg.dataset.from, to = +svg.dataset.to; \
         const line = svg.querySelector('path.line[data-field=\"temperature\"]'); \
         return svg.dataset.mode === 'raw' && to > {fresh} && !!line \
         && +line.dataset.points === ts.filter(t => t >= from && t < to).length; }})()"
    );
    page.wait_for(&picked_up, WAIT);
    let after = read_chart(&mut page);
    eprintln!(
        "console live: temperature points {:?} before the new reading, {:?} after",
        before.lines.iter().find(|(f, _)| f == "temperature"),
        after.lines.iter().find(|(f, _)| f == "temperature")
    );

    let exceptions = page.exceptions;
    let errors = page.console_errors();
    page.check(exceptions == 0, || format!("the page threw: {errors:?}"));

    drop(page);
    rt.block_on(server.shutdown());
}

#[test]
fn console_fits_desktop_and_phone_viewports() {
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, server, _) = start(&[], None);
    let mut page = Page::launch("console_fits_desktop_and_phone_viewports", 1400, 900);
    page.navigate(&server.url("/"));
    wait_for_sensors(&mut page);
    // With a chart, its other fields and its data table: the most there is to lay out.
    page.click(&format!("#sensor-list li[data-sensor={}] button", js_string(&sensor_key("b"))));
    page.click("#range-presets button[data-range='1h']");
    page.wait_for(&chart_shows(HOUR, "raw"), WAIT);
    page.wait_for("document.querySelectorAll('#data-table tr').length > 1", WAIT);
    check_layout(&mut page, 1400, 900, false);
    check_layout(&mut page, 390, 844, true);
    drop(page);
    rt.block_on(server.shutdown());
}

#[test]
fn console_asks_for_the_token_and_shows_nothing_without_it() {
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let (rt, server, _) = start(&["--auth-token", TOKEN], Some(TOKEN));
    let mut page =
        Page::launch("console_asks_for_the_token_and_shows_nothing_without_it", 1400, 900);
    page.navigate(&server.url("/"));

    let dialog_visible = "(() => { const d = document.querySelector('#token-dialog'); \
                          return !!d && d.checkVisibility(); })()";
    page.wait_for(dialog_visible, WAIT);
    let listed = page.eval("document.querySelectorAll('#sensor-list li[data-sensor]').length");
    page.check(listed == 0, || format!("{listed} sensors listed without a token"));
    let chart = page.eval("document.querySelectorAll('#chart path.line').length");
    page.check(chart == 0, || format!("{chart} lines drawn without a token"));

    page.type_into("#token-input", TOKEN);
    page.click("#token-submit");
    wait_for_sensors(&mut page);
    page.wait_for(&format!("!{dialog_visible}"), WAIT);
    let kept = page.eval("sessionStorage.getItem('bucketd-token')");
    page.check(kept == TOKEN, || format!("sessionStorage keeps {kept} as the token"));

    drop(page);
    rt.block_on(server.shutdown());
}

/// The database picker: a token that may read one database is shown that one, its sensors and
/// nothing of the others (the status included); a token that may read all picks among them.
#[test]
fn console_picks_the_database_and_a_scoped_token_sees_only_its_own() {
    use bucketd::tokens::{ScopeSpec, create};
    let _one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tokens.json");
    let lab_only: ScopeSpec = "read:lab".parse().unwrap();
    let lab_token = create(&store, "lab-reader", &[lab_only], None).unwrap();
    let (rt, server, _) =
        start(&["--auth-token", TOKEN, "--token-store", store.to_str().unwrap()], Some(TOKEN));
    rt.block_on(async {
        let created = server
            .client
            .post(server.url("/query?q=CREATE%20DATABASE%20lab"))
            .header("authorization", format!("Token {TOKEN}"))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 200);
        let write = server
            .client
            .post(server.url("/write?db=lab&precision=ms"))
            .header("authorization", format!("Token {TOKEN}"))
            .body(format!("lab,site=z v=1 {}", now_ms()))
            .send()
            .await
            .unwrap();
        assert_eq!(write.status().as_u16(), 204);
    });
    let mut page =
        Page::launch("console_picks_the_database_and_a_scoped_token_sees_only_its_own", 1400, 900);
    page.navigate(&server.url("/"));
    page.wait_for("document.querySelector('#token-dialog').checkVisibility()", WAIT);
    page.type_into("#token-input", &lab_token);
    page.click("#token-submit");
    let only_lab = "(() => { const l = [...document.querySelectorAll('#sensor-list li[data-sensor]')]; \
                    return l.length === 1 && l[0].dataset.sensor === 'lab,site=z'; })()";
    page.wait_for(only_lab, WAIT);
    let options = page.eval("[...document.querySelectorAll('#database option')].map(o => o.value)");
    page.check(options == serde_json::json!(["lab"]), || format!("databases offered: {options}"));
    page.wait_for(
        "document.querySelector('[data-status=\"store\"]').textContent.includes('not shown')",
        WAIT,
    );
    let dialog = page.eval("document.querySelector('#token-dialog').checkVisibility()");
    page.check(dialog == false, || "the scoped token was asked for again".into());

    // A token that reads everything is offered every database, and picks one.
    page.eval(&format!("sessionStorage.setItem('bucketd-token', {})", js_string(TOKEN)));
    page.navigate(&server.url("/?again"));
    wait_for_sensors(&mut page);
    let options = page.eval("[...document.querySelectorAll('#database option')].map(o => o.value)");
    page.check(options == serde_json::json!(["bucketd", "lab"]), || format!("offered: {options}"));
    page.eval(
        "(() => { const s = document.querySelector('#database'); s.value = 'lab'; \
         s.dispatchEvent(new Event('change')); })()",
    );
    page.wait_for(only_lab, WAIT);
    drop(page);
    rt.block_on(server.shutdown());
}
