// Segments: the list, and one segment's page: a condition builder with the live member count for a
// dynamic segment, or the members added and removed by email for a static one; its contacts.

import { h, fill, field, badge, confirmDialog, table, toast, when, num, showError } from '../dom.js';
import * as api from '../api.js';
import { conditionBuilder, liveCount, loadVocabulary, emptyTree } from '../conditions.js';

const enc = encodeURIComponent;

export async function list({ main }) {
  const all = api.rows(await api.get('/segments'));
  fill(main, h('div.head', h('h1', 'Segments'), h('a.button.primary', { href: '/app/segments/new' }, 'New segment')),
    table([
      ['Name', (s) => h('a', { href: `/app/segments/${enc(s.id)}` }, s.name)],
      ['Type', (s) => badge(s.type, 'plain')],
      ['Members', (s) => num(s.memberCount)],
      ['Updated', (s) => when(s.updatedAt)],
    ], all, 'No segment yet.'));
}

async function members(box, s, reload) {
  const page = await api.get(`/segments/${enc(s.id)}/contacts?pageSize=50`);
  fill(box, h('p.muted', `${num(page.total)} member${page.total === 1 ? '' : 's'}`, page.total > 50 ? ' (the 50 newest shown)' : ''),
    table([
      ['Email', (c) => h('a.wrap', { href: `/app/contacts/${enc(c.id)}` }, c.email)],
      ['Subscription', (c) => badge(c.subscribed ? 'subscribed' : 'unsubscribed')],
      s.type === 'STATIC' ? ['', (c) => {
        const b = h('button.small', { type: 'button' }, 'Remove');
        b.addEventListener('click', async () => {
          try { await api.api('DELETE', `/segments/${enc(s.id)}/members`, { emails: [c.email] }); reload(); } catch (e) { toast(e.message, 'bad'); }
        });
        return b;
      }] : ['', () => ''],
    ], api.rows(page), 'No members.'));
}

export async function editor(ctx) {
  const { main, params } = ctx;
  const id = params.id || null;
  const s = id ? await api.get(`/segments/${enc(id)}`) : { name: '', description: '', type: 'DYNAMIC', condition: emptyTree(), trackMembership: false };
  const vocab = await loadVocabulary();
  const count = h('span.live-count', { id: 'segment-count', 'aria-live': 'polite' });
  const builderBox = h('div', { id: 'condition-builder' });
  const update = liveCount(count, async (tree) => (await api.post('/segments/count', { condition: tree })).count);
  let current = () => s.condition;
  const typeSel = h('select', { name: 'type', disabled: Boolean(id) },
    ['DYNAMIC', 'STATIC'].map((t) => h('option', { value: t, selected: s.type === t }, t === 'DYNAMIC' ? 'Dynamic: contacts matching a condition' : 'Static: contacts you add')));
  const dynamicPart = h('section.panel', h('div.head', h('h2', 'Condition'), h('div', 'Matches: ', count)), builderBox);
  const showType = () => { dynamicPart.hidden = typeSel.value !== 'DYNAMIC'; };
  typeSel.addEventListener('change', showType);

  const save = h('button.primary', { type: 'submit' }, id ? 'Save' : 'Create segment');
  const f = h('form.stack', { novalidate: true, id: 'segment-form' }, h('p.form-error', { role: 'alert' }),
    h('div.grid',
      field('Name', h('input', { name: 'name', type: 'text', value: s.name, required: true, maxlength: 200 })),
      field('Type', typeSel)),
    field('Description', h('input', { name: 'description', type: 'text', value: s.description ?? '' })),
    h('label.row', h('input', { type: 'checkbox', name: 'trackMembership', checked: s.trackMembership }),
      'Track entries and exits as events (segment.<name>.entry and .exit)'),
    dynamicPart, h('div.row', save));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f));
    const body = { name: v.name, description: v.description || null, trackMembership: f.elements.trackMembership.checked };
    if (!id) body.type = typeSel.value;
    if (typeSel.value === 'DYNAMIC') body.condition = current();
    save.disabled = true;
    try {
      const out = id ? await api.patch(`/segments/${enc(id)}`, body) : await api.post('/segments', body);
      toast(id ? 'Segment saved.' : 'Segment created.');
      if (!id) ctx.navigate(`/app/segments/${enc(out.id)}`, { replace: true });
      else ctx.reload();
    } catch (err) { showError(f, err); } finally { save.disabled = false; }
  });

  const parts = [h('div.head', h('h1', id ? s.name : 'New segment'), id ? badge(`${num(s.memberCount)} members`, 'plain') : null), f];
  if (id) {
    const memberBox = h('div', { id: 'segment-members' });
    const reload = () => members(memberBox, s, reload);
    if (s.type === 'STATIC') {
      const add = h('form.stack', { novalidate: true }, h('p.form-error', { role: 'alert' }),
        field('Emails', h('textarea', { name: 'emails', rows: 3, placeholder: 'one per line or comma-separated' })),
        h('label.row', h('input', { type: 'checkbox', name: 'createMissing' }), 'Create contacts for unknown emails'),
        h('div.row', h('button.primary', { type: 'submit' }, 'Add members')));
      add.addEventListener('submit', async (e) => {
        e.preventDefault();
        const emails = add.elements.emails.value.split(/[\s,;]+/).filter(Boolean);
        try {
          const r = await api.post(`/segments/${enc(id)}/members`, { emails, createMissing: add.elements.createMissing.checked });
          toast(`${num(r.changed)} added${r.notFound?.length ? `; not found: ${r.notFound.join(', ')}` : ''}.`, r.notFound?.length ? 'bad' : 'ok');
          add.reset();
          reload();
        } catch (err) { showError(add, err); }
      });
      parts.push(h('section.panel', h('h2', 'Add members'), add));
    }
    const remove = h('button.danger', { type: 'button' }, 'Delete segment');
    remove.addEventListener('click', async () => {
      if (!await confirmDialog({ title: `Delete ${s.name}?`, body: 'Campaigns and conditions that use it stop matching its members.', action: 'Delete', danger: true })) return;
      try { await api.del(`/segments/${enc(id)}`); ctx.navigate('/app/segments'); } catch (err) { toast(err.message, 'bad'); }
    });
    parts.push(h('section.panel', h('h2', 'Members'), memberBox), h('div.row', remove));
    fill(main, ...parts);
    reload();
  } else {
    fill(main, ...parts);
  }
  current = conditionBuilder(builderBox, s.condition, vocab, update);
  showType();
  // A saved segment shows the count the server keeps (recounted every few minutes and on each change):
  // counting a large project again on every visit would make the page as slow as the count. Edits
  // count live.
  if (typeSel.value === 'DYNAMIC') {
    if (id) {
      count.textContent = `${num(s.memberCount)} contact${s.memberCount === 1 ? '' : 's'}`;
      count.dataset.count = String(s.memberCount);
    } else update(current());
  }
}
