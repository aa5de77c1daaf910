// A run's attempts on its time axis (GET /runs/{id}/timeline): one row per step, one bar per
// attempt from its start to its end, so a parallel run shows its overlap and a slow step stands
// out. A step a replay reused is a diamond at the moment it was copied. The step table beside it
// carries the same facts for a screen reader.

const ROW = 22;
const LABEL = 150;
const WIDTH = 720;
const PAD = 6;

function fmt(ms) {
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  return Number.isInteger(ms) || ms >= 100 ? `${Math.round(ms)} ms` : `${ms.toFixed(1)} ms`;
}

/**
 * @param h      the page's element builder
 * @param t      the run's timeline: {length_ms, finished_ms, attempts: [{step_id, attempt, start_ms, end_ms, end, duration_ms}]}
 * @param label  what the chart shows, for assistive technology
 * @param svgId  the chart's element id (a page with several charts gives each its own)
 */
export function drawGantt(h, t, label, svgId = 'gantt') {
  const rows = [];
  for (const a of t.attempts) if (!rows.includes(a.step_id)) rows.push(a.step_id);
  const len = Math.max(1, t.length_ms);
  const x = (ms) => LABEL + (Math.min(Math.max(ms, 0), len) / len) * (WIDTH - LABEL - PAD);
  const height = PAD * 2 + (rows.length + 1) * ROW;
  const svg = h('svg', {
    id: svgId, class: 'gantt', role: 'img', 'aria-label': label,
    viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height,
  });
  // The axis: 0 and the run's length.
  const axisY = PAD + rows.length * ROW + 14;
  svg.append(h('path', { class: 'axis', d: `M${LABEL} ${axisY - 12}H${WIDTH - PAD}` }),
    h('text', { x: LABEL, y: axisY, class: 'tick' }, '0'),
    h('text', { x: WIDTH - PAD, y: axisY, class: 'tick', 'text-anchor': 'end' }, fmt(t.length_ms)));
  rows.forEach((id, i) => svg.append(h('text', { x: PAD, y: PAD + i * ROW + 15, class: 'label' }, id)));
  for (const a of t.attempts) {
    const y = PAD + rows.indexOf(a.step_id) * ROW + 3;
    const took = a.duration_ms ?? (a.end_ms === null ? null : a.end_ms - a.start_ms);
    const tip = a.tip ?? (a.end === 'reused'
      ? `${a.step_id}: reused from the source run, at ${fmt(a.start_ms)}`
      : `${a.step_id} attempt ${a.attempt}: ${a.end}, from ${fmt(a.start_ms)}${took === null ? ', still running' : `, took ${fmt(took)}`}`);
    if (a.end === 'reused') {
      const cx = x(a.start_ms);
      svg.append(h('path', { class: 'bar', 'data-step': a.step_id, 'data-end': 'reused', d: `M${cx} ${y}l7 8l-7 8l-7 -8z` }, h('title', {}, tip)));
      continue;
    }
    const from = x(a.start_ms);
    const to = Math.max(from + 2, x(a.end_ms ?? t.length_ms));
    svg.append(h('rect', {
      class: 'bar', 'data-step': a.step_id, 'data-attempt': a.attempt, 'data-end': a.end,
      x: from, y, width: to - from, height: ROW - 6, rx: 2,
    }, h('title', {}, tip)));
  }
  return svg;
}
