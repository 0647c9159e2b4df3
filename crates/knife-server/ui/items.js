// One transcript item (a TurnItem of the API) as DOM: user messages, assistant
// text (safe Markdown), reasoning (collapsed), tool calls, errors, compaction and
// "continuing after restart" markers, approval cards.

import { h, duration, clock, truncated } from './dom.js';
import { markdown } from './markdown.js';
import { approvalCard } from './approvals.js';

/** How long an item ran ("1.2 s"), or how long it has been running. */
function took(item) {
  if (!item.started_at) return '';
  const end = item.completed_at ? new Date(item.completed_at) : new Date();
  const ms = end - new Date(item.started_at);
  return item.completed_at ? duration(ms) : `${duration(ms)} so far`;
}

/** JSON on one line when it is short (`{"path": "."}`), indented otherwise. */
function pretty(value) {
  if (typeof value === 'string') return value;
  try {
    const flat = JSON.stringify(value);
    return flat.length <= 100 ? flat : JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/**
 * Renders `item`. `ctx.requests` maps request id -> RuntimeRequest; `ctx.answer`
 * (request, decision, message) sends an approval answer.
 */
export function renderItem(item, ctx) {
  const attrs = { class: `item item-${item.type} st-${item.status}`, dataset: { item: item.id, status: item.status } };
  switch (item.type) {
    case 'user_message':
      if (item.origin === 'system') {
        return h('div', { ...attrs, class: `${attrs.class} marker restart` },
          h('span', { class: 'marker-label' }, `↻ ${item.description || 'Message from knife'}`),
          h('details', {}, h('summary', {}, 'what knife told the agent'), h('pre', { class: 'plain' }, item.text)));
      }
      {
        // The run's model when the message (or the thread) named one (TURN-10).
        const run = ctx && ctx.runs && ctx.runs.get(item.run_id);
        const model = run && run.model ? h('span', { class: 'run-model muted', title: 'model of this run' }, ` · ${run.model}`) : null;
        return h('div', attrs, h('div', { class: 'who' }, 'You', model), h('div', { class: 'plain user-text' }, item.text));
      }
    case 'assistant_message':
      return h('div', attrs, h('div', { class: 'who' }, 'Assistant', item.streaming ? h('span', { class: 'streaming' }, ' • streaming') : null,
        item.status === 'interrupted' ? h('span', { class: 'badge' }, 'interrupted') : null),
      markdown(item.text));
    case 'reasoning':
      return h('details', attrs,
        h('summary', {}, item.streaming ? 'Reasoning… ' : 'Reasoning ', h('span', { class: 'muted' }, took(item))),
        h('pre', { class: 'plain reasoning-text' }, item.text));
    case 'tool_call': {
      // A write / edit whose approval carries the diff: the card below shows the
      // change, so the raw arguments fold away (CHG-05).
      const diffed = [...(ctx.requests ? ctx.requests.values() : [])]
        .some((r) => r.tool_approval && r.tool_approval.call_id === item.call_id && r.tool_approval.diff);
      const input = truncated(pretty(item.input), 400, 'tool-input');
      return h('div', { ...attrs, class: `${attrs.class} card` },
        h('div', { class: 'card-head' },
          h('span', { class: 'tool-name' }, item.tool),
          h('span', { class: `badge st-${item.status}` }, item.status),
          h('span', { class: 'muted' }, took(item))),
        diffed
          ? h('details', { class: 'tool-args' }, h('summary', { class: 'label' }, 'arguments (the approval shows the change)'), input)
          : [h('div', { class: 'label' }, 'input'), input],
        // The approval that gates this call sits here, before its output (UX-06).
        h('div', { class: 'approval-slot', dataset: { call: item.call_id, run: item.run_id || '' } }),
        item.output != null ? [h('div', { class: 'label' }, 'output'), truncated(item.output, 600, 'tool-output')] : null,
        item.error != null ? [h('div', { class: 'label' }, 'error'), truncated(item.error, 600, 'tool-error error')] : null);
    }
    case 'error':
      // A user's interrupt is no error: a neutral marker (UX-06).
      if (item.error.type === 'interrupted') {
        return h('div', { ...attrs, class: `${attrs.class} marker interrupted` }, '■ Interrupted');
      }
      // A spent budget's message is shown once, by its run's end note (TURN-07).
      return h('div', { ...attrs, class: `${attrs.class} error-box`, hidden: budgetStopped(ctx && ctx.runs && ctx.runs.get(item.run_id)) },
        h('strong', {}, `Error (${item.error.type})`), ' ', h('span', { class: 'error-message' }, item.error.message),
        item.error.http_status ? h('span', { class: 'muted' }, ` HTTP ${item.error.http_status}`) : null);
    case 'compaction':
      return h('div', { ...attrs, class: `${attrs.class} marker compaction` },
        h('span', { class: 'marker-label' }, item.status === 'completed' ? '⇣ Conversation compacted' : '⇣ Compacting the conversation…'),
        item.summary ? h('details', {}, h('summary', {}, 'summary'), markdown(item.summary)) : null);
    case 'approval': {
      const request = ctx.requests.get(item.request_id);
      return h('div', attrs, approvalCard(item, request, ctx.answer));
    }
    default:
      return h('div', attrs, h('pre', { class: 'plain' }, pretty(item)));
  }
}

/** True for a run a spent budget stopped (TURN-07): its end note carries the message. */
export function budgetStopped(run) {
  return !!run && run.status === 'budget_exceeded' && !!run.error;
}

/**
 * A short line about a run's end (interrupted, failed with its error, stopped by a spent
 * budget). `latest`: the run is the thread's newest, so a spent budget offers "Raise and
 * continue" (a later run already continued it, TURN-07).
 */
export function runNote(run, latest) {
  if (run.status === 'interrupted') {
    return h('div', { class: 'marker run-end interrupted', dataset: { run: run.id } }, '■ Interrupted',
      h('span', { class: 'muted' }, ` · run ${run.ordinal}, ${clock(run.completed_at)}`));
  }
  if (budgetStopped(run)) {
    // TURN-07: the thread view handles `.budget-continue` (raise, then a continuation run).
    return h('div', { class: 'error-box run-end', dataset: { run: run.id } },
      h('strong', {}, `Run ${run.ordinal} stopped: budget spent `), h('span', { class: 'error-message' }, run.error.message),
      latest ? [' ', h('button', { type: 'button', class: 'budget-continue', title: 'add 100,000 tokens and 1 USD to this thread\'s budgets and continue' }, 'Raise and continue')] : null);
  }
  if (run.status === 'failed' && run.error) {
    return h('div', { class: 'error-box run-end', dataset: { run: run.id } },
      h('strong', {}, `Run ${run.ordinal} failed (${run.error.type}) `), h('span', { class: 'error-message' }, run.error.message));
  }
  return null;
}
