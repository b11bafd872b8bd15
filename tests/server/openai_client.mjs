// `retnet serve` driven by the official OpenAI JavaScript client: chat and completions, streamed
// and not, usage with cached tokens, an API key, and the client's own error for a bad request.
//   node openai_client.mjs --retnet BIN --workdir DIR
import { spawn, execFileSync } from 'node:child_process';
import OpenAI from 'openai';

import { args, check, failures, freePort, tinyModel } from './harness.mjs';

const model = tinyModel();
const generate = (prompt, n, extra = []) => JSON.parse(execFileSync(args.retnet,
  ['generate', '-m', model, '-p', prompt, '-n', String(n), '--json', ...extra],
  { stdio: ['ignore', 'pipe', 'ignore'] }).toString()).text;

const port = await freePort();
const server = spawn(args.retnet, ['serve', '-m', model, '--port', String(port), '--alias', 'tiny',
  '--api-key', 'test-key'], { stdio: ['ignore', 'ignore', 'inherit'] });
const killer = setTimeout(() => { console.log('FAIL: timed out'); server.kill('SIGKILL'); process.exit(1); }, 120000);
try {
  for (let i = 0; i < 300; ++i) {
    try { if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });

  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === 'tiny', 'models.list');

  const prompt = 'To be, or not to be, that is the question. ';
  const greedy = generate(prompt, 30, ['--temp', '0']);
  const c = await client.completions.create({ model: 'tiny', prompt, max_tokens: 30, temperature: 0 });
  check(c.choices[0].text === greedy, 'completions.create equals retnet generate');
  check(c.usage.completion_tokens === 30 && c.usage.prompt_tokens_details.cached_tokens >= 0, 'usage');

  let streamed = '';
  for await (const chunk of await client.completions.create({ model: 'tiny', prompt, max_tokens: 30, temperature: 0, stream: true }))
    streamed += chunk.choices[0]?.text ?? '';
  check(streamed === greedy, 'streamed completion equals retnet generate');

  const messages = [{ role: 'user', content: 'Hello, who are you?' }];
  const chatWant = generate('<|user|>\nHello, who are you?<|end|>\n<|assistant|>\n', 20, ['--temp', '0', '--stop', '<|end|>']);
  const chat = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 0 });
  check(chat.choices[0].message.content === chatWant, 'chat.completions.create equals retnet generate');
  let chatStreamed = '';
  let usage = null;
  for await (const chunk of await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20,
    temperature: 0, stream: true, stream_options: { include_usage: true } })) {
    chatStreamed += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  check(chatStreamed === chatWant, 'streamed chat equals retnet generate');
  // The same conversation again: its prompt comes from the cache.
  check(usage && usage.prompt_tokens_details.cached_tokens > 0, `cached tokens on a repeated chat: ${JSON.stringify(usage)}`);

  try {
    await client.completions.create({ model: 'tiny', prompt, max_tokens: -5 });
    check(false, 'negative max_tokens is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'max_tokens', `BadRequestError naming max_tokens: ${e}`);
  }
  try {
    await client.completions.create({ model: 'gpt-4o', prompt });
    check(false, 'unknown model is refused');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError for an unknown model: ${e}`);
  }
  try {
    await new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list();
    check(false, 'a wrong key is refused');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError, `AuthenticationError for a wrong key: ${e}`);
  }
} finally {
  server.kill('SIGTERM');
  const code = await new Promise((resolve) => server.on('exit', resolve));
  check(code === 0, `server exit status ${code}`);
  clearTimeout(killer);
}
if (failures.length) { console.log(`${failures.length} failure(s)`); process.exit(1); }
console.log('openai client tests: all passed');
