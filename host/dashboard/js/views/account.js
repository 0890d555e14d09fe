// The account pages: log in, sign up, forgotten password, and the three pages Herald's account mail
// links to (`/account/verify-email`, `/account/reset-password`, `/account/accept-invitation`, each
// with `?token=`). They call `/auth/...`; a successful login lands on `next` or the overview.

import { h, fill, field, showError, toast } from '../dom.js';
import * as api from '../api.js';

function brand() {
  return h('div.row', { class: 'brand-row' }, h('a.brand', { href: '/' }, h('img', { src: '/assets/favicon.svg', alt: '' }), 'Herald'));
}

/** A form whose submit runs `action` with the form's values, showing the API's errors in place. */
export function form(fields, submitLabel, action) {
  const btn = h('button.primary', { type: 'submit' }, submitLabel);
  const f = h('form.stack', { novalidate: true }, h('p.form-error', { role: 'alert' }), fields, h('div.row', btn));
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    btn.disabled = true;
    for (const el of f.querySelectorAll('.error, .form-error')) el.textContent = '';
    try {
      await action(Object.fromEntries(new FormData(f)));
    } catch (err) {
      showError(f, err);
    } finally {
      btn.disabled = false;
    }
  });
  return f;
}

function input(name, type, attrs = {}) {
  return h('input', { name, type, ...attrs });
}

/** Where to go after logging in: a local `next` path, never another site. */
function nextPath(query) {
  const n = query.get('next') || '';
  return /^\/(app|account)(\/|$|\?)/.test(n) ? n : '/app';
}

export async function login(ctx) {
  const { main, query } = ctx;
  const providers = h('div.stack');
  fill(main, brand(), h('h1', 'Log in'),
    form([
      field('Email', input('email', 'email', { autocomplete: 'email', required: true })),
      field('Password', input('password', 'password', { autocomplete: 'current-password', required: true })),
    ], 'Log in', async (v) => {
      await api.post('/auth/login', { email: v.email, password: v.password }, { scoped: false });
      window.dispatchEvent(new CustomEvent('herald:session-changed'));
      ctx.navigate(nextPath(query), { replace: true });
    }),
    providers,
    h('p', h('a', { href: '/account/forgot-password' }, 'Forgot your password?')),
    h('p', 'New to Herald? ', h('a', { href: '/account/signup' }, 'Create an account')));
  try {
    const list = api.rows(await api.get('/auth/oauth-config', { scoped: false }));
    if (list.length) {
      fill(providers, h('div.divider', 'or'),
        list.map((p) => h('a.button', { href: `/auth/oauth/${encodeURIComponent(p.id)}` }, `Continue with ${p.name}`)));
    }
  } catch { /* no providers shown */ }
}

export async function signup({ main }) {
  fill(main, brand(), h('h1', 'Create your account'),
    form([
      field('Name', input('name', 'text', { autocomplete: 'name' })),
      field('Email', input('email', 'email', { autocomplete: 'email', required: true })),
      field('Password', input('password', 'password', { autocomplete: 'new-password', minlength: 8, required: true }),
        'At least 8 characters.'),
    ], 'Sign up', async (v) => {
      const body = { email: v.email, password: v.password };
      if (v.name) body.name = v.name;
      await api.post('/auth/signup', body, { scoped: false });
      fill(main, brand(), h('h1', 'Check your inbox'),
        h('p', 'We sent a link to ', h('strong', v.email), '. Follow it to finish creating your account.'),
        h('p', h('a', { href: '/account/login' }, 'Back to log in')));
    }),
    h('p', 'Have an account? ', h('a', { href: '/account/login' }, 'Log in')));
}

export async function forgot({ main }) {
  fill(main, brand(), h('h1', 'Reset your password'),
    form([field('Email', input('email', 'email', { autocomplete: 'email', required: true }))], 'Send a reset link',
      async (v) => {
        await api.post('/auth/request-password-reset', { email: v.email }, { scoped: false });
        fill(main, brand(), h('h1', 'Check your inbox'),
          h('p', 'If an account has that address, a link to choose a new password is on its way. It works for one hour.'),
          h('p', h('a', { href: '/account/login' }, 'Back to log in')));
      }),
    h('p', h('a', { href: '/account/login' }, 'Back to log in')));
}

function missingToken(main) {
  fill(main, brand(), h('h1', 'This link is incomplete'),
    h('p', 'Open the link from the email again, or ask for a new one.'), h('p', h('a', { href: '/account/login' }, 'Log in')));
}

export async function verifyEmail(ctx) {
  const { main, query } = ctx;
  const token = query.get('token');
  if (!token) { missingToken(main); return; }
  fill(main, brand(), h('h1', 'Confirm your email'),
    h('p', 'Enter the password you chose to finish.'),
    form([field('Password', input('password', 'password', { autocomplete: 'current-password', required: true }))],
      'Confirm', async (v) => {
        await api.post('/auth/verify-email', { token, password: v.password }, { scoped: false });
        window.dispatchEvent(new CustomEvent('herald:session-changed'));
        toast('Your email is confirmed.');
        ctx.navigate('/app', { replace: true });
      }));
}

export async function resetPassword(ctx) {
  const { main, query } = ctx;
  const token = query.get('token');
  if (!token) { missingToken(main); return; }
  fill(main, brand(), h('h1', 'Choose a new password'),
    form([field('New password', input('password', 'password', { autocomplete: 'new-password', minlength: 8, required: true }),
      'At least 8 characters.')], 'Save password', async (v) => {
      await api.post('/auth/reset-password', { token, password: v.password }, { scoped: false });
      toast('Your password is changed: log in with it.');
      ctx.navigate('/account/login', { replace: true });
    }));
}

export async function acceptInvitation(ctx) {
  const { main, query } = ctx;
  const token = query.get('token');
  if (!token) { missingToken(main); return; }
  const accept = h('button.primary', { type: 'button' }, 'Join the project');
  const msg = h('p.form-error', { role: 'alert' });
  accept.addEventListener('click', async () => {
    accept.disabled = true;
    try {
      const r = await api.post('/auth/accept-invitation', { token }, { scoped: false });
      localStorage.setItem('herald.project', r.projectId);
      window.dispatchEvent(new CustomEvent('herald:session-changed'));
      toast(`You joined the project as ${r.role.toLowerCase()}.`);
      ctx.navigate('/app', { replace: true });
    } catch (e) {
      msg.textContent = e.message;
      accept.disabled = false;
    }
  });
  fill(main, h('div.narrow.card', h('h1', 'Join a project'),
    h('p', `You were invited to a project on this Herald server as ${ctx.user.email}.`), msg, accept));
}
