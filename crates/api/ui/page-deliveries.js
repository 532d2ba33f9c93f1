// Deliveries, newest first, filtered by state, endpoint, event type and
// time; `#/deliveries?state=dead` is the dead-letter queue. Filters live in
// the page's address, so a view can be bookmarked (it never holds the token).

import { get, post, seg, withQuery } from './api.js';
import { badge, button, fill, h, heading, link, note, num, shortId, table, when } from './dom.js';

export const STATES = ['pending', 'attempting', 'retrying', 'delivered', 'dead', 'ignored_stale'];
const TERMINAL = new Set(['delivered', 'dead', 'ignored_stale']);
const SINCE = [
  ['', 'any time'],
  ['15m', 'last 15 minutes'],
  ['1h', 'last hour'],
  ['24h', 'last 24 hours'],
  ['7d', 'last 7 days'],
];
const SINCE_MS = { '15m': 900e3, '1h': 3600e3, '24h': 86400e3, '7d': 604800e3 };

function select(name, value, options) {
  return h(
    'select',
    { name, id: `f-${name}` },
    options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)),
  );
}

// The filter form; submitting it moves to the page's new address.
function filters(params, endpoints, ctx) {
  const form = h(
    'form',
    { class: 'filters', method: 'post' },
    h('label', null, 'State', select('state', params.get('state') || '', [['', 'any state'], ...STATES.map((s) => [s, s.replace('_', ' ')])])),
    h('label', null, 'Endpoint', select('endpoint_id', params.get('endpoint_id') || '', [['', 'any endpoint'], ...endpoints.map((e) => [e.endpoint_id, e.url])])),
    h('label', null, 'Event type', h('input', { name: 'type', id: 'f-type', value: params.get('type') || '', placeholder: 'order.created', spellcheck: 'false' })),
    h('label', null, 'Created', select('since', params.get('since') || '', SINCE)),
    h('button', { type: 'submit', class: 'primary' }, 'Filter'),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const query = new URLSearchParams();
    for (const [name, value] of data) if (value) query.set(name, value);
    const text = query.toString();
    ctx.go(text ? `#/deliveries?${text}` : '#/deliveries');
  });
  for (const s of form.querySelectorAll('select')) s.addEventListener('change', () => form.requestSubmit());
  return form;
}

export async function replayOne(id, result, ctx) {
  await post(`/v1/deliveries/${seg(id)}/replay`);
  fill(result, note('ok', `Delivery ${id} queued again.`));
  await ctx.refresh();
}

export default {
  mount(root, route, ctx) {
    const params = route.params;
    const dead = params.get('state') === 'dead';
    const form = h('div');
    const result = h('div');
    const body = h('div');
    const pager = h('div', { class: 'pager' });
    const cursors = [''];
    const urls = new Map();
    fill(
      root,
      heading(dead ? 'Dead letters' : 'Deliveries', dead ? 'Deliveries that used up their retries or were dead-lettered; replay them once the receiver is fixed.' : 'Newest first.'),
      form,
      result,
      body,
      pager,
    );
    get('/v1/stats/endpoints?limit=1000')
      .then((page) => {
        for (const e of page.data) urls.set(e.endpoint_id, e.url);
        fill(form, filters(params, page.data, ctx));
      })
      .catch(() => fill(form, filters(params, [], ctx)));
    return {
      async refresh() {
        const since = SINCE_MS[params.get('since')];
        const query = {
          state: params.get('state'),
          endpoint_id: params.get('endpoint_id'),
          type: params.get('type'),
          since: since ? new Date(Date.now() - since).toISOString() : '',
          order: 'newest',
          limit: 50,
          cursor: cursors[cursors.length - 1],
        };
        const page = await get(withQuery('/v1/deliveries', query));
        fill(
          body,
          table(
            [
              ['Delivery', (d) => link(`#/deliveries/${encodeURIComponent(d.id)}`, shortId(d.id), { 'data-testid': 'delivery-link' })],
              ['State', (d) => badge(d.state)],
              ['Event', (d) => [link(`#/events/${encodeURIComponent(d.event_id)}`, d.event_type || d.event_id), h('div', { class: 'sub' }, shortId(d.event_id))]],
              ['Endpoint', (d) => link(`#/endpoints/${encodeURIComponent(d.endpoint_id)}`, urls.get(d.endpoint_id) || d.endpoint_id)],
              ['Attempts', (d) => num(d.attempt_count), 'num'],
              ['Created', (d) => when(d.created_at)],
              ['Next attempt', (d) => (d.next_attempt_at ? when(d.next_attempt_at) : h('span', { class: 'muted' }, '—'))],
              ['', (d) => (TERMINAL.has(d.state) ? button('Replay', () => replayOne(d.id, result, ctx), { testid: 'replay' }) : null), 'act'],
            ],
            page.data,
            { empty: page.next_cursor ? 'None in this stretch; look further with Older.' : 'No deliveries match.', testid: 'deliveries' },
          ),
        );
        for (const [i, row] of [...body.querySelectorAll('tbody tr')].entries()) row.dataset.id = page.data[i].id;
        fill(
          pager,
          cursors.length > 1 ? button('Newer', async () => { cursors.pop(); await ctx.refresh(); }) : null,
          page.next_cursor ? button('Older', async () => { cursors.push(page.next_cursor); await ctx.refresh(); }) : null,
        );
      },
    };
  },
};
