// Per-minute bar charts drawn as SVG by hand: one bar a minute, a scale
// line at the largest value, the time at both ends.

const NS = 'http://www.w3.org/2000/svg';
const WIDTH = 360;
const HEIGHT = 120;
const PAD = { top: 14, right: 6, bottom: 18, left: 34 };

function svg(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  if (text !== undefined) el.textContent = String(text);
  return el;
}

// A round top for the scale: 1, 2, 5, 10, 20, 50, …
function niceMax(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

const clock = (iso) => new Date(iso).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });

// `minutes`: `[{at, <field>: n}]`, oldest first. `kind` picks the colour.
export function barChart(title, minutes, field, kind) {
  const values = minutes.map((m) => Number(m[field]) || 0);
  const total = values.reduce((a, b) => a + b, 0);
  const top = niceMax(Math.max(0, ...values));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const root = svg('svg', {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: `chart c-${kind}`,
    role: 'img',
    'aria-label': `${title}: ${total} in the last hour`,
  });
  root.appendChild(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: PAD.top, y2: PAD.top, class: 'grid' }));
  root.appendChild(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: PAD.top + plotH, y2: PAD.top + plotH, class: 'axis' }));
  root.appendChild(svg('text', { x: PAD.left - 4, y: PAD.top + 4, class: 'label end' }, top));
  root.appendChild(svg('text', { x: PAD.left - 4, y: PAD.top + plotH, class: 'label end' }, 0));
  const slot = plotW / Math.max(1, values.length);
  values.forEach((value, i) => {
    if (value <= 0) return;
    const barH = Math.max(1, (value / top) * plotH);
    const bar = svg('rect', {
      x: PAD.left + i * slot + slot * 0.15,
      y: PAD.top + plotH - barH,
      width: Math.max(1, slot * 0.7),
      height: barH,
      class: 'bar',
    });
    bar.appendChild(svg('title', {}, `${clock(minutes[i].at)}: ${value}`));
    root.appendChild(bar);
  });
  if (minutes.length) {
    root.appendChild(svg('text', { x: PAD.left, y: HEIGHT - 4, class: 'label' }, clock(minutes[0].at)));
    root.appendChild(svg('text', { x: WIDTH - PAD.right, y: HEIGHT - 4, class: 'label end' }, clock(minutes[minutes.length - 1].at)));
  }
  const figure = document.createElement('figure');
  figure.className = 'chart-box';
  const caption = document.createElement('figcaption');
  const name = document.createElement('span');
  name.textContent = title;
  const sum = document.createElement('strong');
  sum.textContent = total.toLocaleString('en-US');
  sum.dataset.testid = `total-${field}`;
  caption.append(name, sum);
  figure.append(caption, root);
  return figure;
}
