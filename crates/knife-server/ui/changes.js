// A run's "Changes" panel (CHG-03/04): the files the run added, modified, deleted or
// renamed with their +/- lines, each file's unified diff on demand (text nodes only),
// and the revert button with the result of each revert of the run (and its undo).

import { h, replace, clock } from './dom.js';
import { api } from './api.js';
import { diffView } from './approvals.js';

const KIND_LABELS = { added: 'added', modified: 'modified', deleted: 'deleted', renamed: 'renamed', type_changed: 'type changed' };

/**
 * Splits a unified diff in git's format into one section per file: `[{header,
 * text}]`, `header` being the section's `diff --git a/… b/…` line.
 */
export function splitDiff(text) {
  const sections = [];
  for (const line of (text || '').split(/(?<=\n)/)) {
    if (line.startsWith('diff --git ')) sections.push({ header: line.replace(/\n$/, ''), text: '' });
    if (sections.length) sections[sections.length - 1].text += line;
  }
  return sections;
}

/** The diff section of file `f` (a FileChange), or null when the diff has none (cut). */
export function sectionOf(sections, f) {
  const from = f.old_path || f.path;
  const exact = sections.find((s) => s.header === `diff --git a/${from} b/${f.path}`);
  if (exact) return exact;
  // Quoted paths (spaces, non-ASCII): git writes them as C strings; match their lines.
  const quoted = (p) => JSON.stringify(p);
  return sections.find((s) => s.header.endsWith(` b/${f.path}`) || s.header.endsWith(` ${quoted(`b/${f.path}`)}`)
    || s.text.includes(`\n+++ b/${f.path}\n`) || s.text.includes(`\n--- a/${from}\n`)
    || s.text.includes(`\nrename to ${f.path}\n`)) || null;
}

/** Every path changed by runs `ordinal` and later (both sides of a rename), sorted. */
export function pathsFrom(runs, ordinal) {
  const paths = new Set();
  for (const r of runs) {
    if (r.ordinal < ordinal || !r.changes) continue;
    for (const f of r.changes.files) {
      paths.add(f.path);
      if (f.old_path) paths.add(f.old_path);
    }
  }
  return [...paths].sort();
}

/** One line per file of a change set's summary: "3 files, +5 −2". */
export function summary(changes) {
  const n = changes.files.length;
  return `${n} file${n === 1 ? '' : 's'}, +${changes.added} −${changes.removed}`;
}

/**
 * The panel of one run. `actions.revert(run)` and `actions.undo(revert)` do the
 * work (the thread view asks for confirmation and shows errors); `update(run,
 * reverts)` redraws it only when what it shows changed, so opened files stay open.
 */
export class ChangesPanel {
  constructor(threadId, run, actions) {
    this.threadId = threadId;
    this.actions = actions;
    this.diff = null; // Promise of the run's RunDiff once a file was opened
    this.el = h('section', { class: 'run-changes', dataset: { run: run.id, runOrdinal: run.ordinal } });
    this.head = h('div', { class: 'changes-head' });
    this.files = h('div', { class: 'change-files' });
    this.note = h('p', { class: 'muted changes-note', hidden: true });
    this.result = h('div', { class: 'revert-results' });
    this.el.append(this.head, this.files, this.note, this.result);
    this.drawn = null;
    this.resultsDrawn = null;
  }

  /** True when `run` has something to show: changed files, or why it has no checkpoint. */
  static wanted(run, reverts) {
    const files = run.changes && run.changes.files.length;
    const error = run.checkpoints && (run.checkpoints.start_error || run.checkpoints.end_error);
    const terminal = !['queued', 'running'].includes(run.status);
    return terminal && (files || error || reverts.length > 0);
  }

  update(run, reverts) {
    const key = JSON.stringify([run.status, run.changes, run.checkpoints && [run.checkpoints.start_error, run.checkpoints.end_error]]);
    if (key !== this.drawn) {
      this.drawn = key;
      this.run = run;
      this.diff = null;
      this.draw();
    }
    const rkey = JSON.stringify(reverts.map((r) => [r.id, r.status, r.updated_at]));
    if (rkey !== this.resultsDrawn) {
      this.resultsDrawn = rkey;
      replace(this.result, reverts.map((r) => this.revertLine(r)));
    }
  }

  draw() {
    const run = this.run;
    const changes = run.changes;
    const missing = run.checkpoints && (run.checkpoints.start_error || run.checkpoints.end_error);
    const revert = h('button', {
      type: 'button', class: 'revert-run danger',
      title: `Put back the files of run ${run.ordinal} and of every later run as they were before run ${run.ordinal} started`,
      disabled: !!missing,
      on: { click: () => this.actions.revert(run) },
    }, 'Revert to before this run');
    replace(this.head,
      h('span', { class: 'changes-title' }, `Changes · run ${run.ordinal}`),
      changes ? h('span', { class: 'changes-summary muted' }, ` · ${summary(changes)}`) : null,
      h('span', { class: 'changes-buttons' }, revert));
    this.note.hidden = !missing && !(changes && changes.skipped && changes.skipped.length);
    this.note.textContent = missing || (changes && changes.skipped && changes.skipped.length
      ? `Left out of the checkpoint: ${changes.skipped.map((s) => `${s.path} (${s.reason})`).join(', ')}` : '');
    replace(this.files, changes ? changes.files.map((f) => this.fileRow(f)) : []);
  }

  /** A file's row: kind, path (old → new for a rename), +/- lines; opens to its diff. */
  fileRow(f) {
    const body = h('div', { class: 'change-diff' }, h('span', { class: 'muted' }, 'loading the diff…'));
    const row = h('details', { class: `change-file kind-${f.kind}`, dataset: { path: f.path, kind: f.kind } },
      h('summary', {},
        h('span', { class: `badge change-kind kind-${f.kind}` }, KIND_LABELS[f.kind] || f.kind),
        h('span', { class: 'change-path' }, f.old_path ? `${f.old_path} → ${f.path}` : f.path),
        f.binary ? h('span', { class: 'badge change-binary' }, 'binary')
          : [h('span', { class: 'change-added' }, `+${f.added}`), h('span', { class: 'change-removed' }, `−${f.removed}`)]),
      body);
    row.addEventListener('toggle', async () => {
      if (!row.open || row.dataset.loaded) return;
      row.dataset.loaded = '1';
      try {
        const diff = await this.loadDiff();
        const section = sectionOf(splitDiff(diff.diff), f);
        replace(body, section ? diffView(section.text)
          : h('p', { class: 'muted' }, diff.truncated && diff.note ? `Not shown: ${diff.note}` : 'No text diff for this file.'));
      } catch (e) {
        delete row.dataset.loaded;
        replace(body, h('p', { class: 'error' }, e.message));
      }
    });
    return row;
  }

  loadDiff() {
    if (!this.diff) {
      this.diff = api(`/threads/${encodeURIComponent(this.threadId)}/runs/${this.run.ordinal}/diff`);
      this.diff.catch(() => { this.diff = null; });
    }
    return this.diff;
  }

  /** What a revert of this run did (or why it failed), with its Undo button. */
  revertLine(r) {
    const n = r.files.length;
    const files = h('span', { class: 'revert-files muted' }, ` (${r.files.join(', ')})`);
    let text;
    switch (r.status) {
      case 'applied': text = `Reverted ${n} file${n === 1 ? '' : 's'} to before run ${r.run_ordinal} at ${clock(r.updated_at)}${r.forced ? ', overwriting later edits' : ''}.`; break;
      case 'undone': text = `Revert undone at ${clock(r.updated_at)}: ${n} file${n === 1 ? '' : 's'} as they were before it.`; break;
      case 'failed': text = `Revert failed, nothing changed: ${r.error || 'unknown error'}`; break;
      default: text = r.status === 'undoing' ? 'Undoing the revert…' : 'Reverting…';
    }
    const undo = r.status === 'applied'
      ? h('button', { type: 'button', class: 'undo-revert', on: { click: () => this.actions.undo(r) } }, 'Undo revert') : null;
    return h('div', { class: `revert-result revert-${r.status}`, dataset: { revert: r.id, status: r.status } },
      h('span', { class: 'revert-text' }, text), n ? files : null, undo);
  }
}

/** A list of paths for a dialog: at most 20 lines. */
function pathList(paths) {
  const shown = paths.slice(0, 20).map((p) => `  ${p}`).join('\n');
  return paths.length > 20 ? `${shown}\n  … and ${paths.length - 20} more` : shown;
}

/**
 * POSTs `path` with `{}`; on 409 `revert_conflict` (someone changed those files
 * since) asks whether to overwrite them and, if so, POSTs again with `force`.
 * Returns the Revert, or null when the person said no.
 */
async function withConflictCheck(path, what) {
  try {
    return await api(path, { method: 'POST', body: {} });
  } catch (e) {
    if (e.code !== 'revert_conflict') throw e;
    const ask = `${e.message}\n\n${pathList(e.files)}\n\n${what} anyway and overwrite those edits?`;
    if (!window.confirm(ask)) return null;
    return api(path, { method: 'POST', body: { force: true } });
  }
}

/**
 * Asks for confirmation (naming the files), then reverts `run` and every later run
 * of thread `threadId` (`runs`: the thread's runs). Returns the Revert, or null when
 * cancelled; rejects with the ApiError (a run in progress, no checkpoint, …).
 */
export async function confirmRevert(threadId, runs, run) {
  const files = pathsFrom(runs, run.ordinal);
  const later = runs.some((r) => r.ordinal > run.ordinal && r.changes && r.changes.files.length);
  const ask = `Revert to before run ${run.ordinal}?\n\nThese files go back to how they were before run ${run.ordinal} started`
    + `${later ? ' (this includes what the later runs changed)' : ''}:\n${pathList(files)}\n\n`
    + 'The conversation stays as it is; the agent\'s next run is told which files were reverted. You can undo the revert.';
  if (!window.confirm(ask)) return null;
  return withConflictCheck(`/threads/${encodeURIComponent(threadId)}/runs/${run.ordinal}/revert`, 'Revert');
}

/** Asks, then undoes revert `r` (its files go back to what the revert replaced). */
export async function confirmUndo(threadId, r) {
  if (!window.confirm(`Undo the revert of run ${r.run_ordinal}?\n\nThese files go back to how they were just before the revert:\n${pathList(r.files)}`)) return null;
  return withConflictCheck(`/threads/${encodeURIComponent(threadId)}/reverts/${encodeURIComponent(r.id)}/undo`, 'Undo');
}

/**
 * The warning of a thread working in its project's folder while other threads work
 * there too without a worktree (CHG-04): their change sets mix. `threads`: every
 * listed thread. Null when there is nothing to warn about.
 */
export function sharedRootWarning(thread, threads) {
  if (thread.worktree || (!thread.run_count && !thread.active_run_id)) return null;
  const others = threads.filter((t) => t.id !== thread.id && t.project_id === thread.project_id
    && !t.worktree && (t.run_count > 0 || t.active_run_id));
  if (!others.length) return null;
  const names = others.map((t) => `“${t.title || t.id}”${t.active_run_id ? ' (running now)' : ''}`).join(', ');
  return h('p', { class: 'warning shared-root', id: 'shared-root-warning' },
    `⚠ Also working in this folder without a worktree: ${names}. The threads' edits mix in each run's changes, `
    + 'and a revert asks before overwriting files changed since. Tick “own worktree” on new threads to keep them apart.');
}
