// A project's settings: name and tracking; members, roles and invitations; billing limits and this
// month's consumption; security status and suspension reason; resetting the project behind a typed
// confirmation. Sections an owner or admin alone may see answer 403 to others and say so.

import { h, fill, field, badge, confirmDialog, table, toast, when, num, progress } from '../dom.js';
import * as api from '../api.js';
import { form } from './account.js';

const enc = encodeURIComponent;
const ROLES = ['OWNER', 'ADMIN', 'MEMBER'];
const TRACKING = ['MARKETING_ONLY', 'ENABLED', 'DISABLED'];
const CATEGORIES = ['transactional', 'campaigns', 'workflows', 'inbound'];

async function section(title, load) {
  const box = h('section.panel', h('h2', title), h('p.muted', 'Loading…'));
  try {
    const content = await load();
    fill(box, h('h2', title), content);
  } catch (e) {
    fill(box, h('h2', title), h('p.muted', e.status === 403 ? 'Only owners and admins see this.' : e.message));
  }
  return box;
}

export async function page(ctx) {
  const { main, project } = ctx;
  const pid = enc(project.id);
  const general = h('section.panel', h('h2', 'General'), form([
    field('Name', h('input', { name: 'name', type: 'text', value: project.name, required: true, maxlength: 100 })),
    field('Open and click tracking', h('select', { name: 'tracking' },
      TRACKING.map((t) => h('option', { value: t, selected: project.tracking === t }, t))),
    'MARKETING_ONLY tracks campaigns and marketing templates, never transactional email.'),
  ], 'Save', async (v) => {
    await api.patch(`/users/@me/projects/${pid}`, { name: v.name, tracking: v.tracking }, { scoped: false });
    await ctx.refreshSession();
    toast('Project saved.');
    ctx.reload();
  }));

  const members = section('Members', async () => {
    const [list, invites] = await Promise.all([
      api.get(`/projects/${pid}/members`, { scoped: false }),
      api.get(`/projects/${pid}/invitations`, { scoped: false }).catch(() => []),
    ]);
    const invite = form([
      h('div.row', h('div.grow', field('Email', h('input', { name: 'email', type: 'email', required: true }))),
        field('Role', h('select', { name: 'role' }, ROLES.map((r) => h('option', { value: r, selected: r === 'MEMBER' }, r))))),
    ], 'Invite', async (v) => {
      const r = await api.post(`/projects/${pid}/members`, { email: v.email, role: v.role }, { scoped: false });
      toast(r.invited ? `Invitation mailed to ${v.email}.` : `${v.email} added.`);
      ctx.reload();
    });
    const roleCell = (m) => {
      if (m.userId === ctx.user.id) return badge(m.role, 'plain');
      const sel = h('select', { 'aria-label': `Role of ${m.email ?? m.userId}` }, ROLES.map((r) => h('option', { value: r, selected: r === m.role }, r)));
      sel.addEventListener('change', async () => {
        try { await api.patch(`/projects/${pid}/members/${enc(m.userId)}`, { role: sel.value }, { scoped: false }); toast('Role changed.'); } catch (e) { toast(e.message, 'bad'); sel.value = m.role; }
      });
      return sel;
    };
    const removeCell = (m) => {
      const b = h('button.small', { type: 'button' }, m.userId === ctx.user.id ? 'Leave' : 'Remove');
      b.addEventListener('click', async () => {
        if (!await confirmDialog({ title: `Remove ${m.email ?? 'this member'}?`, action: 'Remove', danger: true })) return;
        try { await api.del(`/projects/${pid}/members/${enc(m.userId)}`, { scoped: false }); ctx.reload(); } catch (e) { toast(e.message, 'bad'); }
      });
      return b;
    };
    return [
      table([['Member', (m) => [m.name ? h('strong', m.name) : null, h('div.wrap', m.email ?? m.userId)]], ['Role', roleCell], ['Since', (m) => when(m.createdAt)], ['', removeCell]], api.rows(list)),
      api.rows(invites).length ? [h('h3', 'Invitations'), table([
        ['Email', (i) => i.email], ['Role', (i) => i.role], ['Expires', (i) => when(i.expiresAt)],
        ['', (i) => {
          const b = h('button.small', { type: 'button' }, 'Withdraw');
          b.addEventListener('click', async () => {
            try { await api.del(`/projects/${pid}/invitations/${enc(i.email)}`, { scoped: false }); ctx.reload(); } catch (e) { toast(e.message, 'bad'); }
          });
          return b;
        }],
      ], api.rows(invites))] : null,
      h('h3', 'Invite someone'), invite,
    ];
  });

  const billing = section('Billing', async () => {
    const [limits, use] = await Promise.all([
      api.get(`/users/@me/projects/${pid}/billing-limits`, { scoped: false }),
      api.get(`/users/@me/projects/${pid}/billing-consumption`, { scoped: false }),
    ]);
    const limitForm = form([h('div.grid', CATEGORIES.map((c) => field(`${c} per month`,
      h('input', { name: c, type: 'number', min: 0, value: limits[c] ?? '', placeholder: 'unlimited' }))))],
    'Save limits', async (v) => {
      const body = Object.fromEntries(CATEGORIES.map((c) => [c, v[c] === '' ? null : Number(v[c])]));
      await api.put(`/users/@me/projects/${pid}/billing-limits`, body, { scoped: false });
      toast('Limits saved.');
    });
    return [
      h('p.muted', `This month: ${when(use.period?.start)} to ${when(use.period?.end)}`),
      h('div.grid', CATEGORIES.map((c) => {
        const u = use.usage?.[c] || { used: 0 };
        return h('div.stat', h('div.label', c), h('div.value', num(u.used)),
          u.limit === null || u.limit === undefined ? h('div.label', 'no limit') : progress(u.percent, `${num(u.used)} of ${num(u.limit)}`));
      })),
      h('h3', 'Monthly limits'), limitForm,
    ];
  });

  const security = section('Security', async () => {
    const s = await api.get(`/projects/${pid}/security`, { scoped: false });
    const win = (label, w) => h('div.stat', h('div.label', label), h('div.value', `${(w?.bounceRate || 0).toFixed(2)}%`),
      h('div.label', `bounces of ${num(w?.sent)} sent · complaints ${(w?.complaintRate || 0).toFixed(2)}%`));
    return [
      h('p', 'Status: ', badge(s.status)),
      s.suspensionReason ? h('p.notice.bad', { id: 'suspension-reason' }, s.suspensionReason) : null,
      h('div.grid', win('Last 7 days', s.last7Days), win('Last 30 days', s.last30Days)),
      h('p.muted', `Suspended above ${s.thresholds?.bounceRate ?? 0}% bounces or ${s.thresholds?.complaintRate ?? 0}% complaints, after ${num(s.thresholds?.minimumSent)} emails.`),
      (s.suspensions || []).length ? table([
        ['Suspended', (x) => when(x.suspendedAt)], ['Reason', (x) => x.reason], ['Lifted', (x) => when(x.liftedAt)],
      ], s.suspensions) : null,
    ];
  });

  const resetBtn = h('button.danger', { type: 'button', id: 'reset-project' }, 'Reset project');
  resetBtn.addEventListener('click', async () => {
    const ok = await confirmDialog({
      title: `Reset ${project.name}?`,
      body: 'Every contact, event, template, campaign, segment and workflow of the project is deleted. Domains, members and keys stay.',
      action: 'Reset', danger: true, typed: project.name,
    });
    if (!ok) return;
    try {
      await api.post(`/users/@me/projects/${pid}/reset`, { confirm: project.name }, { scoped: false });
      toast('The project is reset.');
      ctx.navigate('/app');
    } catch (e) { toast(e.message, 'bad'); }
  });

  fill(main, h('div.head', h('h1', 'Settings')), general, h('p.muted', 'Loading…'));
  const parts = await Promise.all([members, billing, security]);
  fill(main, h('div.head', h('h1', 'Settings')), general, ...parts,
    h('section.panel', h('h2', 'Danger zone'), h('p', 'Resetting deletes the project\'s data and cannot be undone.'), resetBtn));
}
