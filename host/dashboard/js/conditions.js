// The condition builder: a tree of groups (`{logic, groups: [{filters, conditions?}]}`) edited in the
// page, with every field type and operator of Herald's conditions and the operators loaded plugins
// provide. It calls `onChange(tree)` on each edit; the API checks the tree (and counts it) as typed.

import { h, fill } from './dom.js';
import * as api from './api.js';

const TEXT_OPS = ['equals', 'notEquals', 'contains', 'notContains', 'exists', 'notExists'];
const NUMBER_OPS = ['greaterThan', 'lessThan', 'greaterThanOrEqual', 'lessThanOrEqual'];
const TIME_OPS = ['within', 'olderThan'];
const EVENT_OPS = ['triggered', 'notTriggered', 'triggeredWithin', 'triggeredOlderThan', 'notTriggeredWithin'];
const SEGMENT_OPS = ['memberOfSegment', 'notMemberOfSegment'];
const NO_VALUE = new Set(['exists', 'notExists', 'triggered', 'notTriggered', 'memberOfSegment', 'notMemberOfSegment']);
const WITH_UNIT = new Set(['within', 'olderThan', 'triggeredWithin', 'triggeredOlderThan', 'notTriggeredWithin']);
const UNITS = ['minutes', 'hours', 'days'];
const EMAIL_ACTIVITIES = ['sent', 'delivery', 'open', 'click', 'bounce', 'complaint'];
const LABELS = {
  equals: 'is', notEquals: 'is not', contains: 'contains', notContains: 'does not contain', exists: 'is set',
  notExists: 'is not set', greaterThan: '>', lessThan: '<', greaterThanOrEqual: '≥', lessThanOrEqual: '≤',
  within: 'within the last', olderThan: 'more than … ago', triggered: 'happened', notTriggered: 'never happened',
  triggeredWithin: 'happened within the last', triggeredOlderThan: 'last happened more than … ago',
  notTriggeredWithin: 'did not happen within the last', memberOfSegment: 'is a member', notMemberOfSegment: 'is not a member',
};

/** What the builder offers: contact data fields, event names, segments and plugin operators. */
export async function loadVocabulary() {
  const [fields, names, segments, plugins] = await Promise.all([
    api.get('/contacts/fields').catch(() => ({ fields: [] })),
    api.get('/events/names').catch(() => ({ names: [] })),
    api.get('/segments').catch(() => []),
    api.get('/plugins').catch(() => ({ plugins: [] })),
  ]);
  return {
    data: (fields.fields || []).map((f) => f.field).filter((f) => f.startsWith('data.')),
    events: (names.names || []).map((n) => n.name),
    segments: api.rows(segments).map((s) => ({ id: s.id, name: s.name })),
    pluginOps: (plugins.plugins || []).filter((p) => p.kind === 'operator' && p.status === 'loaded').flatMap((p) => p.provides || []),
  };
}

function kindOf(field) {
  if (field === 'subscribed') return 'bool';
  if (field === 'createdAt' || field === 'updatedAt') return 'date';
  if (field.startsWith('event.') || field.startsWith('email.')) return 'event';
  if (field.startsWith('segment.')) return 'segment';
  return 'text';
}

function operatorsFor(field, vocab) {
  switch (kindOf(field)) {
    case 'bool': return ['equals', 'notEquals', 'exists', 'notExists', ...vocab.pluginOps];
    case 'date': return [...NUMBER_OPS, ...TIME_OPS, 'exists', 'notExists', ...vocab.pluginOps];
    case 'event': return EVENT_OPS;
    case 'segment': return SEGMENT_OPS;
    default: return [...TEXT_OPS, ...NUMBER_OPS, ...TIME_OPS, ...vocab.pluginOps];
  }
}

/** A value typed into the builder as JSON would carry it: numbers and booleans as such. */
function typed(raw, field) {
  if (field === 'subscribed') return raw === 'true';
  if (raw.trim() !== '' && !Number.isNaN(Number(raw)) && kindOf(field) === 'text') return Number(raw);
  return raw;
}

export function emptyTree() {
  return { logic: 'AND', groups: [{ filters: [{ field: 'email', operator: 'contains', value: '' }] }] };
}

/** Mounts a builder for `tree` into `box`; returns a function answering the current tree. */
export function conditionBuilder(box, tree, vocab, onChange) {
  const state = JSON.parse(JSON.stringify(tree && tree.groups ? tree : emptyTree()));
  const changed = () => onChange(JSON.parse(JSON.stringify(state)));

  const fieldSelect = (filter, redraw) => {
    const options = [
      ['Contact', ['email', 'subscribed', 'createdAt', 'updatedAt'].map((f) => [f, f])],
      ['Data', [...new Set([...vocab.data, ...(filter.field.startsWith('data.') ? [filter.field] : [])])].map((f) => [f, f])],
      ['Events', [...new Set([...vocab.events, ...(filter.field.startsWith('event.') ? [filter.field.slice(6)] : [])])].map((n) => [`event.${n}`, n])],
      ['Email activity', EMAIL_ACTIVITIES.map((a) => [`email.${a}`, `email ${a}`])],
      ['Segments', vocab.segments.map((s) => [`segment.${s.id}`, s.name])],
    ];
    const sel = h('select', { 'aria-label': 'Field', 'data-role': 'field' },
      options.filter(([, opts]) => opts.length).map(([label, opts]) => h('optgroup', { label },
        opts.map(([v, text]) => h('option', { value: v, selected: v === filter.field }, text)))),
      h('option', { value: '__data' }, 'Another data field…'));
    sel.addEventListener('change', () => {
      let f = sel.value;
      if (f === '__data') {
        const name = window.prompt('Data field name (for example plan or address.city)');
        if (!name) { sel.value = filter.field; return; }
        f = `data.${name.replace(/^data\./, '')}`;
        vocab.data.push(f);
      }
      filter.field = f;
      const ops = operatorsFor(f, vocab);
      if (!ops.includes(filter.operator)) filter.operator = ops[0];
      redraw();
      changed();
    });
    return sel;
  };

  const filterRow = (group, filter, index, redraw) => {
    const ops = operatorsFor(filter.field, vocab);
    const opSel = h('select', { 'aria-label': 'Operator', 'data-role': 'operator' },
      ops.map((o) => h('option', { value: o, selected: o === filter.operator }, LABELS[o] || o)));
    opSel.addEventListener('change', () => {
      filter.operator = opSel.value;
      if (NO_VALUE.has(filter.operator)) delete filter.value;
      if (WITH_UNIT.has(filter.operator)) filter.unit = filter.unit || 'days';
      else delete filter.unit;
      redraw();
      changed();
    });
    let value = null;
    if (!NO_VALUE.has(filter.operator)) {
      if (filter.field === 'subscribed' && !WITH_UNIT.has(filter.operator)) {
        value = h('select', { 'aria-label': 'Value', 'data-role': 'value' },
          ['true', 'false'].map((v) => h('option', { value: v, selected: String(filter.value) === v }, v === 'true' ? 'yes' : 'no')));
        if (filter.value === undefined) filter.value = true;
      } else {
        const type = WITH_UNIT.has(filter.operator) ? 'number' : kindOf(filter.field) === 'date' ? 'datetime-local' : 'text';
        value = h('input', { type, 'aria-label': 'Value', 'data-role': 'value', value: filter.value ?? '', min: type === 'number' ? 1 : null });
      }
      const read = () => {
        if (WITH_UNIT.has(filter.operator)) filter.value = Number(value.value);
        else if (kindOf(filter.field) === 'date' && value.value) filter.value = new Date(value.value).toISOString();
        else filter.value = typed(value.value, filter.field);
        changed();
      };
      value.addEventListener(value.tagName === 'SELECT' ? 'change' : 'input', read);
    }
    let unit = null;
    if (WITH_UNIT.has(filter.operator)) {
      unit = h('select', { 'aria-label': 'Unit', 'data-role': 'unit' }, UNITS.map((u) => h('option', { value: u, selected: u === filter.unit }, u)));
      unit.addEventListener('change', () => { filter.unit = unit.value; changed(); });
    }
    const remove = h('button.small', { type: 'button', 'aria-label': 'Remove this filter' }, '×');
    remove.addEventListener('click', () => { group.filters.splice(index, 1); redraw(); changed(); });
    return h('div.row.filter', fieldSelect(filter, redraw), opSel, value, unit, remove);
  };

  const treeView = (t, depth, redraw) => {
    const logic = h('select', { 'aria-label': 'Combine groups with', 'data-role': 'logic' },
      ['AND', 'OR'].map((l) => h('option', { value: l, selected: t.logic === l }, l === 'AND' ? 'all of these groups' : 'any of these groups')));
    logic.addEventListener('change', () => { t.logic = logic.value; changed(); });
    const addGroup = h('button.small', { type: 'button' }, '+ Group');
    addGroup.addEventListener('click', () => { t.groups.push({ filters: [{ field: 'email', operator: 'contains', value: '' }] }); redraw(); changed(); });
    return h('div.tree', { 'data-depth': depth },
      t.groups.length > 1 ? h('div.row', 'Match ', logic) : null,
      t.groups.map((g, gi) => {
        const addFilter = h('button.small', { type: 'button' }, '+ Filter');
        addFilter.addEventListener('click', () => { g.filters.push({ field: 'email', operator: 'contains', value: '' }); redraw(); changed(); });
        const nest = depth < 4 && !g.conditions ? h('button.small', { type: 'button' }, '+ Nested conditions') : null;
        if (nest) nest.addEventListener('click', () => { g.conditions = emptyTree(); redraw(); changed(); });
        const dropGroup = h('button.small', { type: 'button' }, 'Remove group');
        dropGroup.addEventListener('click', () => { t.groups.splice(gi, 1); redraw(); changed(); });
        return h('fieldset.group', h('legend', `Group ${gi + 1}: all of`),
          g.filters.map((f, fi) => filterRow(g, f, fi, redraw)),
          g.conditions ? h('div.nested', treeView(g.conditions, depth + 1, redraw)) : null,
          h('div.row', addFilter, nest, dropGroup));
      }),
      h('div.row', addGroup, t.groups.length === 0 ? h('span.muted', 'No group: every contact matches.') : null));
  };

  const redraw = () => fill(box, treeView(state, 0, redraw));
  redraw();
  return () => JSON.parse(JSON.stringify(state));
}

/** A live count: calls `count(tree)` at most every 400 ms and shows the answer or the API's error. */
export function liveCount(el, count) {
  let timer;
  let seq = 0;
  return (tree) => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      const mine = ++seq;
      el.textContent = 'Counting…';
      try {
        const n = await count(tree);
        if (mine === seq) { el.textContent = `${n.toLocaleString()} contact${n === 1 ? '' : 's'}`; el.dataset.count = String(n); el.classList.remove('error'); }
      } catch (e) {
        if (mine === seq) { el.textContent = e.message; delete el.dataset.count; el.classList.add('error'); }
      }
    }, 400);
  };
}
