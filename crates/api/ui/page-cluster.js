// The cluster: leader and term, each node's liveness and shards, and the
// shard map with owners and fencing tokens; move a shard, drain a node.
// Changes need the admin token when the node has a separate one.

import { del, get, post, seg } from './api.js';
import { badge, button, fill, h, heading, note, num, table, when } from './dom.js';

const PALETTE = 6;

// Each owner keeps one colour: nodes by id, in turn.
const ownerClass = (owner) => (owner === null ? 'o-none' : `o-${owner % PALETTE}`);

function shardCell(s, chosen) {
  const moving = s.owner === null && s.next_owner !== null && s.next_owner !== undefined;
  return h(
    'button',
    {
      type: 'button',
      class: `shard ${ownerClass(s.owner)}${chosen ? ' chosen' : ''}`,
      'data-shard': s.shard,
      'data-owner': s.owner === null ? '' : s.owner,
      title: `shard ${s.shard}: ${s.owner === null ? 'no owner' : `node ${s.owner}`}, token ${s.token}${moving ? `, moving to node ${s.next_owner}` : ''}`,
    },
    h('span', { class: 'shard-no' }, s.shard),
    h('span', { class: 'shard-owner' }, s.owner === null ? (moving ? `→${s.next_owner}` : '—') : `n${s.owner}`),
    h('span', { class: 'shard-token' }, `t${s.token}`),
  );
}

export default {
  mount(root, route, ctx) {
    const summary = h('div');
    const nodes = h('div');
    const result = h('div');
    const map = h('div');
    const mover = h('form', { class: 'filters', method: 'post', 'data-testid': 'move-form' });
    const shardInput = h('select', { name: 'shard', id: 'move-shard' });
    const nodeInput = h('select', { name: 'node', id: 'move-node' });
    let chosen = null;
    fill(mover, h('label', null, 'Shard', shardInput), h('label', null, 'to node', nodeInput), h('button', { type: 'submit', class: 'primary', 'data-testid': 'move' }, 'Move shard'));
    mover.addEventListener('submit', async (e) => {
      e.preventDefault();
      const shard = shardInput.value;
      const target = Number(nodeInput.value);
      try {
        const answer = await post(`/v1/cluster/shards/${seg(shard)}/move`, { node_id: target }, { admin: true });
        fill(result, note('ok', `Shard ${answer.shard} revoked under token ${answer.token}; node ${answer.owner} gets it once the current owner's lease has lapsed.`));
      } catch (error) {
        fill(result, note('error', `Not moved: ${error.message}`));
      }
      await ctx.refresh();
    });
    fill(
      root,
      heading('Cluster', 'Every node answers for the whole cluster; changes are committed through the leader.'),
      summary,
      h('h2', null, 'Nodes'),
      nodes,
      h('h2', null, 'Shard map'),
      h('p', { class: 'muted' }, 'Each endpoint lives in one of the shards; the owner sends for it under the fencing token shown. Pick a shard to move it.'),
      mover,
      result,
      map,
    );
    const drain = (n, draining) => async () => {
      try {
        if (draining) await post(`/v1/cluster/nodes/${seg(n.id)}/drain`, undefined, { admin: true });
        else await del(`/v1/cluster/nodes/${seg(n.id)}/drain`, { admin: true });
        fill(result, note('ok', draining ? `Node ${n.id} is draining: its shards move to the others.` : `Node ${n.id} takes shards again.`));
      } catch (error) {
        fill(result, note('error', error.message));
      }
      await ctx.refresh();
    };
    return {
      async refresh() {
        const c = await get('/v1/cluster');
        fill(
          summary,
          h('div', { class: 'tiles' },
            h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Leader'), h('strong', { class: 'tile-value', 'data-testid': 'leader' }, c.leader_id === null ? 'none' : `node ${c.leader_id}`)),
            h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Term'), h('strong', { class: 'tile-value', 'data-testid': 'term' }, num(c.term))),
            h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'This page talks to'), h('strong', { class: 'tile-value' }, `node ${c.node_id}`)),
            h('div', { class: 'tile' }, h('span', { class: 'tile-label' }, 'Stale outcomes'), h('strong', { class: 'tile-value' }, num(c.outcomes_rejected_stale))),
          ),
        );
        fill(
          nodes,
          table(
            [
              ['Node', (n) => [h('strong', null, `node ${n.id}`), n.id === c.leader_id ? [' ', badge('leader', 'leader')] : null, n.id === c.node_id ? [' ', badge('info', 'this node')] : null]],
              ['Address', (n) => h('code', null, n.addr || '—')],
              ['Liveness', (n) => [n.live ? badge('delivered', 'live') : badge('dead', 'down'), n.draining ? [' ', badge('retrying', 'draining')] : null]],
              ['Role', (n) => (n.voter ? 'voter' : n.member ? 'learner' : 'not a member')],
              ['Shards', (n) => num(n.shards_owned), 'num'],
              ['Last heartbeat', (n) => when(n.last_heartbeat_at)],
              ['', (n) => (n.draining
                ? button('Undrain', drain(n, false))
                : button('Drain', drain(n, true), { kind: 'danger', confirmText: `Drain node ${n.id}? Every shard leaves it.` })), 'act'],
            ],
            c.nodes,
            { testid: 'nodes', rowClass: (n) => (n.live ? '' : 'row-off') },
          ),
        );
        for (const [i, row] of [...nodes.querySelectorAll('tbody tr')].entries()) row.dataset.node = c.nodes[i].id;
        const shardNow = shardInput.value || (chosen ?? '0');
        fill(shardInput, c.shards.map((s) => h('option', { value: s.shard, selected: String(s.shard) === String(shardNow) }, `${s.shard} (${s.owner === null ? 'no owner' : `node ${s.owner}`})`)));
        const nodeNow = nodeInput.value;
        const targets = c.nodes.filter((n) => n.voter && n.live && !n.draining);
        fill(nodeInput, targets.map((n) => h('option', { value: n.id, selected: String(n.id) === nodeNow }, `node ${n.id}`)));
        const grid = h('div', { class: 'shards', 'data-testid': 'shards' }, c.shards.map((s) => shardCell(s, String(s.shard) === shardInput.value)));
        grid.addEventListener('click', (e) => {
          const cell = e.target.closest('[data-shard]');
          if (!cell) return;
          chosen = cell.dataset.shard;
          shardInput.value = chosen;
          for (const other of grid.querySelectorAll('.chosen')) other.classList.remove('chosen');
          cell.classList.add('chosen');
        });
        const legend = h('div', { class: 'legend' }, c.nodes.map((n) => h('span', null, h('i', { class: `swatch ${ownerClass(n.id)}` }), `node ${n.id}: ${num(n.shards_owned)} shards`)));
        fill(map, legend, grid);
      },
    };
  },
};
