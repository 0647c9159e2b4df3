// The thread view: the transcript, live (projection first, then the thread's
// events over the WebSocket from the projection's `latest_sequence`; items are
// upserted by id, so a replayed or repeated update never duplicates anything),
// the composer, the interrupt button and the thread's status line.

import { h, replace, clock, relative } from './dom.js';
import { api, LiveSocket } from './api.js';
import { renderItem, runNote } from './items.js';
import { answerRequest } from './approvals.js';
import { threadStatus } from './sidebar.js';

export class ThreadView {
  constructor(id, sidebar) {
    this.id = id;
    this.sidebar = sidebar;
    this.items = new Map(); // id -> TurnItem
    this.nodes = new Map(); // id -> element
    this.requests = new Map(); // id -> RuntimeRequest
    this.runs = new Map(); // id -> Run
    this.thread = null;
    this.title = h('h2', { class: 'thread-title' }, '…');
    this.statusLine = h('div', { class: 'status-line', id: 'thread-status' });
    this.interruptButton = h('button', { type: 'button', id: 'interrupt', class: 'danger', hidden: true, on: { click: () => this.interrupt() } }, 'Interrupt');
    this.transcript = h('div', { class: 'transcript', id: 'transcript' });
    this.error = h('p', { class: 'error', id: 'thread-error', hidden: true });
    this.input = h('textarea', { id: 'composer-input', rows: 3, placeholder: 'Message the agent (Ctrl+Enter to send)' });
    this.sendButton = h('button', { type: 'submit', id: 'send' }, 'Send');
    const composer = h('form', { class: 'composer', id: 'composer' }, this.input, h('div', { class: 'composer-buttons' }, this.interruptButton, this.sendButton));
    composer.addEventListener('submit', (e) => { e.preventDefault(); this.send(); });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    this.el = h('section', { class: 'view thread-view', dataset: { thread: id } },
      h('header', { class: 'thread-head' }, this.title,
        h('a', { href: `#/thread/${encodeURIComponent(id)}/events`, id: 'events-link' }, 'Events')),
      this.statusLine, this.transcript, this.error, composer);
    this.socket = new LiveSocket();
    this.ticker = setInterval(() => this.drawStatus(), 1000);
    this.offSidebar = sidebar ? sidebar.onChange(() => this.drawStatus()) : () => {};
    this.load();
  }

  async load() {
    try {
      const p = await api(`/threads/${encodeURIComponent(this.id)}`);
      this.thread = p.thread;
      for (const r of p.runs) this.runs.set(r.id, r);
      for (const r of p.runtime_requests) this.requests.set(r.id, r);
      for (const item of p.turn_items) this.upsert(item);
      this.drawRuns();
      this.drawStatus();
      this.socket.subscribe(this.id, p.latest_sequence, (ev) => this.apply(ev));
    } catch (e) {
      this.showError(e.message);
    }
  }

  apply(ev) {
    const p = ev.payload;
    switch (ev.type) {
      case 'turn-item.updated':
        this.upsert(p);
        break;
      case 'runtime-request.updated':
        this.requests.set(p.id, p);
        for (const item of this.items.values()) {
          if (item.type === 'approval' && item.request_id === p.id) this.upsert(item, true);
        }
        break;
      case 'thread.created':
      case 'thread.updated':
        this.thread = p;
        break;
      case 'thread.status':
        if (this.thread) this.thread.agent_status = p.status;
        break;
      case 'thread.error':
        this.showError(`${p.error.name}: ${p.error.message}`);
        break;
      case 'run.created':
      case 'run.updated':
        this.runs.set(p.id, p);
        this.drawRuns();
        if (p.status === 'running' || p.status === 'queued') this.showError(null);
        break;
      default:
        return;
    }
    this.drawStatus();
  }

  /** Inserts or replaces one item's element, keeping ordinal order. */
  upsert(item, force = false) {
    const old = this.items.get(item.id);
    if (old && !force && old.updated_at > item.updated_at) return; // an older copy
    this.items.set(item.id, item);
    const ctx = { requests: this.requests, answer: (r, d, m) => this.answer(r, d, m) };
    const el = renderItem(item, ctx);
    el.dataset.ordinal = item.ordinal;
    const stick = this.nearBottom();
    const existing = this.nodes.get(item.id);
    if (existing) {
      existing.replaceWith(el);
    } else {
      const after = [...this.transcript.children].find((c) => c.dataset.ordinal !== undefined && Number(c.dataset.ordinal) > item.ordinal);
      this.transcript.insertBefore(el, after || null);
    }
    this.nodes.set(item.id, el);
    if (stick) this.scrollDown();
  }

  /** Run-end notes (interrupted / failed) after the run's last item. */
  drawRuns() {
    for (const n of this.transcript.querySelectorAll('.run-end')) n.remove();
    for (const run of this.runs.values()) {
      // A failed run whose error is already an item of the transcript needs no second note.
      const shown = [...this.items.values()].some((i) => i.type === 'error' && i.run_id === run.id);
      const note = shown ? null : runNote(run);
      if (!note) continue;
      // After every item of this run: ordinals of run N are N * 1e6 + n.
      const bound = (run.ordinal + 1) * 1e6;
      note.dataset.ordinal = bound - 0.5;
      const after = [...this.transcript.children].find((c) => c.dataset.ordinal !== undefined && Number(c.dataset.ordinal) > bound - 0.5);
      this.transcript.insertBefore(note, after || null);
    }
  }

  drawStatus() {
    const t = this.thread;
    if (!t) return;
    this.title.textContent = t.title || t.id;
    const pending = [...this.requests.values()].filter((r) => r.status === 'pending').length;
    const s = threadStatus(t, pending);
    const parts = [h('span', { class: `status status-${s.key}`, id: 'thread-status-label', title: s.title || '' }, s.label)];
    if (t.agent_status && t.agent_status.type === 'retry' && t.status === 'running') {
      parts.push(h('span', { class: 'muted' }, ` · ${t.agent_status.message}, ${relative(t.agent_status.next)}`));
    }
    if (t.active_run_id) {
      const run = this.runs.get(t.active_run_id);
      if (run && run.started_at) parts.push(h('span', { class: 'muted' }, ` · run ${run.ordinal} started ${clock(run.started_at)}`));
    }
    if (t.status === 'failed' && t.last_error) parts.push(h('span', { class: 'error-message' }, ` · ${t.last_error.message}`));
    parts.push(h('span', { class: 'muted' }, ` · ${t.provider_instance_id}${t.model ? ` / ${t.model}` : ''}`));
    replace(this.statusLine, parts);
    this.interruptButton.hidden = !t.active_run_id;
  }

  async send() {
    const text = this.input.value;
    if (!text.trim()) return;
    this.sendButton.disabled = true;
    try {
      await api(`/threads/${encodeURIComponent(this.id)}/messages`, { method: 'POST', body: { text } });
      this.input.value = '';
      this.showError(null);
    } catch (e) {
      this.showError(e.message);
    } finally {
      this.sendButton.disabled = false;
    }
  }

  async interrupt() {
    try {
      await api(`/threads/${encodeURIComponent(this.id)}/interrupt`, { method: 'POST', body: {} });
    } catch (e) {
      this.showError(e.message);
    }
  }

  async answer(request, decision, message) {
    const resolved = await answerRequest(request, decision, message);
    this.requests.set(resolved.id, resolved);
    for (const item of this.items.values()) {
      if (item.type === 'approval' && item.request_id === resolved.id) this.upsert(item, true);
    }
  }

  showError(message) {
    this.error.hidden = !message;
    this.error.textContent = message || '';
  }

  nearBottom() {
    const m = document.getElementById('main');
    return !m || m.scrollHeight - m.scrollTop - m.clientHeight < 120;
  }

  scrollDown() {
    const m = document.getElementById('main');
    if (m) m.scrollTop = m.scrollHeight;
  }

  destroy() {
    this.socket.close();
    clearInterval(this.ticker);
    this.offSidebar();
  }
}
