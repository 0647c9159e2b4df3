// Opt-in browser notifications (UX-07): while the tab is hidden, a thread that starts
// waiting for an approval, or whose run ends, raises a notification. Off until the user
// turns it on (the browser then asks for its permission); the choice is kept per browser.

import { threadStatus } from './sidebar.js';

const KEY = 'knife.notify';
const BUSY = ['running', 'waiting', 'retrying', 'resuming'];

export class Notifier {
  /** `sidebar`: the Sidebar (thread statuses); `button`: the toggle in the top bar. */
  constructor(sidebar, button) {
    this.sidebar = sidebar;
    this.button = button;
    this.last = new Map(); // thread id -> status key last seen
    this.supported = typeof window.Notification === 'function';
    button.addEventListener('click', () => this.toggle());
    sidebar.onChange(() => this.check());
    this.draw();
  }

  get on() {
    return this.supported && Notification.permission === 'granted' && localStorage.getItem(KEY) === 'on';
  }

  async toggle() {
    if (!this.supported) return;
    if (this.on) {
      localStorage.setItem(KEY, 'off');
    } else {
      const permission = Notification.permission === 'granted' ? 'granted' : await Notification.requestPermission();
      localStorage.setItem(KEY, permission === 'granted' ? 'on' : 'off');
    }
    this.draw();
  }

  draw() {
    const blocked = this.supported && Notification.permission === 'denied';
    this.button.textContent = !this.supported ? 'Notify: n/a' : blocked ? 'Notify: blocked' : this.on ? 'Notify: on' : 'Notify: off';
    this.button.title = blocked
      ? 'the browser blocks notifications for this page (allow them in its site settings)'
      : 'notify me when a run waits for approval or ends while this tab is hidden';
    this.button.setAttribute('aria-pressed', String(this.on));
  }

  /** Compares each thread's status with the last one seen; notifies on the changes that matter. */
  check() {
    for (const t of this.sidebar.threads.values()) {
      const key = threadStatus(t, this.sidebar.pendingCount(t.id)).key;
      const prev = this.last.get(t.id);
      this.last.set(t.id, key);
      if (prev === undefined || prev === key || !this.on || !document.hidden) continue;
      const title = t.title || t.id;
      if (key === 'waiting') this.show(t, `${title}: waits for your approval`);
      else if (BUSY.includes(prev) && key === 'failed') this.show(t, `${title}: the run failed`);
      else if (BUSY.includes(prev) && key === 'idle') this.show(t, `${title}: the run ended`);
    }
  }

  show(thread, body) {
    const n = new Notification('knife', { body, tag: `knife-${thread.id}` });
    n.onclick = () => {
      window.focus();
      location.hash = `#/thread/${encodeURIComponent(thread.id)}`;
    };
  }
}
