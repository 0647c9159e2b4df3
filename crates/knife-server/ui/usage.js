// Per-run tokens and cost on the page (UX-07): under each finished run, its time, token
// counts and cost (`GET /api/usage?thread_id=&run=N`, priced by knife.toml's [prices]).

import { h, duration } from './dom.js';
import { api } from './api.js';

const n = (x) => Number(x || 0).toLocaleString('en-US');

/** `$0.0031`, `$1.25`; null for an unknown cost. */
export function dollars(micro) {
  if (micro === null || micro === undefined) return null;
  const usd = micro / 1e6;
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

/** The cost of run `ordinal` of `thread`: `{ text }` (`$0.0031`, or why it is unknown). */
export async function runCost(thread, ordinal) {
  const r = await api(`/usage?thread_id=${encodeURIComponent(thread)}&run=${ordinal}`);
  if (r.total.unpriced_runs > 0) return { text: 'cost unknown (no price for its model)' };
  return { text: dollars(r.total.cost_microdollars) };
}

/** The line under a finished run: `run 2 · 3.2 s · 1,372 tokens (1,327 in, 45 out) · $0.0031`. */
export function runUsageLine(run, cost) {
  const parts = [`run ${run.ordinal}`];
  if (run.completed_at) {
    parts.push(duration(new Date(run.completed_at) - new Date(run.started_at || run.requested_at)));
  }
  const u = run.usage;
  if (u) {
    const total = u.total_tokens || (u.input_tokens + u.output_tokens);
    parts.push(`${n(total)} tokens (${n(u.input_tokens)} in, ${n(u.output_tokens)} out)`);
  }
  if (cost && cost.text) parts.push(cost.text);
  return h('div', { class: 'run-usage muted', dataset: { run: run.id } }, parts.filter(Boolean).join(' · '));
}
