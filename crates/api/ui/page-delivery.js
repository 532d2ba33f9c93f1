// One delivery and its whole timeline: where it was received, under which
// key and lease, every attempt (status, latency, node, fencing token, the
// receiver's answer), retries, dead-lettering, replays.

import { get, seg } from './api.js';
import { badge, button, facts, fill, h, heading, link, ms, num, statusBadge, when } from './dom.js';
import { replayOne } from './page-deliveries.js';

const TERMINAL = new Set(['delivered', 'dead', 'ignored_stale']);

const node = (id) => (id === null || id === undefined ? 'unknown node' : `node ${id}`);
const token = (t) => h('span', { class: 'token', title: 'fencing token' }, `token ${t}`);

// What one entry says, after its kind and time.
function detail(entry) {
  switch (entry.kind) {
    case 'received':
      return [`by ${node(entry.node_id)}`];
    case 'encrypted':
    case 'rewrapped':
      return [`under key ${entry.key_id}`];
    case 'leased':
      return [`by ${node(entry.node_id)} under `, token(entry.fencing_token)];
    case 'attempt':
      return [
        statusBadge(entry.status_code, entry.error),
        ` in ${ms(entry.latency_ms)} from ${node(entry.node_id)} under `,
        token(entry.fencing_token),
        entry.status_code !== null && entry.error ? h('div', { class: 'sub' }, entry.error) : null,
        entry.response_body ? h('pre', { class: 'excerpt' }, entry.response_body) : null,
      ];
    case 'retry_scheduled':
      return ['next attempt ', when(entry.next_attempt_at), entry.rule ? ` (${entry.rule.replace(/_/g, ' ')})` : ''];
    case 'dead':
      return [entry.reason];
    case 'truncated':
      return [`${num(entry.dropped)} older entries dropped`];
    case 'sequenced':
      return [`sequence ${entry.sequence}`];
    case 'ignored_stale':
      return ['a newer event was delivered: ', link(`#/events/${encodeURIComponent(entry.newer_event_id)}`, entry.newer_event_id)];
    default:
      return [];
  }
}

const KIND_STATE = { attempt: 'attempting', retry_scheduled: 'retrying', dead: 'dead', delivered: 'delivered', replayed: 'pending', skipped: 'retrying', ignored_stale: 'ignored_stale' };

function timeline(entries) {
  return h(
    'ol',
    { class: 'timeline', 'data-testid': 'timeline' },
    entries.map((entry) =>
      h(
        'li',
        { class: `k-${entry.kind}`, 'data-kind': entry.kind },
        h('div', { class: 'when' }, when(entry.at)),
        h('div', { class: 'what' }, badge(KIND_STATE[entry.kind] || 'info', entry.kind.replace(/_/g, ' ')), ' ', detail(entry)),
      ),
    ),
  );
}

export default {
  mount(root, route, ctx) {
    const id = route.id;
    const result = h('div');
    const top = h('div');
    const body = h('div');
    fill(root, top, result, body);
    return {
      async refresh() {
        const d = await get(`/v1/deliveries/${seg(id)}`);
        fill(
          top,
          heading(
            h('span', null, 'Delivery ', h('code', null, d.id)),
            null,
            TERMINAL.has(d.state) ? button('Replay', () => replayOne(d.id, result, ctx), { testid: 'replay', kind: 'primary' }) : null,
          ),
        );
        fill(
          body,
          facts([
            ['State', h('span', { 'data-testid': 'state' }, badge(d.state))],
            ['Event', link(`#/events/${encodeURIComponent(d.event_id)}`, d.event_id)],
            ['Endpoint', link(`#/endpoints/${encodeURIComponent(d.endpoint_id)}`, d.endpoint_id)],
            ['Attempts', num(d.attempt_count)],
            ['Next attempt', when(d.next_attempt_at)],
            d.ordering_key ? ['Ordering key', `${d.ordering_key} (sequence ${d.sequence})`] : null,
            ['Created', when(d.created_at)],
            ['Updated', when(d.updated_at)],
          ]),
          h('h2', null, 'Timeline'),
          timeline(d.timeline),
        );
      },
    };
  },
};
