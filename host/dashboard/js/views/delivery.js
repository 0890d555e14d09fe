// What keeps a sender's reputation and tells other systems what happened: the state of delivery (the
// project's deferred emails, each transport up or down), the suppression list (add an address or a
// domain, filter by reason, remove) and outbound webhooks (endpoints with their signing secret shown
// once, enable and disable, rotate, a test delivery, the deliveries with a retry).

import { h, fill, field, badge, copyButton, confirmDialog, table, toast, when } from '../dom.js';
import * as api from '../api.js';
import { form } from './account.js';

const REASONS = ['manual', 'bounce', 'complaint'];

// Deferred mail waits for its next attempt or for its transport (docs/delivery.md); refreshed every 5 s.
export async function status(ctx) {
  const { main, every } = ctx;
  const box = h('div', { id: 'delivery-status' });
  const draw = (s) => fill(box,
    h('div.grid', h('div.stat', { 'data-stat': 'deferred' }, h('div.value', String(s.deferred)), h('div.label', 'Deferred emails'))),
    h('h2', 'Transports'),
    table([
      ['Transport', (t) => h('code', t.name)],
      ['State', (t) => badge(t.up ? 'UP' : 'DOWN')],
      ['Down since', (t) => (t.downSince ? when(t.downSince) : '')],
      ['Why', (t) => t.reason || ''],
    ], s.transports, 'No transport.'));
  draw(await api.get('/delivery/status'));
  fill(main, h('div.head', h('h1', 'Delivery')),
    h('p.muted', 'A deferred email is tried again on its schedule, or as soon as its transport is back; it fails only when its give-up window ends.'),
    box);
  every(5000, async () => { try { draw(await api.get('/delivery/status')); } catch { /* the next refresh tries again */ } });
}

export async function suppressions(ctx) {
  const { main } = ctx;
  const box = h('div', { id: 'suppression-list' });
  const filter = h('select', { 'aria-label': 'Reason' },
    h('option', { value: '' }, 'Every reason'), REASONS.map((r) => h('option', { value: r }, r)));
  let rows = [];
  let cursor = '';
  const more = h('button.small', { type: 'button' }, 'Load more');
  const draw = (total) => {
    const remove = (s) => {
      const b = h('button.small', { type: 'button' }, 'Remove');
      b.addEventListener('click', async () => {
        if (!await confirmDialog({ title: `Remove ${s.value}?`, body: 'Mail to it goes out again.', action: 'Remove', danger: true })) return;
        try { await api.del(`/suppressions/${encodeURIComponent(s.value)}`); toast(`${s.value} removed.`); await load(true); } catch (e) { toast(e.message, 'bad'); }
      });
      return b;
    };
    fill(box, h('p.muted', `${total} on the list`),
      table([
        ['Address or domain', (s) => h('code', s.value)],
        ['Type', (s) => s.type],
        ['Reason', (s) => badge(s.reason)],
        ['Detail', (s) => s.detail || ''],
        ['Added', (s) => when(s.createdAt)],
        ['', (s) => remove(s)],
      ], rows, 'Nobody is suppressed.'),
      cursor ? more : null);
  };
  const load = async (fresh) => {
    if (fresh) { rows = []; cursor = ''; }
    const r = await api.get(`/suppressions${api.qs({ limit: 50, cursor, reason: filter.value })}`);
    rows = rows.concat(r.data || []);
    cursor = r.hasMore ? r.cursor : '';
    if (fresh) box.dataset.total = r.total;
    draw(box.dataset.total);
  };
  more.addEventListener('click', () => load(false).catch((e) => toast(e.message, 'bad')));
  filter.addEventListener('change', () => load(true).catch((e) => toast(e.message, 'bad')));
  const value = h('input', { name: 'value', type: 'text', placeholder: 'someone@example.com or example.com', required: true });
  const reason = h('select', { name: 'reason' }, REASONS.map((r) => h('option', { value: r }, r)));
  fill(main, h('div.head', h('h1', 'Suppressions')),
    h('p.muted', 'No email of this project goes to these addresses and domains. Hard bounces and complaints add to the list.'),
    h('section.panel', h('h2', 'Suppress an address or a domain'),
      form([field('Address or domain', value), field('Reason', reason),
        field('Note', h('input', { name: 'detail', type: 'text', maxlength: 500 }))],
      'Suppress', async (v) => {
        const target = v.value.trim();
        const body = target.includes('@') ? { email: target } : { domain: target };
        await api.post('/suppressions', { ...body, reason: v.reason, detail: v.detail || undefined });
        toast(`${target} suppressed.`);
        value.value = '';
        await load(true);
      })),
    h('section.panel', h('div.head', h('h2', 'The list'), filter), box));
  await load(true);
}

/** The secret of an endpoint, shown once, with a copy button. */
function secretNotice(secret) {
  return h('div.notice', { id: 'webhook-secret' }, h('p', 'The signing secret, shown only now:'),
    h('span.row', h('code.wrap', secret), copyButton(secret)));
}

function deliveries(w, list) {
  const retry = (d) => {
    if (d.status === 'PENDING') return '';
    const b = h('button.small', { type: 'button' }, 'Retry');
    b.addEventListener('click', async () => {
      try { await api.post(`/webhooks/${w.id}/deliveries/${d.id}/retry`, {}); toast('Retry queued.'); } catch (e) { toast(e.message, 'bad'); }
    });
    return b;
  };
  const last = (d) => d.attempts[d.attempts.length - 1];
  return table([
    ['Event', (d) => h('code', d.eventType)],
    ['Status', (d) => badge(d.status)],
    ['Attempts', (d) => String(d.attempts.length)],
    ['Last answer', (d) => (last(d) ? (last(d).statusCode ? `HTTP ${last(d).statusCode}` : last(d).error || '') : '')],
    ['Next attempt', (d) => (d.nextAttemptAt ? when(d.nextAttemptAt) : '')],
    ['', (d) => retry(d)],
  ], list, 'No deliveries yet.');
}

function endpointPanel(w, reload, showSecret) {
  const panel = h('section.panel', { 'data-webhook': w.url });
  const act = (label, fn) => {
    const b = h('button.small', { type: 'button' }, label);
    b.addEventListener('click', async () => { b.disabled = true; try { await fn(); } catch (e) { toast(e.message, 'bad'); } b.disabled = false; });
    return b;
  };
  const toggle = act(w.enabled ? 'Disable' : 'Enable', async () => {
    await api.patch(`/webhooks/${w.id}`, { enabled: !w.enabled });
    await reload();
  });
  const test = act('Send test', async () => {
    const d = await api.post(`/webhooks/${w.id}/test`, {});
    const a = d.attempts[0] || {};
    toast(d.status === 'SUCCEEDED' ? `Test delivered (HTTP ${a.statusCode}).` : `Test failed: ${a.error || `HTTP ${a.statusCode}`}`, d.status === 'SUCCEEDED' ? 'ok' : 'bad');
    await reload();
  });
  const rotate = act('Rotate secret', async () => {
    if (!await confirmDialog({ title: 'Rotate the signing secret?', body: 'The current secret stops signing at once.', action: 'Rotate', danger: true })) return;
    const r = await api.post(`/webhooks/${w.id}/rotate-secret`, {});
    showSecret(r.secret);
  });
  const remove = act('Delete', async () => {
    if (!await confirmDialog({ title: `Delete the endpoint ${w.url}?`, body: 'Its deliveries are deleted with it.', action: 'Delete', danger: true })) return;
    await api.del(`/webhooks/${w.id}`);
    await reload();
  });
  const list = h('div');
  fill(panel,
    h('div.head', h('h2', h('code.wrap', w.url), ' ', badge(w.enabled ? 'ENABLED' : 'DISABLED')),
      h('div.row', test, toggle, rotate, remove)),
    h('p.muted', 'Events: ', w.events.join(', '), w.description ? ` · ${w.description}` : ''),
    w.disabledReason ? h('p.form-error', w.disabledReason) : null,
    h('h3', 'Deliveries'), list);
  api.get(`/webhooks/${w.id}/deliveries${api.qs({ limit: 20 })}`)
    .then((r) => fill(list, deliveries(w, r.data || [])))
    .catch((e) => fill(list, h('p.form-error', e.message)));
  return panel;
}

export async function webhooks(ctx) {
  const { main } = ctx;
  const box = h('div', { id: 'webhook-list' });
  const secretBox = h('div');
  const showSecret = (s) => fill(secretBox, secretNotice(s));
  const reload = async () => {
    const r = await api.get('/webhooks');
    const all = r.data || [];
    fill(box, all.length ? all.map((w) => endpointPanel(w, reload, showSecret)) : h('p.empty', 'No endpoint yet.'));
  };
  const url = h('input', { name: 'url', type: 'url', placeholder: 'https://example.com/herald', required: true });
  const events = h('input', { name: 'events', type: 'text', value: 'email.*', required: true });
  fill(main, h('div.head', h('h1', 'Webhooks')),
    h('p.muted', 'Herald posts each event an endpoint wants, signed the Standard Webhooks way, and retries for a day.'),
    h('section.panel', h('h2', 'Add an endpoint'),
      form([field('URL', url),
        field('Events', events, 'Names or prefixes, comma separated: email.*, contact.unsubscribed, signup, or * for all'),
        field('Description', h('input', { name: 'description', type: 'text', maxlength: 500 }))],
      'Add endpoint', async (v) => {
        const list = v.events.split(',').map((s) => s.trim()).filter(Boolean);
        const r = await api.post('/webhooks', { url: v.url.trim(), events: list, description: v.description || undefined });
        showSecret(r.secret);
        url.value = '';
        await reload();
      })),
    secretBox, box);
  await reload();
}
