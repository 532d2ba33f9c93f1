// The overview: the last hour in four numbers and four charts, what is
// queued and dead now, and the endpoints that need a look.

import { get } from './api.js';
import { barChart } from './chart.js';
import { badge, fill, h, heading, link, num, pct, table, when } from './dom.js';
import { healthBadges } from './page-endpoints.js';

const FLOWS = [
  ['Accepted', 'accepted', 'accepted'],
  ['Delivered', 'delivered', 'delivered'],
  ['Retried', 'retried', 'retrying'],
  ['Dead', 'dead', 'dead'],
];

function tile(label, value, kind, href) {
  const body = [h('span', { class: 'tile-label' }, label), h('strong', { class: 'tile-value' }, value)];
  return href ? h('a', { class: `tile t-${kind}`, href }, body) : h('div', { class: `tile t-${kind}` }, body);
}

// An endpoint needs a look when it is disabled, its breaker is not
// closed, it has dead letters, or it failed in the last hour.
const troubled = (e) =>
  e.disabled || e.breaker.state !== 'closed' || e.dead > 0 || (e.last_hour.success_rate !== null && e.last_hour.success_rate < 1);

export default {
  mount(root) {
    const tiles = h('div', { class: 'tiles' });
    const charts = h('div', { class: 'charts' });
    const attention = h('div');
    fill(
      root,
      heading('Overview', 'The last hour across the cluster, as this node applied it.'),
      tiles,
      h('h2', null, 'Per minute'),
      charts,
      h('h2', null, 'Endpoints that need a look'),
      attention,
    );
    return {
      async refresh() {
        const [stats, health] = await Promise.all([get('/v1/stats'), get('/v1/stats/endpoints?limit=1000')]);
        const hour = stats.last_hour;
        fill(
          tiles,
          FLOWS.map(([label, field, kind]) => tile(`${label}, 1 h`, num(hour[field]), kind)),
          tile('Queued now', num(stats.queue_depth), 'pending', '#/deliveries?state=pending'),
          tile('Dead letters held', num(stats.dead), 'dead', '#/deliveries?state=dead'),
        );
        fill(charts, FLOWS.map(([label, field, kind]) => barChart(`${label} per minute`, stats.minutes, field, kind)));
        const rows = health.data.filter(troubled);
        fill(
          attention,
          table(
            [
              ['Endpoint', (e) => [link(`#/endpoints/${encodeURIComponent(e.endpoint_id)}`, e.url), h('div', { class: 'sub' }, e.description || '')]],
              ['State', (e) => healthBadges(e)],
              ['Success, 1 h', (e) => `${pct(e.last_hour.success_rate)} of ${num(e.last_hour.attempts)}`, 'num'],
              ['Dead', (e) => (e.dead ? link(`#/deliveries?state=dead&endpoint_id=${encodeURIComponent(e.endpoint_id)}`, num(e.dead)) : '0'), 'num'],
              ['Last error', (e) => (e.last_error ? [badge('dead', e.last_error.status_code ?? e.last_error.error ?? 'error'), ' ', when(e.last_error.at)] : '—')],
            ],
            rows,
            { empty: `All ${num(health.data.length)} endpoints are healthy.`, testid: 'attention' },
          ),
        );
      },
    };
  },
};
