// Approval cards (a runtime request the agent waits on: allow once, allow always,
// deny with an optional message; expired ones say why) and the Approvals view,
// which gathers the pending requests of every thread.

import { h, replace, clock } from './dom.js';
import { api } from './api.js';

const DECISIONS = { allow_once: 'Allow once', allow_always: 'Allow always', deny: 'Deny' };

/** Why a request can no longer be answered, or null while it can. */
export function closedReason(request) {
  if (!request || request.status === 'pending' || request.status === 'resolved') return null;
  const cap = request.response_capability;
  const why = cap && cap.type === 'not_resumable' ? cap.reason : '';
  return `${request.status}${request.resolved_at ? ` at ${clock(request.resolved_at)}` : ''}${why ? `: ${why}` : ''}`;
}

/**
 * A unified diff as a <pre>, one span per line classed by kind (`diff-file` for the
 * `---`/`+++` headers, `diff-hunk`, `diff-add`, `diff-del`), text nodes only (CHG-05).
 */
export function diffView(diff) {
  const lines = diff.replace(/\n$/, '').split('\n');
  return h('pre', { class: 'diff' }, lines.map((line) => {
    const kind = line.startsWith('+++') || line.startsWith('---') ? 'diff-file'
      : line.startsWith('@@') ? 'diff-hunk'
        : line.startsWith('+') ? 'diff-add'
          : line.startsWith('-') ? 'diff-del' : 'diff-ctx';
    return h('span', { class: `diff-line ${kind}` }, `${line}\n`);
  }));
}

/**
 * The card of one approval. `item`: the approval turn item (tool, subject), or
 * null; `request`: the RuntimeRequest (status, prompt); `answer(request, decision,
 * message)` sends the answer and resolves when it was taken.
 */
export function approvalCard(item, request, answer) {
  const tool = item ? item.tool : request.tool_approval ? request.tool_approval.tool : request.kind;
  const subject = item ? item.subject : request.tool_approval ? request.tool_approval.subject : request.prompt || '';
  const status = request ? request.status : item.status === 'waiting' ? 'pending' : item.status;
  const decision = (request && request.decision) || (item && item.decision);
  const card = h('div', { class: `card approval approval-${status}`, dataset: { request: request ? request.id : item.request_id } },
    h('div', { class: 'card-head' }, h('span', { class: 'tool-name' }, `Approve ${tool}?`),
      h('span', { class: `badge st-${status}` }, status)),
    h('pre', { class: 'subject' }, subject),
    // The proposed change of a write / edit / codex file change, instead of its JSON (CHG-05).
    request && request.tool_approval && request.tool_approval.diff ? diffView(request.tool_approval.diff) : null,
    request && request.tool_approval ? h('div', { class: 'muted' }, `asked by ${request.tool_approval.rule}`) : null);
  if (status === 'pending' && request) {
    const message = h('input', { class: 'approval-message', placeholder: 'message for the agent (optional)' });
    const error = h('p', { class: 'error', hidden: true });
    const buttons = Object.entries(DECISIONS).map(([d, label]) => h('button', {
      type: 'button', class: `decide decide-${d}`, dataset: { decision: d },
      on: {
        click: async () => {
          for (const b of buttons) b.disabled = true;
          try {
            await answer(request, d, message.value.trim() || null);
          } catch (e) {
            error.hidden = false;
            error.textContent = e.message;
            for (const b of buttons) b.disabled = false;
          }
        },
      },
    }, label));
    card.append(message, h('div', { class: 'buttons' }, buttons), error);
  } else if (decision) {
    const msg = (request && request.tool_approval && request.tool_approval.message) || (item && item.message);
    card.append(h('div', { class: 'decision' }, `Answered: ${DECISIONS[decision] || decision}`, msg ? ` — “${msg}”` : ''));
  } else {
    const why = closedReason(request);
    if (why) card.append(h('div', { class: 'expired-reason' }, `Can no longer be answered: ${why}`));
  }
  return card;
}

/** Sends an answer to `request` (POST /api/threads/{id}/requests/{request_id}). */
export function answerRequest(request, decision, message) {
  const path = `/threads/${encodeURIComponent(request.thread_id)}/requests/${encodeURIComponent(request.id)}`;
  return api(path, { method: 'POST', body: message ? { decision, message } : { decision } });
}

/** Every pending approval, across threads (the threads the sidebar knows). */
export class ApprovalsView {
  constructor(sidebar) {
    this.sidebar = sidebar;
    this.list = h('div', { class: 'approvals-list' });
    this.error = h('p', { class: 'error', id: 'approvals-error', hidden: true });
    this.el = h('section', { class: 'view approvals-view' }, h('h2', {}, 'Pending approvals'), this.error, this.list);
    this.off = sidebar.onChange(() => this.load());
    this.load();
  }

  async load() {
    const threads = [...this.sidebar.threads.values()].filter((t) => t.status === 'running');
    const groups = await Promise.all(threads.map(async (t) => {
      try {
        const rs = await api(`/threads/${encodeURIComponent(t.id)}/requests`);
        return { t, rs: rs.filter((r) => r.status === 'pending') };
      } catch (e) {
        return { t, rs: [], error: e.message };
      }
    }));
    if (this.destroyed) return;
    // A thread whose requests could not be read is named, not shown as "nothing waits".
    const failed = groups.filter((g) => g.error);
    this.error.hidden = !failed.length;
    this.error.textContent = failed.map((g) => `Could not read the approvals of “${g.t.title || g.t.id}”: ${g.error}`).join('\n');
    // Redraw only when the set of pending requests changed: a redraw would drop a
    // message being typed into a card.
    const key = groups.flatMap((g) => g.rs.map((r) => r.id)).sort().join(' ') + (failed.length ? ' !' : '');
    if (key === this.shown) return;
    this.shown = key;
    const cards = groups.filter((g) => g.rs.length).map((g) => h('div', { class: 'approval-group' },
      h('h3', {}, h('a', { href: `#/thread/${encodeURIComponent(g.t.id)}` }, g.t.title || g.t.id)),
      g.rs.map((r) => approvalCard(null, r, async (req, d, m) => { await answerRequest(req, d, m); this.load(); }))));
    replace(this.list, cards.length || failed.length ? cards : h('p', { class: 'muted', id: 'no-approvals' }, 'Nothing waits for your approval.'));
  }

  destroy() {
    this.destroyed = true;
    this.off();
  }
}
