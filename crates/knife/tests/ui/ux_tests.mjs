// Browser tests of the page's UX (SPEC UX-05, UX-06, UX-07), run by e2e_ux_page.rs through
// run.mjs ($KNIFE_UI_TESTS) against real `knife serve` + `knife mock-llm` processes.

import assert from 'node:assert/strict';

/** Adds the server's project folder and a thread from the page; opens the thread. */
async function newThread(page, server, title) {
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

const box = (page, sel) => page.locator(sel).first().evaluate((el) => el.getBoundingClientRect().toJSON());
const atBottom = (page) => page.locator('#transcript-scroll').evaluate((s) => s.scrollHeight - s.scrollTop - s.clientHeight < 2);

export const tests = {
  // A phone (390 px): the sidebar is hidden behind ☰ and the transcript takes the
  // width; ☰ opens the sidebar over the page, picking a thread closes it.
  ux_05_phone_layout: {
    server: 'phone',
    viewport: { width: 390, height: 844 },
    mobile: true,
    async run({ page, server, shot }) {
      await page.goto(server.url);
      const sidebar = page.locator('.sidebar');
      const toggle = page.locator('#sidebar-toggle');
      await toggle.waitFor();
      assert.equal(await sidebar.isVisible(), false, 'the sidebar starts hidden on a phone');
      await toggle.click();
      await sidebar.waitFor({ state: 'visible' });
      assert.equal(await toggle.getAttribute('aria-expanded'), 'true');
      // The page behind does not show beside the open sidebar: an opaque backdrop covers it.
      const right = await box(page, '.sidebar');
      const under = await page.evaluate(([x, y]) => {
        const el = document.elementFromPoint(x, y);
        return el ? el.id : null;
      }, [Math.round(right.x + right.width + 10), 400]);
      assert.equal(under, 'sidebar-backdrop', 'right of the open sidebar');
      const backdrop = page.locator('#sidebar-backdrop');
      assert.equal(await backdrop.evaluate((el) => getComputedStyle(el).backgroundColor.startsWith('rgb(')), true, 'the backdrop is opaque');
      await page.screenshot({ path: shot.replace(/\.png$/, '-sidebar-open.png') });
      // Tapping the backdrop closes the sidebar.
      await page.mouse.click(Math.round(right.x + right.width + 10), 400);
      await sidebar.waitFor({ state: 'hidden' });
      assert.equal(await backdrop.isVisible(), false);
      await toggle.click();
      await sidebar.waitFor({ state: 'visible' });
      await newThread(page, server, 'Phone thread');
      // Opening the thread closed the sidebar.
      await sidebar.waitFor({ state: 'hidden' });
      await send(page, 'hello from a phone');
      await page.locator('.item-assistant_message .md', { hasText: 'Short answer for a small screen.' }).waitFor();
      const scroll = await box(page, '#transcript-scroll');
      assert.ok(scroll.width >= 360, `the transcript is ${scroll.width} px wide of 390`);
      const composer = await box(page, '#composer-input');
      assert.ok(composer.width >= 340, `the composer is ${composer.width} px wide of 390`);
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= 390), 'the page scrolls sideways');
      // ☰ again: the thread is in the list; picking it closes the sidebar.
      await toggle.click();
      const link = page.locator('.thread-link', { hasText: 'Phone thread' });
      await link.waitFor();
      await link.click();
      await sidebar.waitFor({ state: 'hidden' });
      assert.equal(await toggle.getAttribute('aria-expanded'), 'false');
    },
  },

  // A desktop window keeps the sidebar beside the transcript and no ☰ button.
  ux_05_desktop_keeps_the_sidebar: {
    server: 'phone',
    async run({ page, server }) {
      await page.goto(server.url);
      await page.locator('.sidebar').waitFor({ state: 'visible' });
      assert.equal(await page.locator('#sidebar-toggle').isVisible(), false);
      const side = await box(page, '.sidebar');
      const main = await box(page, '#main');
      assert.ok(side.right <= main.left + 1, 'the sidebar sits beside the main view');
      assert.ok(server.project);
    },
  },

  // The transcript: the approval card sits in the tool call it gates, before its
  // output; long output folds by lines; a user interrupt is a neutral marker; sending
  // scrolls to the end and follows the answer.
  ux_06_transcript: {
    server: 'transcript',
    viewport: { width: 1100, height: 640 },
    async run({ page, server, shot }) {
      await page.goto(server.url);
      await newThread(page, server, 'Transcript thread');
      await send(page, 'count to forty');
      const pending = page.locator('.item-tool_call .approval-slot .approval-pending');
      await pending.waitFor();
      await page.screenshot({ path: shot.replace(/\.png$/, '-approval-in-call.png') });
      await pending.locator('.decide-allow_once').click();
      const output = page.locator('.item-tool_call .tool-output');
      await output.filter({ hasText: '12' }).waitFor();
      // The answered card is still in the call, before the output.
      const order = await page.evaluate(() => {
        const card = document.querySelector('.item-tool_call .approval-slot .approval');
        const out = document.querySelector('.item-tool_call .tool-output');
        return card && out ? card.compareDocumentPosition(out) & Node.DOCUMENT_POSITION_FOLLOWING : 0;
      });
      assert.ok(order, 'the approval card comes before the output');
      // Folded by lines: the first 12, and "show all N lines".
      const more = page.locator('.item-tool_call .show-more');
      assert.match(await more.innerText(), /^show all 4\d lines$/);
      const folded = await output.innerText();
      assert.ok(!folded.includes('\n13\n') && folded.includes('\n12'), `folded output: ${folded}`);
      await page.locator('.item-assistant_message .md', { hasText: 'Counted.' }).waitFor();
      await more.click();
      await output.filter({ hasText: /\n39\n40/ }).waitFor();
      await more.click();
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();

      // A user interrupt: "Interrupted", neutral, no error anywhere.
      await send(page, 'tell a long story');
      await page.locator('.item-assistant_message .streaming').waitFor();
      await page.locator('#interrupt').click();
      await page.locator('.transcript .interrupted', { hasText: 'Interrupted' }).first().waitFor();
      await page.locator('#thread-status-label', { hasText: 'idle' }).waitFor();
      await page.waitForTimeout(300); // a late thread.error would show by now
      assert.equal(await page.locator('#thread-error').isVisible(), false);
      assert.equal(await page.locator('.transcript .error-box').count(), 0);
      assert.ok(!(await page.locator('#main').innerText()).includes('MessageAbortedError'));
      await page.screenshot({ path: shot.replace(/\.png$/, '-interrupted.png') });

      // Scrolled up, then send: the view jumps to the end and follows the answer.
      await page.locator('#transcript-scroll').evaluate((s) => { s.scrollTop = 0; });
      assert.ok(await page.locator('#transcript-scroll').evaluate((s) => s.scrollHeight > s.clientHeight + 100),
        'the transcript is taller than its box');
      assert.equal(await atBottom(page), false);
      await send(page, 'a tall answer please');
      const streaming = page.locator('.item-assistant_message .streaming');
      await streaming.waitFor();
      await page.waitForFunction(() => {
        const s = document.getElementById('transcript-scroll');
        return s.scrollHeight - s.scrollTop - s.clientHeight < 2;
      });
      await page.locator('.item-assistant_message .md', { hasText: 'LAST LINE' }).waitFor();
      await page.waitForFunction(() => {
        const s = document.getElementById('transcript-scroll');
        return s.scrollHeight - s.scrollTop - s.clientHeight < 2;
      });
    },
    allowConsole: [],
  },

  // The page's tools (UX-07): per-run tokens and cost, opt-in notifications while the tab
  // is hidden, shortcuts under `?`, the thread search box (title filter and full text),
  // the message queue, rename / archive / delete and the model picker present (tests.mjs
  // exercises those, the diff view and revert).
  ux_07_page_tools: {
    server: 'tools',
    async run({ page, server, shot }) {
      // The browser's Notification, recorded (a headless browser shows none), and a
      // switchable "hidden" tab.
      await page.addInitScript(() => {
        window.__notes = [];
        window.__hidden = false;
        Object.defineProperty(document, 'hidden', { get: () => window.__hidden });
        Object.defineProperty(document, 'visibilityState', { get: () => (window.__hidden ? 'hidden' : 'visible') });
        window.Notification = class {
          constructor(title, opts) { window.__notes.push(opts.body); }
          static get permission() { return window.__permission || 'default'; }
          static requestPermission() { window.__permission = 'granted'; return Promise.resolve('granted'); }
        };
      });
      await page.goto(server.url);
      await newThread(page, server, 'Tools thread');
      for (const id of ['#thread-rename', '#thread-archive', '#thread-delete', '#composer-model']) {
        assert.ok(await page.locator(id).isVisible(), `${id} is on the page`);
      }
      const toggle = page.locator('#notify-toggle');
      assert.equal(await toggle.innerText(), 'Notify: off');
      await toggle.click();
      await page.locator('#notify-toggle', { hasText: 'Notify: on' }).waitFor();

      // Per-run tokens and cost under the finished run.
      await send(page, 'first');
      await page.locator('.item-assistant_message .md', { hasText: 'First answer.' }).waitFor();
      const usage = page.locator('.run-usage').first();
      await usage.filter({ hasText: '$' }).waitFor();
      assert.match(await usage.innerText(), /^run 1 · .+ · 1,200 tokens \(1,000 in, 200 out\) · \$0\.0003$/);

      // Hidden tab: an approval and the run's end notify; nothing while visible.
      assert.deepEqual(await page.evaluate(() => window.__notes), []);
      await page.evaluate(() => { window.__hidden = true; });
      await send(page, 'run a command');
      const pending = page.locator('.approval-pending .decide-allow_once');
      await pending.waitFor();
      await page.waitForFunction(() => window.__notes.includes('Tools thread: waits for your approval'));
      await pending.click();
      await page.locator('.item-assistant_message .md', { hasText: 'Ran it.' }).waitFor();
      await page.waitForFunction(() => window.__notes.includes('Tools thread: the run ended'));
      await page.evaluate(() => { window.__hidden = false; });

      // Shortcuts: ? lists them, Esc closes, c goes to the composer.
      await page.locator('.thread-view h2.thread-title').click();
      await page.keyboard.press('Shift+Slash');
      const list = page.locator('#shortcuts');
      await list.waitFor({ state: 'visible' });
      assert.match(await list.innerText(), /j \/ k\s+next \/ previous thread/);
      await page.screenshot({ path: shot.replace(/\.png$/, '-shortcuts.png') });
      await page.keyboard.press('Escape');
      await list.waitFor({ state: 'hidden' });
      await page.keyboard.press('c');
      assert.equal(await page.evaluate(() => document.activeElement.id), 'composer-input');
      await page.keyboard.press('Escape');

      // Search: a second thread; the box filters the list by title; j / k move.
      const project = page.locator('section.project').first();
      await project.locator('.thread-title').fill('Other thread');
      await project.locator('.new-thread-button').click();
      await page.locator('.thread-view .thread-title', { hasText: 'Other thread' }).waitFor();
      await page.locator('.thread-view h2.thread-title').click();
      await page.keyboard.press('/');
      assert.equal(await page.evaluate(() => document.activeElement.id), 'thread-search');
      await page.keyboard.type('tools');
      await page.locator('.thread-link', { hasText: 'Other thread' }).waitFor({ state: 'hidden' });
      assert.ok(await page.locator('.thread-link', { hasText: 'Tools thread' }).isVisible());
      await page.fill('#thread-search', '');
      await page.locator('.thread-link', { hasText: 'Other thread' }).waitFor();
      await page.keyboard.press('Escape');
      await page.keyboard.press('j');
      await page.locator('.thread-view .thread-title', { hasText: 'Tools thread' }).waitFor();
      await page.keyboard.press('k');
      await page.locator('.thread-view .thread-title', { hasText: 'Other thread' }).waitFor();

      // Full-text search (Enter): the answer's word is found in the Tools thread, marked
      // in the snippet; the hit opens the thread.
      await page.fill('#thread-search', 'ran');
      await page.locator('#thread-search').press('Enter');
      const hit = page.locator('#search-results .search-hit', { hasText: 'Tools thread' }).first();
      await hit.waitFor();
      assert.equal((await hit.locator('mark').first().innerText()).toLowerCase(), 'ran');
      await page.locator('#thread-search').press('Escape');
      await hit.click();
      await page.locator('.thread-view .thread-title', { hasText: 'Tools thread' }).waitFor();
      await page.fill('#thread-search', '');
      await page.locator('#thread-search').dispatchEvent('input');

      // The message queue: while a slow answer streams, Send queues; the strip lists the
      // entries, × cancels one, the other runs when the answer ended.
      await send(page, 'answer slowly');
      await page.locator('#interrupt').waitFor({ state: 'visible' });
      for (const text of ['queued one', 'queued two']) {
        await page.fill('#composer-input', text);
        await page.click('#send');
      }
      await page.locator('#queue .queue-entry', { hasText: '2. queued: queued two' }).waitFor();
      assert.match(await page.locator('#queue').innerText(), /1\. queued: queued one/);
      await page.screenshot({ path: shot.replace(/\.png$/, '-queue.png') });
      await page.locator('#queue .queue-entry', { hasText: 'queued two' }).locator('.queue-cancel').click();
      await page.locator('#queue .queue-entry', { hasText: 'queued two' }).waitFor({ state: 'detached' });
      await page.locator('.item-assistant_message .md', { hasText: 'The queued answer.' }).waitFor();
      await page.locator('.item-user_message .user-text', { hasText: 'queued one' }).waitFor();
      assert.equal(await page.locator('.item-user_message .user-text', { hasText: 'queued two' }).count(), 0);
      await page.locator('#queue').waitFor({ state: 'hidden' });
    },
    allowConsole: [/status of 404/],
  },
  // Tokens and cost per run and per thread (TURN-06), and a spent budget's "Raise and
  // continue" (TURN-07): a 1,500-token thread budget lets runs 1 and 2 through (1,200
  // tokens each; the second is under it when it starts), stops run 3 before its turn,
  // and the button raises the budget and runs a continuation.
  turn_07_usage_per_run_and_thread_and_raise_and_continue: {
    server: 'budget',
    async run({ page, server, shot }) {
      await page.goto(server.url);
      await newThread(page, server, 'Budget thread');
      await send(page, 'one');
      await page.locator('.item-assistant_message .md', { hasText: 'First.' }).waitFor();
      const runUsage = (n) => page.locator('.run-usage', { hasText: `run ${n} ·` }).first();
      await runUsage(1).filter({ hasText: '$' }).waitFor();
      assert.match(await runUsage(1).innerText(), /^run 1 · .+ · 1,200 tokens \(1,000 in, 200 out\) · \$0\.0003$/);
      await page.locator('#thread-usage', { hasText: '1200 tokens' }).waitFor();
      await send(page, 'two');
      await page.locator('.item-assistant_message .md', { hasText: 'Second.' }).waitFor();
      await page.locator('#thread-usage', { hasText: '2400 tokens' }).waitFor();
      assert.match(await page.locator('#thread-usage').innerText(), /2400 tokens · \$0\.0005/);
      // Spent: run 3 stops before its turn and says which budget.
      await send(page, 'three');
      const note = page.locator('.run-end', { hasText: 'Run 3 stopped: budget spent' });
      await note.waitFor();
      assert.match(await note.innerText(), /thread budget of 1500 tokens is spent \(2400 tokens used\)/);
      // Each stopped run says it once (its end note; no second error box), and only the
      // newest stopped run offers "Raise and continue".
      const stops = page.locator('.run-end', { hasText: 'stopped: budget spent' });
      const spentBoxes = page.locator('.error-box:visible', { hasText: 'is spent' });
      assert.equal(await spentBoxes.count(), await stops.count(), 'one box per budget-stopped run');
      assert.equal(await page.locator('.item-error:visible', { hasText: 'budget_exceeded' }).count(), 0);
      assert.equal(await page.locator('.budget-continue').count(), 1, 'one "Raise and continue"');
      assert.equal(await note.locator('.budget-continue').count(), 1, 'on the newest stopped run');
      await page.screenshot({ path: shot.replace(/\.png$/, '-spent.png') });
      await note.locator('.budget-continue').click();
      await page.locator('.item-assistant_message .md', { hasText: 'Continued after the raise.' }).waitFor();
      await page.locator('#thread-usage', { hasText: '3600 tokens' }).waitFor();
      await runUsage(4).filter({ hasText: '1,200 tokens' }).waitFor();
      // Continued: no stopped run offers it any more; each still says why it stopped, once.
      assert.equal(await page.locator('.budget-continue').count(), 0, 'no "Raise and continue" after the continuation');
      assert.equal(await spentBoxes.count(), await stops.count());
      await page.screenshot({ path: shot });
    },
    allowConsole: [],
  },
};
