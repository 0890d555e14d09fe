// A project's overview (the onboarding checklist from `/projects/:id/setup-state`), creating a project,
// and its API keys: shown once, when a project is created or its keys are regenerated.

import { h, fill, field, copyButton, confirmDialog, toast } from '../dom.js';
import * as api from '../api.js';
import { form } from './account.js';

const STEPS = [
  ['hasVerifiedDomain', 'Verify a sending domain', '/app/domains'],
  ['hasTemplate', 'Create a template', '/app/templates/new'],
  ['hasContacts', 'Add or import contacts', '/app/contacts/import'],
  ['hasSentEmail', 'Send your first email', '/app/keys'],
  ['hasCampaign', 'Create a campaign', '/app/campaigns/new'],
  ['hasWorkflow', 'Build a workflow', '/app/workflows'],
];

export async function overview({ main, project }) {
  fill(main, h('div.head', h('h1', project.name)), h('p.muted', 'Loading…'));
  const state = await api.get(`/projects/${encodeURIComponent(project.id)}/setup-state`);
  const done = STEPS.filter(([k]) => state[k]).length;
  fill(main, h('div.head', h('h1', project.name), project.disabled ? h('span.badge.tone-bad', 'disabled') : null),
    h('section.panel', { 'aria-labelledby': 'checklist-h' },
      h('h2', { id: 'checklist-h' }, state.completed ? 'All set' : `Getting started: ${done} of ${STEPS.length} done`),
      h('ul.checklist', { id: 'setup-checklist' }, STEPS.map(([key, label, href]) => h('li', {
        class: state[key] ? 'done' : null, 'data-step': key,
      }, h('span.mark', { 'aria-hidden': 'true' }, state[key] ? '✓' : ''),
      h('span.what', href && !state[key] ? h('a', { href }, label) : label),
      h('span.sr-only', state[key] ? ' (done)' : ' (to do)'))))),
    h('section.panel', h('h2', 'Project'), h('dl.props',
      h('dt', 'Project id'), h('dd', h('code', project.id), ' ', copyButton(project.id)),
      h('dt', 'Your role'), h('dd', project.role || '—'),
      h('dt', 'Tracking'), h('dd', project.tracking))));
}

export function showKeys(container, keys) {
  fill(container, h('div.notice', { role: 'status' },
    h('strong', 'Copy the secret key now: Herald shows it only this once.')),
  h('h3', 'Public key'), h('p.muted', 'For tracking from a browser (POST /v1/track).'),
  h('div.secret', h('code', { id: 'public-key' }, keys.public), copyButton(keys.public)),
  h('h3', 'Secret key'), h('p.muted', 'For every other API call, from your servers only.'),
  h('div.secret', h('code', { id: 'secret-key' }, keys.secret), copyButton(keys.secret)));
}

export async function create(ctx) {
  const { main } = ctx;
  const result = h('div');
  fill(main, h('div.head', h('h1', 'New project')),
    h('p.muted', 'A project holds its own contacts, templates, domains and keys.'),
    form([field('Name', h('input', { name: 'name', type: 'text', required: true, maxlength: 100 }))], 'Create project',
      async (v) => {
        const p = await api.post('/users/@me/projects', { name: v.name }, { scoped: false });
        localStorage.setItem('herald.project', p.id);
        api.setProject(p.id);
        await ctx.refreshSession();
        fill(main, h('div.head', h('h1', `${p.name} is ready`)), result,
          h('p', h('a.button.primary', { href: '/app' }, 'Go to the project')));
        showKeys(result, p);
        // Redraw the side bar with the new project without losing the keys on screen.
        const sel = document.getElementById('project-switcher');
        if (sel) sel.prepend(h('option', { value: p.id, selected: true }, p.name));
      }));
}

export async function keys({ main, project }) {
  const out = h('div', { id: 'keys-result' });
  const regen = h('button.danger', { type: 'button', id: 'regenerate-keys' }, 'Regenerate keys');
  regen.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: 'Regenerate the API keys?',
      body: `The current public and secret keys of ${project.name} stop working at once, on every server that uses them.`,
      action: 'Regenerate', danger: true,
    });
    if (!ok) return;
    regen.disabled = true;
    try {
      const r = await api.post(`/users/@me/projects/${encodeURIComponent(project.id)}/regenerate-keys`, undefined, { scoped: false });
      showKeys(out, r);
      toast('New keys are active.');
    } catch (e) {
      toast(e.message, 'bad');
    } finally {
      regen.disabled = false;
    }
  });
  fill(main, h('div.head', h('h1', 'API keys')),
    h('p', 'Herald keeps only a digest of each key, so it cannot show them again. Lost a key? Regenerate both.'),
    h('section.panel', h('h2', 'Send with the API'),
      h('pre', `curl -X POST ${location.origin}/v1/send \\\n  -H "Authorization: Bearer sk_..." \\\n  -H "Content-Type: application/json" \\\n  -d '{"to":"someone@example.com","subject":"Hello","body":"<p>Hi</p>","from":"you@your-domain"}'`)),
    h('div.row', regen), out);
}
