// The dashboard's shell: sign-in, the hash router (`#/deliveries?state=dead`),
// and one refresh loop for the page on screen. Pages poll this node's API,
// so they follow a leader change or a shard move without a reload.

import { ApiError, get, onUnauthorized, session } from './api.js';
import { fill, h, tick } from './dom.js';
import overview from './page-overview.js';
import { endpointList, endpointDetail } from './page-endpoints.js';
import deliveries from './page-deliveries.js';
import delivery from './page-delivery.js';
import event from './page-event.js';
import cluster from './page-cluster.js';

const REFRESH_MS = 2000;
const WHERE_MS = 3000;

const el = (id) => document.getElementById(id);
const main = el('main');

const routes = [
  [/^\/?$/, 'overview', overview],
  [/^\/endpoints$/, 'endpoints', endpointList],
  [/^\/endpoints\/([^/]+)$/, 'endpoints', endpointDetail],
  [/^\/deliveries$/, 'deliveries', deliveries],
  [/^\/deliveries\/([^/]+)$/, 'deliveries', delivery],
  [/^\/events\/([^/]+)$/, 'deliveries', event],
  [/^\/cluster$/, 'cluster', cluster],
];

const notFound = {
  mount: (root) => {
    fill(root, h('h1', null, 'No such page'), h('p', null, h('a', { href: '#/' }, 'Back to the overview')));
    return { refresh: async () => {} };
  },
};

function decoded(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

// `#/deliveries?state=dead` → the page, its nav entry, its id and parameters.
function route() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query = ''] = hash.split('?', 2);
  const params = new URLSearchParams(query);
  for (const [pattern, nav, page] of routes) {
    const match = pattern.exec(path);
    if (!match) continue;
    const dead = nav === 'deliveries' && path === '/deliveries' && params.get('state') === 'dead';
    return { page, nav: dead ? 'dead' : nav, id: match[1] && decoded(match[1]), params };
  }
  return { page: notFound, nav: '', params };
}

// The node this page talks to, as the last answer of `GET /v1/cluster` said.
const where = { node: null, leader: null, term: null };

function banner(text) {
  const b = el('banner');
  b.hidden = !text;
  b.textContent = text || '';
}

let generation = 0;
let current = null;

const ctx = {
  where,
  go: (hash) => {
    if (location.hash === hash) show();
    else location.hash = hash;
  },
  // Refreshes the page on screen now (after an action).
  refresh: () => current && current.run(),
};

function show() {
  if (!session.signedIn()) return signIn();
  const gen = ++generation;
  const r = route();
  for (const a of el('nav').querySelectorAll('a')) a.classList.toggle('active', a.dataset.page === r.nav);
  const root = h('div', { class: 'page' });
  fill(main, root);
  const view = r.page.mount(root, r, ctx);
  let running = null;
  // One refresh at a time; a call during one waits for it and then reads
  // afresh, so an action's result is never hidden by an older answer.
  const run = async () => {
    while (running) await running;
    running = (async () => {
      try {
        await view.refresh();
        banner('');
      } catch (error) {
        if (!(error instanceof ApiError) || error.status !== 401) banner(`Could not refresh: ${error.message}. Retrying.`);
      } finally {
        tick(root);
        running = null;
      }
    })();
    return running;
  };
  current = { run };
  const loop = async () => {
    if (gen !== generation) return;
    if (!document.hidden) await run();
    if (gen === generation) setTimeout(loop, view.every || REFRESH_MS);
  };
  loop();
}

async function updateWhere() {
  if (session.signedIn() && !document.hidden) {
    try {
      const c = await get('/v1/cluster');
      Object.assign(where, { node: c.node_id, leader: c.leader_id, term: c.term });
      const leader = c.leader_id === null ? 'no leader' : c.leader_id === c.node_id ? 'this node leads' : `leader node ${c.leader_id}`;
      fill(el('where'), h('strong', null, `node ${c.node_id}`), ` · ${leader} · term ${c.term}`);
    } catch (error) {
      if (error.status !== 401) fill(el('where'), h('span', { class: 'badge s-dead' }, 'node not answering'));
    }
  }
}

async function whereLoop() {
  await updateWhere();
  setTimeout(whereLoop, WHERE_MS);
}

function signIn(message) {
  generation++;
  current = null;
  el('top').hidden = true;
  main.hidden = true;
  banner('');
  el('login').hidden = false;
  const error = el('login-error');
  error.hidden = !message;
  error.textContent = message || '';
  el('token').focus();
}

function signedIn() {
  el('login').hidden = true;
  el('top').hidden = false;
  main.hidden = false;
  show();
  updateWhere();
}

el('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const token = el('token');
  const admin = el('admin-token');
  session.save(token.value.trim(), admin.value.trim());
  token.value = '';
  admin.value = '';
  try {
    await get('/v1/cluster');
    signedIn();
  } catch (error) {
    if (error.status !== 401) {
      session.clear();
      signIn(`Could not reach the API: ${error.message}`);
    }
  }
});

el('sign-out').addEventListener('click', () => {
  session.clear();
  signIn();
});

onUnauthorized((admin) => {
  session.clear();
  signIn(
    admin
      ? 'The node refused the admin token for that change. Sign in with the admin token (under "Separate admin token").'
      : 'The node refused the token. Sign in again.',
  );
});

window.addEventListener('hashchange', () => session.signedIn() && show());
document.addEventListener('visibilitychange', () => !document.hidden && ctx.refresh());

if (session.signedIn()) signedIn();
else signIn();
setTimeout(whereLoop, WHERE_MS);
