// Endpoints: every endpoint's health in one table, and one endpoint with
// its statistics, last error and actions (enable or disable, replay its
// dead letters).

import { get, patch, post, seg, withQuery } from './api.js';
import { badge, button, facts, fill, h, heading, link, ms, note, num, pct, shortId, statusBadge, table, when } from './dom.js';

// Enabled or disabled, and the breaker's state when it is not closed.
export function healthBadges(e) {
  return [
    e.disabled ? badge('dead', 'disabled') : badge('delivered', 'enabled'),
    e.breaker.state !== 'closed' ? [' ', badge(e.breaker.state === 'open' ? 'dead' : 'retrying', `breaker ${e.breaker.state.replace('_', ' ')}`)] : null,
    e.disabled && e.disabled_reason ? h('div', { class: 'sub' }, e.disabled_reason) : null,
  ];
}

// Attempts under way are known to the node that sends for the endpoint.
function inFlight(e, where) {
  if (e.sender_node_id === null) return h('span', { class: 'muted', title: 'its shard has no owner right now' }, '—');
  if (where.node !== null && e.sender_node_id !== where.node) {
    return h('span', { class: 'muted', title: `node ${e.sender_node_id} sends for this endpoint and counts its attempts under way` }, `on node ${e.sender_node_id}`);
  }
  return num(e.in_flight);
}

function lastError(error) {
  if (!error) return h('span', { class: 'muted' }, 'none');
  return [statusBadge(error.status_code, error.error), ' ', when(error.at)];
}

const deadLink = (id, count) => (count ? link(`#/deliveries?state=dead&endpoint_id=${encodeURIComponent(id)}`, num(count)) : '0');

async function setDisabled(id, disabled) {
  await patch(`/v1/endpoints/${seg(id)}`, { disabled });
}

function toggle(e, done) {
  return e.disabled
    ? button('Enable', async () => done(await setDisabled(e.endpoint_id, false)), { testid: 'enable' })
    : button('Disable', async () => done(await setDisabled(e.endpoint_id, true)), {
        kind: 'danger',
        testid: 'disable',
        confirmText: `Disable ${e.url}? Its queued deliveries are dead-lettered.`,
      });
}

export const endpointList = {
  mount(root, route, ctx) {
    const body = h('div');
    let cursor = '';
    const more = h('div', { class: 'pager' });
    fill(root, heading('Endpoints', 'Health over the last hour, work queued and dead, the last failed attempt.'), body, more);
    const view = {
      async refresh() {
        const page = await get(withQuery('/v1/stats/endpoints', { limit: 200, cursor }));
        fill(
          body,
          table(
            [
              ['Endpoint', (e) => [link(`#/endpoints/${encodeURIComponent(e.endpoint_id)}`, e.url, { 'data-testid': 'endpoint-link' }), h('div', { class: 'sub' }, shortId(e.endpoint_id), e.description ? ` · ${e.description}` : '')]],
              ['State', (e) => healthBadges(e)],
              ['Success, 1 h', (e) => [pct(e.last_hour.success_rate), h('div', { class: 'sub' }, `${num(e.last_hour.attempts)} attempt${e.last_hour.attempts === 1 ? '' : 's'}`)], 'num'],
              ['p50 / p99', (e) => `${ms(e.last_hour.latency_ms.p50)} / ${ms(e.last_hour.latency_ms.p99)}`, 'num'],
              ['In flight', (e) => inFlight(e, ctx.where), 'num'],
              ['Queued', (e) => num(e.queue_depth), 'num'],
              ['Dead', (e) => deadLink(e.endpoint_id, e.dead), 'num'],
              ['Last error', (e) => lastError(e.last_error)],
              ['', (e) => toggle(e, () => ctx.refresh()), 'act'],
            ],
            page.data,
            { empty: 'No endpoints yet: register one with POST /v1/endpoints.', testid: 'endpoints', rowClass: (e) => (e.disabled ? 'row-off' : '') },
          ),
        );
        fill(
          more,
          cursor ? button('First page', async () => { cursor = ''; await ctx.refresh(); }) : null,
          page.next_cursor ? button('Next page', async () => { cursor = page.next_cursor; await ctx.refresh(); }) : null,
        );
      },
    };
    return view;
  },
};

function windowsTable(windows) {
  const rows = ['5m', '1h', '24h'].map((name) => ({ name, ...windows[name] }));
  return table(
    [
      ['Window', (w) => w.name],
      ['Attempts', (w) => num(w.attempts), 'num'],
      ['Success', (w) => pct(w.success_rate), 'num'],
      ['4xx', (w) => num(w.failures.client_4xx), 'num'],
      ['5xx', (w) => num(w.failures.server_5xx), 'num'],
      ['Timeout', (w) => num(w.failures.timeout), 'num'],
      ['Connect', (w) => num(w.failures.connect), 'num'],
      ['p50', (w) => ms(w.latency_ms.p50), 'num'],
      ['p90', (w) => ms(w.latency_ms.p90), 'num'],
      ['p99', (w) => ms(w.latency_ms.p99), 'num'],
    ],
    rows,
  );
}

export const endpointDetail = {
  mount(root, route, ctx) {
    const id = route.id;
    const top = h('div');
    const body = h('div');
    const result = h('div');
    fill(root, top, result, body);
    const replayDead = async () => {
      const answer = await post(`/v1/endpoints/${seg(id)}/replay`, { state: 'dead' });
      const rest = answer.next_cursor ? ' More remain: replay again to go on.' : '';
      fill(result, note('ok', `Replayed ${num(answer.replayed)} dead deliveries.${rest}`));
      await ctx.refresh();
    };
    return {
      async refresh() {
        const [e, stats] = await Promise.all([get(`/v1/endpoints/${seg(id)}`), get(`/v1/endpoints/${seg(id)}/stats`)]);
        const health = { ...stats, endpoint_id: id, url: e.url, disabled: e.disabled, disabled_reason: e.disabled_reason, breaker: e.breaker };
        fill(
          top,
          heading(
            e.url,
            e.description || id,
            link(`#/deliveries?endpoint_id=${encodeURIComponent(id)}`, 'Deliveries', { class: 'btn' }),
            link(`#/deliveries?state=dead&endpoint_id=${encodeURIComponent(id)}`, `Dead letters (${num(stats.dead)})`, { class: 'btn' }),
            stats.dead
              ? button('Replay dead letters', replayDead, { testid: 'replay-dead', confirmText: `Send ${stats.dead} dead deliveries to ${e.url} again?` })
              : null,
            toggle(health, () => ctx.refresh()),
          ),
        );
        const policy = e.retry;
        fill(
          body,
          h(
            'div',
            { class: 'cols' },
            h('section', null, h('h2', null, 'Health'), facts([
              ['State', healthBadges(health)],
              ['Failing since', when(e.failing_since)],
              ['Breaker open until', when(e.breaker.open_until)],
              ['Queued', num(stats.queue_depth)],
              ['In flight', inFlight(health, ctx.where)],
              ['Dead letters', deadLink(id, stats.dead)],
              ['Sent by', stats.sender_node_id === null ? '—' : `node ${stats.sender_node_id}`],
            ])),
            h('section', null, h('h2', null, 'Settings'), facts([
              ['Id', h('code', null, id)],
              ['Event types', e.event_types ? e.event_types.join(', ') : 'every type'],
              ['Sources', e.sources.length ? e.sources.join(', ') : 'producers'],
              ['Max in flight', num(e.max_in_flight)],
              ['Rate limit', e.rate_limit_per_s ? `${num(e.rate_limit_per_s)}/s` : 'none'],
              ['Timeout', ms(e.timeout_ms)],
              ['Retries', `${policy.attempts_max} attempts, ${ms(policy.base_ms)} base, ${ms(policy.cap_ms)} cap, ${num(policy.max_age_s)} s max age`],
              ['Ordering', e.ordering === 'per_key' ? `per key (on dead: ${e.on_dead})` : 'none'],
              ['Auto-disable after', e.disable_after_s ? `${num(e.disable_after_s)} s failing` : 'never'],
            ])),
          ),
          h('h2', null, 'Attempts'),
          windowsTable(stats.windows),
          h('h2', null, 'Last failed attempt'),
          stats.last_error
            ? h('div', { class: 'card' }, facts([
                ['When', when(stats.last_error.at)],
                ['Answer', statusBadge(stats.last_error.status_code, stats.last_error.error)],
                ['Latency', ms(stats.last_error.latency_ms)],
                ['Node', `node ${stats.last_error.node_id}`],
                ['Delivery', link(`#/deliveries/${encodeURIComponent(stats.last_error.delivery_id)}`, stats.last_error.delivery_id)],
              ]), stats.last_error.response_body ? h('pre', { class: 'excerpt' }, stats.last_error.response_body) : null)
            : h('p', { class: 'empty' }, 'No failed attempt counted by this node.'),
        );
      },
    };
  },
};
