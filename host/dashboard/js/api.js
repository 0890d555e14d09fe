// The JSON API, called with the session cookie. Project-scoped endpoints take the current project in
// X-Project-Id; errors arrive as the API's envelope and are thrown as ApiError.

let currentProject = null;

// How many requests are in flight, kept on <html data-pending> so that a page can be seen to have
// settled (the dashboard bench waits for 0).
let inFlight = 0;
function pending(delta) {
  inFlight += delta;
  document.documentElement.dataset.pending = String(inFlight);
}

export function setProject(id) { currentProject = id; }
export function project() { return currentProject; }

export class ApiError extends Error {
  constructor(status, body) {
    const e = body && typeof body.error === 'object' ? body.error : null;
    super(e?.message || (typeof body?.error === 'string' ? body.error : `Request failed (${status})`));
    this.status = status;
    this.code = e?.code || '';
    this.fields = e?.errors || [];
    this.details = e?.details || null;
  }
}

/** One request: `body` is JSON, or FormData for a file. Resolves the parsed body (null when empty). */
export async function api(method, path, body, { scoped = true } = {}) {
  const headers = { Accept: 'application/json' };
  if (scoped && currentProject) headers['X-Project-Id'] = currentProject;
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  pending(1);
  let res;
  let text;
  try {
    res = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
    text = await res.text();
  } finally {
    pending(-1);
  }
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!res.ok) {
    const err = new ApiError(res.status, json);
    if (res.status === 401 && !path.startsWith('/auth/')) window.dispatchEvent(new CustomEvent('herald:logged-out'));
    throw err;
  }
  return json;
}

export const get = (path, opts) => api('GET', path, undefined, opts);
export const post = (path, body, opts) => api('POST', path, body, opts);
export const patch = (path, body, opts) => api('PATCH', path, body, opts);
export const put = (path, body, opts) => api('PUT', path, body, opts);
export const del = (path, opts) => api('DELETE', path, undefined, opts);

/** Builds a query string, leaving out empty values. */
export function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** Lists from the API come bare, or as `{data: [...]}`. */
export function rows(r) {
  if (Array.isArray(r)) return r;
  if (r && Array.isArray(r.data)) return r.data;
  return [];
}
