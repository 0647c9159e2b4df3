// The sidebar's search box (UX-07): filters the thread list by title as you type, and,
// on Enter, asks the server's full-text search (`GET /api/search?q=`, TURN-08), listing
// the matching threads with the matched words marked in a snippet.

import { h, replace } from './dom.js';
import { api } from './api.js';

export function installSearch(sidebar) {
  const input = h('input', { id: 'thread-search', type: 'search', placeholder: 'Search threads ( / ), Enter: full text', autocomplete: 'off' });
  const results = h('div', { id: 'search-results', class: 'search-results', hidden: true });
  const filter = () => {
    const q = input.value.trim().toLowerCase();
    for (const li of sidebar.el.querySelectorAll('ul.threads li')) {
      const a = li.querySelector('.thread-link');
      const title = ((a && a.getAttribute('title')) || '').toLowerCase();
      li.hidden = !!q && !title.includes(q);
    }
    if (!q) results.hidden = true;
  };
  input.addEventListener('input', filter);
  input.addEventListener('keydown', async (e) => {
    if (e.key !== 'Enter') return;
    e.preventDefault();
    const q = input.value.trim();
    if (!q) return;
    try {
      // `GET /api/search` answers `{ query, hits: [{ thread_id, thread_title, kind, snippet, … }] }`.
      const answer = await api(`/search?q=${encodeURIComponent(q)}&limit=20`);
      const hits = (answer && answer.hits) || [];
      results.hidden = false;
      replace(results, hits.length
        ? hits.map((r) => h('a', { class: 'search-hit', href: `#/thread/${encodeURIComponent(r.thread_id)}`, dataset: { thread: r.thread_id, kind: r.kind } },
          h('strong', {}, r.thread_title || r.thread_id), ' ', h('span', { class: 'muted' }, String(r.kind || '').replace('_', ' ')),
          snippet(r.snippet || '')))
        : h('p', { class: 'muted' }, `No thread mentions “${q}”.`));
    } catch (err) {
      results.hidden = false;
      replace(results, h('p', { class: 'error' }, err.message));
    }
  });
  sidebar.el.prepend(h('div', { class: 'search' }, input, results));
  sidebar.onChange(filter);
}

/** A hit's snippet: the server marks the matched words with `[` and `]`; they become <mark>. */
function snippet(text) {
  const parts = [];
  const re = /\[([^\]]*)\]/g;
  let at = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    parts.push(text.slice(at, m.index), h('mark', {}, m[1]));
    at = m.index + m[0].length;
  }
  parts.push(text.slice(at));
  return h('div', { class: 'search-snippet' }, parts);
}
