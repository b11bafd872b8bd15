// Parity of `retnet chat-template` with Hugging Face's own JavaScript Jinja (@huggingface/jinja,
// which transformers.js uses for apply_chat_template): every template of chat_templates.mjs with
// every conversation, with and without the generation prompt, must give the same prompt byte for
// byte, or both must refuse it (raise_exception). Prints both engines' render rates.
//
//   node tests/js/chat_template_parity.mjs --retnet build/retnet --workdir /tmp/ct-parity \
//        [--renders 20000]   (renders timed per engine; the test's default 2000 keeps it quick)
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";
import { conversations, meta, templates } from "./chat_templates.mjs";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const k of ["retnet", "workdir"]) if (!args[k]) throw new Error(`missing --${k}`);
fs.mkdirSync(args.workdir, { recursive: true });

const special = { bos_token: "<s>", eos_token: "</s>" };
function ours(templateFile, messagesFile, generationPrompt, timeRenders = 0) {
  const cli = ["chat-template", "--template", templateFile, "--messages", messagesFile,
    "--bos-token", special.bos_token, "--eos-token", special.eos_token];
  if (generationPrompt) cli.push("--add-generation-prompt");
  if (timeRenders) cli.push("--time-renders", String(timeRenders));
  const r = spawnSync(args.retnet, cli, { encoding: "utf8", maxBuffer: 1 << 26 });
  return r.status === 0 ? { text: r.stdout, stderr: r.stderr } : { error: r.stderr.trim() || `exit ${r.status}` };
}
function theirs(template, vars) {
  try {
    return { text: template.render(vars) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}
function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

let failures = 0, same = 0, bothRaise = 0;
for (const [tname, source] of Object.entries(templates)) {
  const templateFile = path.join(args.workdir, `${tname}.jinja`);
  fs.writeFileSync(templateFile, source);
  const template = new Template(source);
  for (const [cname, messages, extra] of conversations) {
    if ("tools" in extra && !tname.endsWith("_tools")) continue;
    const variables = { ...extra, meta };
    const messagesFile = path.join(args.workdir, `${cname}.json`);
    fs.writeFileSync(messagesFile, JSON.stringify({ messages, ...variables }));
    for (const generationPrompt of [false, true]) {
      const expected = theirs(template, { messages, add_generation_prompt: generationPrompt, ...special, ...variables });
      const got = ours(templateFile, messagesFile, generationPrompt);
      const label = `${tname} / ${cname} / add_generation_prompt=${generationPrompt}`;
      if (expected.error !== undefined && got.error !== undefined) {
        ++bothRaise;
        if (args.verbose) console.log(`${label}: both raise (${got.error} | ${expected.error})`);
      } else if (expected.error !== undefined || got.error !== undefined) {
        ++failures;
        console.log(`FAIL ${label}: ours ${got.error ?? "rendered"}, @huggingface/jinja ${expected.error ?? "rendered"}`);
        if (got.text !== undefined) console.log(`  ours: ${JSON.stringify(got.text)}`);
        if (expected.text !== undefined) console.log(`  theirs: ${JSON.stringify(expected.text)}`);
      } else if (got.text !== expected.text) {
        ++failures;
        const at = firstDifference(got.text, expected.text);
        console.log(`FAIL ${label}: outputs differ at character ${at}`);
        console.log(`  ours:   ${JSON.stringify(got.text.slice(Math.max(0, at - 40), at + 60))}`);
        console.log(`  theirs: ${JSON.stringify(expected.text.slice(Math.max(0, at - 40), at + 60))}`);
      } else {
        ++same;
        if (args.verbose) console.log(`${label}: same (${got.text.length} characters)`);
      }
    }
  }
}
console.log(`${same} renders identical, ${bothRaise} refused by both (raise_exception), ${failures} failures`);

// Render rates on two long prompts: a 5-turn chat (Llama-3) and the tool-use conversation (Qwen2.5).
for (const [tname, cname] of [["llama3", "multi_turn"], ["qwen25_tools", "tools"]]) {
  const [, messages, extra] = conversations.find(([n]) => n === cname);
  const variables = { messages, add_generation_prompt: true, ...special, ...extra, meta };
  const template = new Template(templates[tname]);
  const n = Number(args.renders ?? 2000);
  const t0 = performance.now();
  let bytes = 0;
  for (let i = 0; i < n; ++i) bytes += template.render(variables).length;
  const jsRate = n / ((performance.now() - t0) / 1000);
  const r = ours(path.join(args.workdir, `${tname}.jinja`), path.join(args.workdir, `${cname}.json`), true, n);
  console.log(`${tname} / ${cname}: @huggingface/jinja ${jsRate.toFixed(0)} renders/s (${bytes / n} characters); retnet ${r.stderr?.trim() ?? r.error}`);
}
process.exit(failures ? 1 : 0);
