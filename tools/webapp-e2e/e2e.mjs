// The end-to-end browser test of Cairn's read-only web app. crates/cairn/tests/cli/webapp.rs builds a
// state root with real runs, verifications, kernel jobs and targets, starts `cairn ui`, and runs
// this script with:
//
//   CAIRN_URL             the daemon's base URL (http://127.0.0.1:PORT/)
//   CAIRN_LOGIN_URL       the one-time login link (…/#login=CODE)
//   CAIRN_VIEWER_TOKEN    what every API request must carry as `Authorization: Bearer …`
//   CAIRN_OPERATOR_TOKEN  what no request may ever carry
//   CAIRN_GATE_FILE       creating it lets the live run's step finish
//   CAIRN_ARTIFACTS       where screenshots, downloads and network.json go
//   CAIRN_EXPECT          JSON: the ids the pages must show (see webapp.rs)
//   CAIRN_E2E_DEADLINE_S  optional global deadline in seconds (default 240)
//
// It drives Debian's /usr/bin/chromium (headless, fresh profile) through playwright-core, checks
// every page against the DOM contract, runs axe-core on each, follows a live run to READY without
// a reload, checks the three notebook downloads, and at the end checks the network log: GET only,
// the Viewer token on every API request, never the Operator token, nothing outside the daemon.
// Prints one JSON summary line and exits 0, or says what failed and exits 1.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { CHROMIUM, close, launch } from './browser.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const AXE = path.join(HERE, 'node_modules', 'axe-core', 'axe.min.js');
// How long one check waits for the page. CI's machine ran this test over twice as slowly as a
// developer's 2-core VM (its data took 24 s to prepare, here 10 s), so the waits leave room for it.
const STEP_MS = 30_000;
const LIVE_MS = 60_000;
const DEADLINE_MS = Number(process.env.CAIRN_E2E_DEADLINE_S || 240) * 1000;

function env(name) {
  const v = process.env[name];
  if (!v) fatal(`the environment variable ${name} is not set (webapp.rs sets it)`);
  return v;
}

const BASE = new URL(env('CAIRN_URL'));
const ORIGIN = BASE.origin;
const LOGIN_URL = env('CAIRN_LOGIN_URL');
const VIEWER = env('CAIRN_VIEWER_TOKEN');
const OPERATOR = env('CAIRN_OPERATOR_TOKEN');
const GATE = env('CAIRN_GATE_FILE');
const ARTIFACTS = env('CAIRN_ARTIFACTS');
const EXPECT = JSON.parse(env('CAIRN_EXPECT'));

fs.mkdirSync(ARTIFACTS, { recursive: true });

// ------------------------------------------------------------------------------------------------
// bookkeeping

/** Every request the browser made: method, url, authorization, and (later) the status. */
const network = [];
/** Promises of the full header sets (allHeaders), settled before the network checks. */
const pendingHeaders = [];
/** Uncaught exceptions in the page, console errors, and accessibility violations. */
const pageErrors = [];
const consoleErrors = [];
const axeFailures = [];
/** Pages visited (for the summary). */
const pages = [];
let context = null;
let profile = null;
let current = 'start';

function log(msg) {
  process.stderr.write(`[e2e] ${msg}\n`);
}

function writeNetwork() {
  try {
    fs.writeFileSync(path.join(ARTIFACTS, 'network.json'), JSON.stringify(network, null, 2));
  } catch (e) {
    log(`could not write network.json: ${e}`);
  }
}

async function shutdown() {
  const ctx = context;
  context = null;
  await close(ctx, profile);
}

function fatal(msg) {
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  process.stderr.write(`\nE2E FAILED (${current}): ${msg}\n`);
  writeNetwork();
  process.stdout.write(JSON.stringify({ ok: false, at: current, error: msg }) + '\n');
  process.exit(1);
}

class Failure extends Error {}

function fail(msg) {
  throw new Failure(msg);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `fn` until it returns a truthy value; fails with `what()` after `ms`. */
async function poll(what, fn, ms = STEP_MS) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) fail(`timed out after ${ms / 1000} s waiting for ${typeof what === 'function' ? what(last) : what}`);
    await sleep(100);
  }
}

const norm = (s) => (s ?? '').replace(/\s+/g, ' ').trim();

async function text(page, selector) {
  const el = await page.$(selector);
  return el ? norm(await el.textContent()) : null;
}

/** Waits until the text of `selector` satisfies `pred` (or equals it, when a string). */
async function waitText(page, selector, pred, ms = STEP_MS) {
  const test = typeof pred === 'string' ? (t) => t === pred : pred;
  let seen = null;
  await poll(
    () => `${selector} to read ${typeof pred === 'string' ? JSON.stringify(pred) : pred.toString()} (it reads ${JSON.stringify(seen)})`,
    async () => {
      seen = await text(page, selector);
      return seen !== null && test(seen);
    },
    ms,
  );
  return seen;
}

async function count(page, selector) {
  return (await page.$$(selector)).length;
}

async function mustExist(page, selector, what) {
  await poll(`${what ?? selector} (selector ${selector})`, async () => (await page.$(selector)) !== null);
}

const attr = (v) => JSON.stringify(String(v));

// ------------------------------------------------------------------------------------------------
// page-level checks shared by every page

async function waitPage(page, name) {
  await page
    .waitForSelector(`main#main[data-page=${attr(name)}][data-loaded="true"]`, { timeout: STEP_MS, state: 'attached' })
    .catch(async () => {
      const main = await page.$('main#main');
      const dp = main ? await main.getAttribute('data-page') : null;
      const dl = main ? await main.getAttribute('data-loaded') : null;
      fail(
        `main#main[data-page=${name}][data-loaded=true] never appeared (main ${main ? `has data-page=${dp} data-loaded=${dl}` : 'is missing'}; ` +
          `location ${page.url()}; body text: ${JSON.stringify(norm(await page.textContent('body').catch(() => '')).slice(0, 400))})`,
      );
    });
}

async function checkChrome(page, name) {
  const nav = page.locator('nav[aria-label="Sections"]');
  check((await nav.count()) === 1, `${name}: expected one <nav aria-label="Sections">, found ${await nav.count()}`);
  for (const link of ['Runs', 'Workflows', 'Compute', 'Verifications', 'Docs']) {
    const n = await nav.getByRole('link', { name: link, exact: true }).count();
    check(n === 1, `${name}: the Sections nav must hold one link named ${link}, found ${n}`);
  }
  const h1 = await count(page, 'main#main h1');
  check(h1 === 1, `${name}: main#main must hold exactly one <h1>, found ${h1}`);
}

async function axe(page, name) {
  // Not page.addScriptTag: that injects an inline <script>, which the app's Content Security
  // Policy (script-src 'self') rightly blocks. Evaluating the source over the DevTools protocol is
  // not subject to the page's CSP, so the policy stays on for the app itself.
  if (!(await page.evaluate(() => typeof window.axe === 'object'))) await page.evaluate(fs.readFileSync(AXE, 'utf8'));
  const result = await page.evaluate(() => window.axe.run());
  for (const v of result.violations) {
    if (v.impact !== 'serious' && v.impact !== 'critical') {
      log(`${name}: axe (${v.impact}) ${v.id}: ${v.help}`);
      continue;
    }
    const targets = v.nodes.map((n) => n.target.join(' ')).slice(0, 10);
    axeFailures.push({ page: name, id: v.id, impact: v.impact, help: v.help, targets });
  }
}

async function screenshot(page, name) {
  await page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Everything every page gets once its data is shown: the shared chrome, axe, a screenshot. */
async function finishPage(page, kind, name = kind) {
  await checkChrome(page, name);
  await axe(page, name);
  await screenshot(page, name);
  pages.push(name);
  log(`page ${name}: ok`);
}

/** Goes to a hash route inside the loaded app (no reload; the token lives in the page). */
async function go(page, hash, kind) {
  current = hash;
  await page.evaluate((h) => {
    window.location.hash = h;
  }, hash);
  await poll(`the location to become ${hash} (it is ${page.url()})`, async () => new URL(page.url()).hash === hash);
  await waitPage(page, kind);
}

// ------------------------------------------------------------------------------------------------
// the pages

const RUNS = [
  ['ready', 'READY'],
  ['blocked', 'BLOCKED'],
  ['failed', 'FAILED'],
  ['replay_child', 'READY'],
  ['live', 'RUNNING'],
];

const rowIds = (page) => page.$$eval('table#runs-table tr[data-run-id]', (rs) => rs.map((r) => r.getAttribute('data-run-id')).sort());

/** Clears the filter `select` and waits until every run is listed again. */
async function allRunsBack(page, select, what) {
  await page.selectOption(select, '');
  let got;
  await poll(
    () => `clearing the ${what} filter to bring every run back (rows: ${JSON.stringify(got)})`,
    async () => {
      got = await rowIds(page);
      return RUNS.every(([k]) => got.includes(EXPECT[k]));
    },
  );
}

async function runsList(page) {
  await mustExist(page, 'table#runs-table', 'the runs table');
  for (const [key, status] of RUNS) {
    const id = EXPECT[key];
    const row = `table#runs-table tr[data-run-id=${attr(id)}]`;
    await mustExist(page, row, `the row of the ${key} run ${id}`);
    await waitText(page, `${row} td[data-col=status]`, status);
    const wf = key === 'live' ? `${EXPECT.live_workflow}@${EXPECT.version}` : `${EXPECT.workflow}@${EXPECT.version}`;
    await waitText(page, `${row} td[data-col=workflow]`, wf);
    await waitText(page, `${row} td[data-col=target]`, 'local');
    await waitText(page, `${row} td[data-col=started]`, (t) => t.length > 0);
    await mustExist(page, `${row} td[data-col=duration]`);
  }
}

/** The status filter keeps only matching rows. */
async function statusFilter(page) {
  const statusValues = await page.$$eval('select#filter-status option', (os) => os.map((o) => o.value));
  const wantStatus = ['', 'PENDING', 'RUNNING', 'READY', 'BLOCKED', 'FAILED', 'CANCELLED'];
  check(
    JSON.stringify(statusValues) === JSON.stringify(wantStatus),
    `select#filter-status must offer ${JSON.stringify(wantStatus)}, offers ${JSON.stringify(statusValues)}`,
  );
  for (const [status, keys] of [
    ['BLOCKED', ['blocked']],
    ['FAILED', ['failed']],
    ['RUNNING', ['live']],
  ]) {
    await page.selectOption('select#filter-status', status);
    // Asked of the daemon, so the filter reaches runs older than the newest the page lists.
    await poll(
      () => `the ${status} filter to follow the daemon's list of ${status} runs (GET /runs?follow=true&…&status=${status})`,
      async () => network.some((r) => r.method === 'GET' && r.url.includes('/runs?follow=true') && new URL(r.url).searchParams.get('status') === status),
    );
    const want = keys.map((k) => EXPECT[k]).sort();
    let got;
    await poll(
      () => `the ${status} filter to leave only ${JSON.stringify(want)} (rows: ${JSON.stringify(got)})`,
      async () => JSON.stringify((got = await rowIds(page))) === JSON.stringify(want),
    );
  }
  await page.selectOption('select#filter-status', 'READY');
  const ready = [EXPECT.ready, EXPECT.replay_child];
  let got;
  await poll(
    () => `the READY filter to show ${JSON.stringify(ready)} and nothing that is not READY (rows: ${JSON.stringify(got)})`,
    async () => {
      got = await rowIds(page);
      const statuses = await page.$$eval('table#runs-table tr[data-run-id] td[data-col=status]', (ts) => ts.map((t) => t.textContent.trim()));
      return ready.every((id) => got.includes(id)) && statuses.every((s) => s === 'READY');
    },
  );
  await allRunsBack(page, 'select#filter-status', 'status');
}

/** The workflow filter keeps only that workflow's runs. */
async function workflowFilter(page) {
  let got;
  const wfValues = await page.$$eval('select#filter-workflow option', (os) => os.map((o) => o.value));
  for (const v of ['', EXPECT.workflow, EXPECT.live_workflow]) {
    check(wfValues.includes(v), `select#filter-workflow must offer ${JSON.stringify(v)}, offers ${JSON.stringify(wfValues)}`);
  }
  await page.selectOption('select#filter-workflow', EXPECT.live_workflow);
  await poll(
    () => `the workflow filter ${EXPECT.live_workflow} to leave only ${EXPECT.live} (rows: ${JSON.stringify(got)})`,
    async () => JSON.stringify((got = await rowIds(page))) === JSON.stringify([EXPECT.live]),
  );
  await allRunsBack(page, 'select#filter-workflow', 'workflow');
}

const stepRow = (step) => `table#steps-table tr[data-step=${attr(step)}]`;
const dagNode = (step) => `svg#dag g.node[data-step=${attr(step)}]`;
const ganttBar = (step) => `svg#gantt .bar[data-step=${attr(step)}]`;

/** The Gantt of a finished run: one bar (or, reused, a point) per step, each ending as `ends` says
 *  (default completed). */
async function checkGantt(page, steps, ends = {}) {
  for (const step of steps) {
    await mustExist(page, ganttBar(step), `the Gantt bar of step ${step}`);
    const want = ends[step] || 'completed';
    const got = await page.$$eval(ganttBar(step), (bars) => bars.map((b) => b.getAttribute('data-end')));
    check(got.includes(want), `the Gantt bars of ${step} must include one that ended ${want}, have ${JSON.stringify(got)}`);
  }
}

async function checkSteps(page, steps, statuses) {
  for (const step of steps) {
    await mustExist(page, dagNode(step), `the DAG node of step ${step}`);
    await mustExist(page, stepRow(step), `the step table row of ${step}`);
    for (const col of ['status', 'attempts', 'duration', 'decision', 'reason']) {
      await mustExist(page, `${stepRow(step)} td[data-col=${col}]`);
    }
    const want = statuses[step];
    if (want) {
      const got = await page.getAttribute(dagNode(step), 'data-status');
      check(got === want, `the DAG node of ${step} must have data-status=${want}, has ${got}`);
      await waitText(page, `${stepRow(step)} td[data-col=status]`, (t) => t.toUpperCase().includes(want));
    }
  }
  const nodes = await count(page, 'svg#dag g.node');
  check(nodes === steps.length, `svg#dag must hold ${steps.length} g.node (one a step), holds ${nodes}`);
}

async function openLog(page, step, wantText) {
  const sel = `details.log[data-step=${attr(step)}]`;
  await mustExist(page, sel, `the log of step ${step}`);
  await page.click(`${sel} summary`);
  await waitText(page, `${sel} pre`, (t) => (wantText ? t.includes(wantText) : t.length > 0), STEP_MS);
}

const allDone = () => Object.fromEntries(EXPECT.steps.map((s) => [s, 'COMPLETED']));

/** A step's attempt timings (from the run's timeline): one attempt, started, and ended `how`
 *  ("#1 2026-… → 1.2 s completed"); none for a step a replay reused. */
async function checkTimings(page, step, how) {
  const want = how ? (t) => new RegExp(`^#1 \\S+ \\S+ → .+ ${how}$`).test(t) : '';
  await waitText(page, `${stepRow(step)} td[data-col=timings]`, want);
}

/** The READY run, which is the replay source. */
async function readyRun(page) {
  const steps = EXPECT.steps;
  const done = allDone();
  await go(page, `#/runs/${EXPECT.ready}`, 'run');
  await waitText(page, '#run-status', 'READY');
  // Who submitted it: the state root's owner (the CLI), as `cairn show` says.
  await waitText(page, '#run-submitted-by', 'owner');
  await checkSteps(page, steps, done);
  for (const step of steps) {
    await waitText(page, `${stepRow(step)} td[data-col=attempts]`, '1');
    await checkTimings(page, step, 'completed');
  }
  // No step of it is a pipeline: no jobs line, no jobs section.
  check((await count(page, '#steps-table [data-col=jobs]')) === 0, 'a run without a pipeline step has no jobs line');
  await mustExist(page, '#jobs-none', 'the note that no step of the run is a pipeline');
  await mustExist(page, `#lineage a[href=${attr(`#/runs/${EXPECT.replay_child}`)}]`, 'the lineage link from the source to its replay child');
  await mustExist(page, '#events li[data-kind="run.finished"]', 'the run.finished event');
  await checkGantt(page, steps);
  check((await count(page, '#findings li')) === 0, 'a READY run has no findings');
  await openLog(page, steps[0], EXPECT.log_text);
  await evidence(page);
  await finishPage(page, 'run');
}

/** The READY run's evidence: a step's result (collapsed JSON) and artifact as the API gives them,
 *  and a result over 64 KiB read whole once opened. */
async function evidence(page) {
  const ev = EXPECT.evidence;
  const result = (step) => `details.result[data-step=${attr(step)}]`;
  await mustExist(page, result(ev.step), `the result of step ${ev.step}`);
  check(!(await page.$eval(result(ev.step), (d) => d.open)), 'a step result is collapsed until opened');
  await page.click(`${result(ev.step)} summary`);
  let shown;
  await poll(() => `the result of ${ev.step} to show ${JSON.stringify(ev.result)} (shows ${shown})`, async () => {
    shown = await page.textContent(`${result(ev.step)} pre`);
    try { return JSON.stringify(JSON.parse(shown)) === JSON.stringify(ev.result); } catch { return false; }
  });
  const row = `table#artifacts-table tr[data-path=${attr(ev.artifact.path)}]`;
  await mustExist(page, row, `the artifact row of ${ev.artifact.path}`);
  for (const [col, want] of [['step', ev.step], ['name', ev.artifact.name], ['sha256', ev.artifact.sha256], ['bytes', String(ev.artifact.bytes)]]) {
    await waitText(page, `${row} td[data-col=${col}]`, (t) => t.trim() === want);
  }
  // The cut one: its size in the summary, the whole result once opened.
  await page.click(`${result(ev.cut_step)} summary`);
  await poll(() => `the whole result of ${ev.cut_step} (${ev.cut_bytes} bytes) once opened`, async () => {
    const t = await page.textContent(`${result(ev.cut_step)} pre`);
    try { return JSON.stringify(JSON.parse(t)) === JSON.stringify(ev.cut_result); } catch { return false; }
  }, STEP_MS);
}

/** A pipeline run: its step's jobs, as the run and its jobs endpoint count them. */
async function pipelineRun(page) {
  const p = EXPECT.pipeline;
  await go(page, `#/runs/${p.run}`, 'run');
  await waitText(page, '#run-status', 'READY');
  await waitText(page, `${stepRow(p.step)} td[data-col=status] [data-col=jobs]`, (t) => t.trim() === p.jobs);
  await checkTimings(page, p.step, 'completed');
  await mustExist(page, '#events li[data-kind="pipeline.job_finished"]', 'the pipeline\'s job events in the timeline');
  // Its jobs: a graph (the target job reads what the three others wrote), their bars on the time
  // axis, a table with why each ran; each artifact names the job that wrote it.
  const jobs = `section.jobs[data-step=${attr(p.step)}]`;
  await poll(`the ${p.job_count} jobs of ${p.step} in its job table`, async () => (await count(page, `${jobs} table tbody tr`)) === p.job_count);
  check((await count(page, `${jobs} svg.dag .node`)) === p.job_count, `the job graph of ${p.step} must have ${p.job_count} nodes`);
  check((await count(page, `${jobs} svg.dag .edge`)) === p.job_edges, `the job graph of ${p.step} must have ${p.job_edges} edges`);
  check((await count(page, `${jobs} svg.gantt .bar`)) === p.job_count, `the job chart of ${p.step} must have ${p.job_count} bars`);
  check((await count(page, `${jobs} tr[data-status="finished"]`)) === p.job_count, 'every job finished');
  await waitText(page, `${jobs} td[data-col=reason]`, (t) => t.startsWith('Missing output files'));
  await waitText(page, `table#artifacts-table tr[data-path=${attr(p.artifact)}] [data-col=job]`, (t) => t.includes(p.artifact_rule));
  await finishPage(page, 'run', 'run-pipeline');
}

/** The replay child: lineage back to the source, the reused step marked. */
async function replayRun(page) {
  const steps = EXPECT.steps;
  const done = allDone();
  await go(page, `#/runs/${EXPECT.replay_child}`, 'run');
  await waitText(page, '#run-status', 'READY');
  await checkSteps(page, steps, done);
  await mustExist(page, `#lineage a[href=${attr(`#/runs/${EXPECT.replay_source}`)}]`, 'the lineage link from the child to its source');
  const reused = EXPECT.reused_step;
  check(
    (await page.getAttribute(dagNode(reused), 'data-reused')) === 'true',
    `the DAG node of the reused step ${reused} must have data-reused="true"`,
  );
  for (const step of steps.filter((s) => s !== reused)) {
    check((await page.getAttribute(dagNode(step), 'data-reused')) !== 'true', `the replayed step ${step} must not be marked reused`);
  }
  await checkGantt(page, steps, { [reused]: 'reused' });
  await waitText(page, `${stepRow(reused)} td[data-col=decision]`, 'reused');
  await checkTimings(page, reused, null);
  for (const step of steps.filter((s) => s !== reused)) await checkTimings(page, step, 'completed');
  await waitText(page, `${stepRow(reused)} td[data-col=reason]`, (t) => t.toLowerCase().startsWith('reused'));
  // The reused step's artifact: the source's bytes, produced by the source run.
  const row = `table#artifacts-table tr[data-path=${attr(EXPECT.evidence.artifact.path)}]`;
  await waitText(page, `${row} td[data-col=sha256]`, (t) => t.trim() === EXPECT.evidence.artifact.sha256);
  await mustExist(page, `${row} td[data-col=produced] a[href=${attr(`#/runs/${EXPECT.replay_source}`)}]`, 'the link to the run that produced the reused artifact');
  await finishPage(page, 'run', 'run-replay');
}

/** The BLOCKED run: its finding. */
async function blockedRun(page) {
  const steps = EXPECT.steps;
  const done = allDone();
  await go(page, `#/runs/${EXPECT.blocked}`, 'run');
  await waitText(page, '#run-status', 'BLOCKED');
  await checkSteps(page, steps, done);
  await poll('#findings li (a BLOCKED run has at least one finding)', async () => (await count(page, '#findings li')) >= 1);
  await waitText(page, '#findings', (t) => t.includes(EXPECT.finding));
  await mustExist(page, '#events li[data-kind="run.finished"]', 'the run.finished event');
  await finishPage(page, 'run', 'run-blocked');
}

/** The FAILED run: the failed step, its log. */
async function failedRun(page) {
  const steps = EXPECT.steps;
  await go(page, `#/runs/${EXPECT.failed}`, 'run');
  await waitText(page, '#run-status', 'FAILED');
  await checkSteps(page, steps, { [steps[0]]: 'COMPLETED', [EXPECT.failed_step]: 'FAILED' });
  await mustExist(page, '#events li[data-kind="run.finished"]', 'the run.finished event');
  await checkGantt(page, [steps[0], EXPECT.failed_step], { [EXPECT.failed_step]: 'failed' });
  await checkTimings(page, EXPECT.failed_step, 'failed');
  await openLog(page, EXPECT.failed_step, EXPECT.fail_text);
  await finishPage(page, 'run', 'run-failed');
}

/** A run of more steps than a page holds: its counts, its graph by layers, a table that holds only
 *  the rows in view and reads the rest as it scrolls, filtered by status or by layer, and a step's
 *  details on demand. */
async function largeRun(page) {
  const l = EXPECT.large;
  await go(page, `#/runs/${l.run}`, 'run');
  await waitText(page, '#run-status', 'READY');
  check((await page.getAttribute('main', 'data-large')) === 'true', 'a large run\'s page must say so (main[data-large])');
  await waitText(page, '#step-counts', `${l.steps} steps: ${l.steps} completed, 0 failed, 0 running, 0 pending`);
  await waitText(page, '#dag-layers li[data-layer="0"]', (t) => t.includes(`${l.fan} steps`));
  check((await page.getAttribute('#dag-layers li[data-layer="0"]', 'data-completed')) === String(l.fan), 'layer 0: every step completed');
  await waitText(page, '#dag-layers li[data-layer="1"]', (t) => t.includes('1 step') && t.includes('join'));
  await mustExist(page, stepRow('s0'), 'the first step\'s row');
  const rows = await count(page, 'table#steps-table tbody tr[data-step]');
  check(rows > 5 && rows < 60, `the table must hold only the rows in view, holds ${rows}`);
  // Scrolled to its end, it reads and shows the last rows.
  await page.$eval('#steps-virtual', (el) => { el.scrollTop = el.scrollHeight; });
  await mustExist(page, stepRow('join'), 'the last step\'s row, read on scrolling');
  check(!(await page.$(stepRow('s0'))), 'the first row left the table when scrolled away');
  // By status: none failed.
  await page.selectOption('select#steps-filter', 'FAILED');
  await waitText(page, '#steps-matched', 'No step matches.');
  await page.selectOption('select#steps-filter', '');
  await mustExist(page, stepRow('s0'), 'every step back, from the first');
  // A layer's steps.
  await page.click('#dag-layers li[data-layer="1"] button');
  await mustExist(page, stepRow('join'), 'the join, the one step of layer 1');
  await waitText(page, '#steps-matched', (t) => t.startsWith('Steps 1–1 of 1'));
  await page.click('#steps-all-layers');
  await mustExist(page, stepRow('s0'), 'every layer back');
  // A step's details: its result and log.
  await page.click(`${stepRow('s0')} button`);
  await waitText(page, '#step-detail-log', (t) => t.includes(l.log_text));
  await mustExist(page, 'svg#gantt', 'the attempts of the first steps on a time axis');
  await mustExist(page, '#events li[data-kind="run.finished"]', 'the newest events, the run\'s end among them');
  await finishPage(page, 'run', 'run-large');
}

async function workflowsList(page) {
  await go(page, '#/workflows', 'workflows');
  for (const wf of [EXPECT.workflow, EXPECT.live_workflow]) {
    const row = `table#workflows-table tr[data-workflow=${attr(wf)}][data-version=${attr(EXPECT.version)}]`;
    await mustExist(page, row, `the row of workflow ${wf}@${EXPECT.version}`);
    await mustExist(page, `${row} a[href=${attr(`#/workflows/${wf}/${EXPECT.version}`)}]`, `the link to workflow ${wf}`);
  }
  await finishPage(page, 'workflows');
}

/** One workflow, reached through its link in the list (a hash navigation). */
async function workflowPage(page) {
  await go(page, '#/workflows', 'workflows');
  current = `#/workflows/${EXPECT.workflow}/${EXPECT.version}`;
  const row = `table#workflows-table tr[data-workflow=${attr(EXPECT.workflow)}][data-version=${attr(EXPECT.version)}]`;
  const link = `${row} a[href=${attr(current)}]`;
  if (await page.$(link)) await page.click(link);
  else await go(page, current, 'workflow');
  await waitPage(page, 'workflow');
  for (const step of EXPECT.steps) await mustExist(page, dagNode(step), `the DAG node of step ${step}`);
  const nodes = await count(page, 'svg#dag g.node');
  check(nodes === EXPECT.steps.length, `the workflow's svg#dag must hold ${EXPECT.steps.length} g.node, holds ${nodes}`);
  for (const tool of EXPECT.tools) {
    const sel = `table#tools-table tr[data-tool=${attr(tool)}] td[data-col=digest]`;
    await mustExist(page, sel, `the digest of tool ${tool}`);
    await waitText(page, sel, (t) => /[0-9a-f]{12,}/.test(t));
  }
  await mustExist(page, '#rules', 'the rules section');
  await finishPage(page, 'workflow');
}

async function computePage(page) {
  await go(page, '#/compute', 'compute');
  const targets = ['local', ...(EXPECT.target ? [EXPECT.target] : [])];
  for (const t of targets) {
    const row = `table#targets-table tr[data-target=${attr(t)}]`;
    await mustExist(page, row, `the row of target ${t}`);
    await waitText(page, `${row} td[data-col=readiness]`, (s) => s.length > 0);
    await waitText(page, `${row} td[data-col=probe]`, (s) => s.length > 0);
  }
  if (EXPECT.target) {
    const probe = await text(page, `table#targets-table tr[data-target=${attr(EXPECT.target)}] td[data-col=probe]`);
    check(probe.toLowerCase() !== 'never', `the target ${EXPECT.target} was probed, but its probe cell says ${JSON.stringify(probe)}`);
  }
  await finishPage(page, 'compute');
}

function notebookText(nb) {
  const src = (s) => (Array.isArray(s) ? s.join('') : String(s ?? ''));
  return (nb.cells ?? []).map((c) => src(c.source)).join('\n');
}

async function download(page, button, name) {
  await mustExist(page, button);
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: STEP_MS }), page.click(button)]).catch((e) =>
    fail(`clicking ${button} started no download within ${STEP_MS / 1000} s (${e.message.split('\n')[0]})`),
  );
  const failure = await dl.failure();
  check(failure === null, `the download of ${button} failed: ${failure}`);
  const file = path.join(ARTIFACTS, name);
  await dl.saveAs(file);
  const raw = fs.readFileSync(file, 'utf8');
  let nb;
  try {
    nb = JSON.parse(raw);
  } catch (e) {
    fail(`the download of ${button} (${dl.suggestedFilename()}) is not JSON: ${e.message}; it begins ${JSON.stringify(raw.slice(0, 200))}`);
  }
  check(nb.nbformat === 4, `the download of ${button} must be an nbformat 4 notebook; nbformat is ${JSON.stringify(nb.nbformat)}`);
  check(Array.isArray(nb.cells), `the download of ${button} has no cells`);
  log(`download ${button}: ${dl.suggestedFilename()} -> ${file} (${nb.cells.length} cells)`);
  return nb;
}

async function verificationsTable(page) {
  await go(page, '#/verifications', 'verifications');
  const passed = `table#verifications-table tr[data-verification=${attr(EXPECT.passed_verification)}]`;
  const failed = `table#verifications-table tr[data-verification=${attr(EXPECT.failed_verification)}]`;
  await mustExist(page, passed, `the row of the passed verification ${EXPECT.passed_verification}`);
  await mustExist(page, failed, `the row of the failed verification ${EXPECT.failed_verification}`);
  check((await page.getAttribute(passed, 'data-verdict')) === 'passed', 'the passed verification must have data-verdict="passed"');
  check((await page.getAttribute(failed, 'data-verdict')) === 'failed', 'the failed verification must have data-verdict="failed"');
  const chips = async (row) => page.$$eval(`${row} .cell[data-status]`, (cs) => cs.map((c) => c.getAttribute('data-status')));
  const pc = await chips(passed);
  check(pc.length >= 1 && pc.every((s) => s === 'passed'), `the passed verification's cell chips must all be passed: ${JSON.stringify(pc)}`);
  const fc = await chips(failed);
  check(fc.includes('failed'), `the failed verification's cell chips must include a failed one: ${JSON.stringify(fc)}`);
  await mustExist(page, `${failed} details.draft`, "the failed verification's draft");
  await page.click(`${failed} details.draft summary`);
  await waitText(page, `${failed} details.draft pre`, (t) => t.includes(EXPECT.failed_code));

  for (const job of EXPECT.jobs) {
    const row = `table#jobs-table tr[data-job=${attr(job.id)}]`;
    await mustExist(page, row, `the row of kernel job ${job.id}`);
    await waitText(page, `${row} td[data-col=status]`, (t) => t.toLowerCase().includes(job.status));
  }
  // The failed cell's error, as an agent reads it, and a verification in progress as a job.
  await waitText(page, `${failed} details.cell-error summary`, (t) => t.includes(EXPECT.failed_cell_error));
  const held = `table#jobs-table tr[data-job=${attr(EXPECT.held_verification.id)}]`;
  await mustExist(page, held, `the row of the verification in progress ${EXPECT.held_verification.id}`);
  check((await page.getAttribute(held, 'data-kind')) === 'verification', 'a verification in progress must be a row of kind verification');
  await waitText(page, `${held} td[data-col=status]`, (t) => t.toLowerCase().includes('running'));
  await waitText(page, `${held} td[data-col=cells]`, (t) => t.includes(EXPECT.held_verification.cells));
  await finishPage(page, 'verifications');
}

async function verifiedNotebook(page) {
  await go(page, '#/verifications', 'verifications');
  const nb = await download(page, 'button#download-notebook', 'verified-notebook.ipynb');
  check(notebookText(nb).includes(EXPECT.passed_code), `the verified notebook must hold the passed code ${JSON.stringify(EXPECT.passed_code)}`);
}

async function auditNotebook(page) {
  await go(page, '#/verifications', 'verifications');
  const audit = await download(page, 'button#download-audit', 'audit-notebook.ipynb');
  for (const job of EXPECT.jobs) {
    check(notebookText(audit).includes(job.code), `the audit notebook must hold job ${job.id}'s code ${JSON.stringify(job.code)}`);
  }
}

async function workflowNotebook(page) {
  await go(page, '#/verifications', 'verifications');
  const wf = await download(page, 'button#download-workflow', 'workflow-notebook.ipynb');
  check(notebookText(wf).includes(EXPECT.passed_code), `the workflow export must hold the last verified code ${JSON.stringify(EXPECT.passed_code)}`);
}

/** The Docs page: every doc listed, a search that highlights its word, and one doc rendered as
 *  markdown with its versions and the verification (and notebook) it came from. */
async function docsPages(page) {
  const d = EXPECT.doc;
  await go(page, '#/docs', 'docs');
  for (const name of [d.name, d.other]) await mustExist(page, `table#docs-table tr[data-doc=${attr(name)}]`, `the row of doc ${name}`);
  await waitText(page, `table#docs-table tr[data-doc=${attr(d.name)}] td[data-col=version]`, String(d.versions));
  await page.fill('input#doc-query', d.word);
  await page.click('button#doc-search');
  const hit = `#doc-hits li[data-doc=${attr(d.name)}]`;
  await mustExist(page, hit, `the search hit of ${d.name} for ${d.word}`);
  check((await count(page, '#doc-hits li')) === 1, `the search for ${d.word} must find only ${d.name}`);
  await waitText(page, `${hit} mark`, (t) => t.toLowerCase() === d.word);
  await finishPage(page, 'docs');

  // Into the doc from its search hit.
  await page.click(`${hit} a`);
  await waitPage(page, 'doc');
  await waitText(page, 'main#main h1', d.title);
  await waitText(page, '#doc-version', `${d.versions} of ${d.versions}`);
  await waitText(page, 'article#doc-text h2', d.title);
  await waitText(page, 'article#doc-text h3', d.heading);
  await waitText(page, 'article#doc-text pre code', (t) => t.includes(d.code));
  await waitText(page, 'article#doc-text em', 'inputs');
  check((await count(page, 'article#doc-text script')) === 0, 'raw HTML in a doc must not become an element');
  await waitText(page, 'article#doc-text', (t) => t.includes('<script>alert(1)</script>'));
  check((await count(page, '#doc-versions li')) === d.versions, `the doc page must list ${d.versions} versions`);
  await waitText(page, '#doc-verification', (t) => t.includes(d.verification) && t.includes('passed'));
  await finishPage(page, 'doc');
  const nb = await download(page, 'button#doc-notebook', 'doc-notebook.ipynb');
  check(notebookText(nb).includes(EXPECT.passed_code), `the doc's notebook must be the passed verification's (${EXPECT.passed_code})`);

  // An older version, from the versions list.
  await page.click('#doc-versions li[data-version="1"] a');
  await waitPage(page, 'doc');
  await waitText(page, '#doc-version', `1 of ${d.versions}`);
  await waitText(page, '#doc-verification', (t) => t.includes('no verification'));
  await finishPage(page, 'doc', 'doc-old-version');
}

async function liveRun(page) {
  await go(page, `#/runs/${EXPECT.live}`, 'run');
  await waitText(page, '#run-status', 'RUNNING');
  // An open run says which daemon drives it, as `cairn show` does.
  await waitText(page, '#run-lease', (t) => /^daemon dmn_\w+ on host \S+ \(lease epoch 1, until /.test(t));
  const hold = EXPECT.live_steps[0];
  await poll(`the DAG node of ${hold} to be RUNNING`, async () => (await page.getAttribute(dagNode(hold), 'data-status')) === 'RUNNING');
  await waitText(page, `${stepRow(hold)} td[data-col=timings]`, (t) => /^#1 \S+ \S+ → running$/.test(t));
  await finishPage(page, 'run', 'run-live');

  // From here on nothing may reload or navigate the page: it has to update itself.
  const navigations = [];
  const onNav = (frame) => {
    if (frame === page.mainFrame()) navigations.push(frame.url());
  };
  page.on('framenavigated', onNav);
  await page.evaluate(() => {
    window.__cairnE2eMarker = 'still the same document';
  });
  fs.writeFileSync(GATE, 'go\n');
  log(`created the gate file ${GATE}`);
  current = `${EXPECT.live} live`;
  await waitText(page, '#run-status', 'READY', LIVE_MS);
  await poll('a finished run to show no lease', async () => (await count(page, '#run-lease')) === 0);
  for (const step of EXPECT.live_steps) {
    await poll(`the DAG node of ${step} to be COMPLETED`, async () => (await page.getAttribute(dagNode(step), 'data-status')) === 'COMPLETED');
    await checkTimings(page, step, 'completed');
  }
  page.off('framenavigated', onNav);
  check(navigations.length === 0, `the live run page navigated while following the run: ${JSON.stringify(navigations)}`);
  const marker = await page.evaluate(() => window.__cairnE2eMarker);
  check(marker === 'still the same document', 'the live run page was reloaded while following the run');
  await screenshot(page, 'run-live-ready');

  // Back to the list through the nav link: the run is READY there too.
  current = 'runs (after the live run)';
  await page.locator('nav[aria-label="Sections"]').getByRole('link', { name: 'Runs', exact: true }).click();
  await waitPage(page, 'runs');
  await waitText(page, `table#runs-table tr[data-run-id=${attr(EXPECT.live)}] td[data-col=status]`, 'READY');
}

/** The tab of [`signInRefusals`], whose requests carry [`WRONG_TOKEN`] on purpose. */
let wrongTokenTab = null;
const WRONG_TOKEN = 'not-a-cairn-token';

/** A used login link, and a token the daemon does not know, both end on the sign-in page saying
 *  why (in a second tab, so the first keeps its session). */
async function signInRefusals() {
  const tab = await context.newPage();
  wrongTokenTab = tab;
  tab.on('pageerror', (e) => pageErrors.push(`${current}: ${e.message}`));
  try {
    current = 'the login link, used again';
    await tab.goto(LOGIN_URL, { waitUntil: 'domcontentloaded', timeout: STEP_MS });
    await waitPage(tab, 'signin');
    await waitText(tab, 'main [role=alert]', (t) => t.includes('used already'));
    check(!tab.url().includes('login='), `the used code stayed in the location: ${tab.url()}`);
    current = 'a token the daemon does not know';
    await tab.evaluate((t) => sessionStorage.setItem('cairn.viewer', t), WRONG_TOKEN);
    await tab.reload({ waitUntil: 'domcontentloaded', timeout: STEP_MS });
    await waitPage(tab, 'signin');
    await waitText(tab, 'main [role=alert]', (t) => t.includes('does not accept'));
    await screenshot(tab, 'signin');
  } finally {
    await tab.close();
  }
}

/** Failures of sections: each section is checked on its own, so one report lists them all. */
const sectionFailures = [];

async function section(page, name, fn) {
  current = name;
  try {
    await fn(page);
  } catch (e) {
    const msg = e instanceof Failure ? e.message : (e?.message ?? String(e)).split('\n')[0];
    sectionFailures.push(`${name} (at ${current}): ${msg}`);
    log(`FAILED ${name} (at ${current}): ${msg}`);
    const file = `failure-${name.replace(/[^a-z0-9]+/gi, '-')}.png`;
    await Promise.race([page.screenshot({ path: path.join(ARTIFACTS, file), fullPage: true }).catch(() => {}), sleep(5000)]);
    // Undo what a failed filter check may have left chosen (the app keeps filters across pages).
    for (const sel of ['select#filter-status', 'select#filter-workflow']) {
      if (await page.$(sel).catch(() => null)) await page.selectOption(sel, '', { timeout: 2000 }).catch(() => {});
    }
  }
}

// ------------------------------------------------------------------------------------------------
// the network log

async function checkNetwork() {
  await Promise.race([Promise.allSettled(pendingHeaders), sleep(5000)]);
  const problems = [];
  let apiRequests = 0;
  const open = new Set(['/', '/ui/login']);
  for (const r of network) {
    let u;
    try {
      u = new URL(r.url);
    } catch {
      problems.push(`an unparsable request URL: ${r.url}`);
      continue;
    }
    if (u.protocol === 'data:') continue;
    if (u.protocol === 'blob:') {
      if (new URL(u.pathname).origin !== ORIGIN) problems.push(`a blob of another origin: ${r.url}`);
      continue;
    }
    if (u.origin !== ORIGIN) {
      problems.push(`a request outside the daemon's origin ${ORIGIN}: ${r.method} ${r.url}`);
      continue;
    }
    if (r.method !== 'GET' && r.method !== 'HEAD') problems.push(`a ${r.method} request (the web app is read-only): ${r.url}`);
    if (r.authorization && r.authorization.includes(OPERATOR)) problems.push(`the Operator token was sent: ${r.method} ${r.url}`);
    if (r.url.includes(OPERATOR) || r.url.includes(VIEWER)) problems.push(`a token in a URL: ${r.method} ${u.pathname}`);
    const free = open.has(u.pathname) || u.pathname.startsWith('/assets/');
    if (!free) apiRequests += 1;
    // The refusals tab presents a wrong token on purpose, and only that one.
    const planted = r.wrongTokenTab && r.authorization === `Bearer ${WRONG_TOKEN}`;
    if (!free && !planted && r.authorization !== `Bearer ${VIEWER}`) {
      const had = r.authorization === null ? 'no Authorization header' : r.authorization.startsWith('Bearer ') ? 'another bearer token' : 'another Authorization header';
      problems.push(`an API request without the Viewer token (${had}): ${r.method} ${u.pathname}`);
    }
  }
  if (!network.some((r) => r.url.startsWith(ORIGIN))) problems.push('no request reached the daemon at all');
  if (apiRequests === 0) problems.push('no API request was made (the pages show nothing fetched?)');
  return problems;
}

// ------------------------------------------------------------------------------------------------

async function main() {
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-e2e-profile-'));
  check(fs.existsSync(CHROMIUM), `no chromium at ${CHROMIUM} (scripts/test.sh installs Debian's chromium)`);
  current = 'launch';
  context = await launch(profile, { acceptDownloads: true, timeout: STEP_MS * 2 });
  context.setDefaultTimeout(STEP_MS);
  context.on('request', (req) => {
    const h = req.headers();
    const entry = { method: req.method(), url: req.url(), authorization: h.authorization ?? null, type: req.resourceType(), status: null };
    try {
      entry.wrongTokenTab = wrongTokenTab !== null && req.frame().page() === wrongTokenTab;
    } catch {
      entry.wrongTokenTab = false;
    }
    network.push(entry);
    pendingHeaders.push(
      req
        .allHeaders()
        .then((all) => {
          if (all.authorization !== undefined) entry.authorization = all.authorization;
        })
        .catch(() => {}),
    );
  });
  context.on('response', (resp) => {
    const entry = network.findLast((r) => r.url === resp.url() && r.status === null);
    if (entry) entry.status = resp.status();
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => pageErrors.push(`${current}: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(`${current}: ${m.text()}`);
  });

  // Log in with the one-time link: the page trades the code for the Viewer token and shows Runs.
  current = 'login';
  await page.goto(LOGIN_URL, { waitUntil: 'domcontentloaded', timeout: STEP_MS });
  await poll(() => `the login to land on #/runs (location ${page.url()})`, async () => new URL(page.url()).hash === '#/runs');
  check(!page.url().includes('login='), `the login code stayed in the location: ${page.url()}`);
  current = '#/runs';
  await waitPage(page, 'runs');
  const sections = [
    ['runs list', runsList],
    ['runs status filter', statusFilter],
    ['runs workflow filter', workflowFilter],
    ['runs page', async (p) => (await go(p, '#/runs', 'runs'), finishPage(p, 'runs'))],
    ['READY run', readyRun],
    ['replay child', replayRun],
    ['pipeline run', pipelineRun],
    ['BLOCKED run', blockedRun],
    ['FAILED run', failedRun],
    ['large run', largeRun],
    ['workflows', workflowsList],
    ['workflow', workflowPage],
    ['compute', computePage],
    ['verifications', verificationsTable],
    ['download notebook', verifiedNotebook],
    ['download audit', auditNotebook],
    ['download workflow', workflowNotebook],
    ['docs', docsPages],
    ['live run', liveRun],
    ['sign-in refusals', signInRefusals],
  ];
  for (const [name, fn] of sections) await section(page, name, fn);

  current = 'final checks';
  const problems = await checkNetwork();
  writeNetwork();
  const failures = sectionFailures.slice();
  for (const a of axeFailures) {
    failures.push(`accessibility (${a.page}): ${a.impact} ${a.id}: ${a.help}\n      at ${a.targets.join('\n      at ')}`);
  }
  for (const p of problems) failures.push(`network: ${p}`);
  for (const e of pageErrors) failures.push(`uncaught exception in the page (${e})`);
  const cspSeen = new Set();
  for (const e of consoleErrors) {
    log(`console error: ${e}`);
    // Something the app tried was blocked by its own policy: a bug, whatever it was.
    const what = e.replace(/^[^:]*: /, '');
    if (/Content Security Policy/i.test(e) && !cspSeen.has(what)) {
      cspSeen.add(what);
      failures.push(`a Content Security Policy violation (first at ${e})`);
    }
  }
  const bad = network.filter((r) => r.status !== null && r.status >= 400);
  for (const r of bad) log(`HTTP ${r.status}: ${r.method} ${r.url}`);
  if (failures.length) fail(`${failures.length} problem(s):\n  - ${failures.join('\n  - ')}`);
  return { ok: true, pages, requests: network.length };
}

const deadline = setTimeout(() => {
  fatal(`the global deadline of ${DEADLINE_MS / 1000} s passed`);
}, DEADLINE_MS);

try {
  const summary = await main();
  clearTimeout(deadline);
  await shutdown();
  process.stdout.write(JSON.stringify(summary) + '\n');
  process.exit(0);
} catch (e) {
  clearTimeout(deadline);
  const msg = e instanceof Failure ? e.message : e?.stack ?? String(e);
  const at = current;
  const page = context?.pages()[0];
  if (page) await Promise.race([page.screenshot({ path: path.join(ARTIFACTS, 'failure.png'), fullPage: true }).catch(() => {}), sleep(5000)]);
  await shutdown().catch(() => {});
  current = at;
  for (const err of pageErrors) process.stderr.write(`[e2e] uncaught exception in the page: ${err}\n`);
  fatal(msg);
}
