// Keyboard shortcuts (UX-07), listed by `?`. They act when no text box has the focus
// (Esc leaves one); Ctrl+Enter sends from the composer.

import { h } from './dom.js';

/** `byKeys`: the last thread was opened with j / k, so the view leaves the focus alone. */
export const keyboardNav = { byKeys: false };

export const SHORTCUTS = [
  ['?', 'show or hide this list'],
  ['/', 'search the threads'],
  ['c', 'write to the agent (the composer)'],
  ['j / k', 'next / previous thread'],
  ['n', 'new thread in the first project'],
  ['i', 'interrupt the run in progress'],
  ['Ctrl+Enter', 'send the message'],
  ['Esc', 'close this list, or leave a text box'],
];

/** Installs the shortcuts on the document; returns the dialog element. */
export function installShortcuts() {
  const dialog = h('div', { id: 'shortcuts', class: 'shortcuts', role: 'dialog', 'aria-label': 'keyboard shortcuts', hidden: true },
    h('h3', {}, 'Keyboard shortcuts'),
    h('table', {}, SHORTCUTS.map(([k, what]) => h('tr', {}, h('td', {}, h('kbd', {}, k)), h('td', {}, what)))),
    h('p', { class: 'muted' }, 'Press ? or Esc to close.'));
  document.body.append(dialog);
  document.addEventListener('pointerdown', () => { keyboardNav.byKeys = false; });
  document.addEventListener('keydown', (e) => {
    const typing = e.target.closest && e.target.closest('input, textarea, select, [contenteditable]');
    if (e.key === 'Escape') {
      if (!dialog.hidden) dialog.hidden = true;
      else if (typing) e.target.blur();
      return;
    }
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    const act = {
      '?': () => { dialog.hidden = !dialog.hidden; },
      '/': () => focus('#thread-search'),
      c: () => focus('#composer-input'),
      n: () => focus('section.project .thread-title'),
      i: () => { const b = document.getElementById('interrupt'); if (b && !b.hidden) b.click(); },
      j: () => step(1),
      k: () => step(-1),
    }[e.key];
    if (!act) return;
    e.preventDefault();
    act();
  });
  return dialog;
}

function focus(sel) {
  const el = document.querySelector(sel);
  if (el) el.focus();
}

/** Opens the thread `by` places after (or before) the selected one in the sidebar. */
function step(by) {
  const links = [...document.querySelectorAll('.sidebar .thread-link')].filter((a) => !(a.closest('li') || a).hidden);
  if (!links.length) return;
  const at = links.findIndex((a) => a.closest('li') && a.closest('li').classList.contains('selected'));
  const next = links[Math.min(links.length - 1, Math.max(0, at < 0 ? 0 : at + by))];
  keyboardNav.byKeys = true;
  location.hash = next.getAttribute('href');
}
