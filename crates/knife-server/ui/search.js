// The sidebar's search box (UX-07): filters the thread list by title as you type, and,
// on Enter, asks the server's full-text search (`GET /api/search?q=`, TURN-08) when it
// offers one, listing the matching threads with a snippet.

import { h, replace } from './dom.js';
import { api } from './api.js';

export function installSearch(sidebar) {
  const input = h('input', { id: 'thread-search', type: 'search', placeholder: 'Search threads ( / )', autocomplete: 'off' });
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
      const hits = await api(`/search?q=${encodeURIComponent(q)}`);
      const list = Array.isArray(hits) ? hits : (hits.results || []);
      results.hidden = false;
      replace(results, list.length
        ? list.slice(0, 20).map((r) => h('a', { class: 'search-hit', href: `#/thread/${encodeURIComponent(r.thread_id)}` },
          h('span', { class: 'title' }, r.title || r.thread_id), r.snippet ? h('span', { class: 'muted' }, ` · ${r.snippet}`) : null))
        : h('p', { class: 'muted' }, `No thread mentions “${q}”.`));
    } catch (err) {
      // No full-text search on this server (404): the title filter above is what there is.
      results.hidden = err.status !== 404 ? false : true;
      if (err.status !== 404) replace(results, h('p', { class: 'error' }, err.message));
    }
  });
  sidebar.el.prepend(input, results);
  sidebar.onChange(filter);
}
