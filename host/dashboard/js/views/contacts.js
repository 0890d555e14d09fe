// Contacts: the list (search, subscription filter, sort, cursor paging, a selection for bulk jobs), one
// contact's page (data, subscription, events, emails and workflow activity; edit, delete) and the CSV
// import with its progress. Long jobs are polled until they finish and show a moving progress bar.

import { h, fill, field, badge, confirmDialog, table, toast, when, num, progress, showError } from '../dom.js';
import * as api from '../api.js';

const enc = encodeURIComponent;

/** Polls a contact job until it ends, drawing its progress into `box`; resolves the finished job. */
export async function followJob(path, box, every) {
  return new Promise((resolve) => {
    let busy = false;
    const tick = async () => {
      if (busy || !box.isConnected) return;
      busy = true;
      try {
        const job = await api.get(path);
        const p = job.progress || {};
        fill(box, progress(p.percent, `${num(p.done)} of ${num(p.total)} rows · ${job.state}`));
        if (job.state === 'completed' || job.state === 'failed' || job.state === 'cancelled') {
          clearInterval(id);
          resolve(job);
        }
      } catch (e) {
        fill(box, h('p.notice.bad', e.message));
        clearInterval(id);
        resolve(null);
      } finally {
        busy = false;
      }
    };
    const id = every(500, tick);
    tick();
  });
}

export async function list(ctx) {
  const { main, query, every } = ctx;
  const state = {
    search: query.get('search') || '', subscribed: query.get('subscribed') || '',
    sort: query.get('sort') || 'createdAt', dir: query.get('dir') || 'desc', cursors: [''],
  };
  const selected = new Set();
  const results = h('div', { id: 'contacts-results' });
  const bulkBox = h('div');
  const search = h('input', { type: 'search', name: 'search', value: state.search, placeholder: 'Search by email', 'aria-label': 'Search by email' });
  const filter = h('select', { name: 'subscribed', 'aria-label': 'Subscription' },
    h('option', { value: '' }, 'All contacts'), h('option', { value: 'true' }, 'Subscribed'), h('option', { value: 'false' }, 'Unsubscribed'));
  filter.value = state.subscribed;

  const bulkButtons = [['bulk-subscribe', 'Subscribe'], ['bulk-unsubscribe', 'Unsubscribe'], ['bulk-delete', 'Delete']]
    .map(([op, label]) => {
      const b = h('button.small', { type: 'button', disabled: true, 'data-bulk': op }, label);
      b.addEventListener('click', async () => {
        const ids = [...selected];
        const ok = await confirmDialog({
          title: `${label} ${ids.length} contact${ids.length === 1 ? '' : 's'}?`,
          body: op === 'bulk-delete' ? 'Deleted contacts lose their data and history.' : null,
          action: label, danger: op === 'bulk-delete',
        });
        if (!ok) return;
        try {
          const { jobId } = await api.post(`/contacts/${op}`, { contactIds: ids });
          const job = await followJob(`/contacts/bulk/${enc(jobId)}`, bulkBox, every);
          if (job) toast(`${label}: ${num(job.progress?.done)} done.`);
          selected.clear();
          load(state.cursors.length - 1);
        } catch (e) { toast(e.message, 'bad'); }
      });
      return b;
    });
  const syncBulk = () => { for (const b of bulkButtons) b.disabled = selected.size === 0; };

  const sortButton = (key, label) => {
    const active = state.sort === key;
    const b = h('button.sort', { type: 'button', 'aria-sort': active ? (state.dir === 'asc' ? 'ascending' : 'descending') : null },
      label, active ? (state.dir === 'asc' ? ' ▲' : ' ▼') : '');
    b.addEventListener('click', () => {
      state.dir = active && state.dir === 'desc' ? 'asc' : 'desc';
      state.sort = key;
      state.cursors = [''];
      load(0);
    });
    return b;
  };

  async function load(pageIndex) {
    const params = { limit: 25, search: state.search, subscribed: state.subscribed, sort: state.sort, dir: state.dir, cursor: state.cursors[pageIndex] };
    const page = await api.get(`/contacts${api.qs(params)}`);
    if (page.hasMore) state.cursors[pageIndex + 1] = page.cursor;
    state.cursors.length = Math.min(state.cursors.length, pageIndex + 2);
    const all = h('input', { type: 'checkbox', 'aria-label': 'Select every contact on this page' });
    all.addEventListener('change', () => {
      for (const c of page.data) { if (all.checked) selected.add(c.id); else selected.delete(c.id); }
      for (const box of results.querySelectorAll('input[data-id]')) box.checked = all.checked;
      syncBulk();
    });
    const prev = h('button.small', { type: 'button', disabled: pageIndex === 0 }, 'Previous');
    const next = h('button.small', { type: 'button', disabled: !page.hasMore }, 'Next');
    prev.addEventListener('click', () => load(pageIndex - 1));
    next.addEventListener('click', () => load(pageIndex + 1));
    fill(results,
      h('p.muted', `${num(page.total)} contact${page.total === 1 ? '' : 's'}`),
      table([
        [all, (c) => {
          const box = h('input', { type: 'checkbox', 'data-id': c.id, checked: selected.has(c.id), 'aria-label': `Select ${c.email}` });
          box.addEventListener('change', () => { if (box.checked) selected.add(c.id); else selected.delete(c.id); syncBulk(); });
          return box;
        }],
        [sortButton('email', 'Email'), (c) => h('a.wrap', { href: `/app/contacts/${enc(c.id)}` }, c.email)],
        ['Subscription', (c) => badge(c.subscribed ? 'subscribed' : 'unsubscribed')],
        ['Data', (c) => h('span.muted', Object.keys(c.data || {}).slice(0, 4).join(', '))],
        [sortButton('createdAt', 'Added'), (c) => when(c.createdAt)],
      ], page.data, state.search ? 'No contact matches.' : 'No contacts yet.'),
      h('div.pager', h('span.muted', `Page ${pageIndex + 1}`), prev, next));
    syncBulk();
  }

  let debounce;
  search.addEventListener('input', () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { state.search = search.value.trim(); state.cursors = ['']; load(0); }, 250);
  });
  filter.addEventListener('change', () => { state.subscribed = filter.value; state.cursors = ['']; load(0); });
  fill(main, h('div.head', h('h1', 'Contacts'), h('a.button.primary', { href: '/app/contacts/import' }, 'Import CSV')),
    h('div.row', h('div.grow', search), filter, h('span.muted', 'Selection:'), bulkButtons),
    bulkBox, results);
  await load(0);
}

function dataRows(data) {
  const keys = Object.keys(data || {});
  if (!keys.length) return h('p.empty', 'No data.');
  return h('dl.props', keys.map((k) => [h('dt', k), h('dd', typeof data[k] === 'string' ? data[k] : JSON.stringify(data[k]))]));
}

export async function detail(ctx) {
  const { main, params } = ctx;
  const id = params.id;
  const c = await api.get(`/contacts/${enc(id)}`);
  const [events, activity] = await Promise.all([
    api.get(`/events/contact/${enc(id)}${api.qs({ limit: 50 })}`).catch(() => ({ data: [] })),
    api.get(`/activity${api.qs({ contactId: id, limit: 50 })}`).catch(() => ({ data: [] })),
  ]);
  const editData = h('textarea.code', { name: 'data', 'aria-label': 'Data as JSON' }, JSON.stringify(c.data || {}, null, 2));
  const subscribed = h('input', { type: 'checkbox', name: 'subscribed', checked: c.subscribed });
  const editForm = h('form.stack', { novalidate: true }, h('p.form-error', { role: 'alert' }),
    h('label.row', subscribed, 'Subscribed to marketing email'),
    field('Data (JSON)', editData), h('div.row', h('button.primary', { type: 'submit' }, 'Save')));
  editForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    let data;
    try { data = JSON.parse(editData.value || '{}'); } catch (err) {
      showError(editForm, { message: `Data is not valid JSON: ${err.message}`, fields: [] });
      return;
    }
    try {
      await api.patch(`/contacts/${enc(id)}`, { subscribed: subscribed.checked, data });
      toast('Contact saved.');
      ctx.reload();
    } catch (err) { showError(editForm, err); }
  });
  const remove = h('button.danger', { type: 'button' }, 'Delete contact');
  remove.addEventListener('click', async () => {
    if (!await confirmDialog({ title: `Delete ${c.email}?`, body: 'Its data, events and history go with it.', action: 'Delete', danger: true })) return;
    try { await api.del(`/contacts/${enc(id)}`); toast('Contact deleted.'); ctx.navigate('/app/contacts'); } catch (e) { toast(e.message, 'bad'); }
  });
  const emails = api.rows(activity).filter((a) => a.type.startsWith('email.'));
  const flows = api.rows(activity).filter((a) => a.type.startsWith('workflow.'));
  fill(main,
    h('div.head', h('h1.wrap', { id: 'contact-email' }, c.email), badge(c.subscribed ? 'subscribed' : 'unsubscribed')),
    h('p.muted', `Added ${when(c.createdAt)} · updated ${when(c.updatedAt)}`),
    h('section.panel', h('h2', 'Data'), h('div', { id: 'contact-data' }, dataRows(c.data))),
    h('section.panel', h('h2', 'Emails'), table([
      ['When', (a) => when(a.occurredAt)],
      ['What', (a) => badge(a.type.replace('email.', '').toUpperCase())],
      ['Subject', (a) => a.email?.subject ?? '—'],
      ['Reason', (a) => a.data?.reason ?? a.data?.error ?? ''],
    ], emails, 'No email yet.')),
    h('section.panel', h('h2', 'Events'), table([
      ['When', (e) => when(e.createdAt)],
      ['Event', (e) => h('code', e.name)],
      ['Data', (e) => h('code.wrap', JSON.stringify(e.data || {}))],
    ], api.rows(events), 'No events yet.')),
    h('section.panel', h('h2', 'Workflows'), table([
      ['When', (a) => when(a.occurredAt)],
      ['What', (a) => a.type.replace('workflow.', '')],
      ['Workflow', (a) => a.workflow?.name ?? a.workflow?.id ?? '—'],
    ], flows, 'No workflow activity.')),
    h('section.panel', h('h2', 'Edit'), editForm),
    h('div.row', remove));
}

export async function importer(ctx) {
  const { main, every } = ctx;
  const file = h('input', { type: 'file', name: 'file', accept: '.csv,text/csv', required: true });
  const status = h('div', { id: 'import-progress' });
  const result = h('div', { id: 'import-result' });
  const btn = h('button.primary', { type: 'submit' }, 'Import');
  const f = h('form.stack', { novalidate: true }, h('p.form-error', { role: 'alert' }),
    field('CSV file', file, 'A header row with an email column; other columns become contact data. At most 5 MB.'),
    h('label.row', h('input', { type: 'checkbox', name: 'subscribed', checked: true }), 'New contacts are subscribed'),
    h('label.row', h('input', { type: 'checkbox', name: 'updateExisting', checked: true }), 'Update contacts that exist'),
    h('div.row', btn));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    if (!file.files.length) { showError(f, { message: 'Choose a CSV file first.', fields: [] }); return; }
    const body = new FormData();
    body.append('file', file.files[0]);
    body.append('subscribed', String(f.elements.subscribed.checked));
    body.append('updateExisting', String(f.elements.updateExisting.checked));
    btn.disabled = true;
    fill(result);
    try {
      const { jobId } = await api.post('/contacts/import', body);
      const job = await followJob(`/contacts/import/${enc(jobId)}`, status, every);
      if (job) showResult(result, job);
    } catch (err) {
      showError(f, err);
    } finally {
      btn.disabled = false;
    }
  });
  fill(main, h('div.head', h('h1', 'Import contacts')), h('section.panel', f), status, result);
}

function showResult(box, job) {
  const r = job.result || {};
  const errors = Array.isArray(r.errors) ? r.errors : [];
  fill(box,
    job.state === 'failed' ? h('p.notice.bad', job.error || 'The import failed.') : h('p.notice.ok', { role: 'status' }, 'Import finished.'),
    h('div.grid', [['Created', r.created], ['Updated', r.updated], ['Skipped', r.skipped], ['Failed', r.failed]]
      .map(([label, v]) => h('div.stat', h('div.value', num(v ?? 0)), h('div.label', label)))),
    errors.length ? [h('h2', 'Rows not imported'), table([
      ['Line', (e) => e.line],
      ['Email', (e) => e.email ?? ''],
      ['Reason', (e) => e.reason],
    ], errors)] : null,
    h('p', h('a', { href: '/app/contacts' }, 'See the contacts')));
}
