// The page's entry point: layout, token prompt, hash routing between the views
// (thread, events, approvals, sessions) and the live connection indicator.

import { h, replace } from './dom.js';
import { api, setToken, token, whenUnauthorized } from './api.js';
import { Sidebar } from './sidebar.js';
import { ThreadView } from './thread.js';
import { EventsView } from './events.js';
import { SessionsView } from './sessions.js';
import { ApprovalsView } from './approvals.js';
import { Notifier } from './notify.js';
import { installShortcuts } from './shortcuts.js';
import { installSearch } from './search.js';

const main = h('main', { id: 'main' });
const status = h('span', { class: 'conn', id: 'conn', title: 'live updates (WebSocket)' }, 'connecting…');
const notifyButton = h('button', { type: 'button', class: 'link nav-button', id: 'notify-toggle' }, 'Notify: off');
let shortcuts = null;
const shortcutsButton = h('button', {
  type: 'button', class: 'link nav-button', id: 'shortcuts-button', title: 'keyboard shortcuts (?)',
  on: { click: () => { if (shortcuts) shortcuts.hidden = !shortcuts.hidden; } },
}, '?');
let sidebar = null;
let view = null;

/** Opens or closes the sidebar on a phone (UX-05). */
function toggleSidebar(open) {
  const app = document.getElementById('app');
  const on = open === undefined ? !app.classList.contains('sidebar-open') : open;
  app.classList.toggle('sidebar-open', on);
  const button = document.getElementById('sidebar-toggle');
  if (button) button.setAttribute('aria-expanded', String(on));
}

function nav() {
  return h('nav', { class: 'top' },
    h('button', { type: 'button', class: 'sidebar-toggle', id: 'sidebar-toggle', 'aria-label': 'projects and threads', 'aria-expanded': 'false', on: { click: () => toggleSidebar() } }, '☰'),
    h('a', { href: '#/', class: 'brand' }, 'knife'),
    h('a', { href: '#/approvals', id: 'nav-approvals' }, 'Approvals'),
    h('a', { href: '#/sessions', id: 'nav-sessions' }, 'Sessions'),
    status, notifyButton, shortcutsButton);
}

/** Shows the token form (the server answered 401). */
function askToken(reason) {
  if (document.getElementById('token-form')) return;
  const input = h('input', { type: 'password', id: 'token-input', autocomplete: 'off', placeholder: 'API token' });
  const form = h('form', { id: 'token-form', class: 'token-form' },
    h('h2', {}, 'This knife server needs its API token'),
    h('p', {}, 'knife is listening beyond this machine, so every request must carry the token it was started with ($KNIFE_API_TOKEN, or the variable named by api_token_env). It is kept for this tab only.'),
    token() ? h('p', { class: 'error' }, reason || 'The token was refused.') : null,
    input,
    h('button', { type: 'submit', id: 'token-submit' }, 'Continue'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    location.reload();
  });
  replace(document.getElementById('app'), form);
  input.focus();
}

function route() {
  toggleSidebar(false); // picking a thread (or any view) closes the phone sidebar
  if (view && view.destroy) view.destroy();
  view = null;
  const path = location.hash.replace(/^#\/?/, '').split('/');
  const [kind, id, sub] = path;
  if (kind === 'thread' && id) {
    view = sub === 'events' ? new EventsView(decodeURIComponent(id)) : new ThreadView(decodeURIComponent(id), sidebar);
  } else if (kind === 'sessions') {
    view = new SessionsView(sidebar);
  } else if (kind === 'approvals') {
    view = new ApprovalsView(sidebar);
  } else {
    view = new Welcome(sidebar);
  }
  sidebar.select(kind === 'thread' ? decodeURIComponent(id) : null);
  for (const a of document.querySelectorAll('nav.top a')) {
    a.classList.toggle('active', a.getAttribute('href') === `#/${kind || ''}`);
  }
  replace(main, view.el);
}

/** The start page: first steps while there is no project, else where to click. */
class Welcome {
  constructor(sb) {
    this.sidebar = sb;
    this.el = h('section', { class: 'welcome', id: 'welcome' });
    this.off = sb.onChange(() => this.draw());
    this.draw();
  }

  draw() {
    const first = this.sidebar.loaded && !this.sidebar.projects.length;
    if (first === this.first) return;
    this.first = first;
    replace(this.el, first
      ? [h('h1', {}, 'Welcome to knife'),
        h('p', {}, 'knife runs AI coding agents in project folders and records every step. To start:'),
        h('ol', { id: 'first-steps' },
          h('li', {}, 'Add a project: under “Add a project” on the left, type the absolute path of a folder on the machine knife runs on (like ', h('code', {}, '/home/you/code/app'), ').'),
          h('li', {}, 'Press “+ New thread” under the project.'),
          h('li', {}, 'Write to the agent and press Send (or Ctrl+Enter). The answer streams in; commands and file changes ask for your approval first (unless knife.toml’s permissions allow them).'))]
      : [h('h1', {}, 'knife'),
        h('p', {}, 'Pick a thread on the left, or start a new one under a project.'),
        h('p', { class: 'muted' }, 'Threads update live; approvals, sessions and the raw event log are one click away.')]);
  }

  destroy() {
    this.off();
  }
}

async function start() {
  whenUnauthorized((err) => askToken(err.message));
  try {
    await api('/projects');
  } catch (e) {
    if (e.status === 401) return; // the token form is showing
    // knife not reachable (not started yet, restarting): say so and keep trying.
    const again = e.status === 0;
    replace(document.getElementById('app'), h('p', { class: 'error', id: 'start-error' }, e.message, again ? ' Trying again…' : ''));
    if (again) setTimeout(start, 1000);
    return;
  }
  sidebar = new Sidebar((connected) => {
    status.textContent = connected ? 'live' : 'reconnecting…';
    status.classList.toggle('ok', connected);
  });
  // On a phone the open sidebar lies over an opaque backdrop; tapping it closes the sidebar.
  const backdrop = h('div', { class: 'sidebar-backdrop', id: 'sidebar-backdrop', on: { click: () => toggleSidebar(false) } });
  replace(document.getElementById('app'), nav(), h('div', { class: 'layout' }, sidebar.el, backdrop, main));
  installSearch(sidebar);
  new Notifier(sidebar, notifyButton);
  shortcuts = installShortcuts();
  // A link picked in the phone sidebar closes it, also the thread already open (no hashchange).
  sidebar.el.addEventListener('click', (e) => { if (e.target.closest('a')) toggleSidebar(false); });
  window.addEventListener('hashchange', route);
  route();
}

start();
