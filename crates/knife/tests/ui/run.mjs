// Browser end-to-end tests of knife's web page, run by crates/knife/tests/e2e_ui.rs
// against real `knife serve` + `knife mock-llm` processes it started. Reads
// $KNIFE_UI_CONFIG (JSON: {screenshots, servers: {name: {url, project, token?}}}),
// runs every test in one headless Chromium (a fresh context per test), saves one
// screenshot per test, and exits non-zero when any test failed.

import { createRequire } from 'node:module';
import { readFileSync, mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// $KNIFE_UI_TESTS: another module of tests (e2e_ux_page.rs runs ux_tests.mjs).
const { tests } = await import(process.env.KNIFE_UI_TESTS
  ? pathToFileURL(path.resolve(process.env.KNIFE_UI_TESTS)).href
  : './tests.mjs');

const config = JSON.parse(readFileSync(process.env.KNIFE_UI_CONFIG, 'utf8'));
const modules = process.env.KNIFE_UI_NODE_MODULES;
const require = createRequire(path.join(modules, 'noop.js'));
const { chromium } = require('playwright-core');

const only = process.env.KNIFE_UI_ONLY ? process.env.KNIFE_UI_ONLY.split(',') : null;
mkdirSync(config.screenshots, { recursive: true });
// Playwright gives every launch a fresh temporary --user-data-dir of its own (it
// refuses one in `args`), so no profile state leaks between runs.
const browser = await chromium.launch({
  executablePath: process.env.KNIFE_CHROMIUM || '/usr/bin/chromium',
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
  ],
  timeout: 30000,
});

let failed = 0;
let ran = 0;
for (const [name, test] of Object.entries(tests)) {
  if (only && !only.includes(name)) continue;
  ran += 1;
  const server = config.servers[test.server];
  // A test may ask for another window, e.g. a phone's 390 px (UX-05).
  const context = await browser.newContext({ viewport: test.viewport || { width: 1280, height: 860 }, isMobile: !!test.mobile, hasTouch: !!test.mobile });
  const page = await context.newPage();
  page.setDefaultTimeout(15000);
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('response', (r) => { if (r.status() >= 400) consoleErrors.push(`HTTP ${r.status()} for ${r.url()}`); });
  page.on('pageerror', (e) => consoleErrors.push(`page error: ${e.message}`));
  const started = Date.now();
  const shot = path.join(config.screenshots, `${name}.png`);
  rmSync(shot.replace(/\.png$/, '.failed.png'), { force: true });
  try {
    await test.run({ page, context, server, shot });
    const unexpected = consoleErrors.filter((e) => !(test.allowConsole || []).some((re) => re.test(e)));
    // A failed fetch logs twice (the response, and Chromium's console line); keep the URL one.
    if (unexpected.length) throw new Error(`console errors:\n${unexpected.join('\n')}`);
    await page.screenshot({ path: shot, fullPage: false });
    console.log(`ok   ${name} (${Date.now() - started} ms) → ${shot}`);
  } catch (e) {
    failed += 1;
    await page.screenshot({ path: shot.replace(/\.png$/, '.failed.png') }).catch(() => {});
    console.log(`FAIL ${name} (${Date.now() - started} ms): ${e.stack || e}`);
    if (consoleErrors.length) console.log(`     console:\n${consoleErrors.join('\n')}`);
  }
  await context.close();
}
await browser.close();
if (!ran) {
  console.log(`no browser test matched KNIFE_UI_ONLY=${process.env.KNIFE_UI_ONLY}; names: ${Object.keys(tests).join(', ')}`);
  process.exit(1);
}
console.log(failed ? `${failed} browser test(s) failed` : 'all browser tests passed');
process.exit(failed ? 1 : 0);
