// The web app's page of one huge run, timed in a real browser; run by scripts/bench-scale.sh.
//
//   CAIRN_LOGIN_URL   the one-time login link (…/#login=CODE); used once, then the Viewer token
//                     stays in the tab's sessionStorage, so reloads of the same tab stay signed in
//   CAIRN_RUN_ID      the finished huge run whose page is timed
//   CAIRN_STEPS       its number of steps (the page's counts must say so)
//   BENCH_PAGE_REPS   timed full loads of the page (default 5)
//   BENCH_OUT         where browser-large-run.json goes
//
// The page is usable when it shows the run's step counts, the list of its layers and the first
// rows of its virtualized step table (`#steps-virtual tbody tr[data-step]`); `data-loaded` comes
// later, once the attempts' time axis and the newest events are drawn too. Both are timed from
// the navigation's start (performance.timeOrigin) by an observer installed before the app's
// scripts run, for a full reload of the tab at the run's hash; the Node-side wall time
// (page.reload() → usable seen through playwright) is kept alongside. After each load: the JS
// heap (DevTools `Performance.getMetrics`) and the bytes the load transferred (resource timing).
// A page not usable within 30 s fails the script. One browser (Debian's chromium, headless, a
// fresh profile), one tab. Prints one JSON line: {ok, …}.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { CHROMIUM, close, launch } from './browser.mjs';

const TIMEOUT_MS = 30_000;

function env(name) {
  const v = process.env[name];
  if (!v) fatal(`the environment variable ${name} is not set (scripts/bench-scale.sh sets it)`);
  return v;
}

let profile = null;
let context = null;

function log(msg) {
  process.stderr.write(`[bench-large-run] ${msg}\n`);
}

function fatal(msg) {
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  process.stderr.write(`bench-large-run.mjs failed: ${msg}\n`);
  process.stdout.write(JSON.stringify({ ok: false, error: msg }) + '\n');
  process.exit(1);
}

const LOGIN_URL = env('CAIRN_LOGIN_URL');
const RUN_ID = env('CAIRN_RUN_ID');
const STEPS = Number(env('CAIRN_STEPS'));
const REPS = Number(process.env.BENCH_PAGE_REPS || 5);
const OUT = env('BENCH_OUT');
const RUN_HASH = `#/runs/${encodeURIComponent(RUN_ID)}`;

// Installed before every document's own scripts: records in window.__bench when the run's page
// is first usable and when it is first loaded (ms since the navigation started).
const INIT = () => {
  window.__bench = { usable: null, loaded: null };
  const look = () => {
    const m = document.getElementById('main');
    if (!m || m.dataset.page !== 'run') return;
    const b = window.__bench;
    if (b.usable === null && m.dataset.large === 'true'
      && (document.getElementById('step-counts')?.textContent || '').includes(' steps: ')
      && document.querySelector('#dag-layers li[data-layer]')
      && document.querySelector('#steps-virtual tbody tr[data-step]')) {
      b.usable = performance.now();
    }
    if (b.loaded === null && m.dataset.loaded === 'true') b.loaded = performance.now();
  };
  new MutationObserver(look).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
};

/** What the page shows once usable, for the checks and the report. */
const shown = (page) => page.evaluate(() => ({
  large: document.getElementById('main')?.dataset.large === 'true',
  counts: document.getElementById('step-counts')?.textContent || '',
  layers: document.querySelectorAll('#dag-layers li[data-layer]').length,
  rows: document.querySelectorAll('#steps-virtual tbody tr[data-step]').length,
  first_row: document.querySelector('#steps-virtual tbody tr[data-step]')?.dataset.step ?? null,
  matched: document.getElementById('steps-matched')?.textContent || '',
}));

/** The bytes of this document's load: transferred (HTML, assets, API), and the API's bodies. */
const transferred = (page) => page.evaluate(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const api = res.filter((e) => e.initiatorType === 'fetch');
  return {
    transfer_bytes: (nav?.transferSize || 0) + res.reduce((a, e) => a + (e.transferSize || 0), 0),
    api_body_bytes: api.reduce((a, e) => a + (e.encodedBodySize || 0), 0),
    api_requests: api.map((e) => ({ name: new URL(e.name).pathname + new URL(e.name).search, bytes: e.encodedBodySize, start: Math.round(e.startTime), end: Math.round(e.responseEnd) })),
  };
});

async function heap(cdp) {
  const { metrics } = await cdp.send('Performance.getMetrics');
  const get = (n) => metrics.find((m) => m.name === n)?.value ?? null;
  return { js_heap_used_bytes: get('JSHeapUsedSize'), js_heap_total_bytes: get('JSHeapTotalSize'), dom_nodes: get('Nodes') };
}

async function main() {
  if (!fs.existsSync(CHROMIUM)) fatal(`no chromium at ${CHROMIUM}`);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-bench-profile-'));
  context = await launch(profile, { timeout: TIMEOUT_MS });
  context.setDefaultTimeout(TIMEOUT_MS);
  await context.addInitScript(INIT);
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  const cdp = await context.newCDPSession(page);
  await cdp.send('Performance.enable');

  // The login: the link's code is traded for the Viewer token, and the app shows Runs.
  await page.goto(LOGIN_URL, { waitUntil: 'commit', timeout: TIMEOUT_MS });
  await page.waitForSelector('main#main[data-page="runs"][data-loaded="true"]', { state: 'attached', timeout: TIMEOUT_MS });
  log('logged in');

  // Inside the app, the first time (the daemon's caches as the surfaces left them): Runs → the run.
  const t0 = performance.now();
  await page.evaluate((hash) => { location.hash = hash; }, RUN_HASH);
  await page.waitForFunction(() => window.__bench?.usable !== null
    || document.querySelector('main#main[data-page="run"][data-loaded="true"]'), null, { timeout: TIMEOUT_MS, polling: 'raf' })
    .catch(() => { throw new Error(`the run's page was not usable within ${TIMEOUT_MS} ms of location.hash = ${RUN_HASH}`); });
  const firstHashMs = performance.now() - t0;
  const first = await shown(page);
  if (!first.large) fatal(`the run's page is not the large-run page (main[data-large] is not true; a run of at most one page of steps, 1,000, is shown whole): ${JSON.stringify(first)}`);
  const want = `${STEPS} steps: ${STEPS} completed, 0 failed, 0 running, 0 pending`;
  if (first.counts !== want) fatal(`the page's counts read "${first.counts}", not "${want}"`);
  log(`in the app, the first time: usable after ${firstHashMs.toFixed(0)} ms; ${first.layers} layers, ${first.rows} rows in the table`);

  // Full reloads of the tab at the run's hash (the token stays in sessionStorage).
  const samples = [];
  for (let i = 0; i < REPS; i++) {
    const w0 = performance.now();
    await page.reload({ waitUntil: 'commit', timeout: TIMEOUT_MS });
    await page.waitForFunction(() => window.__bench && window.__bench.usable !== null, null, { timeout: TIMEOUT_MS, polling: 'raf' })
      .catch(async () => {
        const s = await shown(page).catch(() => ({}));
        throw new Error(`load ${i + 1}: the run's page was not usable within ${TIMEOUT_MS} ms (it shows ${JSON.stringify(s)})`);
      });
    const wall = performance.now() - w0;
    await page.waitForFunction(() => window.__bench.loaded !== null, null, { timeout: TIMEOUT_MS });
    const b = await page.evaluate(() => window.__bench);
    const s = await shown(page);
    if (s.counts !== want || s.rows < 1 || s.layers < 1) fatal(`load ${i + 1}: the page shows ${JSON.stringify(s)}`);
    samples.push({ usable_ms: b.usable, loaded_ms: b.loaded, wall_ms: wall, ...(await heap(cdp)), ...(await transferred(page)), rows: s.rows, layers: s.layers });
    log(`load ${i + 1}/${REPS}: usable ${b.usable.toFixed(0)} ms, loaded ${b.loaded.toFixed(0)} ms from navigation start`);
  }
  const last = await shown(page);
  const result = {
    ok: true, run_id: RUN_ID, steps: STEPS, reps: REPS, first_hash_ms: firstHashMs, shown: last, samples,
    page_errors: errors, user_agent: await page.evaluate(() => navigator.userAgent),
  };
  fs.writeFileSync(path.join(OUT, 'browser-large-run.json'), JSON.stringify(result, null, 1));
  await close(context, profile);
  process.stdout.write(JSON.stringify({ ok: true, samples: samples.length }) + '\n');
}

main().catch((e) => fatal(e?.stack || String(e)));
