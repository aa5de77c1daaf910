// Compares the results of `conformance server -o DIR` runs with expected-failures.txt, prints a
// summary, and exits 1 on any unexpected failure or unexpected pass.
//
// Usage: node compare.mjs EXPECTED_FAILURES SCENARIOS_FILE NAME=RESULTS_DIR...
//   EXPECTED_FAILURES  the checked-in list (format below)
//   SCENARIOS_FILE     the output of `conformance list --server`: every scenario must have run
//   NAME=RESULTS_DIR   one `-o` directory per endpoint (`workbench=/tmp/…/workbench`)
//
// expected-failures.txt: one entry a line, `#` starts a comment, and every entry carries its
// justification after ` -- `:
//   <scenario> -- why              the whole scenario fails (at least one check does)
//   <scenario> <check-id> -- why   that check fails; every other check of the scenario must pass
// An entry holds for every endpoint. A check fails when its status is FAILURE or WARNING (as the
// suite's own --expected-failures counts it); INFO checks are a trace, not a verdict.

import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { join } from 'node:path';

const [expectedPath, scenariosPath, ...runs] = process.argv.slice(2);
if (!expectedPath || !scenariosPath || runs.length === 0) {
  console.error('usage: node compare.mjs EXPECTED_FAILURES SCENARIOS_FILE NAME=RESULTS_DIR...');
  process.exit(2);
}

// --- the expected failures -----------------------------------------------------------------
const wholeScenario = new Map(); // scenario -> justification
const singleCheck = new Map(); // "scenario check" -> justification
const problems = [];
readFileSync(expectedPath, 'utf8').split('\n').forEach((raw, i) => {
  const line = raw.replace(/#.*$/, '').trim();
  if (!line) return;
  const [entry, why] = line.split(/\s+--\s+/, 2);
  const words = entry.trim().split(/\s+/);
  if (!why?.trim() || words.length > 2) {
    problems.push(`${expectedPath}:${i + 1}: expected \`<scenario> [<check-id>] -- <justification>\`, got \`${raw}\``);
    return;
  }
  if (words.length === 1) wholeScenario.set(words[0], why.trim());
  else singleCheck.set(words.join(' '), why.trim());
});

// --- what the suite offers -----------------------------------------------------------------
const scenarios = readFileSync(scenariosPath, 'utf8')
  .split('\n')
  .map((l) => l.match(/^\s*-\s+([a-z0-9-]+)/)?.[1])
  .filter(Boolean);
if (scenarios.length === 0) problems.push(`no scenario in ${scenariosPath} (the output of \`conformance list --server\`)`);
for (const s of wholeScenario.keys()) {
  if (!scenarios.includes(s)) problems.push(`expected-failures names \`${s}\`, which this suite version does not have`);
}
for (const k of singleCheck.keys()) {
  const s = k.split(' ')[0];
  if (!scenarios.includes(s)) problems.push(`expected-failures names \`${k}\`, whose scenario this suite version does not have`);
  if (wholeScenario.has(s)) problems.push(`expected-failures names both \`${s}\` and \`${k}\`; keep one`);
}

// --- the results ---------------------------------------------------------------------------
/** scenario -> checks of the newest `server-<scenario>-<timestamp>` directory in `dir`. */
function results(dir) {
  const out = new Map();
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir).sort()) {
    const m = name.match(/^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/);
    const file = join(dir, name, 'checks.json');
    if (!m || !existsSync(file)) continue;
    try {
      out.set(m[1], JSON.parse(readFileSync(file, 'utf8')));
    } catch (e) {
      out.set(m[1], [{ id: '(checks.json)', status: 'FAILURE', errorMessage: `unreadable: ${e.message}` }]);
    }
  }
  return out;
}

const failed = (c) => c.status === 'FAILURE' || c.status === 'WARNING';
const endpoints = runs.map((r) => {
  const at = r.indexOf('=');
  return { name: r.slice(0, at), dir: r.slice(at + 1) };
});
const unexpected = []; // lines explaining each unexpected outcome
const table = []; // [scenario, cell per endpoint]
const counts = { pass: 0, 'pass*': 0, xfail: 0, FAIL: 0, XPASS: 0, MISSING: 0 };

for (const ep of endpoints) ep.results = results(ep.dir);
for (const scenario of scenarios) {
  const row = [scenario];
  for (const ep of endpoints) {
    const checks = ep.results.get(scenario);
    let cell;
    if (!checks) {
      cell = 'MISSING';
      unexpected.push(`${ep.name} ${scenario}: no result (the suite did not run it, or crashed)`);
    } else {
      const verdicts = checks.filter((c) => c.status !== 'INFO');
      const failing = verdicts.filter(failed);
      if (verdicts.length === 0) {
        cell = 'FAIL';
        unexpected.push(`${ep.name} ${scenario}: no check reported a verdict`);
      } else if (wholeScenario.has(scenario)) {
        cell = failing.length > 0 ? 'xfail' : 'XPASS';
        if (cell === 'XPASS') unexpected.push(`${ep.name} ${scenario}: passes now; remove it from expected-failures`);
      } else {
        const bad = failing.filter((c) => !singleCheck.has(`${scenario} ${c.id}`));
        const stale = [...singleCheck.keys()]
          .filter((k) => k.startsWith(`${scenario} `))
          .filter((k) => !failing.some((c) => `${scenario} ${c.id}` === k));
        for (const c of bad) {
          const details = c.details ? ` ${JSON.stringify(c.details)}` : '';
          unexpected.push(
            `${ep.name} ${scenario} / ${c.id}: ${c.status}: ${c.errorMessage ?? c.description ?? ''}${details.slice(0, 2000)}`,
          );
        }
        for (const k of stale) unexpected.push(`${ep.name} ${k}: passes now; remove it from expected-failures`);
        cell = bad.length > 0 ? 'FAIL' : stale.length > 0 ? 'XPASS' : failing.length > 0 ? 'pass*' : 'pass';
      }
    }
    counts[cell] += 1;
    row.push(cell);
  }
  table.push(row);
}

// --- the summary ---------------------------------------------------------------------------
const width = Math.max(...scenarios.map((s) => s.length), 8);
const col = Math.max(...endpoints.map((e) => e.name.length), 7) + 2;
console.log(`\n${'scenario'.padEnd(width)}  ${endpoints.map((e) => e.name.padEnd(col)).join('')}`);
for (const [s, ...cells] of table) {
  console.log(`${s.padEnd(width)}  ${cells.map((c) => c.padEnd(col)).join('')}`);
}
console.log(
  `\npass: every check passed · pass*: every check passed but those expected-failures lists (which failed)\n` +
    `xfail: failed, as expected-failures says · FAIL: a check failed unexpectedly\n` +
    `XPASS: passes, though expected-failures says it fails · MISSING: no result`,
);
console.log(
  `\n${endpoints.length} endpoint(s) x ${scenarios.length} scenarios: ${counts.pass} passed, ` +
    `${counts['pass*']} passed but for expected check failures, ${counts.xfail} expected failures, ` +
    `${counts.FAIL} unexpected failures, ${counts.XPASS} unexpected passes, ${counts.MISSING} missing`,
);
for (const p of problems) unexpected.unshift(`expected-failures: ${p}`);
if (unexpected.length > 0) {
  console.log(`\nUNEXPECTED (${unexpected.length}):`);
  for (const u of unexpected) console.log(`  ${u}`);
  process.exit(1);
}
console.log('\nOK: every outcome is as expected.');
