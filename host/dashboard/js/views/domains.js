// Sending domains: add one, the DNS records to publish (each copyable, with its status from the last
// check), verify now, remove; receiving replies on or off, with the MX record that brings them.

import { h, fill, field, badge, copyButton, confirmDialog, table, toast, when } from '../dom.js';
import * as api from '../api.js';
import { form } from './account.js';

function records(d) {
  return table([
    ['Type', (r) => h('code', r.type)],
    ['Name', (r) => h('span.row', h('code.wrap', r.name), copyButton(r.name))],
    ['Value', (r) => h('span.row', h('code.wrap', r.value.length > 80 ? `${r.value.slice(0, 77)}…` : r.value), copyButton(r.value))],
    ['For', (r) => [r.purpose, r.required ? '' : ' (optional)']],
    ['Status', (r) => badge(r.status || 'PENDING')],
  ], d.records || [], 'No records.');
}

function domainPanel(d, reload) {
  const verify = h('button.primary.small', { type: 'button', 'data-verify': d.domain }, 'Verify now');
  verify.addEventListener('click', async () => {
    verify.disabled = true;
    try {
      const r = await api.get(`/domains/${encodeURIComponent(d.id)}/verify`);
      toast(r.status === 'VERIFIED' ? `${d.domain} is verified.` : `${d.domain}: records not found yet.`, r.status === 'VERIFIED' ? 'ok' : 'bad');
      reload();
    } catch (e) {
      toast(e.message, 'bad');
      verify.disabled = false;
    }
  });
  const remove = h('button.small', { type: 'button' }, 'Remove');
  remove.addEventListener('click', async () => {
    if (!await confirmDialog({ title: `Remove ${d.domain}?`, body: 'Email from this domain is refused once it is removed.', action: 'Remove', danger: true })) return;
    try { await api.del(`/domains/${encodeURIComponent(d.id)}`); reload(); } catch (e) { toast(e.message, 'bad'); }
  });
  const receiving = h('button.small', { type: 'button', 'data-inbound': d.domain }, d.inbound ? 'Stop receiving' : 'Receive replies');
  receiving.addEventListener('click', async () => {
    receiving.disabled = true;
    try {
      await api.patch(`/domains/${encodeURIComponent(d.id)}`, { inbound: !d.inbound });
      toast(d.inbound ? `${d.domain} no longer takes mail.` : `${d.domain} takes replies once its MX record points here.`);
      reload();
    } catch (e) {
      toast(e.message, 'bad');
      receiving.disabled = false;
    }
  });
  const mx = d.inboundRecord;
  const inbound = h('div.inbound',
    h('h3', 'Receiving ', badge(d.inbound ? 'ON' : 'OFF')),
    d.inbound
      ? h('p', 'Replies to this domain become email.received events. Mail reaches Herald through this record:')
      : h('p.muted', 'Mail to this domain is refused until receiving is on.'),
    d.inbound && mx ? table([
      ['Type', (r) => h('code', r.type)],
      ['Name', (r) => h('span.row', h('code.wrap', r.name), copyButton(r.name))],
      ['Value', (r) => h('span.row', h('code.wrap', `${r.priority} ${r.value}`), copyButton(r.value))],
    ], [mx], '') : null,
    receiving);
  return h('section.panel', { 'data-domain': d.domain },
    h('div.head', h('h2', d.domain, ' ', badge(d.status), d.trusted ? h('span.badge', ' trusted') : null),
      h('div.row', d.status === 'VERIFIED' ? null : verify, remove)),
    h('p.muted', `Last checked: ${when(d.lastCheckedAt)}`, d.verifiedAt ? ` · verified ${when(d.verifiedAt)}` : ''),
    d.status === 'VERIFIED' ? null : h('p', 'Publish these records at your DNS provider, then verify.'),
    records(d),
    inbound);
}

export async function list(ctx) {
  const { main, project } = ctx;
  const box = h('div');
  const reload = async () => {
    const all = api.rows(await api.get(`/domains/project/${encodeURIComponent(project.id)}`));
    fill(box, all.length ? all.map((d) => domainPanel(d, reload)) : h('p.empty', 'No domain yet: add the one you send from.'));
  };
  fill(main, h('div.head', h('h1', 'Domains')),
    h('section.panel', h('h2', 'Add a domain'),
      form([field('Domain', h('input', { name: 'domain', type: 'text', placeholder: 'mail.example.com', required: true }))],
        'Add domain', async (v) => {
          await api.post('/domains', { domain: v.domain.trim(), projectId: project.id });
          toast(`${v.domain} added: publish its records.`);
          await reload();
        })),
    box);
  await reload();
}
