// Templates: the list, and an editor whose live preview is rendered by the server exactly as a send
// would render it (POST /templates/preview) with sample data, shown in a sandboxed frame that can run
// no script. Template errors name their line; the editor marks it.

import { h, fill, field, badge, confirmDialog, table, toast, when, showError } from '../dom.js';
import * as api from '../api.js';

const enc = encodeURIComponent;
const TYPES = ['MARKETING', 'TRANSACTIONAL', 'HEADLESS'];

export async function list({ main, query }) {
  const page = Number(query.get('page')) || 1;
  const r = await api.get(`/templates${api.qs({ page, pageSize: 25, search: query.get('search') })}`);
  fill(main, h('div.head', h('h1', 'Templates'), h('a.button.primary', { href: '/app/templates/new' }, 'New template')),
    table([
      ['Name', (t) => h('a', { href: `/app/templates/${enc(t.id)}` }, t.name)],
      ['Subject', (t) => t.subject],
      ['Type', (t) => badge(t.type, 'plain')],
      ['Updated', (t) => when(t.updatedAt)],
    ], api.rows(r), 'No template yet.'),
    r.totalPages > 1 ? h('div.pager',
      page > 1 ? h('a.button.small', { href: `/app/templates?page=${page - 1}` }, 'Previous') : null,
      h('span.muted', `Page ${page} of ${r.totalPages}`),
      page < r.totalPages ? h('a.button.small', { href: `/app/templates?page=${page + 1}` }, 'Next') : null) : null);
}

/** The variables a template uses: `{{name}}`, `{{{name}}}`, `{{name ?? "x"}}`, block helpers' arguments. */
export function variables(src) {
  const found = new Set();
  for (const m of String(src).matchAll(/\{\{\{?\s*(?:[#/^]?(?:if|unless|each|with)\s+)?([A-Za-z_][\w.-]*)/g)) {
    if (!['else', 'this', 'if', 'unless', 'each', 'with'].includes(m[1])) found.add(m[1]);
  }
  return [...found].sort();
}

function sample(vars) {
  const out = { email: 'ada@example.com' };
  for (const v of vars) {
    if (v.includes('.')) continue;
    if (!(v in out)) out[v] = v === 'firstName' || v === 'name' ? 'Ada' : `sample ${v}`;
  }
  return out;
}

/** The 1-based line an error message names ("line 3, column 7: ..."), if any. */
function lineOf(message) {
  const m = /line (\d+)/.exec(message || '');
  return m ? Number(m[1]) : null;
}

function selectLine(area, line) {
  const lines = area.value.split('\n');
  if (line < 1 || line > lines.length) return;
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  area.setSelectionRange(start, start + lines[line - 1].length);
}

export async function editor(ctx) {
  const { main, params } = ctx;
  const id = params.id || null;
  const t = id ? await api.get(`/templates/${enc(id)}`) : {
    name: '', subject: '', from: '', fromName: '', type: 'MARKETING',
    body: '<h1>Hello {{firstName ?? "there"}}</h1>\n<p>Write your email here.</p>\n<p><a href="{{unsubscribeUrl}}">Unsubscribe</a></p>',
  };
  const inp = (name, attrs = {}) => h('input', { name, type: 'text', value: t[name] ?? '', ...attrs });
  const body = h('textarea.code', { name: 'body', spellcheck: 'false' }, t.body);
  const subject = inp('subject', { required: true, maxlength: 998 });
  const typeSel = h('select', { name: 'type' }, TYPES.map((k) => h('option', { value: k, selected: t.type === k }, k)));
  const dataArea = h('textarea.code', { name: 'sample', spellcheck: 'false', 'aria-label': 'Sample data as JSON', rows: 6 });
  const vars = h('div.vars', { id: 'template-variables' });
  const frame = h('iframe', { sandbox: '', title: 'Preview', id: 'template-preview', referrerpolicy: 'no-referrer' });
  const previewSubject = h('p', { id: 'preview-subject' });
  const previewError = h('p.form-error', { id: 'preview-error', role: 'alert' });
  let sampleTouched = false;

  const refreshVars = () => {
    const list = variables(`${subject.value}\n${body.value}`);
    fill(vars, list.length ? list.map((v) => h('code.badge', v)) : h('span.muted', 'No variables.'));
    if (!sampleTouched) dataArea.value = JSON.stringify(sample(list), null, 2);
    return list;
  };
  let timer;
  let seq = 0;
  const preview = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++seq;
      let data;
      try { data = JSON.parse(dataArea.value || '{}'); } catch (e) {
        previewError.textContent = `Sample data is not valid JSON: ${e.message}`;
        return;
      }
      try {
        const r = await api.post('/templates/preview', { subject: subject.value, body: body.value || ' ', data });
        if (mine !== seq) return;
        previewError.textContent = '';
        previewSubject.textContent = r.subject ? `Subject: ${r.subject}` : '';
        frame.srcdoc = r.body;
      } catch (e) {
        if (mine !== seq) return;
        previewError.textContent = e.fields?.[0]?.message || e.message;
      }
    }, 300);
  };
  body.addEventListener('input', () => { refreshVars(); preview(); });
  subject.addEventListener('input', () => { refreshVars(); preview(); });
  dataArea.addEventListener('input', () => { sampleTouched = true; preview(); });

  const save = h('button.primary', { type: 'submit' }, id ? 'Save' : 'Create template');
  const f = h('form.stack', { novalidate: true, id: 'template-form' }, h('p.form-error', { role: 'alert' }),
    h('div.grid',
      field('Name', inp('name', { required: true, maxlength: 200 })),
      field('Type', typeSel),
      field('From address', inp('from', { type: 'email', required: true })),
      field('From name', inp('fromName', { maxlength: 200 }))),
    field('Subject', subject),
    h('div.editor',
      h('div', field('Body (HTML with {{variables}})', body), h('h3', 'Variables'), vars,
        field('Sample data', dataArea, 'The preview renders with these values.')),
      h('div', h('h3', 'Preview'), previewSubject, previewError, frame)),
    h('div.row', save));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = Object.fromEntries(new FormData(f));
    const payload = { name: v.name, subject: v.subject, body: v.body, from: v.from, type: v.type, fromName: v.fromName || null };
    save.disabled = true;
    try {
      const out = id ? await api.patch(`/templates/${enc(id)}`, payload) : await api.post('/templates', payload);
      toast(id ? 'Template saved.' : 'Template created.');
      if (!id) ctx.navigate(`/app/templates/${enc(out.id)}`, { replace: true });
    } catch (err) {
      showError(f, err);
      const bad = err.fields?.find((x) => x.field === 'body');
      const line = bad && lineOf(bad.message);
      if (line) { body.focus(); selectLine(body, line); }
    } finally {
      save.disabled = false;
    }
  });

  const remove = id ? h('button.danger', { type: 'button' }, 'Delete') : null;
  if (remove) {
    remove.addEventListener('click', async () => {
      if (!await confirmDialog({ title: `Delete ${t.name}?`, body: 'Campaigns and workflow steps that use it stop working.', action: 'Delete', danger: true })) return;
      try { await api.del(`/templates/${enc(id)}`); ctx.navigate('/app/templates'); } catch (err) { toast(err.message, 'bad'); }
    });
  }
  fill(main, h('div.head', h('h1', id ? t.name : 'New template'), remove), f);
  refreshVars();
  preview();
}
