// Cairn's read-only web app. Plain ES modules, no build step: the daemon serves these files
// from the binary. Every request to the API carries the Viewer token and is a GET; the page
// has no control that plans, approves, executes or cancels anything.

import { drawDag } from './dag.js';
import { drawGantt } from './gantt.js';

const TOKEN_KEY = 'cairn.viewer';
const RUNS_SHOWN = 200;
const STATUSES = ['PENDING', 'RUNNING', 'READY', 'BLOCKED', 'FAILED', 'CANCELLED'];
/** A run in one of these has ended. */
const FINISHED = ['READY', 'BLOCKED', 'FAILED', 'CANCELLED'];
const main = document.getElementById('main');
let token = sessionStorage.getItem(TOKEN_KEY);
// Aborted when the page changes: ends its streams and timers.
let pageLife = new AbortController();
// The runs list filters survive moving between pages.
const runFilters = { status: '', workflow: '' };

// ------------------------------------------------------------------------------------ DOM

/** An element: `h('td', {class: 'num', 'data-col': 'x'}, 'text', child)`. Text is always text. */
function h(tag, attrs = {}, ...children) {
  const svg = ['svg', 'g', 'rect', 'text', 'path', 'title', 'defs', 'marker'].includes(tag);
  const el = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function badge(status, extra = {}) {
  return h('span', { class: `badge s-${status || 'none'}`, ...extra }, status || '—');
}

function time(iso) {
  if (!iso) return '—';
  return h('time', { datetime: iso }, iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z'));
}

function ms(n) {
  if (n === null || n === undefined) return '—';
  if (n < 1000) return `${Math.round(n)} ms`;
  if (n < 60000) return `${(n / 1000).toFixed(1)} s`;
  const m = Math.floor(n / 60000);
  return `${m} min ${Math.round((n % 60000) / 1000)} s`;
}

function span(from, to) {
  if (!from) return null;
  const end = to ? Date.parse(to) : Date.now();
  return end - Date.parse(from);
}

/** A table; `caption` is its text, or a caption element of the caller's. */
function table(id, caption, headers, rows) {
  return h('table', { id },
    caption instanceof Node ? caption : caption ? h('caption', {}, caption) : null,
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col', class: /^(Attempts|Duration|Findings|Steps|Count)$/.test(t) ? 'num' : null }, t)))),
    h('tbody', {}, rows));
}

/** Replaces the page: one h1, the body, `data-page` for tests and styles. */
function page(name, title, ...body) {
  main.replaceChildren(h('h1', {}, title), ...body.flat().filter((c) => c !== null && c !== undefined && c !== false));
  main.dataset.page = name;
  delete main.dataset.loaded;
  delete main.dataset.large;
  document.title = `${title} · Cairn`;
  for (const a of document.querySelectorAll('nav a[data-section]')) {
    if (a.dataset.section === section(name)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function section(name) {
  return { run: 'runs', workflow: 'workflows', doc: 'docs' }[name] || name;
}

function loaded() {
  main.dataset.loaded = 'true';
}

function errorBox(e) {
  return h('div', { class: 'error', role: 'alert' }, e instanceof Error ? e.message : String(e));
}

// ------------------------------------------------------------------------------------ API

class ApiError extends Error {
  constructor(status, body) {
    super(body?.error?.message || `the daemon answered ${status}`);
    this.status = status;
    this.code = body?.error?.code;
  }
}

function headers() {
  return { Authorization: `Bearer ${token}` };
}

async function api(path, signal = pageLife.signal) {
  const r = await fetch(path, { headers: headers(), signal, cache: 'no-store' });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw refused(r, body);
  return body;
}

/** The error of a refused request; a refused token also signs the page out. */
function refused(r, body) {
  if (r.status === 401) signOut('The daemon does not accept this page\'s token (its tokens may have been replaced). Sign in again.');
  return new ApiError(r.status, body);
}

/** Follows a Server-Sent Events stream with the token (EventSource cannot send headers). */
async function stream(path, onEvent, signal) {
  const r = await fetch(path, { headers: { ...headers(), Accept: 'text/event-stream' }, signal, cache: 'no-store' });
  if (!r.ok) throw refused(r, await r.json().catch(() => null));
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n/g, '\n');
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const chunk = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const ev = { event: 'message', data: '', id: null };
      for (const line of chunk.split('\n')) {
        if (line.startsWith(':')) continue;
        const [k, ...rest] = line.split(':');
        const v = rest.join(':').replace(/^ /, '');
        if (k === 'event') ev.event = v;
        else if (k === 'data') ev.data += (ev.data ? '\n' : '') + v;
        else if (k === 'id') ev.id = v;
      }
      if (ev.data) onEvent(ev);
    }
  }
}

/** Downloads with the token: fetch, then save the body under the server's file name. */
async function download(path, fallback, status) {
  status.textContent = 'Downloading…';
  try {
    const r = await fetch(path, { headers: headers(), cache: 'no-store' });
    if (!r.ok) throw refused(r, await r.json().catch(() => null));
    const name = /filename="([^"]+)"/.exec(r.headers.get('content-disposition') || '')?.[1] || fallback;
    const url = URL.createObjectURL(await r.blob());
    const a = h('a', { href: url, download: name, class: 'visually-hidden' }, name);
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    status.textContent = `Saved ${name}.`;
  } catch (e) {
    status.textContent = e.message;
  }
}

// ------------------------------------------------------------------------------------ sign-in

/** Exchanges a login link's code for the Viewer token. False when it was refused and the page
 *  has no token to go on with (the sign-in page, with the reason, is shown then). */
async function signIn() {
  const m = /^#login=([0-9a-f.]+)$/.exec(location.hash);
  if (!m) return true;
  history.replaceState(null, '', '#/runs');
  const r = await fetch(`/ui/login?code=${encodeURIComponent(m[1])}`, { cache: 'no-store' });
  const body = await r.json().catch(() => null);
  if (r.ok) {
    token = body.token;
    sessionStorage.setItem(TOKEN_KEY, token);
    return true;
  }
  if (token) return true;
  signOut(body?.error?.message || `the daemon refused the login link (${r.status})`);
  return false;
}

function signOut(why) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  pageLife.abort();
  page('signin', 'Sign in',
    why ? h('div', { class: 'error', role: 'alert' }, why) : null,
    h('p', {}, 'This page needs a login link. In a terminal, run:'),
    h('pre', {}, 'cairn ui'),
    h('p', {}, 'and open the link it prints within two minutes. The link works once; the page then reads with the Viewer token, which can change nothing.'));
  loaded();
}

// ------------------------------------------------------------------------------------ routes

async function route() {
  pageLife.abort();
  pageLife = new AbortController();
  if (!token) return signOut();
  const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  const [top, a, b] = parts;
  try {
    if (top === 'runs' && a) await runPage(a);
    else if (top === 'workflows' && a && b) await workflowPage(a, b);
    else if (top === 'workflows') await workflowsPage();
    else if (top === 'compute') await computePage();
    else if (top === 'verifications') await verificationsPage();
    else if (top === 'docs' && a) await docPage(a, b);
    else if (top === 'docs') await docsPage();
    else if (top === 'runs' || !top) await runsPage();
    else {
      page('missing', 'Not found', h('p', {}, 'This page does not exist. ', h('a', { href: '#/runs' }, 'Go to the runs.')));
      loaded();
    }
  } catch (e) {
    if (e.name === 'AbortError' || !token) return; // left the page, or signed out (the sign-in page says why)
    main.append(errorBox(e));
    loaded();
  }
  main.focus({ preventScroll: true });
}

// ------------------------------------------------------------------------------------ runs

async function runsPage() {
  const life = pageLife;
  const live = h('p', { class: 'live', role: 'status' }, 'Connecting…');
  const statusSel = h('select', { id: 'filter-status' },
    h('option', { value: '' }, 'all'), STATUSES.map((s) => h('option', { value: s }, s)));
  const wfSel = h('select', { id: 'filter-workflow' }, h('option', { value: '' }, 'all'));
  const tbl = table('runs-table', h('caption', { class: 'visually-hidden' }, 'Runs, newest first'),
    ['Run', 'Status', 'Workflow', 'Target', 'Started', 'Duration', 'Findings', 'Replay of'], []);
  const tbody = tbl.querySelector('tbody');
  const empty = h('p', { class: 'muted', hidden: true }, 'No runs match.');
  const capped = h('p', { class: 'muted small', hidden: true },
    `Showing the newest ${RUNS_SHOWN} runs; cairn runs --limit N lists more.`);
  const problem = h('div', { class: 'error', role: 'alert' });
  page('runs', 'Runs',
    h('div', { class: 'filters' },
      h('label', {}, 'Status', statusSel),
      h('label', {}, 'Workflow', wfSel),
      live),
    problem, tbl, empty, capped);
  statusSel.value = runFilters.status;
  let runs = [];
  let shownData = null;
  const render = () => {
    const names = [...new Set(runs.map((r) => r.workflow))].sort();
    const chosen = runFilters.workflow;
    wfSel.replaceChildren(h('option', { value: '' }, 'all'), ...names.map((n) => h('option', { value: n }, n)));
    if (chosen && !names.includes(chosen)) wfSel.append(h('option', { value: chosen }, chosen));
    wfSel.value = chosen;
    const shown = runs.filter((r) => (!runFilters.status || r.status === runFilters.status)
      && (!runFilters.workflow || r.workflow === runFilters.workflow));
    tbody.replaceChildren(...shown.map((r) => h('tr', { 'data-run-id': r.run_id },
      h('td', { 'data-col': 'run' }, h('a', { href: `#/runs/${encodeURIComponent(r.run_id)}` }, r.run_id)),
      h('td', { 'data-col': 'status' }, badge(r.status),
        r.waiting ? h('div', { class: 'small', 'data-col': 'waiting', title: r.waiting.reason }, `waiting since ${time(r.waiting.since)} (${r.waiting.code})`) : null),
      h('td', { 'data-col': 'workflow' }, `${r.workflow}@${r.version}`),
      h('td', { 'data-col': 'target' }, r.target || 'local'),
      h('td', { 'data-col': 'started' }, time(r.created_at)),
      h('td', { 'data-col': 'duration', class: 'num' }, r.finished_at ? ms(span(r.created_at, r.finished_at)) : `running ${ms(span(r.created_at))}`),
      h('td', { 'data-col': 'findings', class: 'num' }, r.findings),
      h('td', { 'data-col': 'source' }, r.source_run_id ? h('a', { href: `#/runs/${encodeURIComponent(r.source_run_id)}` }, r.source_run_id) : '—'))));
    empty.hidden = shown.length > 0;
    capped.hidden = runs.length < RUNS_SHOWN;
    const which = runFilters.status ? `${runFilters.status} runs` : 'runs';
    capped.textContent = `Showing the newest ${RUNS_SHOWN} ${which}; cairn runs --limit N lists more.`;
  };
  // A chosen status is asked of the daemon (`status=`), so it finds runs older than the newest
  // RUNS_SHOWN; the rows already shown are filtered at once meanwhile. The workflow is chosen
  // among the runs listed.
  statusSel.addEventListener('change', () => { runFilters.status = statusSel.value; render(); follow(); });
  wfSel.addEventListener('change', () => { runFilters.workflow = wfSel.value; render(); });
  // The list's stream, ended when the page changes or another status is chosen.
  let listing = null;
  // The stream sends the list now and on every change, and ends when no run is active; then
  // the page looks again every 2 s, so a new run shows up without a reload.
  const follow = async () => {
    listing?.abort();
    const mine = new AbortController();
    listing = mine;
    life.signal.addEventListener('abort', () => mine.abort(), { once: true });
    const status = runFilters.status;
    const path = `/runs?follow=true&limit=${RUNS_SHOWN}${status ? `&status=${encodeURIComponent(status)}` : ''}`;
    shownData = null;
    while (!mine.signal.aborted) {
      try {
        live.textContent = 'Live: updates as runs change.';
        await stream(path, (ev) => {
          // Each new stream begins with the whole list: an unchanged one is not drawn again (an
          // open filter menu would close). A list of the status chosen before is dropped.
          if (mine.signal.aborted || ev.event !== 'runs' || ev.data === shownData) return;
          shownData = ev.data;
          runs = JSON.parse(ev.data).runs;
          problem.replaceChildren();
          render();
          loaded();
        }, mine.signal);
        if (mine.signal.aborted) return;
        live.textContent = 'Live: no run is active; checking every 2 s.';
      } catch (e) {
        if (mine.signal.aborted) return;
        problem.textContent = `Cannot follow the runs: ${e.message}. Retrying.`;
        loaded();
      }
      await sleep(2000, mine.signal);
    }
  };
  follow();
}

function sleep(n, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, n);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// ------------------------------------------------------------------------------------ one run

async function runPage(runId) {
  const life = pageLife;
  const enc = encodeURIComponent(runId);
  const run = await api(`/runs/${enc}`);
  // A run over one page of steps is shown a page at a time: its graph by layers, its table
  // virtualized.
  if (run.step_counts && run.step_counts.total > run.steps.length) return largeRunPage(runId, run);
  // The graph needs the workflow's edges; a run whose workflow cannot be read still shows its steps.
  const [wf, firstEvents, replays, firstTimeline] = await Promise.all([
    api(`/workflows/${encodeURIComponent(run.workflow)}?version=${encodeURIComponent(run.version)}`).catch(() => null),
    api(`/runs/${enc}/events`),
    api(`/runs?source_run_id=${enc}&limit=1000`),
    api(`/runs/${enc}/timeline`),
  ]);
  const children = replays.runs;
  const source = run.replay?.source_run_id;

  const status = badge(run.status, { id: 'run-status' });
  const meta = h('dl', { class: 'meta' });
  const dagBox = h('div', { class: 'dag-wrap', role: 'region', 'aria-label': 'Step graph', tabindex: 0 });
  const stepsBox = h('div');
  const ganttBox = h('div', { class: 'dag-wrap', role: 'region', 'aria-label': 'Attempts on a time axis', tabindex: 0 });
  const findingsBox = h('div');
  const resultsBox = h('div', { id: 'results' });
  const artifactsBox = h('div');
  // A pipeline step's jobs: a graph, their times, a table; loaded when the run has any.
  const jobsBox = h('div', { id: 'pipeline-jobs' });
  // Which results are open, so a live re-render keeps them so.
  const openResults = new Set();
  // Scrollable boxes take focus, so a keyboard can scroll them.
  const eventsBox = h('ol', { id: 'events', class: 'timeline', 'aria-label': 'Events, oldest first', tabindex: 0 });
  const logsBox = h('div');
  const lineage = h('div', { id: 'lineage' });
  const liveNote = h('p', { class: 'live', role: 'status' });
  page('run', 'Run', liveNote);
  main.querySelector('h1').replaceChildren(`Run ${runId} `, status);
  main.append(meta,
    h('section', { 'aria-labelledby': 'h-lineage' }, h('h2', { id: 'h-lineage' }, 'Lineage'), lineage),
    h('section', { 'aria-labelledby': 'h-dag' }, h('h2', { id: 'h-dag' }, 'Steps as a graph'), legend(), dagBox),
    h('section', { 'aria-labelledby': 'h-steps' }, h('h2', { id: 'h-steps' }, 'Steps'), stepsBox),
    h('section', { 'aria-labelledby': 'h-gantt' }, h('h2', { id: 'h-gantt' }, 'Where the time went'),
      h('p', { class: 'muted small' }, 'Every attempt from its start to its end on the run\'s time axis; a diamond is a step reused from the source run.'), ganttBox),
    h('section', { 'aria-labelledby': 'h-results' }, h('h2', { id: 'h-results' }, 'Step results'),
      h('p', { class: 'muted small' }, 'What each step found: its tool\'s JSON result.'), resultsBox),
    h('section', { 'aria-labelledby': 'h-jobs' }, h('h2', { id: 'h-jobs' }, 'Pipeline jobs'),
      h('p', { class: 'muted small' }, 'Each job a pipeline step\'s controller ran: what it read (and which job wrote that), why it ran, when, and its status; jobs a replay carried over from an earlier run are dashed.'), jobsBox),
    h('section', { 'aria-labelledby': 'h-artifacts' }, h('h2', { id: 'h-artifacts' }, 'Artifacts'), artifactsBox),
    h('section', { 'aria-labelledby': 'h-findings' }, h('h2', { id: 'h-findings' }, 'Findings'), findingsBox),
    h('section', { 'aria-labelledby': 'h-events' }, h('h2', { id: 'h-events' }, 'Event timeline'), eventsBox),
    h('section', { 'aria-labelledby': 'h-logs' }, h('h2', { id: 'h-logs' }, 'Log tails'),
      h('p', { class: 'muted small' }, 'The last 200 lines of each step\'s output, read when you open it.'), logsBox));

  // Lineage: the run it replays, and the runs that replay it.
  lineage.append(
    source ? h('p', {}, 'Replay of ', h('a', { href: `#/runs/${encodeURIComponent(source)}` }, source),
      run.replay ? ` (requested: ${(run.replay.requested || []).join(', ') || '—'})` : '') : h('p', {}, 'Not a replay.'),
    children.length ? h('p', {}, 'Replayed by ', children.flatMap((c, i) => [i ? ', ' : '', h('a', { href: `#/runs/${encodeURIComponent(c.run_id)}` }, c.run_id), ` (${c.status})`])) : h('p', { class: 'muted' }, 'No replay of this run.'));

  for (const s of run.steps) {
    logsBox.append(loadOnOpen({ class: 'log', 'data-step': s.step_id }, `Log of ${s.step_id}`,
      `Last lines of ${s.step_id}'s output`, async () => {
        const log = await api(`/runs/${enc}/steps/${encodeURIComponent(s.step_id)}/log?lines=200`);
        return (log.truncated ? '[… earlier lines left out]\n' : '') + (log.lines.join('\n') || '(no output)');
      }));
  }

  let events = [];
  const render = (r, tl) => {
    status.textContent = r.status;
    status.className = `badge s-${r.status}`;
    renderMeta(meta, r);
    const byStep = Object.fromEntries(r.steps.map((s) => [s.step_id, s]));
    dagBox.replaceChildren(drawDag(h, wf ? wf.steps : r.steps.map((s) => ({ id: s.step_id, needs: [] })), byStep,
      `Steps of run ${r.run_id} and what each needs, coloured by status`));
    ganttBox.replaceChildren(tl.attempts.length
      ? drawGantt(h, tl, `Attempts of run ${r.run_id} on its time axis, ${tl.length_ms} ms long`)
      : h('p', { class: 'muted' }, 'No step has started yet.'));
    const attempts = attemptsOf(tl);
    stepsBox.replaceChildren(table('steps-table', null,
      ['Step', 'Status', 'Attempts', 'Outcome', 'Duration', 'Attempt timings', 'Decision', 'Reason'],
      r.steps.map((s) => h('tr', { 'data-step': s.step_id },
        h('th', { scope: 'row', 'data-col': 'step' }, s.step_id),
        h('td', { 'data-col': 'status' }, badge(s.status), s.reused ? h('span', { class: 'muted small' }, ' reused') : null,
          s.jobs ? h('div', { class: 'small', 'data-col': 'jobs' }, jobsLine(s.jobs)) : null),
        h('td', { 'data-col': 'attempts', class: 'num' }, s.attempts),
        h('td', { 'data-col': 'outcome' }, s.outcome || '—', s.error ? h('div', { class: 'small muted wrap' }, s.error) : null),
        h('td', { 'data-col': 'duration', class: 'num' }, ms(s.duration_ms)),
        h('td', { 'data-col': 'timings', class: 'small' }, (attempts[s.step_id] || []).map((a) => h('div', {},
          `#${a.attempt} `, time(a.start), a.end ? ` → ${ms(span(a.start, a.end))} ${a.how}` : ' → running'))),
        h('td', { 'data-col': 'decision' }, decision(s, r.replay)),
        h('td', { 'data-col': 'reason' }, reason(s))))));
    const withResult = r.steps.filter((s) => s.result !== null && s.result !== undefined);
    resultsBox.replaceChildren(...(withResult.length ? withResult.map((s) => resultOf(enc, s, openResults))
      : [h('p', { class: 'muted' }, 'No step has completed yet.')]));
    const artifacts = r.steps.flatMap((s) => s.artifacts || []);
    artifactsBox.replaceChildren(artifacts.length
      ? table('artifacts-table', 'The files the steps produced, hashed when each completed',
        ['Step', 'Output', 'Path', 'Bytes', 'SHA-256', 'Produced by'],
        artifacts.map((a) => h('tr', { 'data-path': a.path },
          h('td', { 'data-col': 'step' }, a.step_id),
          h('td', { 'data-col': 'name' }, a.name),
          h('td', { 'data-col': 'path', class: 'mono wrap' }, a.path),
          h('td', { 'data-col': 'bytes', class: 'num' }, a.bytes),
          h('td', { 'data-col': 'sha256', class: 'mono wrap small' }, a.sha256),
          h('td', { 'data-col': 'produced', class: 'small' }, a.reused_from
            ? ['run ', h('a', { href: `#/runs/${encodeURIComponent(a.reused_from)}` }, a.reused_from), `, attempt ${a.attempt}`]
            : `attempt ${a.attempt} of this run`,
          a.job ? h('div', { 'data-col': 'job' }, `job ${a.job.attempt}.${a.job.job} ${jobLabel(a.job)}`) : null,
          a.link ? h('div', { 'data-col': 'link' }, `a symlink to ${a.link} (not followed)`) : null))))
      : h('p', { id: 'artifacts-none', class: 'muted' }, 'None: no step of this run declares outputs (or none has completed).'));
    findingsBox.replaceChildren(r.findings.length
      ? h('ul', { id: 'findings', class: 'findings' }, r.findings.map((f) => h('li', {},
        h('strong', {}, f.rule), `: ${f.finding} (step ${f.step}, ${f.pointer}`,
        'observed' in f ? `, observed ${JSON.stringify(f.observed)}` : ', nothing observed', ')')))
      : h('p', { id: 'findings', class: 'muted' }, r.status === 'READY' ? 'None: every validator rule held.' : 'None.'));
    eventsBox.replaceChildren(...events.map((e) => eventItem(e, true)));
  };

  // The jobs of the pipeline steps (those the run says have jobs), read again as the run goes on.
  const renderJobs = async (r) => {
    const withJobs = r.steps.filter((s) => s.jobs);
    if (!withJobs.length) {
      jobsBox.replaceChildren(h('p', { class: 'muted', id: 'jobs-none' }, 'None: no step of this run is a pipeline (or none has started a job).'));
      return;
    }
    const parts = [];
    for (const s of withJobs) {
      const jobs = await api(`/runs/${enc}/steps/${encodeURIComponent(s.step_id)}/jobs?limit=500`, life.signal);
      parts.push(jobsSection(r, jobs));
    }
    jobsBox.replaceChildren(...parts);
  };

  const finished = (s) => FINISHED.includes(s);
  events = firstEvents.events;
  render(run, firstTimeline);
  await renderJobs(run);
  loaded();
  if (finished(run.status)) return;

  // Live: follow the event stream; each event re-reads the run (at most every 250 ms).
  liveNote.textContent = 'Live: this run is active; the page follows it.';
  let pending = null;
  const refresh = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      try {
        const [r, tl] = await Promise.all([api(`/runs/${enc}`, life.signal), api(`/runs/${enc}/timeline`, life.signal)]);
        render(r, tl);
        await renderJobs(r);
        if (finished(r.status)) liveNote.textContent = `Finished: ${r.status}.`;
      } catch (e) {
        if (!life.signal.aborted) liveNote.textContent = e.message;
      }
    }, 250);
  };
  const after = events.length ? events[events.length - 1].seq : 0;
  try {
    await stream(`/runs/${enc}/events?follow=true&after=${after}`, (ev) => {
      // A change of the run's wait for its environment is no event of its log: the run is read
      // again (it carries the wait), and the live note says it.
      if (ev.event === 'waiting') {
        const w = JSON.parse(ev.data).waiting;
        liveNote.textContent = w
          ? `Waiting since ${time(w.since)} for its environment (${w.code}): ${w.reason}. It continues by itself once this clears.`
          : 'Live: its environment is back; the run goes on.';
      } else {
        events.push(JSON.parse(ev.data));
      }
      refresh();
    }, life.signal);
  } catch (e) {
    if (!life.signal.aborted) liveNote.textContent = `Stopped following: ${e.message}`;
  }
  refresh();
}

/** One event of a run's log as a list item: its number, time, kind, step and attempt, and its
 *  data when `withData`. */
function eventItem(e, withData) {
  return h('li', { 'data-kind': e.kind },
    h('span', { class: 'muted' }, `#${e.seq}`), time(e.at), h('span', {}, e.kind),
    h('span', { class: 'data' }, [e.step_id, e.attempt ? `attempt ${e.attempt}` : null].filter(Boolean).join(' · '),
      withData && Object.keys(e.data || {}).length ? ` ${JSON.stringify(e.data)}` : ''));
}

/** A run's facts: its workflow, target, directory, times, lease, wait, approval, error. */
function renderMeta(meta, r) {
  meta.replaceChildren(
    h('dt', {}, 'Workflow'), h('dd', {}, h('a', { href: `#/workflows/${encodeURIComponent(r.workflow)}/${encodeURIComponent(r.version)}` }, `${r.workflow}@${r.version}`)),
    h('dt', {}, 'Target'), h('dd', {}, r.target || 'local'),
    h('dt', {}, 'Run directory'), h('dd', { class: 'mono wrap' }, r.run_dir),
    h('dt', {}, 'Started'), h('dd', {}, time(r.created_at)),
    h('dt', {}, 'Finished'), h('dd', {}, r.finished_at ? time(r.finished_at) : 'not yet'),
    h('dt', {}, 'Duration'), h('dd', {}, ms(span(r.created_at, r.finished_at))),
    ...(r.thread_id ? [h('dt', {}, 'Thread'), h('dd', {}, r.thread_id)] : []),
    ...(r.lease ? [h('dt', {}, 'Driven by'), h('dd', { id: 'run-lease' }, leaseText(r.lease))] : []),
    ...(r.waiting ? [h('dt', {}, 'Waiting'), h('dd', { id: 'run-waiting', class: 'wrap' },
      `since ${time(r.waiting.since)} for its environment (${r.waiting.code}): ${r.waiting.reason}. `
      + `It continues by itself once this clears; tried ${r.waiting.tries} time(s), next at ${time(r.waiting.next_try_at)}.`)] : []),
    ...(r.approval && r.approval.planned_by ? [h('dt', {}, 'Planned by'), h('dd', { id: 'run-planned-by' }, r.approval.planned_by)] : []),
    ...(r.approval ? [h('dt', {}, 'Approved'), h('dd', { id: 'run-approved' },
      `${r.approval.by ? `by ${r.approval.by}, ` : ''}${r.approval.channel}, ${time(r.approval.at)}`)] : []),
    ...(!r.approval && r.submitted_by ? [h('dt', {}, 'Submitted by'), h('dd', { id: 'run-submitted-by' }, r.submitted_by)] : []),
    ...(r.cancelled_by ? [h('dt', {}, 'Cancelled by'), h('dd', { id: 'run-cancelled-by' }, r.cancelled_by)] : []),
    ...(r.error ? [h('dt', {}, 'Error'), h('dd', {}, r.error)] : []));
}

// ------------------------------------------------------------------------- a large run

/** Rows of the virtualized step table: a row's height, and how many rows one read fetches. */
const ROW_PX = 34;
const ROWS_READ = 200;
/** How many layers of a large run's graph are drawn at first (and at each "more"). */
const LAYERS_SHOWN = 100;
/** How many steps' attempts a large run's time axis draws. */
const GANTT_STEPS = 50;

function countsLine(c) {
  return `${c.total} steps: ${c.completed} completed, ${c.failed} failed, ${c.running} running, ${c.pending} pending`;
}

/** One layer of a large run's graph: its size, a bar of its steps by status, its first steps, and
 *  a button that shows its steps in the table. */
function layerItem(l, show) {
  const c = l.step_counts;
  // Sizes are set through the element's style object: the page's policy refuses style attributes.
  const part = (n, status) => {
    if (!n) return null;
    const seg = h('span', { class: `seg s-${status}`, title: `${n} ${status}` });
    seg.style.flexGrow = String(n);
    return seg;
  };
  return h('li', { 'data-layer': l.layer, 'data-total': c.total, 'data-completed': c.completed, 'data-failed': c.failed },
    h('span', { class: 'layer-name' }, `Layer ${l.layer}`),
    h('span', { class: 'num' }, `${c.total} step${c.total === 1 ? '' : 's'}`),
    h('span', { class: 'bar', 'aria-hidden': 'true' }, part(c.completed, 'COMPLETED'), part(c.failed, 'FAILED'), part(c.running, 'RUNNING'), part(c.pending, 'PENDING')),
    h('span', { class: 'small' }, `${c.completed} completed, ${c.failed} failed, ${c.running} running, ${c.pending} pending`),
    h('span', { class: 'small muted mono' }, l.first.join(', ') + (c.total > l.first.length ? ', …' : '')),
    h('button', { type: 'button', class: 'small-button', onclick: () => show(l.layer) }, `Show its steps`));
}

/** A run of more steps than one page: counts, the graph by layers, a virtualized table of every
 *  step (read a page at a time as it scrolls, filtered by status or layer), the attempts of its
 *  first steps on a time axis, findings, its newest events; followed live while it runs. */
async function largeRunPage(runId, run) {
  const life = pageLife;
  const enc = encodeURIComponent(runId);
  const status = badge(run.status, { id: 'run-status' });
  const meta = h('dl', { class: 'meta' });
  const counts = h('p', { id: 'step-counts' });
  const layersBox = h('ol', { id: 'dag-layers', class: 'layers', 'aria-label': 'The graph by layers' });
  const moreLayers = h('div');
  const filterStatus = h('select', { id: 'steps-filter' },
    h('option', { value: '' }, 'every status'), ['FAILED', 'RUNNING', 'COMPLETED', 'PENDING'].map((x) => h('option', { value: x }, x)));
  const attention = h('input', { type: 'checkbox', id: 'steps-attention' });
  const layerNote = h('span', { id: 'steps-layer', class: 'small' });
  const matchedNote = h('p', { id: 'steps-matched', class: 'small muted', role: 'status' });
  const tbody = h('tbody');
  const scroller = h('div', { id: 'steps-virtual', class: 'virtual', role: 'region', 'aria-label': 'Steps, scroll for more', tabindex: 0 },
    h('table', { id: 'steps-table' },
      h('thead', {}, h('tr', {}, ['Step', 'Status', 'Attempts', 'Outcome', 'Duration', ''].map((t) => h('th', { scope: 'col', class: t === 'Attempts' || t === 'Duration' ? 'num' : null }, t)))),
      tbody));
  const detail = h('div', { id: 'step-detail' });
  const ganttBox = h('div', { class: 'dag-wrap', role: 'region', 'aria-label': 'Attempts on a time axis', tabindex: 0 });
  const ganttNote = h('p', { class: 'muted small' });
  const findingsBox = h('div');
  const eventsBox = h('ol', { id: 'events', class: 'timeline', 'aria-label': 'The newest events, oldest first', tabindex: 0 });
  const liveNote = h('p', { class: 'live', role: 'status' });
  page('run', 'Run', liveNote);
  main.querySelector('h1').replaceChildren(`Run ${runId} `, status);
  main.dataset.large = 'true';
  main.append(meta, counts,
    h('section', { 'aria-labelledby': 'h-dag' }, h('h2', { id: 'h-dag' }, 'Steps as a graph, by layers'),
      h('p', { class: 'muted small' }, 'A step\'s layer is one more than that of the deepest step it needs; each layer shows how many of its steps are in each status.'),
      layersBox, moreLayers),
    h('section', { 'aria-labelledby': 'h-steps' }, h('h2', { id: 'h-steps' }, 'Steps'),
      h('div', { class: 'filters' },
        h('label', { for: 'steps-filter' }, 'Status', filterStatus),
        h('label', { class: 'inline' }, attention, ' failed and running first'),
        layerNote),
      matchedNote, scroller, detail),
    h('section', { 'aria-labelledby': 'h-gantt' }, h('h2', { id: 'h-gantt' }, 'Where the time went'), ganttNote, ganttBox),
    h('section', { 'aria-labelledby': 'h-findings' }, h('h2', { id: 'h-findings' }, 'Findings'), findingsBox),
    h('section', { 'aria-labelledby': 'h-events' }, h('h2', { id: 'h-events' }, 'Newest events'), eventsBox));

  // The table's query, and the pages read for it (by offset), dropped when the query changes.
  const query = { status: '', attention: false, layer: null };
  let pages = new Map();
  let matched = run.step_counts.total;
  const queryString = (offset) => {
    const q = [`steps_offset=${offset}`, `steps_limit=${ROWS_READ}`];
    if (query.status) q.push(`steps_status=${query.status}`);
    if (query.attention) q.push('steps_order=attention');
    if (query.layer !== null) q.push(`steps_layer=${query.layer}`);
    return q.join('&');
  };
  const readPage = async (offset) => {
    if (!pages.has(offset)) {
      const q = queryString(offset);
      pages.set(offset, api(`/runs/${enc}?${q}`, life.signal).then((r) => {
        matched = r.steps_page.matched;
        return r.steps;
      }));
    }
    return pages.get(offset);
  };
  const row = (s) => h('tr', { 'data-step': s.step_id, class: 'row' },
    h('th', { scope: 'row', 'data-col': 'step' }, s.step_id),
    h('td', { 'data-col': 'status' }, badge(s.status), s.reused ? h('span', { class: 'muted small' }, ' reused') : null),
    h('td', { 'data-col': 'attempts', class: 'num' }, s.attempts),
    h('td', { 'data-col': 'outcome', class: 'small' }, s.outcome || '—', s.error ? ` · ${s.error.slice(0, 80)}` : ''),
    h('td', { 'data-col': 'duration', class: 'num' }, ms(s.duration_ms)),
    h('td', {}, h('button', { type: 'button', class: 'small-button', onclick: () => showStep(s.step_id) }, 'Details')));
  const spacer = (n, id) => {
    const cell = h('td', { colspan: 6 });
    cell.style.height = `${n * ROW_PX}px`;
    return h('tr', { 'aria-hidden': 'true', class: 'spacer', 'data-spacer': id }, cell);
  };
  let drawing = 0;
  const draw = async () => {
    const mine = ++drawing;
    const first = Math.floor(scroller.scrollTop / ROW_PX);
    const visible = Math.ceil(scroller.clientHeight / ROW_PX) + 1;
    const from = Math.floor(first / ROWS_READ) * ROWS_READ;
    const to = first + visible;
    const read = [];
    for (let o = from; o < Math.min(to, Math.max(matched, 1)); o += ROWS_READ) read.push(readPage(o));
    const steps = (await Promise.all(read)).flat();
    if (mine !== drawing) return;
    const start = Math.min(first, Math.max(0, from + steps.length - 1));
    const shown = steps.slice(start - from, start - from + visible);
    tbody.replaceChildren(spacer(start, 'top'), ...shown.map(row), spacer(Math.max(0, matched - start - shown.length), 'bottom'));
    matchedNote.textContent = matched
      ? `Steps ${start + 1}–${start + shown.length} of ${matched}${query.status || query.layer !== null ? ' matching' : ''}; scroll for more.`
      : 'No step matches.';
  };
  let scheduled = false;
  scroller.addEventListener('scroll', () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; draw().catch((e) => { if (!life.signal.aborted) matchedNote.textContent = e.message; }); });
  });
  const requery = async () => {
    pages = new Map();
    layerNote.replaceChildren(...(query.layer !== null ? [`Layer ${query.layer} only `,
      h('button', { type: 'button', class: 'small-button', id: 'steps-all-layers', onclick: () => { query.layer = null; requery(); } }, 'every layer')] : []));
    await readPage(0);
    scroller.scrollTop = 0;
    await draw();
  };
  filterStatus.addEventListener('change', () => { query.status = filterStatus.value; requery(); });
  attention.addEventListener('change', () => { query.attention = attention.checked; requery(); });
  const showLayer = (layer) => { query.layer = layer; requery(); scroller.focus(); };

  const showStep = async (stepId) => {
    const s = encodeURIComponent(stepId);
    const [step, log] = await Promise.all([api(`/runs/${enc}/steps/${s}`, life.signal), api(`/runs/${enc}/steps/${s}/log?lines=200`, life.signal)]);
    detail.replaceChildren(h('h3', { id: 'step-detail-title' }, `Step ${stepId} `, badge(step.status)),
      h('dl', { class: 'meta' },
        h('dt', {}, 'Attempts'), h('dd', {}, step.attempts),
        h('dt', {}, 'Outcome'), h('dd', {}, step.outcome || '—'),
        h('dt', {}, 'Duration'), h('dd', {}, ms(step.duration_ms)),
        ...(step.error ? [h('dt', {}, 'Error'), h('dd', { class: 'wrap' }, step.error)] : []),
        h('dt', {}, 'Artifacts'), h('dd', {}, (step.artifacts || []).length
          ? (step.artifacts || []).map((a) => h('div', { class: 'mono small wrap' }, `${a.name}: ${a.path} (${a.bytes} bytes, sha256 ${a.sha256})`)) : 'none')),
      h('pre', { id: 'step-detail-result' }, JSON.stringify(step.result, null, 2) ?? 'no result'),
      h('pre', { id: 'step-detail-log' }, (log.truncated ? '[… earlier lines left out]\n' : '') + (log.lines.join('\n') || '(no output)')));
  };

  let layersShown = LAYERS_SHOWN;
  const renderLayers = async () => {
    const l = await api(`/runs/${enc}/layers?limit=${layersShown}`, life.signal);
    layersBox.replaceChildren(...l.layers.map((x) => layerItem(x, showLayer)));
    moreLayers.replaceChildren(...(l.total > l.layers.length ? [h('p', { class: 'small' }, `${l.total - l.layers.length} more layers `,
      h('button', { type: 'button', class: 'small-button', id: 'more-layers', onclick: () => { layersShown += LAYERS_SHOWN; renderLayers(); } }, 'show more'))] : []));
  };
  const renderRun = (r) => {
    status.textContent = r.status;
    status.className = `badge s-${r.status}`;
    renderMeta(meta, r);
    counts.textContent = countsLine(r.step_counts);
    findingsBox.replaceChildren(r.findings.length
      ? h('ul', { id: 'findings', class: 'findings' }, r.findings.map((f) => h('li', {}, h('strong', {}, f.rule), `: ${f.finding} (step ${f.step}, ${f.pointer})`)))
      : h('p', { id: 'findings', class: 'muted' }, r.status === 'READY' ? 'None: every validator rule held.' : 'None.'));
  };
  const renderGantt = async () => {
    const tl = await api(`/runs/${enc}/timeline?steps_limit=${GANTT_STEPS}${query.attention ? '&steps_order=attention' : ''}`, life.signal);
    ganttNote.textContent = `The attempts of the first ${tl.steps_page.returned} of ${tl.step_counts.total} steps, from each start to its end on the run's time axis.`;
    ganttBox.replaceChildren(tl.attempts.length
      ? drawGantt(h, tl, `Attempts of the first steps of run ${runId} on its time axis`)
      : h('p', { class: 'muted' }, 'No step has started yet.'));
  };
  let events = (await api(`/runs/${enc}/events?limit=200&newest=true`, life.signal)).events;
  const renderEvents = () => eventsBox.replaceChildren(...events.slice(-200).map((e) => eventItem(e, false)));

  renderRun(run);
  await Promise.all([renderLayers(), requery(), renderGantt()]);
  renderEvents();
  loaded();
  if (FINISHED.includes(run.status)) return;

  // Live: the event stream from where the log ends; each burst re-reads the counts, the layers
  // and the rows in view (at most once a second).
  liveNote.textContent = 'Live: this run is active; the page follows it.';
  let pending = null;
  const refresh = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      try {
        const r = await api(`/runs/${enc}?steps_limit=1`, life.signal);
        renderRun(r);
        pages = new Map();
        await Promise.all([renderLayers(), draw(), renderGantt()]);
        renderEvents();
        if (FINISHED.includes(r.status)) liveNote.textContent = `Finished: ${r.status}.`;
      } catch (e) {
        if (!life.signal.aborted) liveNote.textContent = e.message;
      }
    }, 1000);
  };
  const after = events.length ? events[events.length - 1].seq : 0;
  try {
    await stream(`/runs/${enc}/events?follow=true&after=${after}`, (ev) => {
      if (ev.event !== 'waiting') {
        events.push(JSON.parse(ev.data));
        if (events.length > 400) events = events.slice(-200);
      }
      refresh();
    }, life.signal);
  } catch (e) {
    if (!life.signal.aborted) liveNote.textContent = `Stopped following: ${e.message}`;
  }
  refresh();
}

/** A step's result, collapsed: its JSON, pretty. A result the run cut (over 64 KiB) is read whole
 *  from the step when opened. */
function resultOf(enc, s, open) {
  const pre = h('pre', { tabindex: 0, 'aria-label': `Result of ${s.step_id}` });
  const show = (v) => { pre.textContent = JSON.stringify(v, null, 2); };
  const size = s.result_bytes < 1024 ? `${s.result_bytes} bytes` : `${(s.result_bytes / 1024).toFixed(1)} KiB`;
  const d = h('details', { class: 'result', 'data-step': s.step_id, open: open.has(s.step_id) },
    h('summary', {}, `${s.step_id} `, h('span', { class: 'muted small' }, size)), pre);
  const load = async () => {
    if (!s.result_truncated) return show(s.result);
    pre.textContent = 'Loading the whole result…';
    try {
      show((await api(`/runs/${enc}/steps/${encodeURIComponent(s.step_id)}`)).result);
    } catch (e) {
      pre.textContent = e.message;
    }
  };
  d.addEventListener('toggle', () => {
    if (d.open) { open.add(s.step_id); load(); } else open.delete(s.step_id);
  });
  if (d.open) load();
  return d;
}

/** A `<details>` whose `<pre>` is read by `load()` (text) each time it is opened: log tails and
 *  drafts are read only when someone looks. */
function loadOnOpen(attrs, summary, label, load, ...before) {
  const pre = h('pre', { tabindex: 0, 'aria-label': label }, 'Loading…');
  const d = h('details', attrs, h('summary', {}, summary), ...before, pre);
  d.addEventListener('toggle', async () => {
    if (!d.open) return;
    try {
      pre.textContent = await load();
    } catch (e) {
      pre.textContent = e.message;
    }
  });
  return d;
}

function legend() {
  return h('p', { class: 'legend' }, ['PENDING', 'RUNNING', 'COMPLETED', 'FAILED'].map((s) => h('span', {}, badge(s))),
    h('span', {}, 'Dashed border: reused from the source run, not executed.'));
}

/** The replay decision in words: reused, replayed (asked for) or invalidated (re-run because
 *  something it depends on changed). */
/** Which daemon drives an open run, in the words `cairn show` uses. */
function leaseText(l) {
  const on = l.host ? ` on host ${l.host}` : '';
  const until = l.expires_at ? time(l.expires_at) : '?';
  if (l.waits_for_host) return `waiting for a daemon on host ${l.waits_for_host}: its files are there, and the lease of daemon ${l.daemon}${on} expired at ${until}`;
  if (l.expired) return `lease of daemon ${l.daemon}${on} expired at ${until}: the next daemon takes it over`;
  return `daemon ${l.daemon}${on} (lease epoch ${l.epoch}, until ${until})`;
}

function decision(s, replay) {
  if (s.decision === 'reuse') return 'reused';
  if (s.decision === 'replay') return (replay?.invalidated || []).includes(s.step_id) ? 'invalidated' : 'replayed';
  return s.reused ? 'reused' : s.attempts ? 'executed' : '—';
}

function reason(s) {
  if (s.reason) return s.reason;
  return s.attempts ? 'executed in this run (not a replay)' : '—';
}

/** `rule (k=v, …)`. */
function jobLabel(j) {
  const w = Object.entries(j.wildcards || {}).map(([k, v]) => `${k}=${v}`).join(', ');
  return w ? `${j.rule} (${w})` : j.rule;
}

/** As a step's status, for the graph's colours. */
const JOB_STATUS = { finished: 'COMPLETED', carried: 'COMPLETED', failed: 'FAILED', interrupted: 'FAILED', running: 'RUNNING', retrying: 'RUNNING' };

/** One pipeline step's jobs: their graph (an edge from the job that wrote an input), their times on
 * the run's axis, and a table with why each ran and what it read and wrote. */
function jobsSection(r, j) {
  const step = j.step_id;
  const idOf = (x) => `${x.attempt}.${x.job}`;
  const nodes = j.jobs.map((x) => ({
    id: idOf(x),
    label: jobLabel(x),
    needs: [...new Set(x.inputs.filter((i) => i.from).map((i) => idOf(i.from)))],
  }));
  const byJob = Object.fromEntries(j.jobs.map((x) => [idOf(x), { status: JOB_STATUS[x.status] || 'PENDING', reused: x.status === 'carried' }]));
  const origin = Date.parse(r.created_at);
  const ended = j.jobs.map((x) => Date.parse(x.ended_at || x.started_at));
  const carried = j.jobs.filter((x) => x.status !== 'carried');
  const length = Math.max(1, ...carried.map((x) => Date.parse(x.ended_at || new Date().toISOString()) - origin), ...ended.map((e) => e - origin));
  const timeline = {
    length_ms: length,
    attempts: carried.map((x) => ({
      step_id: `${idOf(x)} ${jobLabel(x)}`,
      attempt: x.attempt,
      start_ms: Date.parse(x.started_at) - origin,
      end_ms: x.ended_at ? Date.parse(x.ended_at) - origin : null,
      end: x.status === 'finished' ? 'completed' : x.status,
      tip: `job ${idOf(x)} ${jobLabel(x)}: ${x.status}${x.reason ? ` (${x.reason})` : ''}`,
    })),
  };
  const counts = j.rules.map((rule) => `${rule.rule} ${rule.jobs - rule.carried}${rule.carried ? ` + ${rule.carried} carried` : ''}`).join(', ');
  return h('section', { class: 'jobs', 'data-step': step, 'aria-label': `Jobs of step ${step}` },
    h('h3', {}, `Step ${step}: ${j.total} job(s)`, j.from_run ? ` (reused: they ran in run ${j.from_run})` : ''),
    h('p', { class: 'small', 'data-col': 'rules' }, counts),
    h('div', { class: 'dag-wrap', role: 'region', 'aria-label': `Job graph of step ${step}`, tabindex: 0 },
      drawDag(h, nodes, byJob, `Jobs of step ${step} and the jobs whose outputs each read, coloured by status`, `jobs-dag-${step}`)),
    carried.length ? h('div', { class: 'dag-wrap', role: 'region', 'aria-label': `Jobs of step ${step} on the run's time axis`, tabindex: 0 },
      drawGantt(h, timeline, `Jobs of step ${step} on the run's time axis`, `jobs-gantt-${step}`)) : null,
    table(`jobs-table-${step}`, `The jobs of step ${step}`, ['Job', 'Rule', 'Status', 'Why it ran', 'Inputs', 'Outputs'],
      j.jobs.map((x) => h('tr', { 'data-job': idOf(x), 'data-status': x.status },
        h('th', { scope: 'row', 'data-col': 'job' }, idOf(x)),
        h('td', { 'data-col': 'rule' }, jobLabel(x)),
        h('td', { 'data-col': 'status' }, x.status, x.carried_from ? h('div', { class: 'small muted' }, `ran in run ${x.carried_from}`) : null),
        h('td', { 'data-col': 'reason', class: 'small wrap' }, x.reason || '—'),
        h('td', { 'data-col': 'inputs', class: 'small mono wrap' }, x.inputs.map((i) => h('div', {}, i.path, i.from ? ` ← ${idOf(i.from)}` : ''))),
        h('td', { 'data-col': 'outputs', class: 'small mono wrap' }, x.files.length
          ? x.files.map((f) => h('div', {}, f.path, f.link ? ` → ${f.link}` : f.sha256 ? ` ${f.sha256.slice(0, 12)}…` : ' (gone)'))
          : x.outputs.map((o) => h('div', {}, o)))))));
}

/** A pipeline step's jobs in words, from the numbers its run gives it: "3 of 6 jobs done, 2 running". */
function jobsLine(p) {
  return `${p.done}${p.total === null || p.total === undefined ? '' : ` of ${p.total}`} jobs done`
    + (p.running ? `, ${p.running} running` : '') + (p.failed ? `, ${p.failed} failed` : '');
}

/** Each step's attempts from the run's timeline (its time axis starts at `started_at`): start,
 *  end and how it ended. A step a replay reused (attempt 0) ran no attempt here. */
function attemptsOf(tl) {
  const origin = Date.parse(tl.started_at);
  const at = (n) => new Date(origin + n).toISOString();
  const out = {};
  for (const a of tl.attempts) {
    if (!a.attempt) continue;
    const ended = a.end_ms !== null && a.end_ms !== undefined;
    (out[a.step_id] ||= []).push({ attempt: a.attempt, start: at(a.start_ms), end: ended ? at(a.end_ms) : null, how: ended ? a.end : '' });
  }
  return out;
}

// ------------------------------------------------------------------------------------ workflows

async function workflowsPage() {
  const { workflows } = await api('/workflows');
  page('workflows', 'Workflows',
    workflows.length ? table('workflows-table', 'Every registered version', ['Workflow', 'Version', 'Steps', 'Digest', 'Registered', 'Description'],
      workflows.map((w) => h('tr', { 'data-workflow': w.name, 'data-version': w.version },
        h('th', { scope: 'row' }, w.name),
        h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(w.name)}/${encodeURIComponent(w.version)}`, 'aria-label': `${w.name} version ${w.version}` }, w.version)),
        h('td', { class: 'num' }, w.steps),
        h('td', { class: 'mono', title: w.digest }, short(w.digest)),
        h('td', {}, time(w.registered_at)),
        h('td', {}, w.description || ''))))
      : h('p', { class: 'muted' }, 'No workflow is registered yet; add one with cairn workflow add PATH.'));
  loaded();
}

function short(digest) {
  const hex = String(digest || '').replace(/^sha256:/, '');
  return hex.length > 16 ? `${hex.slice(0, 16)}…` : hex;
}

async function workflowPage(name, version) {
  const [wf, { workflows }] = await Promise.all([
    api(`/workflows/${encodeURIComponent(name)}?version=${encodeURIComponent(version)}`), api('/workflows')]);
  const versions = workflows.filter((w) => w.name === name);
  page('workflow', `${wf.name}@${wf.version}`,
    wf.description ? h('p', {}, wf.description) : null,
    h('dl', { class: 'meta' },
      h('dt', {}, 'Digest'), h('dd', { class: 'mono wrap' }, wf.digest),
      h('dt', {}, 'Versions'), h('dd', {}, versions.flatMap((v, i) => [i ? ', ' : '',
        v.version === wf.version ? h('strong', {}, v.version) : h('a', { href: `#/workflows/${encodeURIComponent(name)}/${encodeURIComponent(v.version)}` }, v.version)]))),
    h('section', { 'aria-labelledby': 'h-dag' }, h('h2', { id: 'h-dag' }, 'Steps as a graph'),
      h('div', { class: 'dag-wrap', role: 'region', 'aria-label': 'Step graph', tabindex: 0 }, drawDag(h, wf.steps, null, `Steps of ${wf.name}@${wf.version} and what each needs`))),
    h('section', { 'aria-labelledby': 'h-steps' }, h('h2', { id: 'h-steps' }, 'Steps'),
      table('wf-steps-table', 'In execution order', ['Step', 'Tool', 'Needs', 'Max attempts', 'Retry on', 'Arguments'],
        wf.order.map((id) => wf.steps.find((s) => s.id === id)).filter(Boolean).map((s) => h('tr', { 'data-step': s.id },
          h('th', { scope: 'row' }, s.id), h('td', {}, s.tool), h('td', {}, (s.needs || []).join(', ') || '—'),
          h('td', { class: 'num' }, s.max_attempts ?? 1), h('td', {}, (s.retry_on || []).join(', ') || '—'),
          h('td', { class: 'mono small wrap' }, JSON.stringify(s.args)))))),
    h('section', { 'aria-labelledby': 'h-tools' }, h('h2', { id: 'h-tools' }, 'Tools'),
      table('tools-table', 'Each tool\'s digest covers its command, files and settings: a change re-runs the steps that use it', ['Tool', 'Command', 'Version', 'Timeout', 'Files', 'Digest'],
        wf.tools.map((t) => h('tr', { 'data-tool': t.name },
          h('th', { scope: 'row' }, t.name),
          h('td', { class: 'mono small wrap' }, (t.command || []).join(' ')),
          h('td', {}, t.version ?? '—'),
          h('td', { class: 'num' }, t.timeout_secs ? `${t.timeout_secs} s` : '—'),
          h('td', { class: 'small' }, (t.files || []).map((f) => h('div', { class: 'mono' }, typeof f === 'string' ? f : (f.path || JSON.stringify(f))))),
          h('td', { 'data-col': 'digest', class: 'mono small wrap' }, t.digest))))),
    h('section', { id: 'rules', 'aria-labelledby': 'h-rules' }, h('h2', { id: 'h-rules' }, 'Validator rules'),
      wf.rules.length ? table('rules-table', 'A finished run is READY when every rule holds, BLOCKED otherwise', ['Rule', 'Step', 'Pointer', 'Check', 'Finding when it fails'],
        wf.rules.map((r) => h('tr', { 'data-rule': r.id },
          h('th', { scope: 'row' }, r.id), h('td', {}, r.step), h('td', { class: 'mono' }, r.pointer),
          h('td', { class: 'mono' }, `${r.op}${'value' in r ? ` ${JSON.stringify(r.value)}` : ''}`), h('td', {}, r.finding))))
        : h('p', { class: 'muted' }, 'No rules: a run that completes every step is READY.')),
    h('section', { 'aria-labelledby': 'h-input' }, h('h2', { id: 'h-input' }, 'Input schema'),
      h('details', {}, h('summary', {}, 'Show the JSON schema'), h('pre', { tabindex: 0, 'aria-label': 'Input schema' }, JSON.stringify(wf.input_schema, null, 2)))));
  loaded();
}

// ------------------------------------------------------------------------------------ compute

async function computePage() {
  const { targets } = await api('/targets');
  page('compute', 'Compute',
    h('p', { class: 'muted' }, 'Readiness here is what the last probe saw (run cairn target probe NAME to look again). A plan still checks its own run directory when it is made.'),
    table('targets-table', null, ['Target', 'Address', 'Executor', 'Workspace root', 'Readiness', 'Last probe', 'Facts'],
      targets.map((t) => {
        const p = t.last_probe;
        const o = p?.observed || {};
        const ready = t.readiness;
        return h('tr', { 'data-target': t.name },
          h('th', { scope: 'row' }, t.name),
          h('td', { class: 'mono small' }, t.ssh ? `${t.ssh.user}@${t.ssh.host}:${t.ssh.port}` : 'this machine'),
          h('td', {}, t.executor, t.partition ? ` (partition ${t.partition})` : ''),
          h('td', { class: 'mono small wrap' }, t.workspace_root),
          h('td', { 'data-col': 'readiness' }, ready === null || ready === undefined
            ? badge('unknown') : ready.ready ? badge('ready') : [h('span', { class: 'badge s-notready' }, 'not ready'),
              h('ul', { class: 'plain small' }, ready.problems.map((x) => h('li', {}, x)))]),
          h('td', { 'data-col': 'probe' }, p ? time(new Date(p.probed_at).toISOString()) : 'never'),
          h('td', { 'data-col': 'facts', class: 'small' }, p ? facts(o) : '—'));
      })));
  loaded();
}

function facts(o) {
  const gb = (b) => (b ? `${(b / 2 ** 30).toFixed(1)} GiB` : '?');
  const rows = [
    ['Host', `${o.hostname || '?'} · ${o.os || '?'} · ${o.machine || '?'}`],
    ['CPUs · memory', `${o.cpus ?? '?'} · ${gb(o.memory?.available_bytes)} free of ${gb(o.memory?.total_bytes)}`],
    ['Workspace', `${o.workspace?.exists ? 'exists' : 'absent'}, ${o.workspace?.writable ? 'writable' : 'not writable'}, ${gb(o.workspace?.free_bytes)} free`],
    ['Python', o.python?.version || '—'],
    ['Snakemake', o.snakemake?.version || 'absent'],
    ['Nextflow', o.nextflow?.version || 'absent'],
    ['Slurm', Object.values(o.slurm || {}).every(Boolean) ? 'sbatch, squeue, scancel, scontrol' : 'absent'],
  ];
  return h('dl', { class: 'meta' }, rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// ------------------------------------------------------------------------------------ verifications

/** One code cell of a verification, in words: its status, time, tags and why it was skipped. */
function cellTitle(c) {
  const parts = [`cell ${c.index}: ${c.status}`];
  if (c.duration_ms != null) parts.push(ms(c.duration_ms));
  if (c.reason === 'tag') parts.push('not run: tagged skip-execution');
  if (c.error_expected) parts.push('its error was expected (raises-exception)');
  if (c.tags && c.tags.length) parts.push(`tags: ${c.tags.join(', ')}`);
  return parts.join(', ');
}

async function verificationsPage() {
  const [{ verifications }, { jobs }] = await Promise.all([api('/verifications?limit=200'), api('/kernel/jobs')]);
  const newestPass = verifications.find((v) => v.verdict === 'passed' && v.notebook);
  const said = h('p', { class: 'small muted', role: 'status' });
  const exportsSaid = h('p', { class: 'small muted', role: 'status' });

  page('verifications', 'Verifications',
    h('p', { class: 'muted' }, 'A verification runs a document\'s cells in order in a fresh kernel and stops at the first failure. A pass proves the cells run, not that their numbers are right.'),
    h('section', { 'aria-labelledby': 'h-newest' }, h('h2', { id: 'h-newest' }, 'Newest pass'),
      newestPass ? h('div', { class: 'actions' },
        h('span', {}, `${newestPass.title} (${newestPass.verification_id}), `, time(newestPass.finished_at ? new Date(newestPass.finished_at).toISOString() : null)),
        h('button', { id: 'download-notebook', type: 'button', onclick: () => download(`/verifications/${encodeURIComponent(newestPass.verification_id)}/notebook`, `${newestPass.verification_id}.ipynb`, said) }, 'Download notebook'),
        said)
        : h('p', { class: 'muted' }, 'No verification has passed yet.')),
    h('section', { 'aria-labelledby': 'h-all' }, h('h2', { id: 'h-all' }, 'All verifications'),
      verifications.length ? table('verifications-table', 'Newest first', ['Verification', 'Title', 'Verdict', 'Cells', 'Started', 'Duration', 'Result'],
        verifications.map((v) => h('tr', { 'data-verification': v.verification_id, 'data-verdict': v.verdict || 'running' },
          h('th', { scope: 'row', class: 'mono small' }, v.verification_id),
          h('td', {}, v.title),
          h('td', {}, badge(v.verdict || 'running')),
          h('td', {}, h('div', { class: 'cells' }, (v.cells || []).map((c) => h('span', { class: `cell s-${c.status}`, 'data-status': c.status, 'data-reason': c.reason || null, title: cellTitle(c) }, `${c.index}: ${c.status}${c.reason === 'tag' ? ' (tag)' : ''}${c.error_expected ? ' (expected error)' : ''}`)))),
          h('td', {}, time(v.created_at ? new Date(v.created_at).toISOString() : null)),
          h('td', { class: 'num' }, v.finished_at ? ms(v.finished_at - v.created_at) : '—'),
          h('td', { class: 'small wrap' },
            v.error ? h('div', {}, v.error) : null,
            ...(v.cells || []).filter((c) => c.error).map((c) => h('details', { class: 'cell-error', 'data-cell': c.index },
              h('summary', {}, `cell ${c.index}${c.error_expected ? ' (expected)' : ''}: ${c.error.ename}: ${c.error.evalue}`),
              h('pre', { class: 'mono small' }, (c.error.traceback || []).join('\n')))),
            v.notebook ? h('div', { class: 'mono' }, v.notebook) : null,
            v.draft ? loadOnOpen({ class: 'draft' }, 'Draft', `Draft of ${v.title}`,
              async () => (await api(`/verifications/${encodeURIComponent(v.verification_id)}`)).draft_text ?? '(no draft)',
              h('p', { class: 'mono small' }, v.draft)) : null))))
        : h('p', { class: 'muted' }, 'No verification yet; run cairn verify DOC.')),
    h('section', { 'aria-labelledby': 'h-jobs' }, h('h2', { id: 'h-jobs' }, 'Session kernel jobs'),
      jobs.length ? table('jobs-table', 'Oldest first', ['Job', 'Status', 'Code', 'Submitted', 'Duration', 'Session'],
        jobs.map((j) => h('tr', { 'data-job': j.job_id, 'data-kind': j.kind || 'session' },
          h('th', { scope: 'row', class: 'mono small' }, j.job_id),
          h('td', { 'data-col': 'status' }, badge(j.status)),
          j.kind === 'verification'
            ? h('td', { class: 'small wrap', 'data-col': 'cells' }, `verifying ${j.title}: ${j.cells_done} of ${j.cells_total} cells done`, h('div', { class: 'mono muted' }, j.code))
            : h('td', { class: 'mono small wrap' }, firstLines(j.code), j.error ? h('div', { class: 'muted' }, j.error) : null),
          h('td', {}, time(j.submitted_at)),
          h('td', { class: 'num' }, ms(j.duration_ms)),
          h('td', { class: 'mono small' }, j.session))))
        : h('p', { class: 'muted' }, 'The session kernel has run no job.')),
    h('section', { 'aria-labelledby': 'h-exports' }, h('h2', { id: 'h-exports' }, 'Exports'),
      h('div', { class: 'actions' },
        h('button', { id: 'download-audit', type: 'button', onclick: () => download('/api/notebook', 'cairn-audit.ipynb', exportsSaid) }, 'Download the audit notebook'),
        h('button', { id: 'download-workflow', type: 'button', onclick: () => download('/api/notebook?workflow=1', 'workflow.ipynb', exportsSaid) }, 'Download the workflow notebook'),
        exportsSaid),
      h('p', { class: 'small muted' }, 'The audit notebook is every retained session job in order, dead ends included, each with a provenance header. The workflow notebook is the newest passed verification: the verified cells and an introduction stating what the run proved and what it did not.')));
  loaded();
}

function firstLines(code) {
  const lines = String(code).split('\n');
  return lines.length > 3 ? `${lines.slice(0, 3).join('\n')}\n…` : code;
}

// ------------------------------------------------------------------------------------ docs

/** The query of the last search on the Docs page, kept while moving between pages. */
let docSearch = '';

async function docsPage() {
  const life = pageLife;
  const { docs } = await api('/docs');
  const input = h('input', { id: 'doc-query', type: 'search', name: 'query', autocomplete: 'off', value: docSearch,
    placeholder: 'e.g. pca clustering' });
  const said = h('p', { class: 'small muted', role: 'status', id: 'doc-search-status' });
  const results = h('div', { id: 'doc-results' });
  const search = async () => {
    docSearch = input.value;
    const q = docSearch.trim();
    if (!q) {
      results.replaceChildren();
      said.textContent = '';
      return;
    }
    said.textContent = 'Searching…';
    try {
      const found = await api(`/docs/search?query=${encodeURIComponent(q)}&limit=50`, life.signal);
      said.textContent = found.results.length ? `${found.results.length} doc${found.results.length === 1 ? '' : 's'} match, best first.` : 'No doc matches.';
      results.replaceChildren(found.results.length ? h('ol', { id: 'doc-hits', class: 'hits' }, found.results.map((r) => h('li', { 'data-doc': r.name },
        h('a', { href: `#/docs/${encodeURIComponent(r.name)}` }, r.title), ' ',
        h('span', { class: 'muted small mono' }, `${r.name}@${r.version}`),
        h('p', { class: 'snippet small' }, r.snippet_parts.map((part) => (part.highlighted ? h('mark', {}, part.text) : part.text)))))) : '');
    } catch (e) {
      if (life.signal.aborted) return;
      said.textContent = '';
      results.replaceChildren(errorBox(e));
    }
  };
  const form = h('form', { role: 'search', class: 'filters', 'aria-label': 'Search the docs', onsubmit: (ev) => { ev.preventDefault(); search(); } },
    h('label', {}, 'Search the docs', input),
    h('button', { type: 'submit', id: 'doc-search' }, 'Search'),
    said);
  page('docs', 'Docs',
    h('p', { class: 'muted' }, 'Procedure docs: a proven procedure minus its dataset, kept for an agent to run again on new data and derive its parameters there. A notebook, on the Verifications page, is the other artifact: one run on one dataset, for a person to re-run.'),
    form, results,
    h('section', { 'aria-labelledby': 'h-docs' }, h('h2', { id: 'h-docs' }, 'All docs'),
      docs.length ? table('docs-table', 'By name, each with its newest version', ['Doc', 'Title', 'Version', 'Saved', 'Verified by'],
        docs.map((d) => h('tr', { 'data-doc': d.name },
          h('th', { scope: 'row' }, h('a', { href: `#/docs/${encodeURIComponent(d.name)}` }, d.name)),
          h('td', {}, d.title),
          h('td', { 'data-col': 'version', class: 'num' }, d.latest_version),
          h('td', {}, time(d.updated_at)),
          h('td', { class: 'mono small' }, d.verification_id || '—'))))
        : h('p', { class: 'muted' }, 'No doc yet; an agent saves one with save_doc, a person with cairn doc save NAME FILE.')));
  if (docSearch.trim()) await search();
  loaded();
}

async function docPage(name, version) {
  const enc = encodeURIComponent(name);
  const doc = await api(`/docs/${enc}?render=html${version ? `&version=${encodeURIComponent(version)}` : ''}`);
  const said = h('p', { class: 'small muted', role: 'status' });
  const article = h('article', { id: 'doc-text', class: 'doc', 'aria-label': `The text of ${doc.name}, version ${doc.version}` });
  // The server renders the markdown with its raw HTML escaped and only safe links (see markdown.rs).
  article.innerHTML = doc.html;
  // The page's own h1 is the doc's title: the doc's headings move one level down.
  for (const el of [...article.querySelectorAll('h1, h2, h3, h4, h5')]) {
    const next = h(`h${Number(el.tagName[1]) + 1}`, {});
    next.append(...el.childNodes);
    el.replaceWith(next);
  }
  const v = doc.verification;
  page('doc', doc.title,
    doc.removed_at ? h('div', { class: 'error', role: 'alert' }, `This doc was removed at ${doc.removed_at}; its versions stay readable.`) : null,
    h('dl', { class: 'meta', id: 'doc-meta' },
      h('dt', {}, 'Doc'), h('dd', { class: 'mono' }, doc.name),
      h('dt', {}, 'Version'), h('dd', { id: 'doc-version' }, `${doc.version} of ${doc.latest_version}`),
      h('dt', {}, 'Saved'), h('dd', {}, time(doc.saved_at)),
      h('dt', {}, 'Size'), h('dd', {}, `${doc.bytes} bytes · SHA-256 `, h('span', { class: 'mono small wrap' }, doc.sha256)),
      h('dt', {}, 'Verified by'), h('dd', { id: 'doc-verification' }, v
        ? [h('a', { href: '#/verifications', class: 'mono' }, v.verification_id), ` ${v.title ? `(${v.title}, ` : '('}${v.verdict || 'record gone'})`,
          v.notebook ? h('div', { class: 'actions' },
            h('button', { type: 'button', id: 'doc-notebook', onclick: () => download(`/verifications/${encodeURIComponent(v.verification_id)}/notebook`, `${v.verification_id}.ipynb`, said) }, 'Download its notebook'),
            said) : null]
        : 'no verification: this doc was saved without one')),
    h('section', { 'aria-labelledby': 'h-versions' }, h('h2', { id: 'h-versions' }, 'Versions'),
      h('ol', { id: 'doc-versions', class: 'plain' }, doc.versions.map((x) => h('li', { 'data-version': x.version },
        x.version === doc.version
          ? h('strong', { 'aria-current': 'page' }, `Version ${x.version}`)
          : h('a', { href: `#/docs/${enc}/${x.version}` }, `Version ${x.version}`),
        ` · ${x.title} · `, time(x.saved_at), ` · ${x.bytes} bytes`, x.verification_id ? ` · verified by ${x.verification_id}` : '')))),
    h('section', { 'aria-labelledby': 'h-text' }, h('h2', { id: 'h-text' }, 'The procedure'), article));
  loaded();
}

// ------------------------------------------------------------------------------------ start

window.addEventListener('hashchange', () => {
  if (location.hash.startsWith('#login=')) signIn().then((ok) => ok && route());
  else route();
});
signIn().then((ok) => ok && route());
