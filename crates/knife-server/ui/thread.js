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
import { budgetStopped, renderItem, runNote } from './items.js';
import { answerRequest } from './approvals.js';
import { threadStatus } from './sidebar.js';
import { runCost, runUsageLine } from './usage.js';
import { keyboardNav } from './shortcuts.js';
import { ChangesPanel, confirmRevert, confirmUndo, sharedRootWarning } from './changes.js';

/**
 * Carries what the reader opened in `old` over to its re-rendered copy `el`: open
 * <details> (reasoning, summaries) and opened "show more" outputs, matched by their
 * order. Without it every streamed update would fold them shut again.
 */
/** The growing fields a live delta extends (knife-protocol `DeltaField`). */
const LIVE_FIELDS = ['text', 'reasoning', 'input', 'output'];
const UTF8 = new TextEncoder();
const UTF8_DECODER = new TextDecoder();
const byteLength = (s) => UTF8.encode(s).length;

/** The durable text of `field` in `item`, or null when it has none (a parsed input: complete). */
function durableText(item, field) {
  if (!item) return null;
  if (field === 'text' && item.type === 'assistant_message') return item.text;
  if (field === 'reasoning' && item.type === 'reasoning') return item.text;
  if (field === 'input' && item.type === 'tool_call') return typeof item.input === 'string' ? item.input : null;
  if (field === 'output' && item.type === 'tool_call') return item.output || '';
  return null;
}

/** An item known only from its deltas so far; any durable copy replaces it. */
function placeholder(m) {
  const base = { id: m.item_id, thread_id: m.thread_id, run_id: m.run_id, ordinal: m.ordinal, status: 'running', updated_at: '' };
  if (m.field === 'reasoning') return { ...base, type: 'reasoning', text: '', streaming: true };
  if (m.field === 'text') return { ...base, type: 'assistant_message', text: '', streaming: true };
  return { ...base, type: 'tool_call', call_id: '', tool: '', input: '', output: null, error: null, status: 'pending' };
}

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

/** Micro-dollars as `$0.0123` (below a dollar) or `$4.57`. */
function usd(micro) {
  const v = micro / 1e6;
  return `$${v < 1 ? v.toFixed(4) : v.toFixed(2)}`;
}

export class ThreadView {
  constructor(id, sidebar) {
    this.id = id;
    this.sidebar = sidebar;
    this.items = new Map(); // id -> TurnItem
    this.nodes = new Map(); // id -> element
    this.requests = new Map(); // id -> RuntimeRequest
    this.runs = new Map(); // id -> Run
    this.reverts = new Map(); // id -> Revert (CHG-04)
    this.panels = new Map(); // run id -> ChangesPanel (CHG-03)
    this.warning = h('div', { class: 'thread-warning' });
    this.notice = h('p', { class: 'muted', id: 'thread-notice' });
    this.thread = null;
    this.title = h('h2', { class: 'thread-title' }, '…');
    this.statusLine = h('div', { class: 'status-line', id: 'thread-status' });
    this.interruptButton = h('button', { type: 'button', id: 'interrupt', class: 'danger', hidden: true, on: { click: () => this.interrupt() } }, 'Interrupt');
    // TURN-01: while a run is active, Send queues the message; Steer hands it to the running turn.
    this.steerButton = h('button', { type: 'button', id: 'steer', hidden: true, title: 'give the message to the running turn (queued if its runtime cannot take it)', on: { click: () => this.send('steer') } }, 'Steer');
    this.queueBox = h('div', { class: 'queue', id: 'queue', hidden: true });
    this.transcript = h('div', { class: 'transcript', id: 'transcript' });
    this.scroller = h('div', { class: 'transcript-scroll', id: 'transcript-scroll' }, this.transcript);
    this.following = false; // set by a send: stay at the bottom while the answer streams
    const unfollow = (e) => { if (!(e.deltaY > 0)) this.following = false; };
    this.scroller.addEventListener('wheel', unfollow, { passive: true });
    this.scroller.addEventListener('touchmove', unfollow, { passive: true });
    this.dirty = new Set(); // item ids to re-render at the next frame
    this.reopened = new Set(); // items reset (a retried attempt) whose durable copy is still the voided one
    this.live = new Map(); // `${item id}\u0000${field}` -> {text, bytes}: live text past the durable copy (LIVE-01)
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
      h('div', { class: 'composer-buttons' }, this.modelInput, this.models, this.interruptButton, this.steerButton, this.sendButton));
    composer.addEventListener('submit', (e) => { e.preventDefault(); this.send(); });
    this.transcript.addEventListener('click', (e) => {
      if (!e.target.closest('.budget-continue')) return;
      api(`/threads/${encodeURIComponent(this.id)}/budget`, { method: 'POST', body: { tokens: 100000, cost_usd: 1, continue: true } })
        .then(() => this.showError(null), (err) => this.showError(err.message));
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    this.el = h('section', { class: 'view thread-view', dataset: { thread: id } },
      h('header', { class: 'thread-head' }, this.title,
        this.actionsBox = this.actions(),
        this.eventsLink = h('a', { href: `#/thread/${encodeURIComponent(id)}/events`, id: 'events-link' }, 'Events')),
      this.statusLine, this.warning, this.notice, this.queueBox, this.scroller, this.error, composer);
    this.socket = new LiveSocket(() => {}, (err) => this.showError(`Live updates failed: ${err.message} (reload the page to try again)`));
    this.ticker = setInterval(() => this.drawStatus(), 1000);
    this.offSidebar = sidebar ? sidebar.onChange(() => this.drawStatus()) : () => {};
    this.load();
  }

  /** Rename, archive / unarchive, fork and delete buttons (CHG-08, CHG-09). */
  actions() {
    const path = `/threads/${encodeURIComponent(this.id)}`;
    const act = (id, label, fn, cls = '') => h('button', {
      type: 'button', id, class: `thread-action ${cls}`,
      on: {
        click: async () => {
          try {
            await fn();
            this.showError(null);
          } catch (e) {
            this.showError(e.message);
          }
        },
      },
    }, label);
    this.archiveButton = act('thread-archive', 'Archive', async () => {
      const archived = !(this.thread && this.thread.archived_at);
      this.thread = await api(path, { method: 'PATCH', body: { archived } });
      this.drawStatus();
    });
    // A worktree thread's work goes back into the project's current branch (CHG-07).
    this.mergeButton = act('thread-merge', 'Merge', async () => {
      const wt = this.thread && this.thread.worktree;
      if (!wt || !window.confirm(`Merge branch ${wt.branch} into the project's current branch?`)) return;
      try {
        const m = await api(`${path}/merge`, { method: 'POST', body: {} });
        this.notice.textContent = m.status === 'up_to_date'
          ? `${m.branch} is already merged${m.into ? ` into ${m.into}` : ''}.`
          : `Merged ${m.branch}${m.into ? ` into ${m.into}` : ''}${m.commit ? ` (${m.commit.slice(0, 12)})` : ''}.`;
      } catch (e) {
        throw e.files && e.files.length ? new Error(`${e.message}: ${e.files.join(', ')}`) : e;
      }
    });
    this.mergeButton.hidden = true;
    return h('span', { class: 'thread-actions' },
      this.mergeButton,
      act('thread-rename', 'Rename', async () => {
        const title = window.prompt('New title (at most 200 characters)', this.thread ? this.thread.title : '');
        if (title === null || !title.trim()) return;
        this.thread = await api(path, { method: 'PATCH', body: { title } });
        this.drawStatus();
      }),
      this.archiveButton,
      act('thread-fork', 'Fork', async () => {
        const t = await api(`${path}/fork`, { method: 'POST', body: {} });
        location.hash = `#/thread/${encodeURIComponent(t.id)}`;
      }),
      act('thread-delete', 'Delete', async () => {
        if (!window.confirm('Delete this thread? It disappears from every list; `knife db purge` removes its events for good.')) return;
        try {
          await api(path, { method: 'DELETE' });
        } catch (e) {
          if (e.code !== 'run_in_progress' || !window.confirm(`${e.message}\n\nStop the run and delete the thread?`)) throw e;
          await api(`${path}?force=true`, { method: 'DELETE' });
        }
        location.hash = '#/';
      }, 'danger'));
  }

  async load() {
    try {
      const p = await api(`/threads/${encodeURIComponent(this.id)}`);
      if (this.destroyed) return;
      this.thread = p.thread;
      this.loadUsage();
      for (const r of p.runs) this.runs.set(r.id, r);
      for (const r of p.runtime_requests) this.requests.set(r.id, r);
      for (const item of p.turn_items) this.upsert(item);
      await this.loadReverts();
      if (this.destroyed) return;
      this.flush();
      this.drawRuns();
      this.drawStatus();
      this.scrollDown();
      this.showError(null);
      this.socket.subscribe(this.id, p.latest_sequence, (ev) => this.apply(ev), (m) => this.applyLive(m));
      const fresh = this.sidebar && this.sidebar.created === this.id;
      // The composer takes the focus unless the reader is moving through threads with j / k.
      if (fresh || (!keyboardNav.byKeys && (!document.activeElement || document.activeElement === document.body))) this.input.focus();
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
        // Nothing to rename, archive, fork, delete or list the events of either.
        this.actionsBox.hidden = true;
        this.eventsLink.hidden = true;
      }
    }
  }

  apply(ev) {
    const p = ev.payload;
    switch (ev.type) {
      case 'turn-item.updated':
        this.upsert(p);
        break;
      case 'turn-item.appended':
        this.append(p);
        break;
      case 'runtime-request.updated':
        this.requests.set(p.id, p);
        for (const item of this.items.values()) {
          if (item.type === 'approval' && item.request_id === p.id) this.upsert(item, true);
          // The guarded tool item folds its arguments once the diff is known (CHG-05).
          if (item.type === 'tool_call' && p.tool_approval && item.call_id === p.tool_approval.call_id) this.upsert(item, true);
        }
        break;
      case 'thread.created':
      case 'thread.updated':
        this.thread = p;
        break;
      case 'thread.deleted':
        this.showError('This thread was deleted.');
        break;
      case 'thread.status':
        if (this.thread) this.thread.agent_status = p.status;
        break;
      case 'thread.error':
        // A run's error shows once, in the transcript (its error item or the run-end
        // note); the line above the composer is for the user's own actions that failed.
        // A user's interrupt shows as the neutral "Interrupted" marker (UX-06).
        break;
      case 'revert.updated':
        this.reverts.set(p.id, p);
        this.drawRuns();
        break;
      case 'run.created':
      case 'run.updated':
        this.runs.set(p.id, p);
        if (p.status !== 'running' && p.status !== 'queued') this.loadUsage();
        this.drawRuns();
        if (p.status === 'running' || p.status === 'queued') this.showError(null);
        break;
      default:
        return;
    }
    this.drawStatus();
  }

  /**
   * A live message (LIVE-01): a `delta` continues an item's field at a UTF-8 byte
   * offset, a `reset` voids the item's live text, `reconnect` drops every live tail
   * (the server's catch-up delta sends it again). Offsets are bytes, JS strings
   * count UTF-16 units: the text is re-encoded only when a delta overlaps.
   */
  applyLive(m) {
    if (m.type === 'reconnect') {
      for (const key of this.live.keys()) this.dirty.add(key.split('\u0000')[0]);
      this.live.clear();
    } else if (m.type === 'reset') {
      for (const field of LIVE_FIELDS) this.live.delete(`${m.item_id}\u0000${field}`);
      this.reopened.add(m.item_id); // the retry's deltas follow its voided copy
      this.dirty.add(m.item_id);
    } else if (m.type === 'delta') {
      const known = this.items.get(m.item_id);
      if (known && !this.reopened.has(m.item_id) && !['pending', 'running', 'waiting'].includes(known.status)) return; // settled: its durable copy is final
      const key = `${m.item_id}\u0000${m.field}`;
      let cur = this.live.get(key);
      if (!cur) {
        const base = durableText(this.items.get(m.item_id), m.field) || '';
        cur = { text: base, bytes: byteLength(base) };
      }
      const end = m.offset + byteLength(m.text);
      // A gap (the next durable snapshot fills it) or text already shown: nothing to add.
      if (m.offset > cur.bytes || end <= cur.bytes) return;
      cur.text = m.offset === cur.bytes
        ? cur.text + m.text
        : UTF8_DECODER.decode(UTF8.encode(cur.text).slice(0, m.offset)) + m.text;
      cur.bytes = end;
      this.live.set(key, cur);
      if (!this.items.has(m.item_id)) this.items.set(m.item_id, placeholder(m));
      this.dirty.add(m.item_id);
    } else {
      return;
    }
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** `item` with the live text of its fields laid over its durable state. */
  shown(item) {
    let out = item;
    for (const field of LIVE_FIELDS) {
      const cur = this.live.get(`${item.id}\u0000${field}`);
      if (!cur) continue;
      if (out === item) out = { ...item };
      if (field === 'text' || field === 'reasoning') out.text = cur.text;
      else out[field] = cur.text;
    }
    return out;
  }

  /**
   * Appended durable text (LIVE-03): `p.text` continues the item's `p.field` at UTF-8
   * byte `p.offset` of its durable state (the last whole snapshot plus the chunks
   * since). Text the durable copy already has adds nothing; a chunk past its end (never
   * sent: the whole snapshot comes first) is ignored.
   */
  append(p) {
    const item = this.items.get(p.item_id);
    const durable = durableText(item, p.field);
    if (durable === null) return;
    const bytes = byteLength(durable);
    const end = p.offset + byteLength(p.text);
    if (p.offset > bytes || end <= bytes) return;
    const text = p.offset === bytes
      ? durable + p.text
      : UTF8_DECODER.decode(UTF8.encode(durable).slice(0, p.offset)) + p.text;
    const next = { ...item, updated_at: p.updated_at };
    if (p.field === 'text' || p.field === 'reasoning') next.text = text;
    else next[p.field] = text;
    this.upsert(next);
  }

  /** Records `item` (newest copy wins) and schedules its element's redraw. */
  upsert(item, force = false) {
    const old = this.items.get(item.id);
    if (old && !force && old.updated_at > item.updated_at) return; // an older copy
    this.items.set(item.id, item);
    if (['pending', 'running', 'waiting'].includes(item.status)) this.reopened.delete(item.id);
    // Live text the durable copy has caught up with (or that a settled item ends) goes.
    const settled = !['pending', 'running', 'waiting'].includes(item.status);
    for (const field of LIVE_FIELDS) {
      const key = `${item.id}\u0000${field}`;
      const cur = this.live.get(key);
      if (!cur) continue;
      const durable = durableText(item, field);
      if (settled || durable === null || byteLength(durable) >= cur.bytes) this.live.delete(key);
    }
    this.dirty.add(item.id);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** Draws the items changed since the last frame, keeping ordinal order. */
  flush() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = null;
    if (!this.dirty.size) return;
    const stick = this.following || this.nearBottom();
    const ctx = { requests: this.requests, runs: this.runs, answer: (r, d, m) => this.answer(r, d, m) };
    for (const id of this.dirty) {
      if (!this.items.has(id)) continue;
      const item = this.shown(this.items.get(id));
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
    this.placeApprovals();
    if (stick) this.scrollDown();
  }

  /**
   * Puts each approval card into the slot of the tool call it gates, before that
   * call's output (UX-06); a card whose call is not shown stays in transcript order.
   */
  placeApprovals() {
    for (const item of this.items.values()) {
      if (item.type !== 'approval') continue;
      const node = this.nodes.get(item.id);
      if (!node) continue;
      const slot = [...this.transcript.querySelectorAll('.approval-slot')]
        .find((s) => s.dataset.call === item.call_id && s.dataset.run === (item.run_id || ''));
      if (slot && node.parentElement !== slot) slot.append(node);
    }
  }

  /** The thread's reverts (a failure leaves them out: the panels still work). */
  async loadReverts() {
    try {
      for (const r of await api(`/threads/${encodeURIComponent(this.id)}/reverts`)) this.reverts.set(r.id, r);
    } catch {
      // Shown again by the next `revert.updated` event.
    }
  }

  /** Inserts `el` after every item of run `ordinal` (ordinals of run N are N * 1e6 + n), at `offset` below the bound. */
  placeAfterRun(el, ordinal, offset) {
    const at = (ordinal + 1) * 1e6 - offset;
    el.dataset.ordinal = at;
    const after = [...this.transcript.children].find((c) => c !== el && c.dataset.ordinal !== undefined && Number(c.dataset.ordinal) > at);
    this.transcript.insertBefore(el, after || null);
  }

  /** Each finished run's Changes panel (CHG-03/04), after its items and its end note. */
  drawChanges() {
    const reverts = [...this.reverts.values()].sort((a, b) => a.created_at.localeCompare(b.created_at));
    for (const run of this.runs.values()) {
      const mine = reverts.filter((r) => r.run_ordinal === run.ordinal);
      let panel = this.panels.get(run.id);
      if (!ChangesPanel.wanted(run, mine)) {
        if (panel) panel.el.remove();
        this.panels.delete(run.id);
        continue;
      }
      if (!panel) {
        panel = new ChangesPanel(this.id, run, {
          revert: (r) => this.revertAction(() => confirmRevert(this.id, [...this.runs.values()], r)),
          undo: (r) => this.revertAction(() => confirmUndo(this.id, r)),
        });
        this.panels.set(run.id, panel);
      }
      panel.update(run, mine);
      this.placeAfterRun(panel.el, run.ordinal, 0.25);
    }
  }

  /** Runs a revert or undo (`fn` asks first); shows its result in the panel, or the error. */
  async revertAction(fn) {
    try {
      const r = await fn();
      if (!r) return;
      this.reverts.set(r.id, r);
      this.showError(null);
      this.drawRuns();
      const line = this.transcript.querySelector(`.revert-result[data-revert="${CSS.escape(r.id)}"]`);
      if (line) line.scrollIntoView({ block: 'nearest' });
    } catch (e) {
      this.showError(e.files && e.files.length ? `${e.message}: ${e.files.join(', ')}` : e.message);
    }
  }

  /** Tokens and cost per run and for the thread (TURN-06), priced by the server. */
  async loadUsage() {
    try {
      this.usage = await api(`/usage?thread_id=${encodeURIComponent(this.id)}`);
      this.drawStatus();
      this.drawRuns();
    } catch {
      // Usage is an extra: the transcript works without it.
    }
  }

  /** Run-end notes (interrupted / failed / budget spent) after the run's last item, then the Changes panels and per-run usage. */
  drawRuns() {
    const stick = this.following || this.nearBottom();
    for (const n of this.transcript.querySelectorAll('.run-end')) n.remove();
    // A failed run whose error is already an item of the transcript needs no second note;
    // a spent budget's note replaces its error item (the message once), and only the
    // newest run offers "Raise and continue": a later run continued the older ones (TURN-07).
    const errors = [...this.items.values()].filter((i) => i.type === 'error');
    const shown = new Set(errors.map((i) => i.run_id));
    for (const item of errors) {
      const node = this.nodes.get(item.id);
      if (node) node.hidden = budgetStopped(this.runs.get(item.run_id));
    }
    const latest = Math.max(0, ...[...this.runs.values()].map((r) => r.ordinal));
    for (const run of this.runs.values()) {
      const note = shown.has(run.id) && !budgetStopped(run) ? null : runNote(run, run.ordinal === latest);
      if (note) this.placeAfterRun(note, run.ordinal, 0.5);
    }
    // Per-run tokens and cost (TURN-06) are drawn by drawUsage (UX-07).
    this.drawChanges();
    this.drawUsage();
    if (stick) this.scrollDown();
  }

  /** Under each finished run: its time, tokens and cost (UX-07); the cost is read once per run. */
  drawUsage() {
    if (!this.costs) this.costs = new Map(); // run id -> {text} | 'loading'
    const stick = this.following || this.nearBottom();
    for (const n of this.transcript.querySelectorAll('.run-usage')) n.remove();
    for (const run of this.runs.values()) {
      if (!['completed', 'failed', 'interrupted', 'budget_exceeded'].includes(run.status)) continue;
      const cost = this.costs.get(run.id);
      if (cost === undefined && run.usage) {
        this.costs.set(run.id, 'loading');
        runCost(this.id, run.ordinal)
          .then((c) => { this.costs.set(run.id, c); if (!this.destroyed) this.drawUsage(); })
          .catch(() => this.costs.set(run.id, null));
      }
      const line = runUsageLine(run, cost && cost !== 'loading' ? cost : null);
      this.placeAfterRun(line, run.ordinal, 0.4);
    }
    if (stick) this.scrollDown();
  }

  drawStatus() {
    const t = this.thread;
    if (!t) return;
    this.title.textContent = t.title || t.id;
    if (this.archiveButton) this.archiveButton.textContent = t.archived_at ? 'Unarchive' : 'Archive';
    if (this.mergeButton) this.mergeButton.hidden = !t.worktree;
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
    parts.push(h('span', { class: 'muted', id: 'thread-instance' }, ` · ${t.provider_instance_id}${t.model ? ` / ${t.model}` : ''}`));
    const total = this.usage && this.usage.total;
    if (total && total.total_tokens) {
      parts.push(h('span', { class: 'muted', id: 'thread-usage' }, ` · ${total.total_tokens} tokens${total.unpriced_runs ? '' : ` · ${usd(total.cost_microdollars)}`}`));
    }
    if (t.worktree) {
      parts.push(h('span', { class: 'muted', id: 'thread-worktree', title: `git worktree of this thread, from ${t.worktree.base_commit.slice(0, 12)}` },
        ` · worktree ${t.worktree.branch} at ${t.worktree.path}`));
    }
    this.fillModels();
    replace(this.statusLine, parts);
    const warning = sharedRootWarning(t, this.sidebar ? [...this.sidebar.threads.values()] : []);
    if ((warning ? warning.textContent : '') !== this.warning.textContent) replace(this.warning, warning);
    const hide = !t.active_run_id;
    // A hidden button cannot keep the focus: hand it to the composer, not to <body>.
    if (hide && [this.interruptButton, this.steerButton].includes(document.activeElement)) this.input.focus();
    this.interruptButton.hidden = hide;
    this.steerButton.hidden = hide;
    this.drawQueue();
  }

  /** The thread's queue (TURN-01/02): entries with a cancel button, and the pause with Resume / Clear. */
  drawQueue() {
    const q = (this.thread && this.thread.queue) || {};
    const entries = q.entries || [];
    const act = (path, method) => () => api(`/threads/${encodeURIComponent(this.id)}${path}`, { method, body: method === 'POST' ? {} : undefined })
      .then(() => this.showError(null), (e) => this.showError(e.message));
    const rows = [];
    if (q.paused) {
      rows.push(h('div', { class: 'queue-paused', id: 'queue-paused' },
        ({ user_interrupt: 'Queue paused: a run was interrupted. ', budget_exceeded: 'Queue paused: a budget is spent. ' })[q.paused.reason] || 'Queue paused: a run could not be resumed. ',
        h('button', { type: 'button', id: 'queue-resume', on: { click: act('/queue/resume', 'POST') } }, 'Resume'), ' ',
        h('button', { type: 'button', id: 'queue-clear', on: { click: act('/queue', 'DELETE') } }, 'Clear')));
    }
    entries.forEach((e, i) => rows.push(h('div', { class: 'queue-entry', dataset: { entry: e.id } },
      `${i + 1}. ${e.steer_run_id ? 'steering' : 'queued'}: ${e.text.split('\n')[0].slice(0, 80)}`,
      e.note ? h('span', { class: 'muted' }, ` (${e.note})`) : null,
      e.steer_run_id ? null : h('button', { type: 'button', class: 'queue-cancel', title: 'cancel this message', on: { click: act(`/queue/${encodeURIComponent(e.id)}`, 'DELETE') } }, '×'))));
    this.queueBox.hidden = rows.length === 0;
    replace(this.queueBox, rows);
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

  async send(mode) {
    const text = this.input.value;
    const model = this.modelInput.value.trim();
    // One message per press: Ctrl+Enter again while the first is on its way is ignored.
    if (!text.trim() || this.sending) return;
    this.sending = true;
    this.sendButton.disabled = true;
    try {
      const body = model ? { text, model } : { text };
      if (mode) body.mode = mode;
      await api(`/threads/${encodeURIComponent(this.id)}/messages`, { method: 'POST', body });
      // Sending jumps to the end and follows the answer until the reader scrolls up (UX-06).
      this.following = true;
      this.scrollDown();
      // Only what was sent is cleared: text typed while it was on its way stays.
      if (this.input.value === text) this.input.value = '';
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
