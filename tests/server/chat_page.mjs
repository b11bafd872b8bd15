// The chat page at / of `retnet serve`, driven in headless Chromium (Debian's /usr/bin/chromium)
// with playwright-core: a greedy reply streamed into the page equals the API's reply to the same
// request; the next turn reads its prompt from the cache (the live line says so); Stop ends a
// running stream and frees its slot; markup typed by the user stays text; conversations and
// settings survive a reload and can be renamed, switched and deleted; a failed request leaves no
// empty message. Saves a screenshot.
//   node chat_page.mjs --retnet BIN --workdir DIR [--chromium PATH]
import { spawn } from 'node:child_process';
import path from 'node:path';
import { chromium } from 'playwright-core';

import { args, check, failures, freePort, tinyModel } from './harness.mjs';

const model = tinyModel();

const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const server = spawn(args.retnet, ['serve', '-m', model, '--port', String(port), '--alias', 'tiny',
  '--parallel', '2', '--max-tokens', '100000000'], { stdio: ['ignore', 'ignore', 'inherit'] });
let browser = null;
const killer = setTimeout(() => {
  console.log('FAIL: timed out');
  server.kill('SIGKILL');
  if (browser) browser.close().catch(() => {});
  process.exit(1);
}, 150000);
const api = async (method, route, body) => {
  const r = await fetch(base + route, { method, headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
};

try {
  for (let i = 0; i < 300; ++i) {
    try { if ((await fetch(`${base}/health`)).ok) break; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  browser = await chromium.launch({ executablePath: args.chromium || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'], timeout: 60000 });
  const page = await browser.newPage();
  page.setDefaultTimeout(30000);
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) pageErrors.push(m.text()); });
  const external = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) external.push(r.url()); });

  await page.goto(base + '/');
  await page.waitForFunction(() => document.getElementById('model').textContent.startsWith('tiny'));
  check((await page.textContent('#model')).includes('KiB'), 'the header shows the state size');
  check(await page.locator('link[rel=icon]').count() === 1, 'the page has its own icon');

  // Turn 1, greedy: the streamed reply equals the API's reply to the same request.
  await page.click('#settings summary');
  await page.fill('#temperature', '0');
  await page.fill('#max_tokens', '40');
  const ask = async (text) => {
    const before = await page.locator('.msg.assistant').count();
    await page.fill('#prompt', text);
    await page.press('#prompt', 'Enter');
    const reply = page.locator('.msg.assistant').nth(before);
    await reply.waitFor();
    await page.waitForFunction((i) => document.querySelectorAll('.msg.assistant')[i].dataset.done === 'true', before);
    return reply.textContent();
  };
  const messages = [{ role: 'user', content: 'Hello, who are you?' }];
  const shown = await ask(messages[0].content);
  const want = await api('POST', '/v1/chat/completions', { messages, temperature: 0, max_tokens: 40 });
  check(want.status === 200 && shown === want.json.choices[0].message.content,
    `the page's streamed reply equals the API's: ${JSON.stringify(shown)} vs ${JSON.stringify(want.json.choices?.[0]?.message?.content)}`);
  check(shown.length > 0, 'the reply is not empty');

  // Turn 2: the conversation so far comes from the prompt cache; the live line reports it.
  messages.push({ role: 'assistant', content: shown }, { role: 'user', content: 'Tell me more.' });
  const shown2 = await ask('Tell me more.');
  const want2 = await api('POST', '/v1/chat/completions', { messages, temperature: 0, max_tokens: 40 });
  check(shown2 === want2.json.choices[0].message.content, 'the second turn equals the API too');
  const status = await page.textContent('#status');
  const cached = /(\d+) from the prompt cache/.exec(status);
  check(cached && Number(cached[1]) > 0 && /tokens\/s/.test(status), `live line: ${status}`);

  // Markup the user types is shown as text, never run.
  await ask('<img src=x onerror="window.__pwned=1"><b>bold</b>');
  check(await page.locator('#log img, #log b').count() === 0, 'no markup from messages in the page');
  check(await page.evaluate(() => window.__pwned === undefined), 'no script from messages ran');
  check((await page.locator('.msg.user').last().textContent()).includes('<b>bold</b>'), 'markup shown as text');

  // Each reply keeps its figures under it; a reload brings back the conversation and settings.
  const stats = await page.locator('.stats').allTextContents();
  check(stats.length === 3 && stats.every((t) => /tokens\/s/.test(t)), `per-reply figures: ${stats}`);
  const before = await page.locator('.msg').allTextContents();
  await page.reload();
  await page.waitForFunction(() => document.getElementById('model').textContent.startsWith('tiny'));
  const after = await page.locator('.msg').allTextContents();
  check(JSON.stringify(after) === JSON.stringify(before), `the conversation survives a reload: ${after.length} of ${before.length} messages`);
  check(await page.inputValue('#temperature') === '0', 'settings survive a reload');
  check(await page.locator('#api_key').inputValue() === '', 'the API key is not stored');

  // Rename, start another conversation, switch back, delete the new one.
  await page.fill('#title', 'first chat');
  await page.locator('#title').dispatchEvent('change');
  await page.click('#new');
  check(await page.locator('.msg').count() === 0, 'a new conversation starts empty');
  await page.selectOption('#conversations', { label: 'first chat' });
  check(JSON.stringify(await page.locator('.msg').allTextContents()) === JSON.stringify(before),
    'switching back shows the renamed conversation');
  await page.click('#new');  // "Conversation 3", then delete it and "Conversation 2"
  await page.click('#delete');
  await page.selectOption('#conversations', { label: 'Conversation 2' });
  await page.click('#delete');
  check(JSON.stringify(await page.locator('.msg').allTextContents()) === JSON.stringify(before),
    'after deleting the shown one, the next is shown');
  const names = await page.locator('#conversations option').allTextContents();
  check(JSON.stringify(names) === '["first chat"]', `after delete: ${names}`);

  // A failed request leaves no empty message, gives the question back, and the next request
  // sends no empty assistant turn.
  await page.click('#settings summary').catch(() => {});
  await page.fill('#max_tokens', '-1');
  const countBefore = await page.locator('.msg.assistant').count();
  await page.fill('#prompt', 'This one fails.');
  await page.press('#prompt', 'Enter');
  await page.locator('.msg.error').first().waitFor();
  await page.waitForFunction(() => document.body.dataset.busy === 'false');
  check(await page.locator('.msg.assistant').count() === countBefore, 'no empty reply after an error');
  check(await page.inputValue('#prompt') === 'This one fails.', 'the question is given back');
  await page.fill('#max_tokens', '40');
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.press('#prompt', 'Enter');
  const body = JSON.parse((await sent).postData());
  await page.waitForFunction(() => document.body.dataset.busy === 'false');
  check(body.messages.every((m) => m.content !== '') &&
        body.messages.filter((m) => m.content === 'This one fails.').length === 1,
        `the request after an error: ${JSON.stringify(body.messages.map((m) => m.role))}`);

  // Stop: a long stream shows text while it runs, then the button ends it and frees the slot.
  // The page's network is held to 256 KB/s (about 1,500 tokens/s) for this stream: the tiny model
  // streams tens of thousands of tokens a second on a fast CPU, and a page laying out such a reply
  // every frame on a loaded machine answers the click only after many seconds.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions',
    { offline: false, latency: 0, downloadThroughput: 256 * 1024, uploadThroughput: -1 });
  await page.fill('#max_tokens', '100000000');  // minutes of text: it must not end by itself
  await page.fill('#prompt', 'Go on forever.');
  await page.press('#prompt', 'Enter');
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('.msg.assistant');
    const last = all[all.length - 1];
    return last.dataset.done === 'false' && last.textContent.length > 200;
  });
  check(await page.isEnabled('#stop') && !(await page.isEnabled('#send')), 'Stop enabled while streaming');
  await page.click('#stop', { timeout: 30000 }).catch(async (e) => {
    throw new Error(`${e.message.split('\n')[0]}; live line: ${await page.textContent('#status')}; ` +
      `messages: ${await page.locator('.msg.error').allTextContents()}`);
  });
  await page.waitForFunction(() => document.body.dataset.busy === 'false');
  const stoppedLine = await page.textContent('#status');
  console.log(`live line after Stop: ${stoppedLine}`);
  check(stoppedLine.includes('stopped'), 'the live line says stopped');
  // (After the stream: a page busy drawing a fast stream can hold a screenshot back for long.)
  await page.screenshot({ path: path.join(args.workdir, 'chat_page.png') });
  let idle = false;
  for (let i = 0; i < 100 && !idle; ++i) {
    idle = (await api('GET', '/slots')).json.every((s) => s.state === 'idle');
    if (!idle) await new Promise((r) => setTimeout(r, 100));
  }
  check(idle, 'Stop frees the slot');
  check(pageErrors.length === 0, `no errors in the page: ${pageErrors}`);
  check(external.length === 0, `no requests outside the server: ${external}`);
} catch (e) {
  check(false, `chat page test: ${e.stack || e}`);
} finally {
  if (browser) await browser.close().catch(() => {});
  server.kill('SIGTERM');
  const code = await new Promise((resolve) => server.on('exit', resolve));
  check(code === 0, `server exit status ${code}`);
  clearTimeout(killer);
}
if (failures.length) { console.log(`${failures.length} failure(s)`); process.exit(1); }
console.log('chat page tests: all passed');
