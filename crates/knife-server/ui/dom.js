// DOM helpers. Every piece of text goes in through textContent (via `h` children
// that are strings): nothing from the server or the model is ever parsed as HTML.

/**
 * Creates an element. `attrs`: `class`, `dataset` (object), `on` (event -> handler),
 * any other key is set with setAttribute (values become strings). Children: nodes,
 * strings (text nodes), arrays, null/undefined/false (skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

/** Appends children (see `h`) to `el`. */
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces all children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** "3 s", "2 min 5 s", "1 h 4 min" for a duration in milliseconds. */
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** Local time of an RFC 3339 timestamp, e.g. "14:03:07". */
export function clock(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleTimeString();
}

/** "5 s ago" / "in 5 s" relative to now. */
export function relative(ts) {
  const d = new Date(ts).getTime() - Date.now();
  if (!Number.isFinite(d)) return '';
  return d >= 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
}

/** Lines a folded text block shows (UX-06). */
export const FOLD_LINES = 12;

/**
 * A text block folded to its first `FOLD_LINES` lines with a "show all N lines" toggle
 * (UX-06); a text of few but long lines is cut at `limit` characters instead. `cls` is
 * the class of the <pre>.
 */
export function truncated(text, limit = 600, cls = 'output') {
  const pre = h('pre', { class: cls });
  const lines = text.replace(/\n$/, '').split('\n');
  const byLines = lines.length > FOLD_LINES;
  const short = byLines ? lines.slice(0, FOLD_LINES).join('\n') : text.slice(0, Math.max(limit, 2000));
  if (!byLines && short.length === text.length) {
    pre.textContent = text;
    return pre;
  }
  let open = false;
  const button = h('button', { class: 'link show-more', type: 'button' });
  const box = h('div', { class: 'truncated' }, pre, button);
  const render = () => {
    pre.textContent = open ? text : `${short}\n…`;
    button.textContent = open ? 'show less'
      : byLines ? `show all ${lines.length} lines` : `show all (${text.length - short.length} more characters)`;
    box.classList.toggle('open', open); // open: the whole text, in a box of its own that scrolls
  };
  button.addEventListener('click', () => { open = !open; render(); });
  render();
  return box;
}
