// A workflow's DAG as SVG: steps in columns by depth (the longest chain of needs before them),
// in workflow order within a column, edges from each need to its step. Small DAGs only need
// this much; the step tables beside every graph carry the same facts for a screen reader.

const W = 176;
const H = 46;
const GAP_X = 64;
const GAP_Y = 16;
const PAD = 8;

/**
 * @param h        the page's element builder
 * @param steps    [{id, needs, tool?, label?}] in workflow order (`label`, when given, is shown
 *                 instead of the id: a pipeline job's rule and wildcards)
 * @param byStep   {id: {status, reused}} for a run, or null for a workflow
 * @param label    what the graph shows, for assistive technology
 * @param svgId    the graph's element id (a page with several graphs gives each its own)
 */
export function drawDag(h, steps, byStep, label, svgId = 'dag') {
  const index = new Map(steps.map((s, i) => [s.id, i]));
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0; // a cycle cannot be registered; never loop on bad data
    seen.add(id);
    const s = steps[index.get(id)];
    const d = Math.max(-1, ...(s?.needs || []).filter((n) => index.has(n)).map((n) => depthOf(n, seen))) + 1;
    depth.set(id, d);
    return d;
  };
  const columns = [];
  for (const s of steps) (columns[depthOf(s.id)] ||= []).push(s);
  const pos = new Map();
  columns.forEach((col, x) => col.forEach((s, y) => pos.set(s.id, { x: PAD + x * (W + GAP_X), y: PAD + y * (H + GAP_Y) })));
  const width = PAD * 2 + Math.max(1, columns.length) * (W + GAP_X) - GAP_X;
  const height = PAD * 2 + Math.max(1, ...columns.map((c) => c.length)) * (H + GAP_Y) - GAP_Y;

  const svg = h('svg', {
    id: svgId, class: 'dag', role: 'img', 'aria-label': label,
    viewBox: `0 0 ${width} ${height}`, width, height,
  });
  svg.append(h('defs', {}, h('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    h('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#7b8794' }))));
  for (const s of steps) {
    const to = pos.get(s.id);
    for (const n of s.needs || []) {
      const from = pos.get(n);
      if (!from) continue;
      const x1 = from.x + W;
      const y1 = from.y + H / 2;
      const x2 = to.x - 2;
      const y2 = to.y + H / 2;
      const mid = (x1 + x2) / 2;
      svg.append(h('path', { class: 'edge', d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`, 'marker-end': 'url(#arrow)', 'data-from': n, 'data-to': s.id }));
    }
  }
  for (const s of steps) {
    const { x, y } = pos.get(s.id);
    const st = byStep?.[s.id];
    const sub = st ? `${st.status}${st.reused ? ' · reused' : ''}` : (s.tool ? `tool ${s.tool}` : '');
    svg.append(h('g', {
      class: 'node', 'data-step': s.id, 'data-status': st?.status, 'data-reused': st?.reused ? 'true' : null,
      transform: `translate(${x} ${y})`,
    },
    h('title', {}, `${s.label || s.id}${sub ? `: ${sub}` : ''}`),
    h('rect', { width: W, height: H, rx: 7, ry: 7 }),
    h('text', { x: 10, y: 19 }, clip(s.label || s.id, 24)),
    h('text', { x: 10, y: 36, class: 'sub' }, clip(sub, 28))));
  }
  return svg;
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}
