// The browser tests (see run.mjs). Each names the server (from e2e_ui.rs) it runs
// against; each server has its own mock-llm script, so tests do not share state.

import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

/** Adds the server's project folder and a thread from the page; opens the thread. */
async function newThread(page, server, title) {
  await page.goto(server.url);
  await page.fill('#project-root', server.project);
  await page.click('#project-create');
  const project = page.locator('section.project').first();
  await project.locator('.thread-title').fill(title);
  await project.locator('.new-thread-button').click();
  await page.waitForURL(/#\/thread\//);
  await page.locator('.thread-view .thread-title', { hasText: title }).waitFor();
}

async function send(page, text) {
  await page.fill('#composer-input', text);
  await page.click('#send');
  await page.locator('.item-user_message .user-text', { hasText: text }).first().waitFor();
}

/** Polls `check()` every 50 ms until it is true; fails after 10 s naming `what`. */
async function eventually(what, check) {
  const deadline = Date.now() + 10000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const assistant = (page) => page.locator('.item-assistant_message');

export const CHAT_ANSWER = 'Hello from **knife**: this answer streams in `piece by piece` over the WebSocket.';

export const tests = {
  // The composer's model picker (TURN-10): a model typed there goes with the
  // message, is recorded on its run and shown on the message; empty again, the
  // next run uses the thread's model.
  model_picker: {
    server: 'model',
    async run({ page, server }) {
      await newThread(page, server, 'Model picker');
      const picker = page.locator('#composer-model');
      const suggested = () => page.locator('#composer-models option').evaluateAll((os) => os.map((o) => o.value));
      await eventually('the configured model in the suggestions', async () => (await suggested()).includes('gpt-4o-mini'));
      assert.deepEqual(await suggested(), ['gpt-4o-mini']);
      await picker.fill('picked-model');
      await send(page, 'first on the picked model');
      await assistant(page).locator('.md', { hasText: 'Answered on the picked model.' }).first().waitFor();
      const first = page.locator('.item-user_message', { hasText: 'first on the picked model' });
      assert.equal((await first.locator('.run-model').innerText()).trim(), '· picked-model');
      assert.equal(await picker.inputValue(), 'picked-model', 'the picker keeps its choice');
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      await picker.fill('');
      await send(page, 'second on the default');
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      const thread = decodeURIComponent(page.url().split('#/thread/')[1]);
      const runs = () => page.evaluate(async (id) => (await (await fetch(`/api/threads/${encodeURIComponent(id)}`)).json()).runs, thread);
      await eventually('two completed runs', async () => (await runs()).filter((r) => r.status === 'completed').length === 2);
      assert.deepEqual((await runs()).map((r) => r.model), ['picked-model', null]);
      const second = page.locator('.item-user_message', { hasText: 'second on the default' });
      assert.equal(await second.locator('.run-model').count(), 0);
    },
  },

  // Threads a server crash cut short (e2e_ui.rs killed and restarted the server
  // before the browser came): one is "resuming after restart" in the sidebar, then
  // shows the "continuing after restart" marker and the resumed answer; the other's
  // approval card says why it can no longer be answered. First, so the resumed
  // answer is still streaming.
  restart_marker: {
    server: 'restart',
    async run({ page, server, shot }) {
      await page.goto(server.url);
      // The resumed run is still streaming (this test runs first, e2e_ui.rs returned
      // as soon as the new process resumed it).
      const link = page.locator('.thread-link', { hasText: 'Resumed thread' });
      await link.locator('.status-resuming', { hasText: 'resuming after restart (attempt 1)' }).waitFor();
      await page.screenshot({ path: shot.replace(/\.png$/, '-resuming.png') });
      await link.click();
      const marker = page.locator('.marker.restart');
      await marker.waitFor();
      assert.match(await marker.locator('.marker-label').innerText(), /continuing after restart/i);
      // The resumed answer streams for about 14 s (e2e_ui.rs).
      await assistant(page).locator('.md', { hasText: 'r39.' }).waitFor({ timeout: 45000 });
      await link.locator('.status-idle').waitFor();
      assert.equal(await page.locator('.item-user_message .user-text', { hasText: 'answer slowly' }).count(), 1);
      await page.screenshot({ path: shot.replace(/\.png$/, '-resumed.png') });
      await page.locator('.thread-link', { hasText: 'Expired approval' }).click();
      const card = page.locator('.transcript .approval-expired');
      await card.waitFor();
      assert.match(await card.locator('.expired-reason').innerText(),
        /expired.*the agent session that asked ended with the previous server process/);
      assert.equal(await card.locator('button.decide').count(), 0);
    },
  },

  // Create a project and a thread from the page; send a message; the answer
  // streams in (seen while streaming, then complete, Markdown rendered).
  create_and_stream: {
    server: 'chat',
    async run({ page, server }) {
      await newThread(page, server, 'First thread');
      await page.locator('.thread-link', { hasText: 'First thread' }).waitFor();
      // A new thread's composer has the focus: the next thing to do is to write.
      assert.equal(await page.evaluate(() => document.activeElement.id), 'composer-input');
      await page.keyboard.type('hello');
      await page.keyboard.press('Control+Enter');
      await page.locator('.item-user_message .user-text', { hasText: 'hello' }).waitFor();
      // Reasoning comes collapsed; opened while it streams, it stays open through
      // the later updates of the item (each re-renders it).
      const reasoning = page.locator('details.item-reasoning');
      await reasoning.waitFor();
      assert.equal(await reasoning.evaluate((d) => d.open), false);
      await reasoning.locator('summary').click();
      await reasoning.evaluate((d) => { d.dataset.clicked = '1'; });
      // Mid-stream: the item is there, marked streaming, with only part of the text.
      await assistant(page).locator('.streaming').waitFor();
      const partial = await assistant(page).locator('.md').innerText();
      assert.ok(!partial.includes('over the WebSocket.'), `already complete while streaming: ${partial}`);
      // A thread title being typed in the sidebar survives its redraws (the status
      // goes running -> idle meanwhile): text and focus stay.
      await page.locator('.thread-link', { hasText: 'First thread' }).evaluate((a) => { a.dataset.before = '1'; });
      const draft = page.locator('section.project .thread-title').first();
      await draft.click();
      await page.keyboard.type('Draft title');
      await assistant(page).locator('.md', { hasText: 'over the WebSocket.' }).waitFor();
      await assistant(page).locator('.streaming').waitFor({ state: 'detached' });
      assert.equal(await assistant(page).locator('.md strong').innerText(), 'knife');
      assert.equal(await assistant(page).locator('.md code').innerText(), 'piece by piece');
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      await page.locator('.thread-link .status-idle').waitFor();
      assert.equal(await page.locator('.thread-link[data-before]').count(), 0, 'the sidebar never redrew');
      assert.equal(await draft.inputValue(), 'Draft title');
      assert.equal(await draft.evaluate((el) => el === document.activeElement), true, 'the title input lost the focus');
      await draft.fill('');
      await page.locator('#interrupt').waitFor({ state: 'hidden' });
      assert.equal(await page.locator('details.item-reasoning[data-clicked]').count(), 0, 'the reasoning was never re-rendered');
      assert.equal(await reasoning.evaluate((d) => d.open), true, 'a streamed update folded the reasoning shut');
      await reasoning.locator('.reasoning-text', { hasText: 'I will answer politely.' }).waitFor();
    },
  },

  // The events view of the same thread: sequence numbers and JSON, in order.
  events_view: {
    server: 'chat',
    async run({ page, server, shot }) {
      await page.goto(server.url);
      await page.locator('.thread-link', { hasText: 'First thread' }).click();
      await page.click('#events-link');
      await page.locator('.event[data-type="turn-item.updated"]').first().waitFor();
      const seqs = await page.locator('.event').evaluateAll((els) => els.map((e) => Number(e.dataset.sequence)));
      assert.ok(seqs.length > 5, `only ${seqs.length} events`);
      for (let i = 1; i < seqs.length; i += 1) assert.ok(seqs[i] > seqs[i - 1], `sequence not increasing at ${i}: ${seqs}`);
      const first = page.locator('.event').first();
      await first.locator('summary').click();
      const json = JSON.parse(await first.locator('pre.json').innerText());
      assert.equal(json.sequence, seqs[0]);
      assert.equal(json.type, 'thread.created');
      await page.screenshot({ path: shot.replace(/\.png$/, '-log.png') });
      // A thread that does not exist (a stale link): said so, and no composer.
      await page.goto(`${server.url}#/thread/thread_gone`);
      await page.locator('#thread-error', { hasText: 'thread thread_gone does not exist' }).waitFor();
      await page.locator('.thread-view .thread-title', { hasText: 'No such thread' }).waitFor();
      assert.equal(await page.locator('#composer').isVisible(), false);
      // No thread actions for a thread that does not exist.
      for (const sel of ['#thread-rename', '#thread-archive', '#thread-fork', '#thread-delete', '#events-link']) {
        assert.equal(await page.locator(sel).isVisible(), false, `${sel} shows on "No such thread"`);
      }
    },
    allowConsole: [/status of 404/, /HTTP 404 for .*\/api\/threads\/thread_gone$/],
  },

  // knife goes away and comes back. While it is away: the live indicator says
  // "reconnecting…", the sidebar says knife is not reachable, a message that cannot
  // be sent says why and stays in the composer, a view opened meanwhile retries,
  // and a reload shows why the page cannot start and keeps trying. Once knife is
  // back: "live" again, the messages gone, the transcript whole and not doubled.
  server_away: {
    server: 'chat',
    async run({ page, context, server }) {
      let away = false;
      const sockets = [];
      await context.route('**/api/**', (r) => (away ? r.abort('connectionrefused') : r.continue()));
      await context.routeWebSocket(/\/api\/ws/, (ws) => {
        if (away) return ws.close({ code: 4001, reason: 'knife is away' });
        ws.connectToServer();
        sockets.push(ws);
      });
      const items = () => page.locator('.transcript [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
      await page.goto(server.url);
      await page.locator('.thread-link', { hasText: 'First thread' }).click();
      await assistant(page).locator('.md', { hasText: 'over the WebSocket.' }).waitFor();
      await page.locator('#conn.ok', { hasText: 'live' }).waitFor();
      const before = await items();
      const threadUrl = page.url();

      away = true;
      for (const ws of sockets.splice(0)) await ws.close({ code: 4001, reason: 'knife stopped' });
      await page.locator('#conn', { hasText: 'reconnecting…' }).waitFor();
      await page.fill('#composer-input', 'are you there?');
      await page.click('#send');
      await page.locator('#thread-error', { hasText: 'knife is not reachable' }).waitFor();
      assert.equal(await page.inputValue('#composer-input'), 'are you there?');
      await page.locator('#sidebar-offline', { hasText: 'knife is not reachable' }).waitFor();
      await page.click('#nav-sessions');
      await page.goBack();
      await page.locator('#thread-error', { hasText: 'Retrying' }).waitFor();

      away = false;
      await page.locator('#conn.ok', { hasText: 'live' }).waitFor();
      await assistant(page).locator('.md', { hasText: 'over the WebSocket.' }).waitFor();
      await page.locator('#thread-error').waitFor({ state: 'hidden' });
      await page.locator('#sidebar-offline').waitFor({ state: 'hidden' });
      assert.deepEqual(await items(), before);
      // An error the server sends on the socket (its read of the log failed) is shown.
      for (const ws of sockets) ws.send(JSON.stringify({ type: 'error', error: { code: 'store', message: 'disk I/O error' } }));
      await page.locator('#thread-error', { hasText: 'Live updates failed: disk I/O error' }).waitFor();

      away = true;
      await page.reload();
      await page.locator('#start-error', { hasText: /not reachable.*Trying again/ }).waitFor();
      away = false;
      await assistant(page).locator('.md', { hasText: 'over the WebSocket.' }).waitFor({ timeout: 5000 });
      assert.equal(page.url(), threadUrl);
      assert.deepEqual(await items(), before);
      await page.fill('#composer-input', '');
    },
    allowConsole: [/ERR_CONNECTION_REFUSED|net::ERR_FAILED|WebSocket connection to .* failed/],
  },

  // Live deltas name their item by a per-connection `ref` after its introduction
  // (LIVE-03, docs/2026-12-01-live-deltas.md 2026-12-02): `LiveSocket` fills a
  // continuing delta in from its introduction, keeps refs of different items apart,
  // and after a reset drops a continuing delta until the item is introduced again.
  live_delta_refs: {
    server: 'xss',
    async run({ page, server }) {
      await page.goto(server.url);
      await page.locator('#conn.ok').waitFor();
      const got = await page.evaluate(async () => {
        const { LiveSocket } = await import('/ui/api.js');
        const live = Object.create(LiveSocket.prototype);
        const seen = [];
        live.subs = new Map([['thread_r', { after: 0, onEvent() {}, onLive: (m) => seen.push({ ...m }) }]]);
        live.liveItems = new Map();
        const recv = (m) => live.receive(JSON.stringify(m));
        recv({ type: 'delta', thread_id: 'thread_r', run_id: 'run:thread_r:1', item_id: 'item:a', ordinal: 2, ref: 7, field: 'text', offset: 0, text: 'He' });
        recv({ type: 'delta', ref: 7, field: 'text', offset: 2, text: 'llo' });
        recv({ type: 'delta', thread_id: 'thread_r', item_id: 'item:b', ordinal: 3, ref: 8, field: 'reasoning', offset: 0, text: 'hm' });
        recv({ type: 'reset', thread_id: 'thread_r', item_id: 'item:a' });
        recv({ type: 'delta', ref: 7, field: 'text', offset: 0, text: 'stale' });
        recv({ type: 'delta', ref: 8, field: 'reasoning', offset: 2, text: 'm' });
        return seen.map((m) => [m.type, m.item_id, m.thread_id, m.run_id ?? null, m.ordinal ?? null, m.offset ?? null, m.text ?? null]);
      });
      assert.deepEqual(got, [
        ['delta', 'item:a', 'thread_r', 'run:thread_r:1', 2, 0, 'He'],
        ['delta', 'item:a', 'thread_r', 'run:thread_r:1', 2, 2, 'llo'],
        ['delta', 'item:b', 'thread_r', null, 3, 0, 'hm'],
        ['reset', 'item:a', 'thread_r', null, null, null, null],
        ['delta', 'item:b', 'thread_r', null, 3, 2, 'm'],
      ]);
    },
  },

  // Markdown of hostile model output, rendered in the page itself: no link or tag
  // that could run anything, and each 1 MB input renders in about a second at
  // most (unclosed markers once took quadratic time or overflowed the stack).
  markdown_hostile_inputs: {
    server: 'xss',
    async run({ page, server }) {
      await page.goto(server.url);
      await page.locator('#conn.ok').waitFor();
      const result = await page.evaluate(async () => {
        const { markdown } = await import('/ui/markdown.js');
        const big = {
          paragraphs: Array.from({ length: 960 }, (_, i) => `Paragraph ${i}: ${Array.from({ length: 40 }, (_, j) => `w${j} **b${j}** \`c${j}\` _i${j}_`).join(' ')}`).join('\n\n'),
          open_brackets: '['.repeat(1000000),
          open_backticks: '``a` '.repeat(250000),
          open_stars: '*a '.repeat(330000),
          open_double_stars: '**a '.repeat(250000),
          quotes: '> '.repeat(500000),
          nested_quotes: Array.from({ length: 1400 }, (_, i) => '>'.repeat(i)).join('\n'),
          long_word: 'x'.repeat(1000000),
          fences: '```\n'.repeat(250000),
        };
        const times = {};
        for (const [name, text] of Object.entries(big)) {
          const t = performance.now();
          try {
            markdown(text);
            times[name] = Math.round(performance.now() - t);
          } catch (e) {
            times[name] = `${e.name}: ${e.message}`;
          }
        }
        const html = (t) => markdown(t).innerHTML;
        return {
          times,
          js: html('[x](javascript:alert(1)) [y](data:text/html,hi) [z](https://example.com/a)'),
          raw: html('<a href="https://example.com">a</a><iframe src=x></iframe>'),
          nested: html('**a *b* c** and ***d***'),
          fence: html('```js\nlet a = "<b>";'),
          depth: markdown(`${'>'.repeat(50)} deep`).querySelectorAll('blockquote').length,
        };
      });
      // Each hostile 1 MB input must finish parsing without throwing. The bound only
      // separates linear from quadratic work (a quadratic parse of 1 MB takes minutes), so it
      // is set far above any machine's load: 30 s, not a speed target.
      for (const [name, ms] of Object.entries(result.times)) {
        assert.ok(typeof ms === 'number' && ms < 30000, `${name}: ${ms}`);
      }
      assert.equal(result.js, '<p>[x](javascript:alert(1)) [y](data:text/html,hi) <a href="https://example.com/a" target="_blank" rel="noopener noreferrer">z</a></p>');
      assert.equal(result.raw, '<p>&lt;a href="https://example.com"&gt;a&lt;/a&gt;&lt;iframe src=x&gt;&lt;/iframe&gt;</p>');
      assert.equal(result.nested, '<p><strong>a <em>b</em> c</strong> and <strong><em>d</em></strong></p>');
      assert.equal(result.fence, '<pre class="code"><code data-lang="js">let a = "&lt;b&gt;";</code></pre>');
      assert.equal(result.depth, 8);
    },
  },

  // A `write` asks for approval: its card shows the proposed change as a diff (text
  // only: the model's `<b>` stays text), CHG-05. Then the thread's header buttons:
  // rename, archive (gone from the sidebar) / unarchive, fork, delete (CHG-08, CHG-09).
  approve_write_diff_and_thread_lifecycle: {
    server: 'diff',
    async run({ page, server, shot }) {
      await newThread(page, server, 'Diff thread');
      await send(page, 'write the notes');
      const diff = page.locator('.transcript .approval-pending .diff');
      await diff.waitFor();
      assert.equal(await diff.locator('.diff-file').first().textContent(), '--- /dev/null\n');
      assert.match(await diff.locator('.diff-file').nth(1).textContent(), /\+\+\+ b\/notes\.md/);
      assert.deepEqual(await diff.locator('.diff-add').allTextContents(), ['+hello <b>knife</b>\n', '+second line\n']);
      assert.equal(await diff.locator('b').count(), 0, 'model text was parsed as HTML');
      // The write's raw arguments fold away behind the diff.
      await page.locator('.item-tool_call details.tool-args').waitFor();
      assert.equal(await page.locator('.item-tool_call details.tool-args').evaluate((d) => d.open), false);
      await page.screenshot({ path: shot.replace(/\.png$/, '-approval-diff.png') });
      await page.locator('.transcript .approval-pending .decide-allow_once').click();
      await assistant(page).locator('.md', { hasText: 'Written.' }).waitFor();
      await page.locator('.thread-link .status-idle').waitFor();

      page.once('dialog', (d) => d.accept('Renamed thread'));
      await page.click('#thread-rename');
      await page.locator('.thread-view .thread-title', { hasText: 'Renamed thread' }).waitFor();
      await page.locator('.thread-link', { hasText: 'Renamed thread' }).waitFor();

      await page.click('#thread-archive');
      await page.locator('#thread-archive', { hasText: 'Unarchive' }).waitFor();
      await eventually('the archived thread to leave the sidebar',
        async () => (await page.locator('.thread-link', { hasText: 'Renamed thread' }).count()) === 0);
      await page.click('#thread-archive');
      await page.locator('.thread-link', { hasText: 'Renamed thread' }).waitFor();

      await page.click('#thread-fork');
      await page.locator('.thread-view .thread-title', { hasText: 'Renamed thread (fork)' }).waitFor();
      await page.locator('.item-user_message .user-text', { hasText: 'write the notes' }).waitFor();
      await page.screenshot({ path: shot.replace(/\.png$/, '-fork.png') });

      page.once('dialog', (d) => d.accept());
      await page.click('#thread-delete');
      await page.waitForURL((u) => !u.hash.includes('thread'));
      await eventually('the deleted fork to leave the sidebar',
        async () => (await page.locator('.thread-link', { hasText: 'Renamed thread (fork)' }).count()) === 0);
      await page.locator('.thread-link', { hasText: 'Renamed thread' }).waitFor();
    },
  },

  // A run that edits files (CHG-03/04): its Changes panel lists every file with its
  // kind and +/- lines, each file opens to its diff (text only: the written markup
  // stays text); a second thread answering in the same folder brings the
  // shared-folder warning; "Revert to before this run" (confirmed) puts the files back
  // on disk and says so; "Undo revert" brings the run's version back.
  changes_panel_revert_and_undo: {
    server: 'changes',
    async run({ page, server, shot }) {
      const file = (name) => path.join(server.project, name);
      const read = (name) => readFileSync(file(name), 'utf8');
      await newThread(page, server, 'Changes thread');
      await send(page, 'change the files');
      await assistant(page).locator('.md', { hasText: 'Changed four files.' }).waitFor();
      const panel = page.locator('.transcript .run-changes[data-run-ordinal="1"]');
      await panel.waitFor();
      assert.equal(await panel.locator('.changes-summary').innerText(), '· 4 files, +3 −3');
      const row = (p) => panel.locator(`.change-file[data-path="${p}"]`);
      const rows = await panel.locator('.change-file').evaluateAll((rs) => rs.map((r) => [
        r.dataset.path, r.dataset.kind, r.querySelector('.change-path').textContent,
        r.querySelector('.change-added').textContent, r.querySelector('.change-removed').textContent]));
      assert.deepEqual(rows.sort(), [
        ['gone.txt', 'deleted', 'gone.txt', '+0', '−2'],
        ['keep.txt', 'modified', 'keep.txt', '+1', '−1'],
        ['new-name.txt', 'renamed', 'old-name.txt → new-name.txt', '+0', '−0'],
        ['page.html', 'added', 'page.html', '+2', '−0'],
      ]);
      // Each file's diff, on demand.
      await row('keep.txt').locator('summary').click();
      await row('keep.txt').locator('.diff').waitFor();
      assert.deepEqual(await row('keep.txt').locator('.diff-del').allTextContents(), ['-beta\n']);
      assert.deepEqual(await row('keep.txt').locator('.diff-add').allTextContents(), ['+BETA\n']);
      await row('page.html').locator('summary').click();
      await row('page.html').locator('.diff').waitFor();
      assert.deepEqual(await row('page.html').locator('.diff-add').allTextContents(),
        ['+<img src=x onerror="window.__pwned = 1">\n', '+<b>bold</b>\n']);
      assert.equal(await panel.locator('img, b').count(), 0, 'diff text was parsed as HTML');
      assert.equal(await page.evaluate(() => window.__pwned), undefined);
      await row('gone.txt').locator('summary').click();
      await row('gone.txt').locator('.diff').waitFor();
      assert.deepEqual(await row('gone.txt').locator('.diff-del').allTextContents(), ['-bye\n', '-bye again\n']);
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      await page.screenshot({ path: shot.replace(/\.png$/, '-panel.png') });

      // A second thread in the same folder, no worktree: both threads warn.
      const project = page.locator('section.project').first();
      await project.locator('.thread-title').fill('Second thread');
      await project.locator('.new-thread-button').click();
      await page.locator('.thread-view .thread-title', { hasText: 'Second thread' }).waitFor();
      await send(page, 'say something');
      await assistant(page).locator('.md', { hasText: 'The second thread answers.' }).waitFor();
      const warning = page.locator('#shared-root-warning');
      await warning.waitFor();
      assert.match(await warning.innerText(), /Also working in this folder without a worktree: “Changes thread”\./);
      await page.screenshot({ path: shot.replace(/\.png$/, '-shared-folder.png') });
      await page.locator('.thread-link', { hasText: 'Changes thread' }).click();
      await page.locator('#shared-root-warning', { hasText: '“Second thread”' }).waitFor();

      // Revert run 1, confirmed: the files are back on disk, the panel says so.
      let asked = '';
      page.once('dialog', async (d) => { asked = d.message(); await d.accept(); });
      await panel.locator('button.revert-run').click();
      const applied = panel.locator('.revert-result.revert-applied');
      await applied.waitFor();
      assert.match(asked, /^Revert to before run 1\?/);
      for (const p of ['gone.txt', 'keep.txt', 'new-name.txt', 'old-name.txt', 'page.html']) assert.ok(asked.includes(`  ${p}\n`), `${p} not in: ${asked}`);
      assert.match(await applied.locator('.revert-text').innerText(), /^Reverted 5 files to before run 1 at /);
      assert.equal(read('keep.txt'), 'alpha\nbeta\ngamma\n');
      assert.equal(read('gone.txt'), 'bye\nbye again\n');
      assert.equal(read('old-name.txt'), 'a file that the run renames\nline two\nline three\n');
      assert.equal(existsSync(file('new-name.txt')), false, 'the renamed file stayed');
      assert.equal(existsSync(file('page.html')), false, 'the added file stayed');
      assert.equal(await page.locator('#thread-error').isHidden(), true);
      await page.screenshot({ path: shot.replace(/\.png$/, '-reverted.png') });

      // Undo: the run's version again.
      page.once('dialog', (d) => d.accept());
      await applied.locator('button.undo-revert').click();
      await panel.locator('.revert-result.revert-undone').waitFor();
      assert.equal(read('keep.txt'), 'alpha\nBETA\ngamma\n');
      assert.equal(existsSync(file('gone.txt')), false);
      assert.equal(existsSync(file('old-name.txt')), false);
      assert.equal(read('new-name.txt'), 'a file that the run renames\nline two\nline three\n');
      assert.equal(read('page.html'), '<img src=x onerror="window.__pwned = 1">\n<b>bold</b>\n');

      // A person edits keep.txt since: the revert says so and asks again; "no" writes
      // nothing, "yes" overwrites (the result says so).
      writeFileSync(file('keep.txt'), 'edited by a person\n');
      const replies = [];
      const answers = [];
      page.on('dialog', async (d) => {
        answers.push(d.message());
        await (replies.shift() ? d.accept() : d.dismiss());
      });
      replies.push(true, false);
      await panel.locator('button.revert-run').click();
      await eventually('the conflict question', async () => answers.length === 2);
      assert.match(answers[1], /changed since/);
      assert.ok(answers[1].includes('  keep.txt'), answers[1]);
      assert.equal(read('keep.txt'), 'edited by a person\n');
      assert.equal(existsSync(file('new-name.txt')), true, 'a refused revert wrote files');
      replies.push(true, true);
      await panel.locator('button.revert-run').click();
      const forced = panel.locator('.revert-result.revert-applied');
      await forced.waitFor();
      assert.match(await forced.locator('.revert-text').innerText(), /overwriting later edits/);
      assert.equal(read('keep.txt'), 'alpha\nbeta\ngamma\n');
      assert.equal(existsSync(file('new-name.txt')), false);
    },
    // The refused revert's 409 (revert_conflict), the answer the page asks about.
    allowConsole: [/^HTTP 409 for .*\/runs\/1\/revert$/, /Failed to load resource: the server responded with a status of 409/],
  },

  // "own worktree" under "+ New thread" (CHG-07): the thread shows its branch in the
  // sidebar and its branch and path in the status line; the agent's file lands in the
  // worktree, not in the project folder; Merge brings it into the project's branch.
  worktree_thread_and_merge: {
    server: 'worktree',
    async run({ page, server, shot }) {
      await page.goto(server.url);
      await page.fill('#project-root', server.project);
      await page.click('#project-create');
      const project = page.locator('section.project').first();
      await project.locator('.thread-title').fill('Worktree thread');
      await project.locator('input.thread-worktree').check();
      await project.locator('.new-thread-button').click();
      await page.waitForURL(/#\/thread\//);
      const status = page.locator('#thread-worktree');
      await status.waitFor();
      const [, branch, wtPath] = (await status.innerText()).match(/worktree (knife\/\S+) at (\S+)$/);
      await page.locator('.thread-link .thread-branch', { hasText: branch }).waitFor();
      assert.equal(await project.locator('input.thread-worktree').isChecked(), false, 'the checkbox stays ticked');
      await send(page, 'add the feature');
      await assistant(page).locator('.md', { hasText: 'Wrote feature.txt.' }).waitFor();
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      assert.equal(readFileSync(path.join(wtPath, 'feature.txt'), 'utf8'), 'made in the worktree\n');
      assert.equal(existsSync(path.join(server.project, 'feature.txt')), false, 'written in the project folder');
      // Its own folder: no shared-folder warning.
      assert.equal(await page.locator('#shared-root-warning').count(), 0);
      await page.screenshot({ path: shot.replace(/\.png$/, '-before-merge.png') });
      page.once('dialog', (d) => d.accept());
      await page.click('#thread-merge');
      await page.locator('#thread-notice', { hasText: `Merged ${branch} into main` }).waitFor();
      assert.equal(readFileSync(path.join(server.project, 'feature.txt'), 'utf8'), 'made in the worktree\n');
    },
  },

  // A `bash` call asks for approval: the sidebar says so, the Approvals view lists
  // it, "Allow once" runs it and its output appears.
  approve_bash: {
    server: 'approval',
    async run({ page, server, shot }) {
      await newThread(page, server, 'Approval thread');
      await send(page, 'run the command');
      const card = page.locator('.transcript .approval-pending');
      await card.waitFor();
      assert.match(await card.locator('.subject').innerText(), /echo knife-ui-ok; seq 1 300/);
      await page.locator('.thread-link .status-waiting', { hasText: 'waiting for approval' }).waitFor();
      // The requests cannot be read: the Approvals view says so (not "nothing waits").
      await page.route('**/api/threads/*/requests', (r) => r.fulfill({ status: 500, contentType: 'application/json',
        body: JSON.stringify({ error: { code: 'store', message: 'disk on fire' } }) }));
      await page.click('#nav-approvals');
      await page.locator('#approvals-error', { hasText: /Could not read the approvals of “Approval thread”: disk on fire/ }).waitFor();
      assert.equal(await page.locator('#no-approvals').count(), 0);
      await page.unroute('**/api/threads/*/requests');
      await page.click('#nav-sessions');
      await page.click('#nav-approvals');
      await page.locator('.approvals-view .approval-pending .subject', { hasText: 'echo knife-ui-ok' }).waitFor();
      assert.equal(await page.locator('#approvals-error').isVisible(), false);
      await page.screenshot({ path: shot.replace(/\.png$/, '-approvals-view.png') });
      await page.locator('.thread-link', { hasText: 'Approval thread' }).click();
      await page.locator('.transcript .approval-pending .approval-message').fill('go ahead');
      await page.locator('.transcript .approval-pending .decide-allow_once').click();
      const output = page.locator('.item-tool_call .tool-output');
      await output.filter({ hasText: 'knife-ui-ok' }).waitFor();
      // Long output is cut, with "show more" for the rest.
      assert.ok(!(await output.innerText()).includes('\n300'), 'long output not truncated');
      await page.locator('.item-tool_call .badge', { hasText: 'completed' }).waitFor();
      await page.locator('.transcript .decision', { hasText: 'Allow once' }).waitFor();
      await assistant(page).locator('.md', { hasText: 'The command printed knife-ui-ok.' }).waitFor();
      await page.locator('.thread-link .status-idle').waitFor();
      // The transcript (taller than the window with the approval and the output)
      // followed the run to its end: scrolled to the bottom, the answer in view.
      await page.waitForFunction(() => {
        const s = document.getElementById('transcript-scroll');
        return s.scrollHeight > s.clientHeight && s.scrollHeight - s.scrollTop - s.clientHeight < 2;
      });
      await page.locator('.item-tool_call .show-more').click();
      await output.filter({ hasText: /\n299\n300/ }).waitFor();
      // The long output does not push the composer up or run on below it: the
      // transcript scrolls in its own box above the composer, which stays at the
      // bottom of the window, and the opened output scrolls in a box of its own.
      const box = (sel) => page.locator(sel).evaluate((el) => el.getBoundingClientRect().toJSON());
      const [scroll, composer, main] = [await box('#transcript-scroll'), await box('#composer'), await box('#main')];
      assert.ok(scroll.bottom <= composer.top + 1, `transcript (bottom ${scroll.bottom}) runs under the composer (top ${composer.top})`);
      assert.ok(composer.bottom <= main.bottom + 1 && composer.bottom >= main.bottom - 40,
        `composer not at the bottom: ${JSON.stringify(composer)} in ${JSON.stringify(main)}`);
      assert.equal(await page.locator('#main').evaluate((m) => m.scrollHeight <= m.clientHeight + 1), true, 'the page itself scrolls');
      const viewport = page.viewportSize().height;
      const pre = await output.evaluate((el) => ({ h: el.clientHeight, sh: el.scrollHeight }));
      assert.ok(pre.h <= viewport * 0.6 + 1 && pre.sh > pre.h, `opened output not in its own scroll box: ${JSON.stringify(pre)}`);
    },
    allowConsole: [/status of 500/, /HTTP 500 for .*\/requests$/],
  },

  // A long stream is stopped with the Interrupt button.
  interrupt: {
    server: 'slow',
    async run({ page, server }) {
      await newThread(page, server, 'Long thread');
      await send(page, 'tell me a long story');
      await assistant(page).locator('.streaming').waitFor();
      // A second message while the run is active is queued (TURN-01) and shown.
      await page.fill('#composer-input', 'and another');
      await page.keyboard.press('Control+Enter');
      await page.locator('#queue .queue-entry', { hasText: 'and another' }).waitFor();
      assert.equal(await page.inputValue('#composer-input'), '');
      await page.locator('#interrupt').click();
      await page.locator('.run-end', { hasText: 'interrupted' }).waitFor();
      await page.locator('#interrupt').waitFor({ state: 'hidden' });
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      assert.equal(await page.evaluate(() => document.activeElement.id), 'composer-input');
      const text = await assistant(page).locator('.md').innerText();
      assert.ok(!text.includes('THE END'), 'the whole story arrived; the interrupt did nothing');
      // The interrupt paused the queue (TURN-02); Clear drops the message.
      await page.locator('#queue-paused').waitFor();
      await page.locator('#queue-clear').click();
      await page.locator('#queue').waitFor({ state: 'hidden' });
    },
    allowConsole: [/status of 409/, /HTTP 409 for .*\/messages$/],
  },

  // The WebSocket drops mid-stream: the events view reconnects and resumes from the
  // last sequence it saw — the same events as a fresh replay, none missing, none
  // twice. Then the thread view loses its socket and is reloaded mid-stream: the
  // transcript ends complete, nothing doubled.
  reconnect_and_reload: {
    server: 'reload',
    async run({ page, context, server }) {
      const pageSides = [];
      await context.routeWebSocket(/\/api\/ws/, (ws) => {
        ws.connectToServer();
        pageSides.push(ws);
      });
      const drop = async () => {
        const open = pageSides.splice(0);
        assert.ok(open.length > 0, 'no socket to drop');
        for (const ws of open) await ws.close({ code: 4000, reason: 'the test drops the socket' });
      };
      const sequences = () => page.locator('.event').evaluateAll((els) => els.map((e) => Number(e.dataset.sequence)));
      const runDone = (n) => page.waitForFunction((count) => [...document.querySelectorAll('.event[data-type="run.updated"] pre')]
        .filter((p) => JSON.parse(p.textContent).payload.status === 'completed').length >= count, n);

      await newThread(page, server, 'Reload thread');
      await send(page, 'count to fifty');
      await page.click('#events-link');
      await page.locator('.event[data-type="turn-item.updated"]').first().waitFor();
      await drop();
      await eventually('the events view to reconnect', () => pageSides.length > 0);
      await runDone(1);
      const live = await sequences();
      for (let i = 1; i < live.length; i += 1) assert.ok(live[i] > live[i - 1], `not increasing at ${i}: ${live}`);
      await page.reload();
      await runDone(1);
      await page.waitForFunction((n) => document.querySelectorAll('.event').length >= n, live.length);
      // A fresh replay from 0 starts with exactly what the resumed view showed (more
      // may have been written since, e.g. the thread's own update).
      const fresh = await sequences();
      assert.deepEqual(fresh.slice(0, live.length), live, 'the resumed log differs from a fresh replay');

      await page.click('text=Back to the thread');
      await send(page, 'again');
      const second = assistant(page).nth(1);
      await second.locator('.md', { hasText: 'v5 ' }).waitFor();
      await drop();
      await eventually('the thread view to reconnect', () => pageSides.length > 0);
      await second.locator('.md', { hasText: 'v15 ' }).waitFor();
      await page.reload();
      await second.locator('.md', { hasText: 'v49 THE END' }).waitFor();
      await second.locator('.streaming').waitFor({ state: 'detached' });
      assert.equal(await assistant(page).count(), 2);
      assert.equal(await page.locator('.item-user_message').count(), 2);
      const expected = (p) => [...Array(50).keys()].map((i) => `${p}${i}`).concat(['THE', 'END']);
      assert.deepEqual((await assistant(page).nth(0).locator('.md').innerText()).trim().split(/\s+/), expected('w'));
      assert.deepEqual((await second.locator('.md').innerText()).trim().split(/\s+/), expected('v'));
      const ids = await page.locator('.transcript [data-item]').evaluateAll((els) => els.map((e) => e.dataset.item));
      assert.equal(new Set(ids).size, ids.length, `duplicate items: ${ids}`);
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
    },
  },

  // The sessions view shows the live session; Close releases it.
  sessions: {
    server: 'sessions',
    async run({ page, server, shot }) {
      await newThread(page, server, 'Session thread');
      // Ctrl+Enter twice while the first POST is still on its way sends one message.
      let posts = 0;
      await page.route('**/api/threads/*/messages', async (r) => {
        posts += 1;
        await new Promise((f) => setTimeout(f, 300));
        await r.continue();
      });
      await page.fill('#composer-input', 'hi');
      await page.keyboard.press('Control+Enter');
      await page.keyboard.press('Control+Enter');
      // While the answer streams (about 3 s), the session is busy, not "ready".
      await assistant(page).locator('.md', { hasText: 'Session' }).waitFor();
      assert.equal(await page.locator('#composer-input').inputValue(), ''); // (before the view is left)
      await page.click('#nav-sessions');
      await page.locator('.card.session .session-status', { hasText: 'busy · 1 turn running' }).waitFor();
      await page.locator('.thread-link', { hasText: 'Session thread' }).click();
      await assistant(page).locator('.md', { hasText: 'streams slowly.' }).waitFor();
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      assert.equal(posts, 1, 'the message was posted twice');
      assert.equal(await page.locator('.item-user_message').count(), 1);
      assert.equal(await page.locator('#thread-error').isVisible(), false);
      assert.equal(await page.locator('#composer-input').inputValue(), '');
      await page.click('#nav-sessions');
      const card = page.locator('.card.session').first();
      await card.waitFor();
      assert.match(await card.locator('dl').innerText(), /driver\s+builtin/);
      await card.locator('.countdown', { hasText: 'released in' }).waitFor();
      assert.equal(await card.locator('.session-status').innerText(), 'ready');
      await card.locator('.session-thread', { hasText: 'Session thread' }).waitFor();
      await card.locator('.mcp', { hasText: 'orchestration' }).waitFor();
      // The countdown ticks without rebuilding the card (a rebuilt card between a
      // button's press and release would swallow the click).
      await card.evaluate((el) => { el.dataset.mark = '1'; });
      const before = await card.locator('.countdown').innerText();
      await card.locator('.countdown').filter({ hasNotText: before }).waitFor();
      assert.equal(await card.getAttribute('data-mark'), '1', 'the card was rebuilt by the tick');
      await page.screenshot({ path: shot.replace(/\.png$/, '-before-close.png') });
      await card.locator('.close-session').click();
      await page.locator('#no-sessions').waitFor();
    },
  },

  // Two provider instances: "+ New thread" offers a picker (the default selected);
  // a thread made on the other one says so in its header and in the sidebar, and
  // its message runs there.
  provider_picker: {
    server: 'providers',
    async run({ page, server }) {
      await page.goto(server.url);
      await page.fill('#project-root', server.project);
      await page.click('#project-create');
      const project = page.locator('section.project').first();
      const picker = project.locator('select.thread-provider');
      await picker.waitFor();
      assert.equal(await picker.inputValue(), 'mock');
      assert.deepEqual(await picker.locator('option').allInnerTexts(),
        ['mock (openai-chat / gpt-4o-mini) · default', 'second (openai-chat / second-model)']);
      await picker.selectOption('second');
      await project.locator('.thread-title').fill('On the second');
      await project.locator('.new-thread-button').click();
      await page.waitForURL(/#\/thread\//);
      await page.locator('#thread-instance', { hasText: 'second' }).waitFor();
      // The sidebar names each thread's instance next to its status.
      const link = page.locator('.thread-link', { hasText: 'On the second' });
      assert.equal(await link.locator('.thread-instance').innerText(), 'second');
      await send(page, 'hello second');
      await assistant(page).locator('.md', { hasText: 'Answered by the second instance.' }).waitFor();
      // Back to the default for the next one.
      await project.locator('.thread-title').fill('On the default');
      assert.equal(await picker.inputValue(), 'second'); // the choice survives redraws
      await picker.selectOption('mock');
      await project.locator('.new-thread-button').click();
      await page.waitForURL(/#\/thread\//);
      await page.locator('.thread-view .thread-title', { hasText: 'On the default' }).waitFor();
      await page.locator('#thread-instance', { hasText: 'mock' }).waitFor();
      await page.locator('.thread-link', { hasText: 'On the default' }).locator('.thread-instance', { hasText: 'mock' }).waitFor();
      assert.equal(await link.locator('.thread-instance').innerText(), 'second');
    },
  },

  // A rate-limited model call: the sidebar and the status line say "retrying" with
  // the attempt and the next try; then the answer comes. A later run that fails
  // shows "failed" and the error's message.
  retry_then_fail: {
    server: 'retry',
    async run({ page, server, shot }) {
      await newThread(page, server, 'Retry thread');
      await send(page, 'first');
      await page.locator('.thread-link .status-retrying', { hasText: /retrying \(attempt 1, next try .+\)/ }).waitFor();
      await page.locator('#thread-status-label', { hasText: 'retrying (attempt 1' }).waitFor();
      await page.screenshot({ path: shot.replace(/\.png$/, '-retrying.png') });
      await assistant(page).locator('.md', { hasText: 'Recovered after the retry.' }).waitFor();
      await page.locator('.thread-link .status-idle').waitFor();
      await send(page, 'second');
      await page.locator('.thread-link .status-failed', { hasText: 'failed' }).waitFor();
      await page.locator('.transcript .error-message', { hasText: 'bad request from the mock' }).first().waitFor();
      await page.locator('#thread-status-label', { hasText: 'failed' }).waitFor();
      // The error shows once, in the transcript: not in the header, not above the composer.
      assert.equal(await page.locator('.transcript .error-message', { hasText: 'bad request from the mock' }).count(), 1);
      assert.equal((await page.locator('#thread-status').innerText()).includes('bad request'), false);
      assert.equal(await page.locator('#thread-error').isVisible(), false);
    },
  },

  // An answer that overflows the context: the transcript shows the compaction
  // marker (summary folded) and the answer after it.
  compaction_marker: {
    server: 'compaction',
    async run({ page, server }) {
      await newThread(page, server, 'Compaction thread');
      await send(page, 'What is here?');
      const marker = page.locator('.marker.compaction');
      await marker.locator('.marker-label', { hasText: 'Conversation compacted' }).waitFor();
      await assistant(page).locator('.md', { hasText: 'Final answer after compaction.' }).waitFor();
      await marker.locator('summary').click();
      await marker.locator('.md', { hasText: 'The user asked about the project; it is empty.' }).waitFor();
    },
  },

  // Model output with <script> and <img onerror> renders as text; nothing runs.
  model_html_is_text: {
    server: 'xss',
    async run({ page, server }) {
      await page.setViewportSize({ width: 800, height: 700 });
      await newThread(page, server, 'XSS thread');
      await send(page, 'say <b>something</b> risky');
      await assistant(page).locator('.md', { hasText: 'end of test' }).waitFor();
      await assistant(page).locator('.streaming').waitFor({ state: 'detached' });
      const text = await assistant(page).locator('.md').innerText();
      assert.ok(text.includes('<script>window.__pwned = 1</script>'), text);
      assert.ok(text.includes('<img src=x onerror="window.__pwned = 2">'), text);
      assert.ok(text.includes('<a href="javascript:window.__pwned=4">raw</a>'), text);
      assert.equal(await assistant(page).locator('.md strong em').innerText(), 'nested italic');
      assert.equal(await assistant(page).locator('.md pre.code').innerText(), 'an unclosed fence');
      // An 800 px window and a 3000-character word: nothing is wider than the window.
      const overflow = await page.evaluate(() => [document.documentElement, document.getElementById('main'), document.getElementById('transcript-scroll')]
        .filter((el) => el.scrollWidth > el.clientWidth + 1).map((el) => `${el.id || el.tagName}: ${el.scrollWidth} > ${el.clientWidth}`));
      assert.deepEqual(overflow, []);
      assert.equal(await page.locator('.transcript script, .transcript img, .transcript b').count(), 0);
      assert.equal(await page.locator('.transcript a').count(), 0);
      await page.waitForTimeout(300);
      assert.equal(await page.evaluate(() => window.__pwned), undefined);
      assert.equal(await page.locator('.item-user_message .user-text').innerText(), 'say <b>something</b> risky');
    },
  },

  // A server with an API token: the page asks for it, refuses a wrong one, then works
  // (REST and WebSocket) with the right one.
  token: {
    server: 'token',
    async run({ page, server }) {
      await page.goto(server.url);
      await page.locator('#token-form').waitFor();
      await page.fill('#token-input', 'wrong-token');
      await page.click('#token-submit');
      await page.locator('#token-form .error').waitFor();
      await page.fill('#token-input', server.token);
      await page.click('#token-submit');
      await page.locator('#conn.ok', { hasText: 'live' }).waitFor();
      // No project yet: the page says what to do first.
      await page.locator('#first-steps li', { hasText: 'absolute path of a folder' }).waitFor();
      await page.locator('#no-projects').waitFor();
      await newThread(page, server, 'Token thread');
      await send(page, 'hello');
      await assistant(page).locator('.md', { hasText: 'Authorised answer.' }).waitFor();
    },
    allowConsole: [/401/],
  },
};
