// `retnet serve` driven by the official OpenAI JavaScript client: chat and completions, streamed
// and not, usage with cached tokens, n: 3 choices, structured output and tool calls through the
// client's parse(), an API key, and the client's own error for a bad request.
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

  // Structured output: the client's parse() reads the JSON a random model wrote under the mask.
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 6 },
    n: { type: 'integer' }, ok: { type: 'boolean' } }, required: ['name', 'n', 'ok'], additionalProperties: false };
  for (let seed = 1; seed <= 5; ++seed) {
    const r = await client.beta.chat.completions.parse({ model: 'tiny', messages, max_tokens: 400, temperature: 1,
      seed, response_format: { type: 'json_schema', json_schema: { name: 'thing', strict: true, schema } } });
    const p = r.choices[0].message.parsed;
    check(p && typeof p.name === 'string' && [...p.name].length <= 6 && Number.isInteger(p.n) && typeof p.ok === 'boolean',
      `parse() with a JSON schema, seed ${seed}: ${JSON.stringify(r.choices[0].message)}`);
  }
  const tools = [{ type: 'function', function: { name: 'add', strict: true, parameters: { type: 'object',
    properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'], additionalProperties: false } } }];
  const called = await client.beta.chat.completions.parse({ model: 'tiny', messages, max_tokens: 400, temperature: 1,
    seed: 2, tools, tool_choice: 'required' });
  const call = called.choices[0].message.tool_calls?.[0];
  check(called.choices[0].finish_reason === 'tool_calls' && call?.function.name === 'add' &&
    Number.isInteger(call.function.parsed_arguments?.a) && Number.isInteger(call.function.parsed_arguments?.b),
  `tool_choice required gives parsed arguments: ${JSON.stringify(called.choices[0])}`);
  const runner = client.beta.chat.completions.stream({ model: 'tiny', messages, max_tokens: 400, temperature: 1,
    seed: 2, tools, tool_choice: { type: 'function', function: { name: 'add' } } });
  const final = await runner.finalChatCompletion();
  check(final.choices[0].message.tool_calls?.[0]?.function.arguments === call?.function.arguments,
    `a streamed tool call equals the plain one: ${JSON.stringify(final.choices[0])}`);
  // tool_choice auto (the default): a reply starting with '{' is a call, any other is prose; a bias on '{'
  // (token 123) picks the branch.
  const auto = await client.beta.chat.completions.parse({ model: 'tiny', messages, max_tokens: 400, temperature: 1,
    seed: 3, tools, logit_bias: { 123: 100 } });
  const autoCall = auto.choices[0].message.tool_calls?.[0];
  check(auto.choices[0].finish_reason === 'tool_calls' && Number.isInteger(autoCall?.function.parsed_arguments?.a),
    `tool_choice auto gives a parsed call when the model starts one: ${JSON.stringify(auto.choices[0])}`);
  const prose = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 0, tools,
    logit_bias: { 123: -100 } });
  check(!prose.choices[0].message.tool_calls && typeof prose.choices[0].message.content === 'string' &&
    prose.choices[0].message.content.length > 0, `tool_choice auto gives prose otherwise: ${JSON.stringify(prose.choices[0])}`);

  // Embeddings: the client asks for base64 and decodes it; the same vectors as floats.
  const emb = await client.embeddings.create({ model: 'tiny', input: ['hello', 'a quiet sea'] });
  const floats = await client.embeddings.create({ model: 'tiny', input: ['hello', 'a quiet sea'], encoding_format: 'float' });
  const v = Array.from(emb.data[0]?.embedding ?? []);
  check(emb.data.length === 2 && v.length > 0 && v.every(Number.isFinite) &&
    Math.abs(Math.hypot(...v) - 1) < 1e-5 && emb.usage.prompt_tokens > 0 &&
    emb.data.every((d, i) => d.index === i && Array.from(d.embedding).every((x, k) => x === floats.data[i].embedding[k])),
  `embeddings.create: normalized vectors, base64 equal to floats: ${JSON.stringify(emb.usage)}`);

  try {
    await client.completions.create({ model: 'tiny', prompt, max_tokens: -5 });
    check(false, 'negative max_tokens is refused');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'max_tokens', `BadRequestError naming max_tokens: ${e}`);
  }
  // n: 3 reads the prompt once and forks its state: greedy gives three equal texts.
  const three = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20, temperature: 0, n: 3 });
  check(three.choices.length === 3 && three.choices.every((c, i) => c.index === i && c.message.content === chatWant),
    `n: 3 gives three greedy choices equal to retnet generate: ${JSON.stringify(three.choices)}`);
  const streamedChoices = ['', '', ''];
  for await (const chunk of await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 20,
    temperature: 0, n: 3, stream: true }))
    for (const ch of chunk.choices) streamedChoices[ch.index] += ch.delta?.content ?? '';
  check(streamedChoices.every((t) => t === chatWant), `streamed n: 3 gives three equal texts: ${JSON.stringify(streamedChoices)}`);
  // One model is served whatever the name a client sends; models.retrieve names the real one.
  const named = await client.completions.create({ model: 'gpt-4o', prompt, max_tokens: 4 });
  check(named.model === 'tiny' && named.choices.length === 1, `any model name is served: ${named.model}`);
  const retrieved = await client.models.retrieve('tiny');
  check(retrieved.id === 'tiny' && retrieved.object === 'model', `models.retrieve: ${JSON.stringify(retrieved)}`);
  try {
    await client.models.retrieve('gpt-4o');
    check(false, 'retrieving another model is 404');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, `NotFoundError retrieving an unknown model: ${e}`);
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
