// The dashboard's frame: routes a path to its view, draws the side bar (project switcher, navigation,
// the live activity badge, log out) and keeps links inside the page. Each view is an async function
// of a context: `main` to fill, the route's params and query, the user and projects, and `every` for
// timers that stop when the person navigates away.

import { h, fill, toast } from './dom.js';
import * as api from './api.js';
import * as account from './views/account.js';
import * as projectViews from './views/project.js';
import * as domains from './views/domains.js';
import * as delivery from './views/delivery.js';
import * as contacts from './views/contacts.js';
import * as templates from './views/templates.js';
import * as segments from './views/segments.js';
import * as campaigns from './views/campaigns.js';
import * as workflows from './views/workflows.js';
import * as activity from './views/activity.js';
import * as settings from './views/settings.js';

const PUBLIC = [
  ['/account/login', account.login],
  ['/account/signup', account.signup],
  ['/account/forgot-password', account.forgot],
  ['/account/verify-email', account.verifyEmail],
  ['/account/reset-password', account.resetPassword],
];

// [path pattern, view, navigation entry it belongs to]
const APP = [
  ['/account/accept-invitation', account.acceptInvitation, null],
  ['/app', projectViews.overview, 'overview'],
  ['/app/new-project', projectViews.create, null],
  ['/app/keys', projectViews.keys, 'keys'],
  ['/app/domains', domains.list, 'domains'],
  ['/app/delivery', delivery.status, 'delivery'],
  ['/app/suppressions', delivery.suppressions, 'suppressions'],
  ['/app/webhooks', delivery.webhooks, 'webhooks'],
  ['/app/contacts', contacts.list, 'contacts'],
  ['/app/contacts/import', contacts.importer, 'contacts'],
  ['/app/contacts/:id', contacts.detail, 'contacts'],
  ['/app/templates', templates.list, 'templates'],
  ['/app/templates/new', templates.editor, 'templates'],
  ['/app/templates/:id', templates.editor, 'templates'],
  ['/app/segments', segments.list, 'segments'],
  ['/app/segments/new', segments.editor, 'segments'],
  ['/app/segments/:id', segments.editor, 'segments'],
  ['/app/campaigns', campaigns.list, 'campaigns'],
  ['/app/campaigns/new', campaigns.editor, 'campaigns'],
  ['/app/campaigns/:id', campaigns.editor, 'campaigns'],
  ['/app/workflows', workflows.list, 'workflows'],
  ['/app/workflows/:id', workflows.editor, 'workflows'],
  ['/app/events', activity.events, 'events'],
  ['/app/activity', activity.feed, 'activity'],
  ['/app/analytics', activity.analytics, 'analytics'],
  ['/app/plugins', activity.plugins, 'plugins'],
  ['/app/settings', settings.page, 'settings'],
];

const NAV = [
  ['overview', '/app', 'Overview'],
  ['contacts', '/app/contacts', 'Contacts'],
  ['templates', '/app/templates', 'Templates'],
  ['segments', '/app/segments', 'Segments'],
  ['campaigns', '/app/campaigns', 'Campaigns'],
  ['workflows', '/app/workflows', 'Workflows'],
  ['domains', '/app/domains', 'Domains'],
  ['delivery', '/app/delivery', 'Delivery'],
  ['suppressions', '/app/suppressions', 'Suppressions'],
  ['webhooks', '/app/webhooks', 'Webhooks'],
  ['events', '/app/events', 'Events'],
  ['activity', '/app/activity', 'Activity'],
  ['analytics', '/app/analytics', 'Analytics'],
  ['plugins', '/app/plugins', 'Plugins'],
  ['keys', '/app/keys', 'API keys'],
  ['settings', '/app/settings', 'Settings'],
];

const PROJECT_KEY = 'herald.project';
let timers = [];
let session = null; // {user, projects}
let renderSeq = 0;

function match(pattern, path) {
  const a = pattern.split('/');
  const b = path.split('/');
  if (a.length !== b.length) return null;
  const params = {};
  for (let i = 0; i < a.length; i += 1) {
    if (a[i].startsWith(':')) params[a[i].slice(1)] = decodeURIComponent(b[i]);
    else if (a[i] !== b[i]) return null;
  }
  return params;
}

function find(table, path) {
  // Literal paths win over patterns (`/app/contacts/import` over `/app/contacts/:id`).
  const exact = table.find(([p]) => p === path);
  if (exact) return [exact, {}];
  for (const row of table) {
    const params = match(row[0], path);
    if (params) return [row, params];
  }
  return [null, null];
}

export function navigate(to, { replace = false } = {}) {
  if (replace) history.replaceState(null, '', to);
  else history.pushState(null, '', to);
  render();
}

function every(ms, fn) {
  const id = setInterval(fn, ms);
  timers.push(id);
  return id;
}

async function loadSession(force = false) {
  if (session && !force) return session;
  try {
    const user = await api.get('/users/@me', { scoped: false });
    const projects = api.rows(await api.get('/users/@me/projects', { scoped: false }));
    session = { user, projects };
  } catch (e) {
    if (e.status === 401) session = null;
    else throw e;
  }
  return session;
}

/** The project shown: the one chosen before when it is still one of the user's, else the first. */
function currentProject(projects) {
  const wanted = new URLSearchParams(location.search).get('project') || localStorage.getItem(PROJECT_KEY);
  const p = projects.find((x) => x.id === wanted) || projects[0] || null;
  if (p) localStorage.setItem(PROJECT_KEY, p.id);
  api.setProject(p ? p.id : null);
  return p;
}

export function chooseProject(id) {
  localStorage.setItem(PROJECT_KEY, id);
  api.setProject(id);
}

function sidebar(s, proj, active) {
  const badge = h('span.count', { id: 'activity-count', 'aria-label': 'new activity in the last hour' });
  const select = h('select', { 'aria-label': 'Project', id: 'project-switcher' },
    s.projects.map((p) => h('option', { value: p.id, selected: proj && p.id === proj.id }, p.name)),
    h('option', { value: '__new' }, '+ New project'));
  select.addEventListener('change', () => {
    if (select.value === '__new') { navigate('/app/new-project'); return; }
    chooseProject(select.value);
    navigate('/app');
  });
  const side = h('aside.side');
  const toggle = h('button.menu-toggle.small', { type: 'button', 'aria-expanded': 'false' }, 'Menu');
  toggle.addEventListener('click', () => {
    const open = side.classList.toggle('open');
    toggle.setAttribute('aria-expanded', String(open));
  });
  const logout = h('button.link', { type: 'button' }, 'Log out');
  logout.addEventListener('click', async () => {
    try { await api.post('/auth/logout', {}, { scoped: false }); } catch { /* the cookie is gone either way */ }
    session = null;
    navigate('/account/login');
  });
  fill(side,
    h('div.row.spread', h('a.brand', { href: '/app' }, h('img', { src: '/assets/favicon.svg', alt: '' }), 'Herald'), toggle),
    s.projects.length ? select : null,
    proj ? h('nav', { 'aria-label': 'Project' }, NAV.map(([key, href, label]) => h('a', {
      href, 'aria-current': key === active ? 'page' : null,
    }, label, key === 'activity' ? badge : null))) : null,
    h('div.foot', h('div.muted', s.user.email), logout));
  return side;
}

async function pollBadge() {
  const el = document.getElementById('activity-count');
  if (!el || !api.project()) return;
  try {
    const r = await api.get('/activity/recent-count');
    el.textContent = r.count > 0 ? `${r.count}${r.capped ? '+' : ''}` : '';
  } catch { /* shown again at the next tick */ }
}

async function render() {
  const seq = ++renderSeq;
  for (const t of timers) clearInterval(t);
  timers = [];
  const root = document.getElementById('app');
  const path = location.pathname.replace(/\/+$/, '') || '/';
  const query = new URLSearchParams(location.search);
  const base = { query, navigate, every, reload: () => render() };

  let [row, params] = find(PUBLIC, path);
  if (row) {
    document.body.className = 'public';
    const main = h('main.card.narrow', { id: 'main', tabindex: '-1' });
    fill(root, main);
    await row[1]({ ...base, main, params, refreshSession: () => loadSession(true) });
    return;
  }
  let s;
  try {
    s = await loadSession();
  } catch (e) {
    fill(root, h('main.card.narrow', { id: 'main' }, h('h1', 'Herald is not answering'), h('p', e.message)));
    return;
  }
  if (seq !== renderSeq) return;
  if (!s) {
    const next = path === '/' ? '' : `?next=${encodeURIComponent(path + location.search)}`;
    navigate(`/account/login${next}`, { replace: true });
    return;
  }
  if (path === '/') { navigate('/app', { replace: true }); return; }
  [row, params] = find(APP, path);
  const proj = currentProject(s.projects);
  if (row && !proj && row[2]) { navigate('/app/new-project', { replace: true }); return; }
  document.body.className = '';
  const main = h('main.content', { id: 'main', tabindex: '-1' });
  fill(root, h('div.frame', sidebar(s, proj, row ? row[2] : null), main));
  if (!row) {
    fill(main, h('h1', 'Page not found'), h('p', h('a', { href: '/app' }, 'Back to the overview')));
    return;
  }
  document.title = `${NAV.find(([k]) => k === row[2])?.[2] || 'Herald'} · Herald`;
  pollBadge();
  every(15000, pollBadge);
  try {
    await row[1]({
      ...base, main, params, user: s.user, projects: s.projects, project: proj,
      refreshSession: () => loadSession(true),
    });
  } catch (e) {
    if (seq !== renderSeq) return;
    fill(main, h('h1', 'Something went wrong'), h('p.notice.bad', e.message));
  }
  if (seq === renderSeq) main.focus({ preventScroll: true });
}

// Links to dashboard pages stay in the page; everything else is an ordinary link.
document.addEventListener('click', (e) => {
  const a = e.target.closest('a[href]');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !/^\/(app|account)(\/|$)/.test(url.pathname)) return;
  // A link to a place on this page (the skip link) is the browser's to follow.
  if (url.hash && url.pathname === location.pathname && url.search === location.search) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener('popstate', render);
window.addEventListener('herald:logged-out', () => {
  session = null;
  if (!location.pathname.startsWith('/account/')) {
    toast('Your session ended: log in again.', 'bad');
    navigate(`/account/login?next=${encodeURIComponent(location.pathname)}`, { replace: true });
  }
});
window.addEventListener('herald:session-changed', () => { session = null; });

render();
