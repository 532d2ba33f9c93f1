// One event: its payload as this node opens it, and every delivery it
// made, with replay for one delivery or the whole event.

import { get, post, seg } from './api.js';
import { badge, button, facts, fill, h, heading, link, note, shortId, table, when } from './dom.js';
import { replayOne } from './page-deliveries.js';

const TERMINAL = new Set(['delivered', 'dead', 'ignored_stale']);

function payload(event) {
  if (event.payload_error) return h('p', { class: 'note error' }, `The payload cannot be opened on this node: ${event.payload_error}`);
  return h('pre', { class: 'payload', 'data-testid': 'payload' }, JSON.stringify(event.payload, null, 2));
}

export default {
  mount(root, route, ctx) {
    const id = route.id;
    const top = h('div');
    const result = h('div');
    const body = h('div');
    fill(root, top, result, body);
    const replay = (includeDelivered) => async () => {
      const answer = await post(`/v1/events/${seg(id)}/replay`, includeDelivered ? { include_delivered: true } : undefined);
      const skipped = answer.skipped.map((s) => `${s.id}: ${s.reason}`).join('; ');
      fill(result, note(answer.replayed.length ? 'ok' : 'warn', `Replayed ${answer.replayed.length} deliveries.${skipped ? ` Skipped ${skipped}.` : ''}`));
      await ctx.refresh();
    };
    return {
      async refresh() {
        const e = await get(`/v1/events/${seg(id)}`);
        const settled = e.deliveries.some((d) => d.state === 'dead' || d.state === 'ignored_stale');
        fill(
          top,
          heading(
            h('span', null, 'Event ', h('code', null, e.id)),
            e.type,
            settled ? button('Replay dead deliveries', replay(false), { testid: 'replay-event', kind: 'primary' }) : null,
            button('Send to every endpoint again', replay(true), { confirmText: 'Send this event again to every endpoint, the ones that have it too?' }),
          ),
        );
        fill(
          body,
          facts([
            ['Type', h('code', null, e.type)],
            ['Received', [when(e.received_at), e.received_by ? ` by node ${e.received_by}` : '']],
            ['Idempotency key', e.idempotency_key || '—'],
            ['Ordering key', e.ordering_key || '—'],
            ['Payload key', e.key_id || 'stored in clear'],
            e.inbound ? ['Inbound', `source ${e.inbound.source_id}, provider event ${e.inbound.provider_event_id}`] : null,
          ]),
          h('h2', null, 'Payload'),
          payload(e),
          h('h2', null, 'Deliveries'),
          table(
            [
              ['Delivery', (d) => link(`#/deliveries/${encodeURIComponent(d.id)}`, shortId(d.id))],
              ['Endpoint', (d) => link(`#/endpoints/${encodeURIComponent(d.endpoint_id)}`, d.endpoint_id)],
              ['State', (d) => badge(d.state)],
              ['', (d) => (TERMINAL.has(d.state) ? button('Replay', () => replayOne(d.id, result, ctx)) : null), 'act'],
            ],
            e.deliveries,
            { empty: 'No endpoint was subscribed to this event.', testid: 'event-deliveries' },
          ),
        );
      },
    };
  },
};
