// Campaigns: the list; the editor (content, or a template to start from; the audience: everyone, a
// segment, or a condition built here, with the live recipient count); a test send; send now or at a
// time behind a confirmation that names the count; cancel; and the stats, which follow a sending
// campaign with a progress bar.

import { h, fill, field, badge, confirmDialog, table, toast, when, num, progress, showError } from '../dom.js';
import * as api from '../api.js';
import { conditionBuilder, liveCount, loadVocabulary, emptyTree } from '../conditions.js';
import { lineChart } from './activity.js';

const enc = encodeURIComponent;
const EDITABLE = new Set(['DRAFT', 'SCHEDULED']);

export async function list({ main, query }) {
  const page = Number(query.get('page')) || 1;
  const r = await api.get(`/campaigns${api.qs({ page, pageSize: 25, status: query.get('status') })}`);
  fill(main, h('div.head', h('h1', 'Campaigns'), h('a.button.primary', { href: '/app/campaigns/new' }, 'New campaign')),
    table([
      ['Name', (c) => h('a', { href: `/app/campaigns/${enc(c.id)}` }, c.name)],
      ['Status', (c) => badge(c.status)],
      ['Recipients', (c) => num(c.totalRecipients)],
      ['Opened', (c) => num(c.openedCount)],
      ['When', (c) => when(c.sentAt || c.scheduledFor || c.updatedAt)],
    ], api.rows(r), 'No campaign yet.'),
    r.totalPages > 1 ? h('div.pager', h('span.muted', `Page ${page} of ${r.totalPages}`),
      page < r.totalPages ? h('a.button.small', { href: `/app/campaigns?page=${page + 1}` }, 'Next') : null) : null);
}

function stats(box, s) {
  const done = s.sentCount + s.failedCount + s.cancelledCount + (s.uncertainCount || 0);
  const pct = s.totalRecipients ? (100 * done) / s.totalRecipients : 0;
  const rate = (x) => `${(x || 0).toFixed(1)}%`; // the API's rates are percentages
  fill(box,
    s.status === 'SENDING' ? progress(pct, `${num(done)} of ${num(s.totalRecipients)} handed over`) : null,
    h('div.grid', [
      ['Recipients', s.totalRecipients], ['Sent', s.sentCount], ['Delivered', s.deliveredCount, s.deliveryRate],
      ['Opened', s.openedCount, s.openRate], ['Clicked', s.clickedCount, s.clickRate], ['Bounced', s.bouncedCount, s.bounceRate],
      ['Complaints', s.complainedCount, s.complaintRate], ['Unsubscribed', s.unsubscribedCount, s.unsubscribeRate], ['Failed', s.failedCount],
      ['Deferred', s.deferredCount],
    ].map(([label, v, r]) => h('div.stat', { 'data-stat': label.toLowerCase() }, h('div.value', num(v ?? 0)), h('div.label', label, r !== undefined ? ` · ${rate(r)}` : '')))));
}

export async function editor(ctx) {
  const { main, params, every } = ctx;
  const id = params.id || null;
  const c = id ? await api.get(`/campaigns/${enc(id)}`) : {
    name: '', subject: '', from: '', fromName: '', type: 'MARKETING', status: 'DRAFT', audienceType: 'ALL',
    body: '<p>Hello {{firstName ?? "there"}},</p>\n<p></p>\n<p><a href="{{unsubscribeUrl}}">Unsubscribe</a></p>',
  };
  const editable = EDITABLE.has(c.status);
  const [vocab, segments, templates] = await Promise.all([
    loadVocabulary(), api.get('/segments').then(api.rows).catch(() => []), api.get('/templates?pageSize=100').then(api.rows).catch(() => []),
  ]);
  const inp = (name, attrs = {}) => h('input', { name, type: 'text', value: c[name] ?? '', disabled: !editable, ...attrs });
  const count = h('span.live-count', { id: 'audience-count', 'aria-live': 'polite' });
  const audience = () => {
    const type = f.elements.audienceType.value;
    const body = { audienceType: type };
    if (type === 'SEGMENT') body.segmentId = segSel.value;
    if (type === 'FILTERED') body.audienceCondition = currentTree();
    return body;
  };
  const recount = liveCount(count, async () => (await api.post('/campaigns/audience-count', audience())).count);
  const segSel = h('select', { name: 'segmentId', 'aria-label': 'Segment', disabled: !editable },
    segments.map((s) => h('option', { value: s.id, selected: s.id === c.segmentId }, `${s.name} (${num(s.memberCount)})`)));
  const builderBox = h('div', { id: 'audience-builder' });
  let currentTree = () => c.audienceCondition || emptyTree();
  const radios = [['ALL', 'Every subscribed contact'], ['SEGMENT', 'A segment'], ['FILTERED', 'Contacts matching a condition']]
    .map(([v, label]) => h('label.row', h('input', { type: 'radio', name: 'audienceType', value: v, checked: c.audienceType === v, disabled: !editable || (v === 'SEGMENT' && !segments.length) }), label));
  const showAudience = () => {
    const t = f.elements.audienceType.value;
    segSel.hidden = t !== 'SEGMENT';
    builderBox.hidden = t !== 'FILTERED';
    recount();
  };
  const fromTemplate = templates.length && editable ? h('select', { 'aria-label': 'Start from a template' },
    h('option', { value: '' }, 'Start from a template…'), templates.map((t) => h('option', { value: t.id }, t.name))) : null;
  if (fromTemplate) {
    fromTemplate.addEventListener('change', () => {
      const t = templates.find((x) => x.id === fromTemplate.value);
      if (!t) return;
      for (const k of ['subject', 'body', 'from', 'fromName']) if (t[k] !== undefined && t[k] !== null) f.elements[k].value = t[k];
    });
  }
  const save = h('button.primary', { type: 'submit', hidden: !editable }, id ? 'Save' : 'Create campaign');
  const f = h('form.stack', { novalidate: true, id: 'campaign-form' }, h('p.form-error', { role: 'alert' }),
    h('div.grid', field('Name', inp('name', { required: true })), field('From address', inp('from', { type: 'email' })),
      field('From name', inp('fromName'))),
    fromTemplate,
    field('Subject', inp('subject')),
    field('Body (HTML with {{variables}})', h('textarea.code', { name: 'body', disabled: !editable }, c.body)),
    h('section.panel', h('div.head', h('h2', 'Audience'), h('div', 'Recipients: ', count)),
      h('fieldset.group', h('legend', 'Send to'), radios), segSel, builderBox),
    h('div.row', save));
  f.addEventListener('change', (e) => { if (e.target.name === 'audienceType' || e.target.name === 'segmentId') showAudience(); });
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f));
    const body = { name: v.name, subject: v.subject, body: v.body, from: v.from, fromName: v.fromName || null, type: c.type || 'MARKETING', ...audience() };
    save.disabled = true;
    try {
      const out = id ? await api.put(`/campaigns/${enc(id)}`, body) : (await api.post('/campaigns', body)).data;
      toast(id ? 'Campaign saved.' : 'Campaign created.');
      if (!id) ctx.navigate(`/app/campaigns/${enc(out.id)}`, { replace: true }); else ctx.reload();
    } catch (err) { showError(f, err); } finally { save.disabled = false; }
  });

  const parts = [h('div.head', h('h1', id ? c.name : 'New campaign'), id ? badge(c.status) : null)];
  if (id) {
    const statsBox = h('div', { id: 'campaign-stats' });
    const chartBox = h('div', { id: 'campaign-chart' });
    const refresh = async () => {
      const [s, t] = await Promise.all([
        api.get(`/campaigns/${enc(id)}/stats`),
        c.status === 'DRAFT' ? null : api.get(`/campaigns/${enc(id)}/timeseries`).catch(() => null),
      ]);
      stats(statsBox, s);
      if (t) fill(chartBox, lineChart(t.series || [], ['opened', 'clicked'], `Opened and clicked, per ${t.interval}`));
      return s;
    };
    const actions = h('div.row', { id: 'campaign-actions' });
    if (c.status === 'DRAFT') {
      const testTo = h('input', { type: 'email', name: 'testTo', value: ctx.user.email, 'aria-label': 'Test send to' });
      const test = h('button', { type: 'button' }, 'Send a test');
      test.addEventListener('click', async () => {
        try { await api.post(`/campaigns/${enc(id)}/test`, { email: testTo.value }); toast(`Test sent to ${testTo.value}.`); } catch (err) { toast(err.message, 'bad'); }
      });
      const at = h('input', { type: 'datetime-local', name: 'scheduledFor', 'aria-label': 'Send at' });
      const send = h('button.primary', { type: 'button', id: 'send-campaign' }, 'Send…');
      send.addEventListener('click', async () => {
        let n;
        try { n = (await api.post('/campaigns/audience-count', audience())).count; } catch (err) { toast(err.message, 'bad'); return; }
        const later = at.value ? new Date(at.value) : null;
        const ok = await confirmDialog({
          title: later ? `Schedule ${c.name}?` : `Send ${c.name} now?`,
          body: `It goes to ${num(n)} subscribed contact${n === 1 ? '' : 's'}${later ? `, on ${later.toLocaleString()}` : ', starting now'}.`,
          action: later ? `Schedule for ${num(n)}` : `Send to ${num(n)}`,
        });
        if (!ok) return;
        try {
          const r = await api.post(`/campaigns/${enc(id)}/send`, later ? { scheduledFor: later.toISOString() } : {});
          toast(r.message || 'Sending.');
          ctx.reload();
        } catch (err) { toast(err.message, 'bad'); }
      });
      actions.append(h('div.row', testTo, test), h('div.row', at, send));
    }
    if (c.status === 'SCHEDULED' || c.status === 'SENDING') {
      const cancel = h('button.danger', { type: 'button' }, 'Cancel');
      cancel.addEventListener('click', async () => {
        if (!await confirmDialog({ title: `Cancel ${c.name}?`, body: 'Emails not yet handed over are not sent.', action: 'Cancel campaign', danger: true })) return;
        try { await api.post(`/campaigns/${enc(id)}/cancel`, {}); ctx.reload(); } catch (err) { toast(err.message, 'bad'); }
      });
      actions.append(cancel);
    }
    if (c.status === 'SENDING' || c.status === 'SENT') {
      // Each contact whose email delivery gave up on gets it once more (docs/delivery.md).
      const resend = h('button', { type: 'button', id: 'resend-failed' }, 'Resend failed…');
      resend.addEventListener('click', async () => {
        const s = await api.get(`/campaigns/${enc(id)}/stats`).catch(() => ({ failedCount: 0 }));
        if (!s.failedCount) { toast('No email of this campaign failed.'); return; }
        const n = s.failedCount;
        if (!await confirmDialog({ title: `Resend to ${num(n)}?`, body: `Each contact whose email failed gets it once more.`, action: `Resend ${num(n)}` })) return;
        try { const r = await api.post(`/campaigns/${enc(id)}/resend-failed`, {}); toast(r.message); ctx.reload(); } catch (err) { toast(err.message, 'bad'); }
      });
      actions.append(resend);
    }
    if (c.scheduledFor) actions.append(h('span.muted', `Scheduled for ${when(c.scheduledFor)}`));
    parts.push(actions, h('section.panel', h('h2', 'Results'), statsBox), chartBox);
    await refresh();
    let last = c.status;
    every(2000, async () => {
      try {
        const s = await refresh();
        if (s.status !== last) { last = s.status; ctx.reload(); }
      } catch { /* next tick */ }
    });
  }
  parts.push(f);
  fill(main, ...parts);
  currentTree = conditionBuilder(builderBox, c.audienceCondition || emptyTree(), vocab, () => recount());
  if (!editable) for (const el of builderBox.querySelectorAll('select, input, button')) el.disabled = true;
  showAudience();
}
