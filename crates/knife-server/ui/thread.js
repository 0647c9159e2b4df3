// The thread view: the transcript, live (projection first, then the thread's
// events over the WebSocket from the projection's `latest_sequence`; items are
// upserted by id, so a replayed or repeated update never duplicates anything),
// the composer, the interrupt button and the thread's status line.
//
// Layout: the transcript scrolls in its own box and the composer sits below it, so
// nothing of the transcript ever shows under the composer. Items are re-rendered at
// most once per animation frame (a replay after a reconnect may carry hundreds of
// updates of one streaming message).

import { h, replace, clock, relative } from './dom.js';
import { api, LiveSocket } from './api.js';
import { renderItem, runNote } from './items.js';
import { answerRequest } from './approvals.js';
import { threadStatus } from './sidebar.js';

/**
 * Carries what the reader opened in `old` over to its re-rendered copy `el`: open
 * <details> (reasoning, summaries) and opened "show more" outputs, matched by their
 * order. Without it every streamed update would fold them shut again.
 */
function keepOpen(old, el) {
  const pairs = (sel) => {
    const a = [...(old.matches(sel) ? [old] : []), ...old.querySelectorAll(sel)];
    const b = [...(el.matches(sel) ? [el] : []), ...el.querySelectorAll(sel)];
    return a.map((x, i) => [x, b[i]]).filter(([, y]) => y);
  };
  for (const [a, b] of pairs('details')) if (a.open) b.open = true;
  for (const [a, b] of pairs('.truncated')) {
    if (a.classList.contains('open') && !b.classList.contains('open')) b.querySelector('.show-more').click();
  }
}

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
    this.scroller = h('div', { class: 'transcript-scroll', id: 'transcript-scroll' }, this.transcript);
    this.dirty = new Set(); // item ids to re-render at the next frame
    this.sending = false;
    this.error = h('p', { class: 'error', id: 'thread-error', hidden: true });
    this.input = h('textarea', { id: 'composer-input', rows: 3, placeholder: 'Message the agent (Ctrl+Enter to send)' });
    this.sendButton = h('button', { type: 'submit', id: 'send' }, 'Send');
    // The model picker (TURN-10): empty sends no `model` (the thread's); a name
    // applies to each message sent while it is set, recorded on its run. The
    // list suggests the configured instances' models; any name can be typed.
    this.models = h('datalist', { id: 'composer-models' });
    this.modelInput = h('input', { id: 'composer-model', list: 'composer-models', autocomplete: 'off', placeholder: 'model (default)', title: 'model of the next run; empty: the thread\'s model' });
    const composer = this.composer = h('form', { class: 'composer', id: 'composer' }, this.input,
      h('div', { class: 'composer-buttons' }, this.modelInput, this.models, this.interruptButton, this.sendButton));
    composer.addEventListener('submit', (e) => { e.preventDefault(); this.send(); });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    this.el = h('section', { class: 'view thread-view', dataset: { thread: id } },
      h('header', { class: 'thread-head' }, this.title,
        h('a', { href: `#/thread/${encodeURIComponent(id)}/events`, id: 'events-link' }, 'Events')),
      this.statusLine, this.scroller, this.error, composer);
    this.socket = new LiveSocket(() => {}, (err) => this.showError(`Live updates failed: ${err.message} (reload the page to try again)`));
    this.ticker = setInterval(() => this.drawStatus(), 1000);
    this.offSidebar = sidebar ? sidebar.onChange(() => this.drawStatus()) : () => {};
    this.load();
  }

  async load() {
    try {
      const p = await api(`/threads/${encodeURIComponent(this.id)}`);
      if (this.destroyed) return;
      this.thread = p.thread;
      for (const r of p.runs) this.runs.set(r.id, r);
      for (const r of p.runtime_requests) this.requests.set(r.id, r);
      for (const item of p.turn_items) this.upsert(item);
      this.flush();
      this.drawRuns();
      this.drawStatus();
      this.scrollDown();
      this.showError(null);
      this.socket.subscribe(this.id, p.latest_sequence, (ev) => this.apply(ev));
      const fresh = this.sidebar && this.sidebar.created === this.id;
      if (fresh || !document.activeElement || document.activeElement === document.body) this.input.focus();
      if (fresh) this.sidebar.created = null;
    } catch (e) {
      if (this.destroyed) return;
      // knife unreachable (restarting?): say so and try again; other errors
      // (unknown thread, refused token) stay on screen.
      this.showError(e.status === 0 ? `${e.message} Retrying…` : e.message);
      if (e.status === 0) this.retry = setTimeout(() => this.load(), 1000);
      if (e.status === 404) {
        // Nothing to write to: say so where the title goes, no composer.
        this.title.textContent = 'No such thread';
        this.composer.hidden = true;
      }
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

  /** Records `item` (newest copy wins) and schedules its element's redraw. */
  upsert(item, force = false) {
    const old = this.items.get(item.id);
    if (old && !force && old.updated_at > item.updated_at) return; // an older copy
    this.items.set(item.id, item);
    this.dirty.add(item.id);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** Draws the items changed since the last frame, keeping ordinal order. */
  flush() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = null;
    if (!this.dirty.size) return;
    const stick = this.nearBottom();
    const ctx = { requests: this.requests, runs: this.runs, answer: (r, d, m) => this.answer(r, d, m) };
    for (const id of this.dirty) {
      const item = this.items.get(id);
      const el = renderItem(item, ctx);
      el.dataset.ordinal = item.ordinal;
      const existing = this.nodes.get(id);
      if (existing) {
        keepOpen(existing, el);
        existing.replaceWith(el);
      } else {
        const last = this.transcript.lastElementChild;
        const after = !last || Number(last.dataset.ordinal) < item.ordinal
          ? null // the usual case: a new item at the end
          : [...this.transcript.children].find((c) => c.dataset.ordinal !== undefined && Number(c.dataset.ordinal) > item.ordinal);
        this.transcript.insertBefore(el, after || null);
      }
      this.nodes.set(id, el);
    }
    this.dirty.clear();
    if (stick) this.scrollDown();
  }

  /** Run-end notes (interrupted / failed) after the run's last item. */
  drawRuns() {
    for (const n of this.transcript.querySelectorAll('.run-end')) n.remove();
    // A failed run whose error is already an item of the transcript needs no second note.
    const shown = new Set([...this.items.values()].filter((i) => i.type === 'error').map((i) => i.run_id));
    for (const run of this.runs.values()) {
      const note = shown.has(run.id) ? null : runNote(run);
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
    parts.push(h('span', { class: 'muted', id: 'thread-instance' }, ` · ${t.provider_instance_id}${t.model ? ` / ${t.model}` : ''}`));
    this.fillModels();
    replace(this.statusLine, parts);
    const hide = !t.active_run_id;
    // A hidden button cannot keep the focus: hand it to the composer, not to <body>.
    if (hide && document.activeElement === this.interruptButton) this.input.focus();
    this.interruptButton.hidden = hide;
  }

  /** The picker's suggestions: the thread's model and every configured instance's. */
  fillModels() {
    const t = this.thread;
    const known = [t && t.model, ...((this.sidebar && this.sidebar.providers) || []).map((p) => p.model)];
    const names = [...new Set(known.filter(Boolean))];
    if (names.join('\n') === this.models.dataset.names) return;
    this.models.dataset.names = names.join('\n');
    replace(this.models, names.map((m) => h('option', { value: m })));
  }

  async send() {
    const text = this.input.value;
    const model = this.modelInput.value.trim();
    // One message per press: Ctrl+Enter again while the first is on its way is ignored.
    if (!text.trim() || this.sending) return;
    this.sending = true;
    this.sendButton.disabled = true;
    try {
      const body = model ? { text, model } : { text };
      await api(`/threads/${encodeURIComponent(this.id)}/messages`, { method: 'POST', body });
      this.input.value = '';
      this.showError(null);
    } catch (e) {
      // The API's message names CLI commands; on the page the way out is a button.
      this.showError(e.code === 'run_in_progress'
        ? 'The agent is still working on the last message: wait until it finishes, or press Interrupt. Your message stays here.'
        : e.message);
    } finally {
      this.sending = false;
      this.sendButton.disabled = false;
      this.input.focus();
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
    const m = this.scroller;
    return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
  }

  scrollDown() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  destroy() {
    this.destroyed = true;
    clearTimeout(this.retry);
    if (this.frame) cancelAnimationFrame(this.frame);
    this.socket.close();
    clearInterval(this.ticker);
    this.offSidebar();
  }
}
