// The tokenizer files `retnet export` writes, read by Hugging Face's JavaScript port
// (@huggingface/tokenizers): a byte-level model exported in both layouts loads there with its
// tokenizer_config.json and encodes and decodes a set of texts exactly as the engine does.
//
//   node tests/js/export_parity.mjs --retnet build/retnet --workdir /tmp/export_parity
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const k of ["retnet", "workdir"]) if (!args[k]) throw new Error(`missing --${k}`);
fs.rmSync(args.workdir, { recursive: true, force: true });
fs.mkdirSync(args.workdir, { recursive: true });
const retnet = (...cli) => execFileSync(args.retnet, cli, { maxBuffer: 1 << 26, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const at = (name) => path.join(args.workdir, name);

let ascii = "";
for (let c = 1; c < 128; ++c) ascii += String.fromCharCode(c);
const texts = ["Hello, world!", "  two  spaces\n\ttab\r\n", "e\u0301 caf\u00e9 \ufb01 \uff11\uff12", "\u65e5\u672c\u8a9e \u{1F642}",
  "<|user|>\nhi<|end|>\n", ascii, "x".repeat(5000)];

let failures = 0;
const check = (ok, what) => { if (!ok) { ++failures; console.log(`  FAILED: ${what}`); } };
const configs = {
  syncdoth: { decoder_embed_dim: 32, decoder_value_embed_dim: 64, decoder_retention_heads: 2, decoder_ffn_embed_dim: 64, decoder_layers: 1, vocab_size: 256 },
  fla: { hidden_size: 32, num_hidden_layers: 1, num_heads: 2, vocab_size: 256 },
};
for (const [layout, config] of Object.entries(configs)) {
  console.log(`${layout}:`);
  fs.writeFileSync(at(`${layout}.config.json`), JSON.stringify(config));
  const model = at(`${layout}.safetensors`);
  if (layout === "fla") {  // an fla config.json makes a directory; its export is the case here
    retnet("init", "--config", at(`${layout}.config.json`), "-o", at("fla-src"));
  } else {
    retnet("init", "--config", at(`${layout}.config.json`), "-o", model);
  }
  const out = at(`${layout}-export`);
  retnet("export", layout === "fla" ? at("fla-src") : model, "--format", layout, "-o", out);
  const tokenizerJson = JSON.parse(fs.readFileSync(path.join(out, "tokenizer.json"), "utf8"));
  const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(out, "tokenizer_config.json"), "utf8"));
  const gen = JSON.parse(fs.readFileSync(path.join(out, "generation_config.json"), "utf8"));
  check(gen !== null && typeof gen === "object" && !Array.isArray(gen), `generation_config.json is an object: ${JSON.stringify(gen)}`);
  check(typeof tokenizerConfig.chat_template === "string", "tokenizer_config.json has a chat_template");
  const js = new Tokenizer(tokenizerJson, tokenizerConfig);
  for (const [i, text] of texts.entries()) {
    fs.writeFileSync(at("text.txt"), text);
    const expected = js.encode(text, { add_special_tokens: false }).ids;
    const raw = retnet("tokenizer", "encode", "--tokenizer", out, "--file", at("text.txt")).trim();
    const ours = raw === "" ? [] : raw.split(",").map(Number);
    const bytes = [...Buffer.from(text, "utf8")];
    check(JSON.stringify(ours) === JSON.stringify(expected), `text ${i}: retnet ${JSON.stringify(ours.slice(0, 12))} js ${JSON.stringify(expected.slice(0, 12))}`);
    check(JSON.stringify(expected) === JSON.stringify(bytes), `text ${i}: js ids are not the UTF-8 bytes`);
    check(js.decode(expected) === text, `text ${i}: js decode differs`);
  }
  console.log(`  ${texts.length} texts encode alike`);
}
console.log(failures ? `FAILED: ${failures} differences` : "the exported tokenizers agree with @huggingface/tokenizers");
process.exit(failures ? 1 : 0);
