// Building the page. Every string that reaches the page goes through a text node or an attribute set
// with setAttribute, never through innerHTML, so contact data, names and subjects (all of them typed by
// someone else) are shown as text and never run. Links are checked to be http(s), mailto or local.

const SAFE_URL = /^(\/(?!\/)|#|https?:\/\/|mailto:)/i;

/** h('tag.class', {attr: value, onclick: fn}, ...children): one element. */
export function h(tag, props, ...children) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name || 'div');
  if (classes.length) el.className = classes.join(' ');
  if (props && (typeof props !== 'object' || props instanceof Node || Array.isArray(props))) {
    children.unshift(props);
    props = null;
  }
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = [el.className, v].filter(Boolean).join(' ');
    else if (k === 'value') el.value = v;
    else if (k === 'checked' || k === 'selected' || k === 'disabled') el[k] = Boolean(v);
    else if ((k === 'href' || k === 'src') && !SAFE_URL.test(String(v))) continue;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/** Appends children: nodes, strings (as text), numbers, nested arrays; skips null and false. */
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A date-time for people, in the browser's zone. */
export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : d.toLocaleString();
}

export function num(n) {
  return typeof n === 'number' ? n.toLocaleString() : (n ?? '—');
}

/** A small coloured label for a status. */
export function badge(text, tone) {
  const t = tone || ({
    VERIFIED: 'ok', SENT: 'ok', DELIVERED: 'ok', OPENED: 'ok', CLICKED: 'ok', ACTIVE: 'ok', completed: 'ok',
    subscribed: 'ok', LOADED: 'ok', ENABLED: 'ok', UP: 'ok',
    PENDING: 'warn', SCHEDULED: 'warn', SENDING: 'warn', WARNING: 'warn', queued: 'warn', active: 'warn',
    DEFERRED: 'warn',
    BOUNCED: 'bad', COMPLAINED: 'bad', FAILED: 'bad', SUSPENDED: 'bad', failed: 'bad', CANCELLED: 'bad',
    unsubscribed: 'bad', ERROR: 'bad', DOWN: 'bad',
  })[text] || 'plain';
  return h('span.badge', { class: `tone-${t}` }, text);
}

/** A button that copies `text` to the clipboard and says so. */
export function copyButton(text, label = 'Copy') {
  const b = h('button.small', { type: 'button', 'aria-label': `${label}: ${text.slice(0, 40)}` }, label);
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      b.textContent = 'Copied';
    } catch {
      const area = h('textarea', { readonly: true }, text);
      document.body.append(area);
      area.select();
      document.execCommand('copy');
      area.remove();
      b.textContent = 'Copied';
    }
    setTimeout(() => { b.textContent = label; }, 1500);
  });
  return b;
}

/** A message at the top of the page that goes away by itself. */
export function toast(text, tone = 'ok') {
  const box = document.getElementById('toasts');
  if (!box) return;
  while (box.children.length >= 3) box.firstChild.remove();
  const t = h('div.toast', { class: `tone-${tone}`, role: tone === 'bad' ? 'alert' : 'status' }, text);
  box.append(t);
  setTimeout(() => t.remove(), tone === 'bad' ? 8000 : 4000);
}

/**
 * A modal confirmation: resolves true when confirmed. With `typed`, the person must type that text
 * exactly before the button unlocks (a project reset).
 */
export function confirmDialog({ title, body, action = 'Confirm', danger = false, typed = null }) {
  return new Promise((resolve) => {
    const input = typed ? h('input', { type: 'text', autocomplete: 'off', 'aria-label': `Type ${typed} to confirm` }) : null;
    const ok = h('button', { type: 'submit', class: danger ? 'danger' : 'primary', disabled: Boolean(typed) }, action);
    const cancel = h('button', { type: 'button' }, 'Cancel');
    const form = h('form.dialog-body', { method: 'dialog' },
      h('h2', title), body ? h('p', body) : null,
      typed ? h('label', 'Type ', h('code', typed), ' to confirm', input) : null,
      h('div.row.end', cancel, ok));
    const dlg = h('dialog.confirm', form);
    if (input) input.addEventListener('input', () => { ok.disabled = input.value !== typed; });
    const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    cancel.addEventListener('click', () => done(false));
    form.addEventListener('submit', (e) => { e.preventDefault(); if (!ok.disabled) done(true); });
    dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
    document.body.append(dlg);
    dlg.showModal();
    (input || ok).focus();
  });
}

/** A labelled form field. */
export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h('div.field', h('label', { for: id }, label), input, hint ? h('small.hint', hint) : null,
    h('small.error', { 'data-for': input.name || '' }));
}

/**
 * Shows an API error on a form: each field error next to its input (by `name`), the message above.
 * Returns the message.
 */
export function showError(form, err) {
  for (const e of form.querySelectorAll('.error')) e.textContent = '';
  const box = form.querySelector('.form-error');
  const fields = err?.fields || [];
  let placed = 0;
  for (const f of fields) {
    const slot = form.querySelector(`.error[data-for="${CSS.escape(String(f.field || ''))}"]`);
    if (slot) { slot.textContent = f.message || f.code || 'invalid'; placed += 1; }
  }
  const msg = err?.message || String(err);
  if (box) box.textContent = placed && placed === fields.length ? '' : msg;
  else toast(msg, 'bad');
  return msg;
}

/** A table from rows: `columns` is [[heading, row => cell], ...]. */
export function table(columns, rows, empty = 'Nothing here yet.') {
  if (!rows.length) return h('p.empty', empty);
  return h('div.table-wrap', h('table',
    h('thead', h('tr', columns.map(([head]) => h('th', { scope: 'col' }, head)))),
    h('tbody', rows.map((r) => h('tr', columns.map(([, cell]) => h('td', cell(r))))))));
}

/** A progress bar with a label. */
export function progress(percent, label) {
  const p = Math.max(0, Math.min(100, Math.round(percent || 0)));
  return h('div.progress', { role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100, 'aria-valuenow': p },
    h('div.bar', { style: `width:${p}%` }), h('span', label ?? `${p}%`));
}
