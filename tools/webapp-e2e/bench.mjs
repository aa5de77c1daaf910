// Page-load timings of Cairn's read-only web app in a real browser; run by scripts/bench-webapp.sh.
//
//   CAIRN_LOGIN_URL   the one-time login link (…/#login=CODE); used once, then the Viewer token
//                     stays in the tab's sessionStorage, so reloads of the same tab stay signed in
//   CAIRN_RUN_ID      the run whose page is timed
//   BENCH_PAGE_REPS   timed loads of each page and way (default 10), after one untimed warm-up
//   BENCH_OUT         where samples.json goes
//
// Two ways of reaching a page, each timed to `main[data-page=P][data-loaded=true]`:
//   hash    inside the loaded app: from the not-found page (no request), `location.hash = …`;
//           timed in the page (performance.now() at the assignment → the MutationObserver
//           callback that sees the attribute), so no DevTools round trip is counted
//   reload  a full reload of the tab at that hash (HTML, CSS, ES modules, then the API calls);
//           timed from the navigation's start (performance.timeOrigin) to the same callback, by
//           an observer installed before the app's scripts run; the Node-side wall time
//           (page.reload() → the selector seen through playwright) is kept alongside
// One browser (Debian's chromium, headless, a fresh profile), one tab, for everything.
// Prints one JSON line: {ok, samples: {runs_hash_ms, run_hash_ms, runs_reload_ms, …}}.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { CHROMIUM, close, launch } from './browser.mjs';

const TIMEOUT_MS = 30_000;

function env(name) {
  const v = process.env[name];
  if (!v) fatal(`the environment variable ${name} is not set (scripts/bench-webapp.sh sets it)`);
  return v;
}

let profile = null;
let context = null;

function log(msg) {
  process.stderr.write(`[bench] ${msg}\n`);
}

function fatal(msg) {
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  process.stderr.write(`bench.mjs failed: ${msg}\n`);
  process.stdout.write(JSON.stringify({ ok: false, error: msg }) + '\n');
  process.exit(1);
}

const LOGIN_URL = env('CAIRN_LOGIN_URL');
const RUN_ID = env('CAIRN_RUN_ID');
const REPS = Number(process.env.BENCH_PAGE_REPS || 10);
const OUT = env('BENCH_OUT');

const RUNS_HASH = '#/runs';
const RUN_HASH = `#/runs/${encodeURIComponent(RUN_ID)}`;
const NOWHERE = '#/bench-nowhere';

// Installed before every document's own scripts: records when main first reads
// data-page=<wanted> data-loaded=true (ms since the navigation started) in window.__benchLoaded.
const INIT = () => {
  window.__benchLoaded = null;
  const look = () => {
    const m = document.getElementById('main');
    if (!m || window.__benchLoaded) return;
    if (m.dataset.loaded === 'true' && m.dataset.page) {
      window.__benchLoaded = { page: m.dataset.page, ms: performance.now(), hash: location.hash };
    }
  };
  new MutationObserver(look).observe(document, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-loaded', 'data-page'] });
};

/** In the page: sets location.hash and resolves with the ms until main shows `want` loaded. */
async function hashNav(page, hash, want) {
  return page.evaluate(
    ([hash, want, timeout]) =>
      new Promise((resolve, reject) => {
        const main = document.getElementById('main');
        let t0 = 0;
        const done = () => main.dataset.page === want && main.dataset.loaded === 'true';
        const obs = new MutationObserver(() => {
          if (done()) {
            const t = performance.now() - t0;
            obs.disconnect();
            clearTimeout(timer);
            resolve(t);
          }
        });
        const timer = setTimeout(() => {
          obs.disconnect();
          reject(new Error(`${hash}: main[data-page=${want}][data-loaded=true] not seen within ${timeout} ms (data-page=${main.dataset.page}, loaded=${main.dataset.loaded})`));
        }, timeout);
        obs.observe(main, { attributes: true, attributeFilter: ['data-loaded', 'data-page'] });
        t0 = performance.now();
        location.hash = hash;
      }),
    [hash, want, TIMEOUT_MS],
  );
}

/** Reloads the tab at `hash`; resolves with {in_page_ms, wall_ms}. */
async function reloadNav(page, hash, want) {
  if (new URL(page.url()).hash !== hash) await hashNav(page, hash, want);
  const t0 = performance.now();
  await page.reload({ waitUntil: 'commit', timeout: TIMEOUT_MS });
  await page.waitForSelector(`main#main[data-page="${want}"][data-loaded="true"]`, { state: 'attached', timeout: TIMEOUT_MS });
  const wall = performance.now() - t0;
  const seen = await page.waitForFunction(() => window.__benchLoaded, null, { timeout: TIMEOUT_MS }).then((h) => h.jsonValue());
  if (seen.page !== want) throw new Error(`after a reload at ${hash} the first loaded page was ${seen.page}, not ${want}`);
  // Where the time went: the document's navigation timing and each request's span (ms since the
  // navigation started).
  const parts = await page.evaluate(() => {
    const n = performance.getEntriesByType('navigation')[0];
    const r = (x) => Math.round(x * 10) / 10;
    return {
      response_end: r(n.responseEnd),
      dom_content_loaded: r(n.domContentLoadedEventEnd),
      resources: performance.getEntriesByType('resource').map((e) => ({
        name: new URL(e.name).pathname + new URL(e.name).search, type: e.initiatorType, start: r(e.startTime), end: r(e.responseEnd),
      })),
    };
  });
  return { in_page_ms: seen.ms, wall_ms: wall, parts };
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

  // The login: the link's code is traded for the Viewer token, and the app shows Runs.
  const t0 = performance.now();
  await page.goto(LOGIN_URL, { waitUntil: 'commit', timeout: TIMEOUT_MS });
  await page.waitForSelector('main#main[data-page="runs"][data-loaded="true"]', { state: 'attached', timeout: TIMEOUT_MS });
  const login = { wall_ms: performance.now() - t0, in_page_ms: (await page.evaluate(() => window.__benchLoaded))?.ms ?? null };
  const rows = await page.$$eval('table#runs-table tr[data-run-id]', (rs) => rs.length);
  log(`logged in; the Runs page shows ${rows} rows (${login.wall_ms.toFixed(0)} ms from the link)`);
  if (new URL(page.url()).hash !== RUNS_HASH) fatal(`the login landed on ${page.url()}, not ${RUNS_HASH}`);

  const samples = { runs_hash_ms: [], run_hash_ms: [], runs_reload_ms: [], run_reload_ms: [], runs_reload_wall_ms: [], run_reload_wall_ms: [] };
  const ways = [
    ['runs', RUNS_HASH, 'runs'],
    ['run', RUN_HASH, 'run'],
  ];
  // Hash navigation inside the app, each from the not-found page (no request in flight).
  for (let i = 0; i <= REPS; i++) {
    for (const [key, hash, want] of ways) {
      await hashNav(page, NOWHERE, 'missing');
      const ms = await hashNav(page, hash, want);
      if (i > 0) samples[`${key}_hash_ms`].push(ms);
    }
  }
  log(`hash navigation: ${REPS} x 2 pages`);
  // Full reloads of the tab (the token stays in sessionStorage).
  const breakdown = { runs_reload: [], run_reload: [] };
  for (let i = 0; i <= REPS; i++) {
    for (const [key, hash, want] of ways) {
      const r = await reloadNav(page, hash, want);
      if (i > 0) {
        samples[`${key}_reload_ms`].push(r.in_page_ms);
        samples[`${key}_reload_wall_ms`].push(r.wall_ms);
        breakdown[`${key}_reload`].push(r.parts);
      }
    }
  }
  log(`full reloads: ${REPS} x 2 pages`);
  const runRows = await page.evaluate(() => document.querySelectorAll('table#steps-table tr[data-step]').length);
  const result = { ok: true, runs_rows: rows, run_steps: runRows, login, samples, breakdown, page_errors: errors, user_agent: await page.evaluate(() => navigator.userAgent) };
  fs.writeFileSync(path.join(OUT, 'browser-samples.json'), JSON.stringify(result, null, 1));
  await close(context, profile);
}

main().catch((e) => fatal(e?.stack || String(e)));
