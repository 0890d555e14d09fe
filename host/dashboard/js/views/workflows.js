// Workflows: the list, and the editor: the graph drawn as SVG (steps as nodes at their positions,
// transitions as edges labelled with their branch), nodes dragged or moved with the arrow keys, a side
// panel with the selected step's form (built-in types, and plugin types from the config schema their
// plugin publishes; the API validates and its errors show at the field), links added and removed,
// enable and disable, and the executions with one execution's step-by-step timeline.

import { h, fill, field, badge, confirmDialog, table, toast, when, num, showError } from '../dom.js';
import * as api from '../api.js';

const enc = encodeURIComponent;
const SVG = 'http://www.w3.org/2000/svg';
const W = 190; const H = 58;
const BUILTIN = ['SEND_EMAIL', 'DELAY', 'WAIT_FOR_EVENT', 'CONDITION', 'EXIT'];
const LABEL = { TRIGGER: 'Trigger', SEND_EMAIL: 'Send email', DELAY: 'Delay', WAIT_FOR_EVENT: 'Wait for event', CONDITION: 'Condition', EXIT: 'Exit' };
const OPERATORS = ['equals', 'notEquals', 'contains', 'notContains', 'greaterThan', 'lessThan', 'greaterThanOrEqual',
  'lessThanOrEqual', 'exists', 'notExists', 'within', 'olderThan', 'triggered', 'triggeredWithin', 'triggeredOlderThan',
  'notTriggered', 'notTriggeredWithin', 'memberOfSegment', 'notMemberOfSegment'];

function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const k of kids) if (k !== null && k !== undefined) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

export async function list({ main, navigate }) {
  const r = await api.get('/workflows?pageSize=100');
  const name = h('input', { name: 'name', type: 'text', required: true, maxlength: 100 });
  const ev = h('input', { name: 'eventName', type: 'text', required: true, placeholder: 'signed-up' });
  const f = h('form.stack', { novalidate: true }, h('p.form-error', { role: 'alert' }),
    h('div.grid', field('Name', name), field('Starts when this event is tracked', ev)),
    h('div.row', h('button.primary', { type: 'submit' }, 'Create workflow')));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const w = await api.post('/workflows', { name: name.value, eventName: ev.value });
      navigate(`/app/workflows/${enc(w.id)}`);
    } catch (err) { showError(f, err); }
  });
  fill(main, h('div.head', h('h1', 'Workflows')),
    table([
      ['Name', (w) => h('a', { href: `/app/workflows/${enc(w.id)}` }, w.name)],
      ['Trigger', (w) => w.triggerType === 'EVENT' ? h('code', w.triggerConfig?.eventName ?? '') : w.triggerType],
      ['Status', (w) => badge(w.enabled ? 'ENABLED' : 'DISABLED', w.enabled ? 'ok' : 'plain')],
      ['Steps', (w) => num(w._count?.steps)],
      ['Executions', (w) => num(w._count?.executions)],
    ], api.rows(r), 'No workflow yet.'),
    h('section.panel', h('h2', 'New workflow'), f));
}

/** Form fields for a step's config; `name` attributes are the API's field paths (`config.amount`). */
function configFields(type, cfg, step, ctx) {
  const inp = (path, attrs = {}) => h('input', { name: path, type: 'text', ...attrs });
  const sel = (path, options, value) => h('select', { name: path }, options.map(([v, l]) => h('option', { value: v, selected: String(v) === String(value ?? '') }, l)));
  switch (type) {
    case 'TRIGGER': return [h('p.muted', 'The trigger is the workflow\'s: change it above.')];
    case 'SEND_EMAIL': return [
      field('Template', sel('templateId', ctx.templates.map((t) => [t.id, t.name]), step?.templateId)),
      field('Recipient', sel('config.recipient.type', [['CONTACT', 'The contact'], ['CUSTOM', 'Another address']], cfg.recipient?.type || 'CONTACT')),
      field('Other address', inp('config.recipient.customEmail', { value: cfg.recipient?.customEmail ?? '', placeholder: 'team@example.com or {{data.manager}}' }), 'Only with "Another address".'),
    ];
    case 'DELAY': return [h('div.row',
      field('Wait', inp('config.amount', { type: 'number', min: 1, value: cfg.amount ?? 1 })),
      field('Unit', sel('config.unit', [['minutes', 'minutes'], ['hours', 'hours'], ['days', 'days']], cfg.unit || 'days')))];
    case 'WAIT_FOR_EVENT': return [
      field('Event', inp('config.eventName', { value: cfg.eventName ?? '', list: 'wf-events' })),
      field('Time-out (seconds)', inp('config.timeout', { type: 'number', min: 1, value: cfg.timeout ?? '' }), 'Empty: wait as long as it takes.'),
    ];
    case 'CONDITION': return [
      field('Field', inp('config.field', { value: cfg.field ?? 'contact.subscribed', list: 'wf-fields' }), 'contact.email, data.plan, event.<name>, workflow.<path>, segment.<id>, email.open…'),
      h('div.row',
        field('Operator', sel('config.operator', [...OPERATORS, ...ctx.pluginOps].map((o) => [o, o]), cfg.operator || 'equals')),
        field('Value', inp('config.value', { value: cfg.value === undefined ? '' : (typeof cfg.value === 'string' ? cfg.value : JSON.stringify(cfg.value)) })),
        field('Unit', sel('config.unit', [['', '—'], ['minutes', 'minutes'], ['hours', 'hours'], ['days', 'days']], cfg.unit))),
    ];
    case 'EXIT': return [field('Reason', inp('config.reason', { value: cfg.reason ?? '', maxlength: 500 }))];
    default: {
      const schema = ctx.stepTypes.find((t) => t.name === type)?.configSchema;
      const props = schema && schema.type === 'object' && schema.properties ? schema.properties : null;
      if (!props) return [field('Config (JSON)', h('textarea.code', { name: 'config', 'data-json': 'whole' }, JSON.stringify(cfg || {}, null, 2)))];
      const required = new Set(schema.required || []);
      return Object.entries(props).map(([k, p]) => {
        const path = `config.${k}`;
        const label = `${k}${required.has(k) ? '' : ' (optional)'}`;
        const v = cfg[k] ?? p.default;
        if (Array.isArray(p.enum)) return field(label, sel(path, p.enum.map((x) => [x, x]), v), p.description);
        if (p.type === 'boolean') return h('label.row', h('input', { type: 'checkbox', name: path, checked: Boolean(v), 'data-kind': 'boolean' }), label);
        if (p.type === 'number' || p.type === 'integer') return field(label, inp(path, { type: 'number', value: v ?? '', 'data-kind': 'number' }), p.description);
        if (p.type === 'string') return field(label, inp(path, { value: v ?? '' }), p.description);
        return field(label, h('textarea.code', { name: path, 'data-kind': 'json', rows: 4 }, v === undefined ? '' : JSON.stringify(v, null, 2)), p.description || 'JSON');
      });
    }
  }
}

/** Reads a step form back into `{config, templateId}`; throws on JSON that does not parse. */
function readConfig(form, type) {
  const whole = form.querySelector('[data-json=whole]');
  if (whole) return { config: whole.value.trim() ? JSON.parse(whole.value) : {} };
  const config = {};
  let templateId;
  for (const el of form.elements) {
    if (!el.name) continue;
    if (el.name === 'templateId') { templateId = el.value || undefined; continue; }
    if (!el.name.startsWith('config.')) continue;
    const path = el.name.slice(7).split('.');
    let v = el.type === 'checkbox' ? el.checked : el.value;
    if (el.dataset.kind === 'json') { if (v.trim() === '') continue; v = JSON.parse(v); }
    else if (el.type === 'number' || el.dataset.kind === 'number') { if (v === '') continue; v = Number(v); }
    else if (v === '' && el.type !== 'checkbox') continue;
    if (type === 'CONDITION' && path[0] === 'value') {
      try { v = JSON.parse(v); } catch { /* a plain string */ }
    }
    let o = config;
    for (const k of path.slice(0, -1)) o = (o[k] = o[k] || {});
    o[path[path.length - 1]] = v;
  }
  if (type === 'SEND_EMAIL' && config.recipient?.type === 'CONTACT') delete config.recipient.customEmail;
  return { config, templateId };
}

function branchesOf(step) {
  if (step.type === 'CONDITION') return [['yes', { condition: { branch: 'yes' } }], ['no', { condition: { branch: 'no' } }]];
  if (step.type === 'WAIT_FOR_EVENT') return [['EVENT', { waitOutcome: 'EVENT' }], ['TIMEOUT', { waitOutcome: 'TIMEOUT' }]];
  return [['next', {}]];
}

const edgeLabel = (t) => t.condition?.branch ?? t.waitOutcome ?? '';

export async function editor(ctx) {
  const { main, params, every } = ctx;
  const id = params.id;
  const base = `/workflows/${enc(id)}`;
  const [templates, plugins, names] = await Promise.all([
    api.get('/templates?pageSize=100').then(api.rows).catch(() => []),
    api.get('/plugins').catch(() => ({ plugins: [], stepTypes: [] })),
    api.get('/events/names').catch(() => ({ names: [] })),
  ]);
  const vocab = {
    templates, stepTypes: plugins.stepTypes || [],
    pluginOps: (plugins.plugins || []).filter((p) => p.kind === 'operator' && p.status === 'loaded').flatMap((p) => p.provides || []),
  };
  let wf = await api.get(base);
  let selected = null; // a step id, or {transition: id}
  const canvas = h('div.canvas', { id: 'workflow-canvas' });
  const side = h('aside.panel.side-panel', { id: 'step-panel' });
  const head = h('div');
  const runs = h('section.panel', { id: 'workflow-executions' });
  const timeline = h('div', { id: 'execution-timeline' });
  let openRun = null;

  const reload = async () => { wf = await api.get(base); draw(); };
  const stepOf = (sid) => wf.steps.find((x) => x.id === sid);
  const act = async (fn, ok) => {
    try { await fn(); if (ok) toast(ok); await reload(); } catch (err) { toast(err.message, 'bad'); }
  };

  function drawHead() {
    const toggle = h('button', { type: 'button', id: 'workflow-toggle', class: wf.enabled ? null : 'primary' }, wf.enabled ? 'Disable' : 'Enable');
    toggle.addEventListener('click', () => act(() => api.patch(base, { enabled: !wf.enabled }), wf.enabled ? 'Workflow disabled.' : 'Workflow enabled.'));
    const ev = h('input', { type: 'text', value: wf.triggerConfig?.eventName ?? '', 'aria-label': 'Trigger event', list: 'wf-events' });
    const saveEv = h('button.small', { type: 'button' }, 'Change trigger');
    saveEv.addEventListener('click', () => act(() => api.patch(base, { triggerType: 'EVENT', triggerConfig: { eventName: ev.value } }), 'Trigger changed.'));
    const typeSel = h('select', { 'aria-label': 'Step type', id: 'new-step-type' },
      [...BUILTIN, ...vocab.stepTypes.map((t) => t.name)].map((t) => h('option', { value: t }, LABEL[t] || t)));
    const add = h('button.primary.small', { type: 'button', id: 'add-step' }, 'Add step…');
    add.addEventListener('click', () => { selected = { adding: typeSel.value }; drawSide(); });
    fill(head, h('div.head', h('h1', wf.name), h('div.row', badge(wf.enabled ? 'ENABLED' : 'DISABLED', wf.enabled ? 'ok' : 'plain'), toggle)),
      h('div.row', wf.triggerType === 'EVENT' ? [h('span', 'Starts on event'), ev, saveEv] : h('span', `Trigger: ${wf.triggerType}`),
        h('span.grow'), typeSel, add),
      h('datalist', { id: 'wf-events' }, (names.names || []).map((n) => h('option', { value: n.name }))),
      h('datalist', { id: 'wf-fields' }, ['contact.email', 'contact.subscribed', 'contact.createdAt', 'email.open', 'email.click']
        .map((f) => h('option', { value: f }))));
  }

  function drawGraph() {
    const xs = wf.steps.map((st) => st.position?.x ?? 0);
    const ys = wf.steps.map((st) => st.position?.y ?? 0);
    const minX = Math.min(0, ...xs) - 40; const minY = Math.min(0, ...ys) - 40;
    const width = Math.max(600, Math.max(...xs, 0) + W + 80 - minX);
    const height = Math.max(320, Math.max(...ys, 0) + H + 80 - minY);
    const svg = s('svg', { viewBox: `${minX} ${minY} ${width} ${height}`, width, height, role: 'group', 'aria-label': 'Workflow graph', class: 'graph' });
    svg.append(s('defs', {}, s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
      s('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: 'currentColor' }))));
    const pos = (st) => ({ x: st.position?.x ?? 0, y: st.position?.y ?? 0 });
    const labels = []; // drawn last, above the nodes
    for (const t of wf.transitions) {
      const a = stepOf(t.fromStepId); const b = stepOf(t.toStepId);
      if (!a || !b) continue;
      const p = pos(a); const q = pos(b);
      const x1 = p.x + W / 2; const y1 = p.y + H; const x2 = q.x + W / 2; const y2 = q.y;
      const my = (y1 + y2) / 2;
      const isSel = selected && selected.transition === t.id;
      const g = s('g', { class: `edge${isSel ? ' selected' : ''}`, 'data-transition': t.id, 'data-label': edgeLabel(t), tabindex: 0, role: 'button', 'aria-label': `Link from ${a.name} to ${b.name}${edgeLabel(t) ? ` (${edgeLabel(t)})` : ''}` },
        s('path', { d: `M ${x1} ${y1} C ${x1} ${my}, ${x2} ${my}, ${x2} ${y2 - 2}`, fill: 'none', stroke: 'currentColor', 'stroke-width': isSel ? 3 : 1.5, 'marker-end': 'url(#arrow)' }));
      const label = edgeLabel(t);
      if (label) {
        // On the curve a third of the way from its step, so two branches of one step never share a spot.
        const k = 0.35; const u = 1 - k;
        const lx = u * u * u * x1 + 3 * u * u * k * x1 + 3 * u * k * k * x2 + k * k * k * x2;
        const ly = u * u * u * y1 + 3 * u * u * k * my + 3 * u * k * k * my + k * k * k * y2;
        labels.push(s('g', { class: 'edge-tag', 'data-for': t.id },
          s('rect', { x: lx - 28, y: ly - 10, width: 56, height: 20, rx: 10, class: `edge-label tone-${label === 'yes' || label === 'EVENT' ? 'ok' : label === 'no' || label === 'TIMEOUT' ? 'bad' : 'plain'}` }),
          s('text', { x: lx, y: ly + 4, 'text-anchor': 'middle', 'font-size': 11 }, label)));
      }
      const pick = () => { selected = { transition: t.id }; draw(); };
      g.addEventListener('click', pick);
      g.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pick(); } });
      svg.append(g);
    }
    for (const st of wf.steps) {
      const p = pos(st);
      const isSel = selected === st.id;
      const g = s('g', { class: `node type-${st.type.toLowerCase()}${isSel ? ' selected' : ''}`, transform: `translate(${p.x} ${p.y})`, tabindex: 0, role: 'button', 'data-step': st.id, 'data-type': st.type, 'aria-label': `${LABEL[st.type] || st.type}: ${st.name}` },
        s('rect', { width: W, height: H, rx: 8 }),
        s('text', { x: 12, y: 22, class: 'node-type', 'font-size': 11 }, LABEL[st.type] || st.type),
        s('text', { x: 12, y: 42, class: 'node-name', 'font-size': 14 }, st.name.length > 24 ? `${st.name.slice(0, 23)}…` : st.name));
      let drag = null;
      g.addEventListener('pointerdown', (e) => {
        const m = svg.getScreenCTM().inverse();
        const start = new DOMPoint(e.clientX, e.clientY).matrixTransform(m);
        drag = { start, from: { ...p }, moved: false };
        g.setPointerCapture(e.pointerId);
      });
      g.addEventListener('pointermove', (e) => {
        if (!drag) return;
        const m = svg.getScreenCTM().inverse();
        const at = new DOMPoint(e.clientX, e.clientY).matrixTransform(m);
        const dx = at.x - drag.start.x; const dy = at.y - drag.start.y;
        if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
        drag.to = { x: Math.round(drag.from.x + dx), y: Math.round(drag.from.y + dy) };
        g.setAttribute('transform', `translate(${drag.to.x} ${drag.to.y})`);
      });
      g.addEventListener('pointerup', () => {
        const d = drag; drag = null;
        if (d && d.moved && d.to) move(st, d.to);
        else { selected = st.id; draw(); }
      });
      g.addEventListener('keydown', (e) => {
        const step = { ArrowLeft: [-20, 0], ArrowRight: [20, 0], ArrowUp: [0, -20], ArrowDown: [0, 20] }[e.key];
        if (step) { e.preventDefault(); move(st, { x: p.x + step[0], y: p.y + step[1] }); }
        if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); selected = st.id; draw(); }
      });
      svg.append(g);
    }
    for (const l of labels) svg.append(l);
    fill(canvas, svg);
  }

  async function move(st, to) {
    st.position = to;
    draw();
    try { await api.patch(`${base}/steps/${enc(st.id)}`, { position: to }); } catch (err) { toast(err.message, 'bad'); await reload(); }
    canvas.querySelector(`[data-step="${st.id}"]`)?.focus();
  }

  function stepForm(type, step) {
    const name = h('input', { name: 'name', type: 'text', value: step?.name ?? (LABEL[type] || type), required: true, maxlength: 100 });
    const auto = step ? null : h('label.row', h('input', { type: 'checkbox', name: 'autoConnect', checked: true }), 'Link it after the last step that leads nowhere');
    const btn = h('button.primary', { type: 'submit' }, step ? 'Save step' : 'Add step');
    const f = h('form.stack', { novalidate: true, 'data-form': step ? 'edit' : 'add' }, h('p.form-error', { role: 'alert' }),
      field('Name', name), ...configFields(type, step?.config || {}, step, vocab), auto, h('div.row', btn));
    f.addEventListener('submit', async (e) => {
      e.preventDefault();
      let read;
      try { read = readConfig(f, type); } catch (err) { showError(f, { message: `Not valid JSON: ${err.message}`, fields: [] }); return; }
      const body = { name: name.value, ...(type === 'TRIGGER' ? {} : { config: read.config }) };
      if (read.templateId) body.templateId = read.templateId;
      btn.disabled = true;
      try {
        if (step) {
          await api.patch(`${base}/steps/${enc(step.id)}`, body);
          toast('Step saved.');
        } else {
          const lowest = Math.max(0, ...wf.steps.map((x) => (x.position?.y ?? 0)));
          body.type = type;
          body.autoConnect = f.elements.autoConnect.checked;
          // Below the lowest step, in one of three columns, so a branch's steps sit side by side.
          body.position = { x: (wf.steps.length % 3) * (W + 40), y: lowest + 110 };
          const created = await api.post(`${base}/steps`, body);
          selected = created.id;
          toast(`${LABEL[type] || type} added.`);
        }
        await reload();
      } catch (err) { showError(f, err); } finally { btn.disabled = false; }
    });
    return f;
  }

  function linkForm(step) {
    const targets = wf.steps.filter((x) => x.id !== step.id && x.type !== 'TRIGGER');
    if (!targets.length || step.type === 'EXIT') return null;
    const to = h('select', { 'aria-label': 'Link to', name: 'toStepId' }, targets.map((x) => h('option', { value: x.id }, x.name)));
    const branches = branchesOf(step);
    const br = h('select', { 'aria-label': 'Branch', name: 'branch' }, branches.map(([l], i) => h('option', { value: i }, l)));
    const custom = step.type in LABEL ? null : h('input', { type: 'text', name: 'customBranch', placeholder: 'named branch (optional)', 'aria-label': 'Named branch' });
    const go = h('button.small', { type: 'button' }, 'Link');
    go.addEventListener('click', () => {
      const extra = custom && custom.value ? { condition: { branch: custom.value } } : branches[Number(br.value)][1];
      act(() => api.post(`${base}/transitions`, { fromStepId: step.id, toStepId: to.value, ...extra }), 'Linked.');
    });
    return h('div', h('h3', 'Link to another step'), h('div.row', to, branches.length > 1 ? br : null, custom, go));
  }

  function drawSide() {
    if (selected && selected.adding) {
      fill(side, h('h2', `New ${LABEL[selected.adding] || selected.adding} step`), stepForm(selected.adding, null));
      return;
    }
    if (selected && selected.transition) {
      const t = wf.transitions.find((x) => x.id === selected.transition);
      if (!t) { selected = null; drawSide(); return; }
      const rm = h('button.danger', { type: 'button' }, 'Remove link');
      rm.addEventListener('click', () => { selected = null; act(() => api.del(`${base}/transitions/${enc(t.id)}`), 'Link removed.'); });
      fill(side, h('h2', 'Link'), h('p', `${stepOf(t.fromStepId)?.name} → ${stepOf(t.toStepId)?.name}`, edgeLabel(t) ? ` (${edgeLabel(t)})` : ''), rm);
      return;
    }
    const step = selected && stepOf(selected);
    if (!step) { fill(side, h('h2', 'Steps'), h('p.muted', 'Select a step to edit it, or add one. Drag steps to arrange them; with a step focused, the arrow keys move it.')); return; }
    const del = step.type === 'TRIGGER' ? null : h('button.danger.small', { type: 'button' }, 'Delete step');
    if (del) {
      del.addEventListener('click', async () => {
        const splice = step.outgoingTransitions.length === 1;
        if (!await confirmDialog({ title: `Delete ${step.name}?`, body: splice ? 'Its links move to the step after it.' : 'Steps that only it leads to go with it.', action: 'Delete', danger: true })) return;
        selected = null;
        act(() => api.del(`${base}/steps/${enc(step.id)}${splice ? '?splice=true' : ''}`), 'Step deleted.');
      });
    }
    fill(side, h('h2', `${LABEL[step.type] || step.type}`), stepForm(step.type, step), linkForm(step), h('div.row.end', del));
  }

  async function drawRuns() {
    const r = await api.get(`${base}/executions?pageSize=20`);
    const rowsOf = api.rows(r);
    fill(runs, h('h2', 'Executions'), table([
      ['Started', (x) => h('button.link', { type: 'button', 'data-execution': x.id, onclick: () => { openRun = x.id; drawTimeline(); } }, when(x.startedAt))],
      ['Status', (x) => badge(x.status)],
      ['Contact', (x) => h('a.wrap', { href: `/app/contacts/${enc(x.contactId)}` }, x.contactId)],
      ['Note', (x) => x.error ?? x.exitReason ?? ''],
    ], rowsOf, 'No execution yet: enable the workflow and track its event.'), timeline);
    if (openRun) drawTimeline();
  }

  async function drawTimeline() {
    const x = await api.get(`${base}/executions/${enc(openRun)}`);
    fill(timeline, h('h3', 'Execution ', badge(x.status)), h('ol.timeline', (x.stepExecutions || []).map((r) => h('li', { 'data-status': r.status },
      h('div.row', badge(r.status), h('strong', stepOf(r.stepId)?.name ?? r.stepType), h('span.muted', when(r.startedAt))),
      r.error ? h('p.error', r.error) : null,
      r.output && Object.keys(r.output).length ? h('code.wrap', JSON.stringify(r.output)) : null))));
  }

  function draw() { drawHead(); drawGraph(); drawSide(); }
  fill(main, head, h('div.workflow', canvas, side), runs);
  draw();
  await drawRuns();
  every(2000, () => drawRuns().catch(() => {}));
}
