// The sidebar: projects and their threads, newest activity first, with each
// thread's live status. Statuses follow the WebSocket (one subscription per thread
// from the log's current end, so no history is replayed); the lists themselves are
// re-read every few seconds to pick up projects and threads made elsewhere.

import { h, replace, clock } from './dom.js';
import { api, LiveSocket } from './api.js';

const REFRESH_MS = 4000;

/** The status word and detail the sidebar shows for a thread. */
export function threadStatus(thread, pendingCount) {
  const a = thread.agent_status;
  if (thread.status === 'running' && pendingCount > 0) {
    return { key: 'waiting', label: 'waiting for approval' };
  }
  if (a && a.type === 'retry' && thread.status === 'running') {
    return { key: 'retrying', label: `retrying (attempt ${a.attempt}, next try ${clock(a.next)})`, title: a.message };
  }
  if (thread.claimed_at && thread.resume_attempts > 0 && thread.status === 'running') {
    return { key: 'resuming', label: `resuming after restart (attempt ${thread.resume_attempts})` };
  }
  if (thread.claimed_at && thread.status !== 'running') {
    return { key: 'resuming', label: 'resuming after restart' };
  }
  if (thread.status === 'running') return { key: 'running', label: 'running' };
  if (thread.status === 'failed') {
    return { key: 'failed', label: 'failed', title: thread.last_error ? thread.last_error.message : '' };
  }
  return { key: 'idle', label: 'idle' };
}

export class Sidebar {
  constructor(onConnection) {
    this.projects = [];
    this.threads = new Map(); // id -> Thread
    this.pending = new Map(); // thread id -> Set of pending request ids
    this.selected = null;
    this.listeners = new Set();
    this.list = h('div', { class: 'tree' });
    this.error = h('p', { class: 'error', id: 'sidebar-error', hidden: true }); // a form's failure
    this.offline = h('p', { class: 'error', id: 'sidebar-offline', hidden: true }); // the lists' last read failed
    this.forms = new Map(); // project id -> its "new thread" form, kept across redraws
    this.providers = null; // GET /api/providers once it answered: [{id, driver, model, default}]
    this.loaded = false; // the lists were read once
    this.el = h('aside', { class: 'sidebar' }, this.projectForm(), this.error, this.offline, this.list);
    this.socket = null;
    this.subscribed = new Set(); // thread ids followed on the socket
    this.onConnection = onConnection;
    this.refresh();
    this.timer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  /** `fn()` is called whenever a thread's status or the lists change. */
  onChange(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  select(id) {
    this.selected = id;
    this.render();
  }

  projectForm() {
    const root = h('input', { id: 'project-root', placeholder: '/path/to/project folder', required: true });
    const name = h('input', { id: 'project-name', placeholder: 'name (optional)' });
    const form = h('form', { class: 'new-project' },
      h('label', { for: 'project-root' }, 'Add a project'), root, name,
      h('button', { type: 'submit', id: 'project-create' }, 'Add project'));
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      try {
        await api('/projects', { method: 'POST', body: { root: root.value.trim(), name: name.value.trim() || null } });
        root.value = '';
        name.value = '';
        this.showError(null);
        await this.refresh();
      } catch (err) {
        this.showError(err.message);
      }
    });
    return form;
  }

  showError(message) {
    this.error.hidden = !message;
    this.error.textContent = message || '';
  }

  async refresh() {
    if (this.refreshing) return; // one at a time (the timer may fire during a slow one)
    this.refreshing = true;
    try {
      if (!this.socket) {
        // The log's end first, the lists after: every event later than `after` is
        // streamed, and the lists already include everything up to it.
        const { sequence } = await api('/events/latest');
        this.after = sequence;
        // A dropped or restored connection re-reads the lists at once: the
        // "not reachable" line appears or goes without waiting for the timer.
        this.socket = new LiveSocket((connected) => {
          this.onConnection(connected);
          this.refresh();
        }, (err) => this.showError(`Live status updates failed: ${err.message}`));
      }
      const [projects, threads] = await Promise.all([api('/projects'), api('/threads')]);
      if (!this.providers) {
        // Configured at start: read once (a failure is retried by the next refresh).
        this.providers = await api('/providers');
        for (const form of this.forms.values()) this.fillProviders(form.providerSelect);
      }
      this.projects = projects;
      this.loaded = true;
      this.offline.hidden = true;
      // Threads archived or deleted elsewhere leave the list (CHG-08).
      const listed = new Set(threads.map((t) => t.id));
      for (const id of [...this.threads.keys()]) if (!listed.has(id) && id !== this.created) this.threads.delete(id);
      for (const t of threads) {
        const old = this.threads.get(t.id);
        if (!old || old.updated_at <= t.updated_at) this.threads.set(t.id, t);
        this.follow(t);
      }
      this.render();
    } catch (err) {
      // Cleared by the next refresh that works (knife restarting, say).
      this.offline.hidden = false;
      this.offline.textContent = err.message;
    } finally {
      this.refreshing = false;
    }
  }

  /** Subscribes to `t`'s events once (from the log's end at page load). */
  follow(t) {
    if (!this.socket || this.subscribed.has(t.id)) return;
    this.subscribed.add(t.id);
    this.socket.subscribe(t.id, this.after, (ev) => this.apply(ev));
    if (t.status === 'running') this.loadPending(t.id);
  }

  async loadPending(threadId) {
    try {
      const requests = await api(`/threads/${encodeURIComponent(threadId)}/requests`);
      const set = new Set(requests.filter((r) => r.status === 'pending').map((r) => r.id));
      this.pending.set(threadId, set);
      this.render();
    } catch {
      // The next event or refresh corrects it.
    }
  }

  apply(ev) {
    const p = ev.payload;
    if (ev.type === 'thread.created' || ev.type === 'thread.updated') {
      // An archived thread is hidden from the list (CHG-08).
      if (p.archived_at) this.threads.delete(p.id);
      else this.threads.set(p.id, p);
    } else if (ev.type === 'thread.deleted') {
      this.threads.delete(p.thread_id);
    } else if (ev.type === 'thread.status') {
      const t = this.threads.get(p.thread_id);
      if (t) t.agent_status = p.status;
    } else if (ev.type === 'runtime-request.updated') {
      const set = this.pending.get(p.thread_id) || new Set();
      if (p.status === 'pending') set.add(p.id);
      else set.delete(p.id);
      this.pending.set(p.thread_id, set);
    } else {
      return;
    }
    this.render();
  }

  pendingCount(threadId) {
    const set = this.pending.get(threadId);
    return set ? set.size : 0;
  }

  /** Thread ids with a pending approval. */
  waitingThreads() {
    return [...this.threads.values()].filter((t) => t.status === 'running' && this.pendingCount(t.id) > 0);
  }

  render() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.draw();
      for (const fn of this.listeners) fn();
    });
  }

  draw() {
    const byProject = new Map(this.projects.map((p) => [p.id, []]));
    for (const t of this.threads.values()) {
      if (!byProject.has(t.project_id)) byProject.set(t.project_id, []);
      byProject.get(t.project_id).push(t);
    }
    const newest = (pid) => {
      const p = this.projects.find((x) => x.id === pid);
      const times = byProject.get(pid).map((t) => t.updated_at);
      if (p) times.push(p.updated_at);
      return times.sort().at(-1) || '';
    };
    const order = [...byProject.keys()].sort((a, b) => newest(b).localeCompare(newest(a)));
    // Redraw only what changed, and give the focus back: the lists are re-read every
    // few seconds and statuses change while someone types a thread title.
    const key = JSON.stringify([this.loaded, this.selected, order.map((pid) => [pid, this.projects.find((p) => p.id === pid)?.name,
      byProject.get(pid).map((t) => [t.id, t.title, t.updated_at, t.provider_instance_id, t.worktree && t.worktree.branch, threadStatus(t, this.pendingCount(t.id))])])]);
    if (key !== this.drawn) {
      this.drawn = key;
      const focus = document.activeElement;
      const keep = focus && this.list.contains(focus) && focus.tagName === 'INPUT'
        ? { el: focus, start: focus.selectionStart, end: focus.selectionEnd } : null;
      replace(this.list, this.loaded && !order.length
        ? h('p', { class: 'muted hint', id: 'no-projects' }, 'No projects yet. A project is a folder on the machine knife runs on: type its absolute path above and press “Add project”, then start a thread in it.')
        : order.map((pid) => this.projectNode(pid, byProject.get(pid))));
      if (keep && keep.el.isConnected) {
        keep.el.focus();
        keep.el.setSelectionRange(keep.start, keep.end);
      }
    }
    const waiting = this.waitingThreads().length;
    const navA = document.getElementById('nav-approvals');
    if (navA) navA.textContent = waiting ? `Approvals (${waiting})` : 'Approvals';
  }

  projectNode(pid, threads) {
    const project = this.projects.find((p) => p.id === pid);
    threads.sort((a, b) => b.updated_at.localeCompare(a.updated_at));
    if (!this.forms.has(pid)) this.forms.set(pid, this.threadForm(pid));
    const form = this.forms.get(pid);
    return h('section', { class: 'project', dataset: { project: pid } },
      h('h3', { title: project ? project.root : pid }, project ? project.name : pid),
      h('ul', { class: 'threads' }, threads.map((t) => this.threadNode(t))),
      form);
  }

  /** The "new thread" form of project `pid` (made once: a redraw keeps what is typed). */
  threadForm(pid) {
    const title = h('input', { class: 'thread-title', placeholder: 'thread title (optional)' });
    const button = h('button', { type: 'submit', class: 'new-thread-button' }, '+ New thread');
    const provider = h('select', { class: 'thread-provider', title: 'provider instance of the new thread', hidden: true });
    // Its own git worktree (CHG-07); unticked, the project's `worktree` setting applies.
    const worktree = h('input', { type: 'checkbox', class: 'thread-worktree' });
    const label = h('label', { class: 'thread-worktree-label', title: 'run the thread in a git worktree of its own, on branch knife/<id>' }, worktree, ' own worktree');
    const form = h('form', { class: 'new-thread', dataset: { project: pid } }, title, provider, button, label);
    form.providerSelect = provider;
    this.fillProviders(provider);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (button.disabled) return;
      button.disabled = true;
      try {
        const body = { project_id: pid, title: title.value.trim() || null };
        if (!provider.hidden && provider.value) body.provider_instance_id = provider.value;
        if (worktree.checked) body.worktree = true;
        const t = await api('/threads', { method: 'POST', body });
        title.value = '';
        worktree.checked = false;
        this.showError(null);
        this.threads.set(t.id, t);
        this.follow(t); // (before the first refresh has a socket, that refresh follows it)
        this.created = t.id; // its view takes the focus: the next thing to do is to write
        location.hash = `#/thread/${encodeURIComponent(t.id)}`;
      } catch (err) {
        this.showError(err.message);
      } finally {
        button.disabled = false;
      }
    });
    return form;
  }

  /**
   * Fills a "new thread" form's provider picker: every configured instance, the
   * default one selected. Hidden with fewer than two (the server's default applies).
   */
  fillProviders(select) {
    const list = this.providers || [];
    if (select.options.length === list.length) return; // filled already (a redraw keeps the choice)
    replace(select, list.map((p) => h('option', { value: p.id, selected: p.default },
      `${p.id} (${p.driver}${p.model ? ` / ${p.model}` : ''})${p.default ? ' · default' : ''}`)));
    const def = list.find((p) => p.default);
    if (def) select.value = def.id;
    select.hidden = list.length < 2;
  }

  threadNode(t) {
    const s = threadStatus(t, this.pendingCount(t.id));
    return h('li', { class: t.id === this.selected ? 'selected' : '' },
      h('a', { href: `#/thread/${encodeURIComponent(t.id)}`, class: 'thread-link', title: t.title || t.id, dataset: { thread: t.id } },
        h('span', { class: 'title' }, t.title || t.id),
        h('span', { class: 'meta' },
          h('span', { class: `status status-${s.key}`, title: s.title || '' }, s.label),
          h('span', { class: 'thread-instance muted', title: 'provider instance' }, t.provider_instance_id),
          t.worktree ? h('span', { class: 'thread-branch muted', title: `worktree ${t.worktree.path}` }, `⎇ ${t.worktree.branch}`) : null)));
  }
}
