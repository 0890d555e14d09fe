// Events, the activity feed, analytics (charts drawn as SVG from `/analytics/timeseries`, top campaigns,
// top events) and the server's plugins.

import { h, fill, badge, table, when, num } from '../dom.js';
import * as api from '../api.js';

const enc = encodeURIComponent;
const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

const COLOURS = { sent: '#3b5bdb', delivered: '#2f9e44', opened: '#f08c00', clicked: '#ae3ec9', bounced: '#e03131', opens: '#f08c00', clicks: '#ae3ec9' };

/** A line chart of `series` (rows of {time, metric: count}) for `metrics`, with a legend and a table fallback. */
export function lineChart(series, metrics, title) {
  const W = 720; const H = 240; const P = 32;
  const max = Math.max(1, ...series.flatMap((r) => metrics.map((m) => r[m] || 0)));
  const x = (i) => P + (series.length <= 1 ? 0 : (i * (W - 2 * P)) / (series.length - 1));
  const y = (v) => H - P - ((v || 0) * (H - 2 * P)) / max;
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, class: 'chart', width: '100%' },
    svg('line', { x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: 'currentColor', 'stroke-opacity': 0.3 }),
    svg('text', { x: 2, y: P, 'font-size': 11, fill: 'currentColor' }, num(max)),
    svg('text', { x: 2, y: H - P, 'font-size': 11, fill: 'currentColor' }, '0'),
    ...metrics.map((m) => svg('polyline', {
      fill: 'none', stroke: COLOURS[m] || '#868e96', 'stroke-width': 2, 'data-metric': m,
      points: series.map((r, i) => `${x(i).toFixed(1)},${y(r[m]).toFixed(1)}`).join(' '),
    })),
    // Dots for short series, so one bucket (a campaign's first hour) still shows.
    ...(series.length <= 48 ? metrics.flatMap((m) => series.map((r, i) => svg('circle', {
      cx: x(i).toFixed(1), cy: y(r[m]).toFixed(1), r: 3.5, fill: COLOURS[m] || '#868e96',
    }))) : []));
  const totals = Object.fromEntries(metrics.map((m) => [m, series.reduce((n, r) => n + (r[m] || 0), 0)]));
  return h('figure.panel', h('figcaption', h('strong', title)),
    h('div.row', metrics.map((m) => h('span.badge', { style: `color:${COLOURS[m] || 'inherit'}`, 'data-total': m }, `${m}: ${num(totals[m])}`))),
    chart);
}

export async function events({ main, query, navigate }) {
  const name = query.get('name') || '';
  const [names, page] = await Promise.all([
    api.get('/events/names'),
    api.get(`/events${api.qs({ limit: 50, name, cursor: query.get('cursor') })}`),
  ]);
  const pick = h('select', { 'aria-label': 'Event name' }, h('option', { value: '' }, 'All events'),
    (names.names || []).map((n) => h('option', { value: n.name, selected: n.name === name }, `${n.name} (${num(n.count)})`)));
  pick.addEventListener("change", () => navigate(`/app/events${api.qs({ name: pick.value })}`));
  fill(main, h('div.head', h('h1', 'Events'), pick),
    table([
      ['When', (e) => when(e.createdAt)],
      ['Event', (e) => h('code', e.name)],
      ['Contact', (e) => h('a.wrap', { href: `/app/contacts/${enc(e.contactId)}` }, e.contactEmail ?? e.contactId)],
      ['Data', (e) => h('code.wrap', JSON.stringify(e.data || {}))],
    ], api.rows(page), 'No events yet: track one with POST /v1/track.'),
    page.hasMore ? h('div.pager', h('a.button.small', { href: `/app/events${api.qs({ name, cursor: page.cursor })}` }, 'Older')) : null);
}

function describe(a) {
  const who = a.contact ? (a.contact.email ?? 'a deleted contact') : null;
  const what = a.email?.subject ?? a.campaign?.name ?? a.workflow?.name ?? '';
  return [who ? h('span.wrap', who) : null, what ? [' · ', what] : null];
}

export async function feed(ctx) {
  const { main, every } = ctx;
  const list = h('div', { id: 'activity-list' });
  const load = async () => {
    const page = await api.get(`/activity${api.qs({ limit: 50 })}`);
    fill(list, table([
      ['When', (a) => when(a.occurredAt)],
      ['Type', (a) => badge(a.type)],
      ['About', describe],
      ['Detail', (a) => h('span.muted', a.data?.reason ?? a.data?.error ?? '')],
    ], api.rows(page), 'Nothing has happened yet.'));
  };
  fill(main, h('div.head', h('h1', 'Activity'), h('span.muted', 'Updates every 10 seconds')), list);
  await load();
  every(10000, () => load().catch(() => {}));
}

export async function analytics({ main, query }) {
  const days = Math.min(366, Math.max(1, Number(query.get('days')) || 30));
  const to = new Date();
  const from = new Date(to.getTime() - days * 86400000);
  const interval = days <= 2 ? 'hour' : 'day';
  const metrics = ['sent', 'delivered', 'opened', 'clicked', 'bounced'];
  const [series, top, evs] = await Promise.all([
    api.get(`/analytics/timeseries${api.qs({ metric: metrics.join(','), interval, from: from.toISOString(), to: to.toISOString() })}`),
    api.get('/analytics/top-campaigns?limit=10'),
    api.get(`/analytics/top-events?limit=10&days=${days}`),
  ]);
  const range = h('div.row', [1, 7, 30, 90].map((d) => h('a.button.small', { href: `/app/analytics?days=${d}`, 'aria-current': d === days ? 'true' : null }, d === 1 ? '24 h' : `${d} days`)));
  fill(main, h('div.head', h('h1', 'Analytics'), range),
    h('div', { id: 'analytics-chart' }, lineChart(series.series || [], metrics, `Email over the last ${days === 1 ? '24 hours' : `${days} days`}`)),
    h('section.panel', h('h2', 'Top campaigns'), table([
      ['Campaign', (c) => c.name],
      ['Sent', (c) => num(c.sent)],
      ['Open rate', (c) => `${(c.openRate || 0).toFixed(1)}%`],
      ['Click rate', (c) => `${(c.clickRate || 0).toFixed(1)}%`],
    ], top.campaigns || [], 'No campaign sent yet.')),
    h('section.panel', h('h2', 'Top events'), table([
      ['Event', (e) => h('code', e.name)],
      ['Count', (e) => num(e.count)],
    ], evs.events || [], 'No events in this window.')));
}

export async function plugins({ main }) {
  const r = await api.get('/plugins');
  fill(main, h('div.head', h('h1', 'Plugins'), h('span.muted', `Supported ABI: ${(r.supportedAbi || []).join(', ')}`)),
    table([
      ['Plugin', (p) => [h('strong', p.name), p.version ? ` ${p.version}` : '', p.description ? h('div.muted', p.description) : null]],
      ['Kind', (p) => p.kind ?? '—'],
      ['ABI', (p) => p.abiVersion ?? '—'],
      ['Provides', (p) => (p.provides || []).map((x) => h('code', `${x} `))],
      ['Status', (p) => badge(p.status)],
      ['Calls', (p) => `${num(p.calls)} (${num(p.failures)} failed)`],
      ['Last error', (p) => p.error ? h('span.error', p.error) : '—'],
    ], r.plugins || [], 'No plugins loaded. Drop a .wasm component into the plugins folder.'));
}
