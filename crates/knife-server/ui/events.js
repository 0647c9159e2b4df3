// The events view: a thread's raw event log (sequence, type, time, JSON), replayed
// from the start and then followed live, for debugging.

import { h, clock } from './dom.js';
import { LiveSocket } from './api.js';

const MAX_ROWS = 5000;

export class EventsView {
  constructor(id) {
    this.id = id;
    this.count = h('span', { class: 'muted' }, '0 events');
    this.rows = h('div', { class: 'events', id: 'events' });
    this.n = 0;
    this.error = h('p', { class: 'error', id: 'events-error', hidden: true });
    this.el = h('section', { class: 'view events-view' },
      h('header', { class: 'thread-head' }, h('h2', {}, 'Event log'),
        h('a', { href: `#/thread/${encodeURIComponent(id)}` }, 'Back to the thread')),
      h('p', { class: 'muted' }, `Thread ${id}, oldest first. `, this.count),
      this.error, this.rows);
    this.socket = new LiveSocket(() => {}, (err) => {
      this.error.hidden = false;
      this.error.textContent = `Live updates failed: ${err.message} (reload the page to try again)`;
    });
    this.socket.subscribe(id, 0, (ev) => this.add(ev));
  }

  add(ev) {
    this.n += 1;
    this.count.textContent = `${this.n} events`;
    this.rows.append(h('details', { class: 'event', dataset: { sequence: ev.sequence, type: ev.type } },
      h('summary', {}, h('span', { class: 'seq' }, `#${ev.sequence}`), ' ', h('span', { class: 'etype' }, ev.type), ' ',
        h('span', { class: 'muted' }, clock(ev.occurred_at))),
      h('pre', { class: 'json' }, JSON.stringify(ev, null, 2))));
    while (this.rows.children.length > MAX_ROWS) this.rows.firstChild.remove();
  }

  destroy() {
    this.socket.close();
  }
}
