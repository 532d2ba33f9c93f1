// Calls this node's public /v1 API with the operator's token. The token
// lives in the tab's session storage only: it goes in the Authorization
// header, never in a URL, and is gone when the tab closes.

const TOKEN = 'hookraft.token';
const ADMIN_TOKEN = 'hookraft.admin-token';

export const session = {
  signedIn: () => sessionStorage.getItem(TOKEN) !== null,
  save(token, adminToken) {
    sessionStorage.setItem(TOKEN, token);
    if (adminToken) sessionStorage.setItem(ADMIN_TOKEN, adminToken);
    else sessionStorage.removeItem(ADMIN_TOKEN);
  },
  clear() {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(ADMIN_TOKEN);
  },
  token: (admin) => (admin && sessionStorage.getItem(ADMIN_TOKEN)) || sessionStorage.getItem(TOKEN) || '',
};

// A failed call: the HTTP status (0 when the node did not answer) and the
// problem document's title and detail.
export class ApiError extends Error {
  constructor(status, problem) {
    const title = (problem && problem.title) || (status ? `HTTP ${status}` : 'No answer');
    const detail = problem && typeof problem === 'object' ? problem.detail : problem;
    super(detail ? `${title}: ${detail}` : title);
    this.status = status;
    this.problem = problem;
  }
}

let unauthorized = () => {};

// What to do when the node refuses the token: the app signs out.
export function onUnauthorized(handler) {
  unauthorized = handler;
}

// One call. `admin` sends the admin token when one was given (changes
// under /v1/cluster/ need it on a node started with --admin-token).
export async function call(method, path, body, { admin = false, signal } = {}) {
  const headers = { accept: 'application/json' };
  const token = session.token(admin);
  if (token) headers.authorization = `Bearer ${token}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error', signal };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (error.name === 'AbortError') throw error;
    throw new ApiError(0, { title: 'The node did not answer', detail: error.message });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (response.status === 401) {
    unauthorized(admin);
    throw new ApiError(401, data);
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const get = (path, options) => call('GET', path, undefined, options);
export const post = (path, body, options) => call('POST', path, body, options);
export const patch = (path, body) => call('PATCH', path, body);
export const del = (path, options) => call('DELETE', path, undefined, options);

// `path?a=1&b=2` from the given parameters, leaving out empty ones.
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(name, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

// A path segment from an id the API gave: encoded, so no id can change the route.
export const seg = (id) => encodeURIComponent(String(id));
