// bucketd console. Plain JavaScript, no libraries; talks only to this server's JSON API.
'use strict';

(function () {
  const TOKEN_KEY = 'bucketd-token';
  const PAGE = 100;
  const RAW_LIMIT = 5000;
  const RAW_MAX_RANGE_MS = 6 * 3600e3;
  const MAX_STEPS = 2000;
  const TABLE_ROWS = 1000;
  const LIVE_EVERY_MS = 2000;
  const STATUS_EVERY_MS = 2000;
  const SPARK_POINTS = 60;
  const LADDER = [
    ['1s', 1e3], ['5s', 5e3], ['10s', 10e3], ['30s', 30e3], ['1m', 60e3], ['5m', 300e3],
    ['10m', 600e3], ['30m', 1800e3], ['1h', 3600e3], ['3h', 10800e3], ['6h', 21600e3],
    ['12h', 43200e3], ['1d', 86400e3],
  ];
  const PRESETS = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 86400e3, '30d': 30 * 86400e3 };
  const COLORS = ['#0b5cad', '#c0392b', '#1e7b3a', '#8e44ad', '#b36b00', '#00838f', '#6d4c41', '#ad1457', '#455a64', '#558b2f'];
  const SVGNS = 'http://www.w3.org/2000/svg';

  const $ = (sel) => document.querySelector(sel);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  };
  const sv = (tag, attrs) => {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  };

  // ---------------------------------------------------------------- API and token

  let tokenWait = null; // a promise resolved when the user gives a token

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { return ''; }
  }

  function askToken(refused) {
    if (tokenWait) return tokenWait;
    const dialog = $('#token-dialog');
    $('#token-error').hidden = !refused;
    tokenWait = new Promise((resolve) => {
      const form = $('#token-form');
      const onSubmit = (ev) => {
        ev.preventDefault();
        const t = $('#token-input').value.trim();
        if (!t) return;
        try { sessionStorage.setItem(TOKEN_KEY, t); } catch (_) { /* private mode */ }
        form.removeEventListener('submit', onSubmit);
        if (dialog.open) dialog.close();
        tokenWait = null;
        resolve();
      };
      form.addEventListener('submit', onSubmit);
    });
    if (!dialog.open) {
      if (typeof dialog.showModal === 'function') dialog.showModal(); else dialog.setAttribute('open', '');
    }
    $('#token-input').focus();
    return tokenWait;
  }
  // Escape must not leave the page without a token and without a way back.
  $('#token-dialog').addEventListener('cancel', (ev) => ev.preventDefault());

  // The database the sensors, readings and InfluxQL calls read.
  let database = 'bucketd';
  const DATABASE_PATHS = ['/api/v1/sensors?', '/api/v1/readings?', '/api/v1/rollups?', '/query?'];

  // GET `path` on this server with the session's token, in the chosen database; asks for a
  // token on 401 (none, or a wrong one) and 403 (one that may not read) and retries. With
  // `kind` 'server' (the status, about the whole server), a 403 is an error instead: a token
  // scoped to some databases may not see it, and may still read them.
  async function api(path, kind) {
    if (DATABASE_PATHS.some((p) => path.startsWith(p))) path += '&' + qs({ db: database });
    for (;;) {
      if (tokenWait) await tokenWait;
      const headers = {};
      const t = token();
      if (t) headers.Authorization = 'Token ' + t;
      const r = await fetch(path, { headers, cache: 'no-store' });
      if (r.status === 403 && kind === 'server') throw new Error('not shown to this token');
      if (r.status === 401 || r.status === 403) {
        if (t) { try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* ignore */ } }
        await askToken(!!t);
        continue;
      }
      if (!r.ok) {
        let msg = r.status + ' ' + r.statusText;
        try { const b = await r.json(); if (b && b.error) msg = b.error; } catch (_) { /* not JSON */ }
        throw new Error(msg);
      }
      return kind === 'blob' ? r.blob() : r.json();
    }
  }

  const qs = (params) => Object.entries(params)
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => encodeURIComponent(k) + '=' + encodeURIComponent(x)))
    .join('&');

  // ---------------------------------------------------------------- formatting

  const iso = (ms) => new Date(ms).toISOString();
  const toLocalInput = (ms) => iso(ms).slice(0, 19);
  function fromLocalInput(v) {
    if (!v) return NaN;
    const s = v.length === 16 ? v + ':00' : v;
    return Date.parse(s + 'Z');
  }
  function fmtTime(ms, span) {
    const s = iso(ms);
    if (span != null && span <= 2 * 86400e3) return s.slice(11, span <= 3600e3 ? 19 : 16);
    return s.slice(5, 10) + ' ' + s.slice(11, 16);
  }
  const fmtFull = (ms) => iso(ms).replace('T', ' ').replace('Z', ' UTC');
  function fmtNum(v) {
    if (typeof v !== 'number' || !isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a !== 0 && (a >= 1e7 || a < 1e-3)) return v.toExponential(3);
    return (Math.round(v * 1000) / 1000).toLocaleString('en-US', { maximumFractionDigits: 3 });
  }
  function fmtBytes(n) {
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
  }
  const fmtInt = (n) => Number(n).toLocaleString('en-US');
  function fmtValue(v) {
    if (typeof v === 'number') return fmtNum(v);
    return typeof v === 'string' ? v : String(v);
  }

  // ---------------------------------------------------------------- sensors

  const list = $('#sensor-list');
  const more = $('#more-sensors');
  let listGen = 0;
  let nextCursor = null;
  let shownSensors = 0;
  const latestCache = new Map(); // sensor key -> latest reading (or null when none)
  const latestQueue = [];
  let latestInFlight = 0;

  function sensorQuery(cursor) {
    const tag = $('#tag-filter').value;
    return '/api/v1/sensors?' + qs({ limit: PAGE, prefix: $('#sensor-search').value, tag, cursor });
  }

  async function loadSensors(reset) {
    const gen = reset ? ++listGen : listGen;
    if (reset) { nextCursor = null; shownSensors = 0; }
    more.disabled = true;
    let page;
    try {
      page = await api(sensorQuery(reset ? null : nextCursor));
    } catch (e) {
      if (gen === listGen) $('#sensor-count').textContent = 'Cannot list sensors: ' + e.message;
      more.disabled = false;
      return;
    }
    if (gen !== listGen) return;
    if (reset) list.replaceChildren();
    for (const s of page.sensors) list.append(sensorItem(s));
    shownSensors += page.sensors.length;
    nextCursor = page.next_cursor;
    more.hidden = !nextCursor;
    more.disabled = false;
    $('#sensor-count').textContent = shownSensors === 0
      ? 'No sensors match.'
      : fmtInt(shownSensors) + (nextCursor ? ' sensors shown, more follow.' : ' sensors.');
    if (!chart.sensor && page.sensors.length && reset && !chart.opening) openSensor(page.sensors[0]);
  }

  const fieldsObserver = 'IntersectionObserver' in window
    ? new IntersectionObserver((entries) => {
      for (const en of entries) {
        if (en.isIntersecting) { fieldsObserver.unobserve(en.target); queueLatest(en.target); }
      }
    })
    : null;

  function sensorItem(s) {
    const li = el('li', { 'data-sensor': s.key });
    if (chart.sensor && chart.sensor.key === s.key) li.classList.add('selected');
    const b = el('button', { type: 'button', 'aria-label': 'Open ' + s.key }, s.key);
    b.addEventListener('click', () => openSensor(s));
    li.append(b);
    const meta = el('div', { class: 'meta' });
    meta.append(el('span', { class: 'm' }, s.measurement), ' ');
    for (const [k, v] of Object.entries(s.tags || {})) meta.append(el('span', { class: 'tag' }, k + '=' + v));
    li.append(meta);
    li.append(el('div', { class: 'meta' }, 'first ' + fmtFull(Date.parse(s.first)) + ' · last ' + fmtFull(Date.parse(s.last))));
    li.append(el('div', { class: 'fields' }, 'fields: …'));
    if (fieldsObserver) fieldsObserver.observe(li); else queueLatest(li);
    return li;
  }

  function describeFields(reading) {
    if (!reading) return 'fields: none in the store yet';
    return 'fields: ' + Object.entries(reading.fields)
      .map(([k, v]) => k + ' (' + (typeof v === 'number' ? 'number' : typeof v) + ')').join(', ');
  }

  function queueLatest(li) {
    const key = li.dataset.sensor;
    if (latestCache.has(key)) { li.querySelector('.fields').textContent = describeFields(latestCache.get(key)); return; }
    latestQueue.push(li);
    pumpLatest();
  }

  // At most 4 of these small requests at once, and only for entries that were on screen.
  function pumpLatest() {
    while (latestInFlight < 4 && latestQueue.length) {
      const li = latestQueue.shift();
      if (!li.isConnected) continue;
      const key = li.dataset.sensor;
      latestInFlight++;
      api('/api/v1/readings?' + qs({ sensor: key, order: 'desc', limit: 1, from: 0, to: Date.now() + 86400e3 }))
        .then((p) => {
          const r = p.readings[0] || null;
          latestCache.set(key, r);
          li.querySelector('.fields').textContent = describeFields(r);
        })
        .catch(() => { li.querySelector('.fields').textContent = 'fields: unavailable'; })
        .finally(() => { latestInFlight--; pumpLatest(); });
    }
  }

  async function loadTags() {
    const sel = $('#tag-filter');
    let body;
    try {
      body = await api('/query?' + qs({ q: 'SHOW TAG VALUES WITH KEY =~ /.*/ LIMIT 1000' }));
    } catch (_) { return; }
    const pairs = new Set();
    for (const res of body.results || []) {
      for (const series of res.series || []) {
        const ki = series.columns.indexOf('key');
        const vi = series.columns.indexOf('value');
        for (const row of series.values || []) pairs.add(row[ki] + ':' + row[vi]);
      }
    }
    const keep = sel.value;
    sel.replaceChildren(el('option', { value: '' }, 'any tag'));
    for (const p of [...pairs].sort().slice(0, 1000)) sel.append(el('option', { value: p }, p));
    sel.value = keep;
  }

  let searchTimer = 0;
  $('#sensor-search').addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => loadSensors(true), 250);
  });
  $('#tag-filter').addEventListener('change', () => loadSensors(true));
  more.addEventListener('click', () => loadSensors(false));

  // ---------------------------------------------------------------- chart state

  const chart = {
    sensor: null,       // {key, measurement, tags, first, last}
    opening: false,
    from: 0, to: 0,
    preset: '1h',       // or null for a custom range
    zoomStack: [],
    rate: null,         // readings per ms, from the latest readings
    hidden: new Set(),  // fields toggled off
    gen: 0,
    data: null,         // what is drawn: {mode, stepMs, stepName, series: {f: [[t, v]]}, bands: {f: [[t, min, max]]}, readings}
    loading: false,
  };
  let firstChartDone = false;

  function setRange(from, to, preset) {
    chart.from = from;
    chart.to = to;
    chart.preset = preset || null;
    $('#from').value = toLocalInput(from);
    $('#to').value = toLocalInput(to);
    for (const b of document.querySelectorAll('#range-presets button')) {
      b.setAttribute('aria-pressed', String(b.dataset.range === chart.preset));
    }
    saveHash();
  }

  // The address keeps the sensor and the range, so a view can be reloaded or shared.
  function saveHash() {
    if (!chart.sensor) return;
    const range = chart.preset ? { range: chart.preset } : { from: chart.from, to: chart.to };
    const live = $('#live').checked ? { live: liveMinutes() } : {};
    const where = { db: database, sensor: chart.sensor.key };
    history.replaceState(null, '', '#' + qs(Object.assign(where, range, live)));
  }

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    if (h.get('db')) database = h.get('db');
    const key = h.get('sensor');
    if (!key) return false;
    const from = Number(h.get('from')), to = Number(h.get('to'));
    if (PRESETS[h.get('range')]) presetRange(h.get('range'));
    else if (from < to) setRange(from, to, null);
    const live = Number(h.get('live'));
    if (live >= 1) { $('#live-minutes').value = String(live); $('#live').checked = true; }
    openSensor({ key }).then(() => { if ($('#live').checked) startLive(); });
    return true;
  }

  function presetRange(name) {
    const now = Date.now();
    setRange(now - PRESETS[name], now, name);
  }

  async function openSensor(s) {
    chart.sensor = s;
    chart.opening = true;
    chart.zoomStack = [];
    chart.hidden = new Set();
    chart.rate = null;
    $('#zoom-out').disabled = true;
    for (const li of list.children) li.classList.toggle('selected', li.dataset.sensor === s.key);
    $('#sensor-title').textContent = s.key;
    if (chart.preset) presetRange(chart.preset); else saveHash();
    const gen = ++chart.gen;
    try {
      // The latest readings tell the sensor's recent rate (the raw/rollup rule) and its fields.
      const p = await api('/api/v1/readings?' + qs({ sensor: s.key, order: 'desc', limit: 100, from: 0, to: Date.now() + 86400e3 }));
      if (gen !== chart.gen) return;
      const ts = p.readings.map((r) => Date.parse(r.t));
      latestCache.set(s.key, p.readings[0] || null);
      if (ts.length >= 2) {
        const span = ts[0] - ts[ts.length - 1];
        chart.rate = span > 0 ? (ts.length - 1) / span : Infinity;
      }
    } catch (_) { /* the chart's own request reports errors */ }
    chart.opening = false;
    await loadChart();
  }

  // The rule: raw readings when the range is at most 6 h or holds at most 5,000 readings at
  // the sensor's recent rate; otherwise rollups, the finest step of the ladder that gives at
  // most 2,000 steps.
  function chooseMode(from, to) {
    const span = to - from;
    const expected = chart.rate == null ? Infinity : chart.rate * span;
    if (span <= RAW_MAX_RANGE_MS || expected <= RAW_LIMIT) return { mode: 'raw' };
    for (const [name, ms] of LADDER) {
      if (span / ms <= MAX_STEPS) return { mode: 'rollup', stepName: name, stepMs: ms };
    }
    const [name, ms] = LADDER[LADDER.length - 1];
    return { mode: 'rollup', stepName: name, stepMs: ms };
  }

  async function loadChart() {
    if (!chart.sensor) return;
    const key = chart.sensor.key;
    const gen = ++chart.gen;
    const { from, to } = chart;
    const choice = chooseMode(from, to);
    chart.loading = true;
    $('#chart-caption').textContent = 'Loading…';
    updateCsv();
    try {
      let data;
      if (choice.mode === 'raw') {
        const p = await api('/api/v1/readings?' + qs({ sensor: key, from, to, order: 'desc', limit: RAW_LIMIT }));
        if (gen !== chart.gen) return;
        const readings = p.readings.reverse();
        data = rawData(readings, !!p.next_cursor);
        data.tableReadings = readings;
        data.tableMore = !!p.next_cursor;
      } else {
        const step = choice.stepMs;
        const aFrom = Math.floor(from / step) * step;
        const aTo = Math.ceil(to / step) * step;
        const [roll, page] = await Promise.all([
          api('/api/v1/rollups?' + qs({ sensor: key, from: aFrom, to: aTo, step: choice.stepName })),
          api('/api/v1/readings?' + qs({ sensor: key, from, to, order: 'desc', limit: TABLE_ROWS })),
        ]);
        if (gen !== chart.gen) return;
        data = rollupData(roll, choice);
        data.tableReadings = page.readings.reverse();
        data.tableMore = !!page.next_cursor;
      }
      // The data keeps the range it was read for: a redraw before the next load (a resize, a
      // toggle) must not put it under another range's axis and attributes.
      data.from = from;
      data.to = to;
      chart.data = data;
      renderToggles();
      drawChart();
      renderTables();
    } catch (e) {
      if (gen !== chart.gen) return;
      chart.data = null;
      $('#chart-caption').textContent = 'Cannot load: ' + e.message;
      drawChart();
    } finally {
      if (gen === chart.gen) chart.loading = false;
    }
  }

  function rawData(readings, truncated) {
    const series = {};
    const other = new Set();
    for (const r of readings) {
      const t = Date.parse(r.t);
      for (const [f, v] of Object.entries(r.fields)) {
        if (typeof v === 'number') (series[f] || (series[f] = [])).push([t, v]);
        else other.add(f);
      }
    }
    return { mode: 'raw', series, bands: null, other: [...other].sort(), truncated, count: readings.length };
  }

  function rollupData(roll, choice) {
    const series = {};
    const bands = {};
    const stepMs = roll.step_ms || choice.stepMs;
    for (const row of roll.rows) {
      const t = Date.parse(row.t) + stepMs / 2;
      for (const [f, st] of Object.entries(row.fields)) {
        if (!st || st.count === 0 || typeof st.mean !== 'number') continue;
        (series[f] || (series[f] = [])).push([t, st.mean]);
        (bands[f] || (bands[f] = [])).push([t, st.min, st.max]);
      }
    }
    return { mode: 'rollup', series, bands, other: [], stepMs, stepName: choice.stepName, count: roll.rows.length };
  }

  function fieldNames() {
    return Object.keys(chart.data ? chart.data.series : {}).sort();
  }
  const colorOf = (f) => COLORS[fieldNames().indexOf(f) % COLORS.length];

  function renderToggles() {
    const box = $('#field-toggles');
    box.replaceChildren();
    for (const f of fieldNames()) {
      const id = 'toggle-' + f.replace(/[^A-Za-z0-9_-]/g, '_');
      const input = el('input', { type: 'checkbox', id, 'data-field': f });
      input.checked = !chart.hidden.has(f);
      input.addEventListener('change', () => {
        if (input.checked) chart.hidden.delete(f); else chart.hidden.add(f);
        drawChart();
      });
      const sw = el('span', { class: 'swatch', 'aria-hidden': 'true' });
      sw.style.background = colorOf(f);
      const label = el('label', { for: id });
      label.append(sw, f);
      box.append(el('span'));
      box.lastChild.append(input, label);
    }
  }

  // ---------------------------------------------------------------- drawing

  const M = { top: 10, right: 12, bottom: 26, left: 56 };
  let geom = null; // the scales of the chart drawn last

  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; lo -= 1; }
    const raw = (hi - lo) / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const ticks = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return ticks;
  }

  function timeTicks(from, to, n) {
    const span = to - from;
    const steps = [1e3, 5e3, 15e3, 30e3, 60e3, 300e3, 900e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3, 2 * 86400e3, 7 * 86400e3];
    const step = steps.find((s) => span / s <= n) || 30 * 86400e3;
    const out = [];
    for (let t = Math.ceil(from / step) * step; t <= to; t += step) out.push(t);
    return out;
  }

  function drawChart() {
    const box = $('#chart');
    const W = Math.max(280, Math.floor(box.clientWidth || 600));
    const H = W < 500 ? 220 : 320;
    const data = chart.data;
    const shownFrom = data ? data.from : chart.from;
    const shownTo = data ? data.to : chart.to;
    const svg = sv('svg', {
      viewBox: '0 0 ' + W + ' ' + H, width: W, height: H, tabindex: '0', role: 'img',
      'data-mode': data ? data.mode : 'raw', 'data-from': String(shownFrom), 'data-to': String(shownTo),
      'aria-label': 'Chart of ' + (chart.sensor ? chart.sensor.key : 'no sensor'),
    });
    if (data && data.mode === 'rollup') svg.setAttribute('data-step-ms', String(data.stepMs));
    const x0 = M.left, x1 = W - M.right, y0 = H - M.bottom, y1 = M.top;
    const from = shownFrom, to = Math.max(shownTo, shownFrom + 1);
    const visible = fieldNames().filter((f) => !chart.hidden.has(f));
    let lo = Infinity, hi = -Infinity;
    for (const f of visible) {
      for (const p of data.series[f]) { if (p[0] >= from && p[0] <= to) { lo = Math.min(lo, p[1]); hi = Math.max(hi, p[1]); } }
      if (data.bands && data.bands[f]) for (const b of data.bands[f]) { if (b[0] >= from && b[0] <= to) { lo = Math.min(lo, b[1]); hi = Math.max(hi, b[2]); } }
    }
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    const yt = niceTicks(lo, hi, 5);
    const ylo = Math.min(lo, yt[0]), yhi = Math.max(hi, yt[yt.length - 1]);
    const sx = (t) => x0 + (t - from) / (to - from) * (x1 - x0);
    const sy = (v) => yhi === ylo ? (y0 + y1) / 2 : y0 - (v - ylo) / (yhi - ylo) * (y0 - y1);
    geom = { W, H, x0, x1, y0, y1, from, to, sx, sy, visible };

    const axes = sv('g', { class: 'axis' });
    for (const v of yt) {
      const y = sy(v).toFixed(1);
      axes.append(sv('line', { class: 'grid', x1: x0, x2: x1, y1: y, y2: y }));
      const t = sv('text', { x: x0 - 6, y: Number(y) + 4, 'text-anchor': 'end' });
      t.textContent = fmtNum(v);
      axes.append(t);
    }
    const xt = timeTicks(from, to, Math.max(2, Math.floor((x1 - x0) / 90)));
    for (const tm of xt) {
      const x = sx(tm).toFixed(1);
      axes.append(sv('line', { class: 'grid', x1: x, x2: x, y1: y1, y2: y0 }));
      const t = sv('text', { x, y: H - 8, 'text-anchor': 'middle' });
      t.textContent = fmtTime(tm, to - from);
      axes.append(t);
    }
    svg.append(axes);

    const plot = sv('g', { class: 'plot' });
    if (data) {
      const gap = data.mode === 'rollup' ? data.stepMs * 1.5 : Infinity;
      for (const f of visible) {
        const color = colorOf(f);
        if (data.bands && data.bands[f]) {
          const segs = split(data.bands[f], gap);
          let d = '';
          for (const seg of segs) {
            d += 'M' + seg.map((b) => sx(b[0]).toFixed(1) + ',' + sy(b[2]).toFixed(1)).join('L');
            d += 'L' + seg.slice().reverse().map((b) => sx(b[0]).toFixed(1) + ',' + sy(b[1]).toFixed(1)).join('L') + 'Z';
          }
          plot.append(sv('path', { class: 'band', 'data-field': f, d, fill: color }));
        }
        const pts = data.series[f];
        let d = '';
        for (const seg of split(pts, gap)) {
          d += 'M' + seg.map((p) => sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1)).join('L');
          if (seg.length === 1) d += 'h0.01';
        }
        plot.append(sv('path', { class: 'line', 'data-field': f, 'data-points': String(pts.length), d, stroke: color }));
      }
      if (!visible.length) {
        const t = sv('text', { class: 'empty', x: (x0 + x1) / 2, y: (y0 + y1) / 2, 'text-anchor': 'middle' });
        t.textContent = fieldNames().length ? 'Every field is switched off.' : 'No numeric readings in this range.';
        plot.append(t);
      }
    }
    svg.append(plot);
    svg.append(sv('line', { class: 'cursor', x1: -10, x2: -10, y1: y1, y2: y0, visibility: 'hidden' }));
    svg.append(sv('rect', { class: 'selection', x: 0, y: y1, width: 0, height: y0 - y1, visibility: 'hidden' }));
    wireChart(svg);
    box.replaceChildren(svg);
    $('#tooltip').hidden = true;
    if (data) {
      $('#chart-caption').textContent = caption(data);
      if (!firstChartDone) {
        firstChartDone = true;
        document.body.dataset.firstChartMs = String(Math.round(performance.now()));
      }
    }
  }

  function caption(data) {
    const range = fmtFull(data.from) + ' – ' + fmtFull(data.to);
    if (data.mode === 'raw') {
      return 'raw readings (' + fmtInt(data.count) + (data.truncated ? ', the latest ' + fmtInt(RAW_LIMIT) + ' of the range' : '') + ') · ' + range;
    }
    return 'rollup: mean with min–max band, step ' + data.stepName + ' (' + fmtInt(data.count) + ' steps) · ' + range;
  }

  function split(points, gap) {
    const out = [];
    let cur = [];
    for (let i = 0; i < points.length; i++) {
      if (cur.length && points[i][0] - cur[cur.length - 1][0] > gap) { out.push(cur); cur = []; }
      cur.push(points[i]);
    }
    if (cur.length) out.push(cur);
    return out;
  }

  // ---------------------------------------------------------------- hover, drag-zoom, keys

  function svgX(svg, ev) {
    const r = svg.getBoundingClientRect();
    return (ev.clientX - r.left) * (geom.W / r.width);
  }

  function nearest(points, t) {
    let lo = 0, hi = points.length - 1;
    if (hi < 0) return null;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] < t) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && Math.abs(points[lo - 1][0] - t) <= Math.abs(points[lo][0] - t)) lo--;
    return points[lo];
  }

  function showTooltip(svg, x) {
    if (!geom || !chart.data) return;
    const g = geom;
    const t = g.from + (x - g.x0) / (g.x1 - g.x0) * (g.to - g.from);
    let best = null;
    for (const f of g.visible) {
      const p = nearest(chart.data.series[f], t);
      if (p && (best == null || Math.abs(p[0] - t) < Math.abs(best - t))) best = p[0];
    }
    const tip = $('#tooltip');
    const cursor = svg.querySelector('.cursor');
    if (best == null) { tip.hidden = true; cursor.setAttribute('visibility', 'hidden'); return; }
    const cx = g.sx(best);
    cursor.setAttribute('x1', cx); cursor.setAttribute('x2', cx);
    cursor.setAttribute('visibility', 'visible');
    tip.replaceChildren(el('div', null, fmtFull(chart.data.mode === 'rollup' ? best - chart.data.stepMs / 2 : best)));
    for (const f of g.visible) {
      const p = nearest(chart.data.series[f], best);
      if (!p || p[0] !== best) continue;
      const row = el('div');
      const sw = el('span', { class: 'swatch' });
      sw.style.background = colorOf(f);
      let text = f + ': ' + fmtNum(p[1]);
      if (chart.data.bands) {
        const b = nearest(chart.data.bands[f], best);
        if (b) text += ' (min ' + fmtNum(b[1]) + ', max ' + fmtNum(b[2]) + ')';
      }
      row.append(sw, text);
      tip.append(row);
    }
    tip.hidden = false;
    const rect = svg.getBoundingClientRect();
    const px = cx * rect.width / g.W;
    const left = px + 12 + tip.offsetWidth > rect.width ? Math.max(0, px - 12 - tip.offsetWidth) : px + 12;
    tip.style.left = left + 'px';
    tip.style.top = '8px';
  }

  function wireChart(svg) {
    let dragFrom = null;
    let keyX = null;
    const sel = () => svg.querySelector('.selection');
    svg.addEventListener('pointerdown', (ev) => {
      if (!geom || ev.button !== 0) return;
      const x = svgX(svg, ev);
      if (x < geom.x0 || x > geom.x1) return;
      dragFrom = x;
      svg.setPointerCapture(ev.pointerId);
    });
    svg.addEventListener('pointermove', (ev) => {
      if (!geom) return;
      const x = Math.min(geom.x1, Math.max(geom.x0, svgX(svg, ev)));
      if (dragFrom != null) {
        const s = sel();
        s.setAttribute('x', Math.min(dragFrom, x));
        s.setAttribute('width', Math.abs(x - dragFrom));
        s.setAttribute('visibility', 'visible');
      }
      showTooltip(svg, x);
    });
    const end = (ev) => {
      if (dragFrom == null) return;
      const x = Math.min(geom.x1, Math.max(geom.x0, svgX(svg, ev)));
      const a = Math.min(dragFrom, x), b = Math.max(dragFrom, x);
      dragFrom = null;
      sel().setAttribute('visibility', 'hidden');
      if (b - a < 5) return;
      const t = (px) => Math.round(geom.from + (px - geom.x0) / (geom.x1 - geom.x0) * (geom.to - geom.from));
      zoomTo(t(a), t(b));
    };
    svg.addEventListener('pointerup', end);
    svg.addEventListener('pointercancel', () => { dragFrom = null; sel().setAttribute('visibility', 'hidden'); });
    svg.addEventListener('pointerleave', () => {
      if (dragFrom == null) { $('#tooltip').hidden = true; svg.querySelector('.cursor').setAttribute('visibility', 'hidden'); }
    });
    svg.addEventListener('keydown', (ev) => {
      if (!geom) return;
      if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
        ev.preventDefault();
        const stepPx = (geom.x1 - geom.x0) / 50;
        keyX = keyX == null ? (geom.x0 + geom.x1) / 2 : keyX + (ev.key === 'ArrowLeft' ? -stepPx : stepPx);
        keyX = Math.min(geom.x1, Math.max(geom.x0, keyX));
        showTooltip(svg, keyX);
      } else if (ev.key === 'Escape') {
        $('#tooltip').hidden = true;
      }
    });
    svg.addEventListener('blur', () => { $('#tooltip').hidden = true; });
  }

  function zoomTo(from, to) {
    if (to - from < 1000) to = from + 1000;
    chart.zoomStack.push([chart.from, chart.to, chart.preset]);
    $('#zoom-out').disabled = false;
    stopLive();
    setRange(from, to, null);
    loadChart();
  }

  // ---------------------------------------------------------------- tables and CSV

  function renderTables() {
    const data = chart.data;
    const readings = data.tableReadings || [];
    const shown = readings.slice(-TABLE_ROWS).reverse(); // newest first
    const fields = [...new Set(shown.flatMap((r) => Object.keys(r.fields)))].sort();
    fillTable($('#data-table'), ['time (UTC)', ...fields], shown.map((r) => [fmtFull(Date.parse(r.t)), ...fields.map((f) => (f in r.fields ? fmtValue(r.fields[f]) : ''))]));
    const more = data.tableMore || readings.length > TABLE_ROWS;
    $('#data-note').textContent = shown.length
      ? fmtInt(shown.length) + ' readings, newest first' + (more ? ' (the latest ' + fmtInt(shown.length) + ' of the range; the CSV has them all)' : '')
      : 'No readings in this range.';
    const other = [...new Set(readings.flatMap((r) => Object.entries(r.fields).filter(([, v]) => typeof v !== 'number').map(([k]) => k)))].sort();
    const rows = shown.filter((r) => other.some((f) => f in r.fields));
    fillTable($('#other-fields'), ['time (UTC)', ...other], other.length
      ? rows.map((r) => [fmtFull(Date.parse(r.t)), ...other.map((f) => (f in r.fields ? fmtValue(r.fields[f]) : ''))])
      : [], other.length ? null : 'No boolean or string fields in this range.');
  }

  function fillTable(table, head, rows, empty) {
    const thead = table.tHead || table.createTHead();
    const tr = el('tr');
    for (const h of head) tr.append(el('th', { scope: 'col' }, h));
    thead.replaceChildren(tr);
    const body = table.tBodies[0] || table.createTBody();
    const frag = document.createDocumentFragment();
    for (const r of rows) {
      const row = el('tr');
      for (const c of r) row.append(el('td', null, c));
      frag.append(row);
    }
    if (!rows.length && empty) {
      const row = el('tr');
      row.append(el('td', { colspan: String(head.length) }, empty));
      frag.append(row);
    }
    body.replaceChildren(frag);
  }

  function csvUrl() {
    return '/api/v1/readings?' + qs({ sensor: chart.sensor.key, from: chart.from, to: chart.to, format: 'csv', limit: 100000 });
  }

  function updateCsv() {
    const a = $('#csv-link');
    if (!chart.sensor) return;
    a.href = csvUrl();
    a.setAttribute('download', chart.sensor.key.replace(/[^A-Za-z0-9_.=-]+/g, '_') + '.csv');
  }

  // A link cannot send the token header: with a token, fetch the file and hand it over.
  $('#csv-link').addEventListener('click', async (ev) => {
    if (!chart.sensor) { ev.preventDefault(); return; }
    if (!token()) return;
    ev.preventDefault();
    try {
      const blob = await api(csvUrl(), 'blob');
      const url = URL.createObjectURL(blob);
      const a = el('a', { href: url, download: $('#csv-link').getAttribute('download') });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      $('#data-note').textContent = 'CSV download failed: ' + e.message;
    }
  });

  // ---------------------------------------------------------------- range controls and live

  for (const b of document.querySelectorAll('#range-presets button')) {
    b.addEventListener('click', () => {
      stopLive();
      chart.zoomStack = [];
      $('#zoom-out').disabled = true;
      presetRange(b.dataset.range);
      loadChart();
    });
  }

  $('#apply-range').addEventListener('click', () => {
    const from = fromLocalInput($('#from').value);
    const to = fromLocalInput($('#to').value);
    if (!(from < to)) { $('#chart-caption').textContent = 'The range needs a start before its end.'; return; }
    stopLive();
    setRange(from, to, null);
    loadChart();
  });

  $('#zoom-out').addEventListener('click', () => {
    const prev = chart.zoomStack.pop();
    $('#zoom-out').disabled = chart.zoomStack.length === 0;
    if (!prev) return;
    if (prev[2]) presetRange(prev[2]); else setRange(prev[0], prev[1], null);
    loadChart();
  });

  let liveTimer = 0;
  function liveMinutes() {
    const n = Number($('#live-minutes').value);
    return n >= 1 ? Math.min(n, 1440) : 15;
  }
  function liveTick() {
    const now = Date.now();
    setRange(now - liveMinutes() * 60e3, now, null);
    if (!chart.loading) loadChart();
  }
  function startLive() {
    clearInterval(liveTimer);
    chart.zoomStack = [];
    $('#zoom-out').disabled = true;
    liveTick();
    liveTimer = setInterval(liveTick, LIVE_EVERY_MS);
  }
  function stopLive() {
    if (!$('#live').checked) return;
    $('#live').checked = false;
    clearInterval(liveTimer);
  }
  $('#live').addEventListener('change', () => {
    if ($('#live').checked) startLive(); else { clearInterval(liveTimer); saveHash(); }
  });
  $('#live-minutes').addEventListener('change', () => { if ($('#live').checked) liveTick(); });

  let resizeTimer = 0;
  const onResize = () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => { if (chart.data) drawChart(); }, 100); };
  if ('ResizeObserver' in window) {
    let lastW = 0;
    new ResizeObserver((entries) => {
      const w = Math.floor(entries[0].contentRect.width);
      if (w !== lastW) { lastW = w; onResize(); }
    }).observe($('#chart'));
  } else {
    window.addEventListener('resize', onResize);
  }

  // ---------------------------------------------------------------- status

  const samples = []; // [time ms, accepted total]
  const rates = [];

  async function pollStatus() {
    let s;
    try {
      s = await api('/api/v1/status', 'server');
    } catch (e) {
      $('[data-status="store"]').textContent = 'unreachable: ' + e.message;
      $('[data-status="store"]').className = 'state-bad';
      return;
    }
    const now = performance.now();
    samples.push([now, s.readings_accepted_total]);
    if (samples.length > 2) samples.shift();
    const rateEl = $('[data-status="ingest-rate"]');
    if (samples.length === 2) {
      const [a, b] = samples;
      const rate = Math.max(0, (b[1] - a[1]) / ((b[0] - a[0]) / 1000));
      rates.push(rate);
      if (rates.length > SPARK_POINTS) rates.shift();
      rateEl.textContent = fmtNum(rate) + ' readings/s';
      drawSpark();
    } else {
      rateEl.textContent = '… readings/s';
    }
    rateEl.title = fmtInt(s.readings_accepted_total) + ' accepted since start';
    const buf = s.buffered;
    const bufEl = $('[data-status="buffered"]');
    bufEl.textContent = fmtInt(buf.readings) + ' readings, ' + fmtBytes(buf.bytes) +
      ' of ' + fmtBytes(buf.bound_bytes);
    bufEl.className = buf.bytes >= buf.bound_bytes * 0.9 ? 'state-bad' : '';
    $('[data-status="wal"]').textContent = s.wal
      ? fmtInt(s.wal.unsettled_readings) + ' unsettled, ' + fmtBytes(s.wal.bytes)
      : 'off (--ack=buffered)';
    const st = $('[data-status="store"]');
    st.textContent = s.store.name + ' — ' + (s.store.ready ? 'ready' : 'not ready');
    st.className = s.store.ready ? 'state-ok' : 'state-bad';
    st.title = s.store.reason || '';
    const fe = $('[data-status="flush-errors"]');
    fe.textContent = fmtInt(s.flush_errors_total);
    fe.className = s.flush_errors_total > 0 ? 'state-bad' : '';
    // Refused readings waiting for POST /api/v1/dead-letters/replay.
    const dl = s.dead_letters;
    const dlEl = $('[data-status="dead-letters"]');
    dlEl.textContent = dl.files > 0
      ? dl.files + (dl.files === 1 ? ' file, ' : ' files, ') + fmtBytes(dl.bytes)
      : 'none';
    dlEl.className = dl.files > 0 ? 'state-bad' : '';
    dlEl.title = (dl.readings_total ? fmtInt(dl.readings_total) + ' readings refused since start' : '')
      + (dl.last_reason ? ': ' + dl.last_reason : '');
  }

  function drawSpark() {
    const svg = $('#ingest-sparkline');
    const max = Math.max(1, ...rates);
    const n = SPARK_POINTS - 1;
    const off = SPARK_POINTS - rates.length;
    const d = rates.map((r, i) => (i ? 'L' : 'M') + ((off + i) / n * 120).toFixed(1) + ',' + (27 - r / max * 25).toFixed(1)).join('');
    svg.replaceChildren(sv('path', { d }));
    svg.setAttribute('aria-label', 'Ingest rate, last ' + rates.length + ' samples, peak ' + fmtNum(max) + ' readings/s');
  }

  function pollLoop() {
    pollStatus().finally(() => setTimeout(pollLoop, STATUS_EVERY_MS));
  }

  // ---------------------------------------------------------------- databases

  const databaseSelect = $('#database');

  // The databases the token may read, from SHOW DATABASES; the chosen one stays chosen if
  // the token may read it, else the first it may read is.
  async function loadDatabases() {
    let body;
    try {
      body = await api('/query?' + qs({ q: 'SHOW DATABASES' }));
    } catch (_) {
      return;
    }
    const rows = (((body.results || [])[0] || {}).series || [])[0];
    const names = rows ? rows.values.map((v) => v[0]) : [];
    if (names.length && !names.includes(database)) database = names[0];
    if (!names.includes(database)) names.unshift(database);
    databaseSelect.replaceChildren(...names.map((n) => el('option', { value: n }, n)));
    databaseSelect.value = database;
  }

  databaseSelect.addEventListener('change', () => {
    database = databaseSelect.value;
    stopLive();
    chart.sensor = null;
    $('#sensor-title').textContent = 'No sensor selected';
    history.replaceState(null, '', '#' + qs({ db: database }));
    loadSensors(true);
    loadTags();
  });

  // ---------------------------------------------------------------- start

  presetRange('1h');
  drawChart();
  readHash();
  loadDatabases().then(() => {
    loadSensors(true);
    loadTags();
  });
  pollLoop();
})();
