// The sessions view: the live provider sessions (GET /api/sessions, re-read every
// 2 s; the idle countdown ticks every second in between), each with a Close button.

import { h, replace, clock, duration } from './dom.js';
import { api } from './api.js';

const POLL_MS = 2000;

function countdown(s) {
  if (s.busy_turns.length) return 'busy: no idle release while a turn runs';
  if (!s.idle_deadline) return '—';
  const ms = new Date(s.idle_deadline) - Date.now();
  const pin = s.pinned_since ? ' (pinned: background work may defer it)' : '';
  return ms > 0 ? `released in ${duration(ms)}${pin}` : `release due now${pin}`;
}

function capabilities(c) {
  const on = Object.entries(c).filter(([, v]) => v).map(([k]) => k.replaceAll('_', ' '));
  return on.length ? on.join(', ') : 'none';
}

export class SessionsView {
  /** `sidebar` (optional) names threads by their titles. */
  constructor(sidebar = null) {
    this.sidebar = sidebar;
    this.sessions = [];
    this.mcp = new Map(); // thread id -> {at, caps}
    this.list = h('div', { class: 'sessions-list' });
    this.error = h('p', { class: 'error', hidden: true });
    this.el = h('section', { class: 'view sessions-view' },
      h('h2', {}, 'Live provider sessions'),
      h('p', { class: 'muted' }, 'Each session is one live agent runtime. An idle session is released when its countdown ends; the thread’s next message opens a new one.'),
      this.error, this.list);
    this.countdowns = []; // [element, session]: ticked every second without a redraw
    this.poll = setInterval(() => this.load(), POLL_MS);
    this.tick = setInterval(() => {
      for (const [el, s] of this.countdowns) el.textContent = countdown(s);
    }, 1000);
    this.load();
  }

  /** MCP capabilities of `threadId`'s credential, from its projection (cached 15 s). */
  mcpOf(threadId) {
    const hit = this.mcp.get(threadId);
    if (!hit || Date.now() - hit.at > 15000) {
      this.mcp.set(threadId, { at: Date.now(), caps: hit ? hit.caps : null });
      api(`/threads/${encodeURIComponent(threadId)}`).then((p) => {
        const caps = p.mcp && p.mcp.active ? p.mcp.capabilities : [];
        const changed = JSON.stringify(caps) !== JSON.stringify(hit ? hit.caps : null);
        this.mcp.set(threadId, { at: Date.now(), caps });
        if (changed) this.draw(true);
      }).catch((e) => {
        this.mcp.set(threadId, { at: Date.now(), caps: hit ? hit.caps : null, error: e.message });
      });
    }
    return hit ? hit.caps : null;
  }

  mcpText(s) {
    if (!s.mcp_threads.length) return 'no MCP credential';
    return s.mcp_threads.map((t) => {
      const caps = this.mcpOf(t);
      const err = this.mcp.get(t) && this.mcp.get(t).error;
      const list = caps === null ? (err ? `unknown (${err})` : '…') : caps.length ? caps.join(', ') : 'no capabilities';
      return `${list} (credential of ${this.threadName(t)})`;
    }).join('; ');
  }

  /** A thread's title when the sidebar knows it, else its id. */
  threadName(id) {
    const t = this.sidebar && this.sidebar.threads.get(id);
    return (t && t.title) || id;
  }

  async load() {
    try {
      this.sessions = await api('/sessions');
      this.error.hidden = true;
    } catch (e) {
      this.error.hidden = false;
      this.error.textContent = e.message;
    }
    this.draw();
  }

  /**
   * Rebuilds the cards when the sessions changed (or `force`). Not on every tick: a
   * card replaced between a button's press and release would swallow the click.
   */
  draw(force = false) {
    // Only what the cards show; the idle deadline to the second (the server works it
    // out anew on every read, so its nanoseconds move).
    const key = JSON.stringify(this.sessions.map((s) => [s.provider_session_id, s.status, s.driver, s.provider_instance_id,
      s.model, s.cwd, s.threads, s.busy_turns, s.idle_deadline && Math.round(Date.parse(s.idle_deadline) / 1000),
      s.pinned_since, s.capabilities, s.mcp_threads, s.node, s.remote]));
    if (key === this.drawn && !force) return;
    this.drawn = key;
    this.countdowns = [];
    if (!this.sessions.length) {
      replace(this.list, h('p', { class: 'muted', id: 'no-sessions' }, 'No live sessions. Sending a message to a thread starts one.'));
      return;
    }
    replace(this.list, this.sessions.map((s) => {
      // Only the node holding a session closes it; another node's is listed, not closed.
      const close = s.remote ? h('span', { class: 'muted' }, `on node ${s.node}`)
        : h('button', { type: 'button', class: 'danger close-session', dataset: { session: s.provider_session_id } }, 'Close');
      if (!s.remote) close.addEventListener('click', async () => {
        close.disabled = true;
        try {
          await api(`/sessions/${encodeURIComponent(s.provider_session_id)}/close`, { method: 'POST', body: {} });
          await this.load();
        } catch (e) {
          close.disabled = false;
          this.error.hidden = false;
          this.error.textContent = e.message;
        }
      });
      const row = (label, value) => [h('dt', {}, label), h('dd', {}, value)];
      return h('div', { class: 'card session', dataset: { session: s.provider_session_id } },
        h('div', { class: 'card-head' }, h('span', { class: 'tool-name' }, s.provider_session_id),
          this.statusBadge(s), close),
        h('dl', {},
          row('driver', s.driver),
          row('instance', `${s.provider_instance_id}${s.model ? ` / ${s.model}` : ''}`),
          row('folder', s.cwd),
          ...(s.node ? row('node', s.remote ? `${s.node} (another node)` : s.node) : []),
          row('threads', s.threads.length ? s.threads.map((t) => [h('a', { href: `#/thread/${encodeURIComponent(t)}`, class: 'session-thread', title: t }, this.threadName(t)), ' ']) : 'none'),
          row('busy turns', s.remote ? `known to node ${s.node}` : s.busy_turns.length ? s.busy_turns.join(', ') : 'none'),
          row('idle release', s.remote ? `known to node ${s.node}` : this.countdownNode(s)),
          row('pinned since', s.pinned_since ? clock(s.pinned_since) : 'not pinned'),
          row('runtime capabilities', capabilities(s.capabilities)),
          row('MCP capabilities', h('span', { class: 'mcp' }, this.mcpText(s)))));
    }));
  }

  /**
   * The session's status badge. The record says `ready` between turns and while one
   * runs (it is the session's, not the turn's), so a session with busy turns shows
   * "busy · N turn(s) running" instead.
   */
  statusBadge(s) {
    const n = s.busy_turns.length;
    if (!n) return h('span', { class: `badge session-status st-${s.status}` }, s.status);
    return h('span', { class: 'badge session-status st-busy', title: `session record: ${s.status}` },
      `busy · ${n} turn${n === 1 ? '' : 's'} running`);
  }

  countdownNode(s) {
    const el = h('span', { class: 'countdown' }, countdown(s));
    this.countdowns.push([el, s]);
    return el;
  }

  destroy() {
    clearInterval(this.poll);
    clearInterval(this.tick);
  }
}
