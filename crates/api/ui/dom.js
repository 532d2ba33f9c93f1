// Building the page from API data. Everything from the API reaches the
// DOM as text (text nodes, attributes set one by one), never as markup.

// An element: `h('td', {class: 'num'}, 'text', child, [more])`. Attributes
// starting with `on` take a function; `null`, `false` and `undefined`
// children and attributes are left out.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

// Replaces everything inside `el`.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const link = (hash, text, attrs = {}) => h('a', { href: hash, ...attrs }, text);

// `12 s ago`, `3 min ago`, `in 40 s`; `—` without a time.
export function ago(iso, now = Date.now()) {
  if (!iso) return '—';
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return String(iso);
  const seconds = Math.round((now - ms) / 1000);
  const size = Math.abs(seconds);
  let text;
  if (size < 2) return 'just now';
  if (size < 90) text = `${size} s`;
  else if (size < 90 * 60) text = `${Math.round(size / 60)} min`;
  else if (size < 36 * 3600) text = `${Math.round(size / 3600)} h`;
  else text = `${Math.round(size / 86400)} d`;
  return seconds >= 0 ? `${text} ago` : `in ${text}`;
}

// A relative time that shows the exact time on hover; `tick` keeps it current.
export const when = (iso) =>
  iso ? h('time', { datetime: iso, title: iso }, ago(iso)) : h('span', { class: 'muted' }, '—');

// Brings every relative time under `root` up to date.
export function tick(root) {
  const now = Date.now();
  for (const el of root.querySelectorAll('time[datetime]')) el.textContent = ago(el.getAttribute('datetime'), now);
}

// A state as a coloured label: delivery states, breaker states, node states.
export const badge = (state, text) => h('span', { class: `badge s-${state}` }, text || String(state).replace(/_/g, ' '));

// An HTTP status as a coloured label, or the transport error.
export function statusBadge(code, error) {
  if (code === null || code === undefined) return h('span', { class: 'badge s-dead', title: error || '' }, error || 'no answer');
  return h('span', { class: `badge ${code >= 200 && code < 300 ? 's-delivered' : 's-dead'}` }, String(code));
}

export const ms = (value) => (value === null || value === undefined ? '—' : value >= 1000 ? `${(value / 1000).toFixed(1)} s` : `${value} ms`);
export const pct = (rate) => (rate === null || rate === undefined ? '—' : `${(rate * 100).toFixed(rate === 1 || rate === 0 ? 0 : 1)}%`);
export const num = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US'));

// A table: `columns` are `[label, cell(row), className?]`; a cell returns
// text or nodes. `empty` is shown when there are no rows.
export function table(columns, rows, { empty = 'Nothing here.', rowClass, testid } = {}) {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h(
    'table',
    { 'data-testid': testid },
    h('thead', null, h('tr', null, columns.map(([label, , cls]) => h('th', { class: cls }, label)))),
    h(
      'tbody',
      null,
      rows.map((row) =>
        h('tr', { class: rowClass && rowClass(row) }, columns.map(([, cell, cls]) => h('td', { class: cls }, cell(row)))),
      ),
    ),
  );
}

// `label: value` pairs as a definition list.
export function facts(pairs) {
  return h(
    'dl',
    { class: 'facts' },
    pairs.filter(Boolean).map(([label, value]) => [h('dt', null, label), h('dd', null, value)]),
  );
}

// A button that runs `action`, disabled meanwhile; `confirmText` asks first.
export function button(text, action, { kind = '', confirmText, testid, title } = {}) {
  const el = h('button', { type: 'button', class: kind, 'data-testid': testid, title }, text);
  el.addEventListener('click', async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    el.disabled = true;
    try {
      await action();
    } finally {
      el.disabled = false;
    }
  });
  return el;
}

// A short message after an action: `ok` or `error`.
export const note = (kind, text) => h('p', { class: `note ${kind}`, role: 'status' }, text);

// A page heading with an optional subtitle and actions on the right.
export const heading = (title, subtitle, ...actions) =>
  h('div', { class: 'heading' }, h('div', null, h('h1', null, title), subtitle ? h('p', { class: 'muted' }, subtitle) : null), h('div', { class: 'actions' }, actions));

// A monospaced id, shortened in the middle for tables; full id on hover.
export function shortId(id) {
  const text = String(id);
  return h('code', { title: text }, text.length > 18 ? `${text.slice(0, 8)}…${text.slice(-6)}` : text);
}
