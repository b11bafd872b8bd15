// Parity of `retnet tokenizer encode/decode` on tokenizer.json files with Hugging Face's own
// JavaScript port (@huggingface/tokenizers): the same ids, token for token, and the same decoded
// text, on Tiny Shakespeare and a torture text, and with Unicode normalizers (NFC, NFD, NFKC,
// NFKD) on text with combining marks and compatibility characters. Prints both encoders'
// throughput.
//
//   node tests/js/tokenizer_parity.mjs --retnet build/retnet --data data/tinyshakespeare.txt \
//        --workdir /tmp/parity [--full 1]
// The JavaScript port runs SentencePiece-style BPE over a whole text at once (no pre-tokenizer
// splits it), about 0.04 MB/s; so that the test stays fast, those two layouts read the first
// 100 KB of Tiny Shakespeare unless --full 1 is given (which the throughput figures in
// docs/tokenizers.md use).
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { byteLevel, sentencepieceStyle, tortureText } from "./make_tokenizers.mjs";

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
for (const k of ["retnet", "data", "workdir"]) if (!args[k]) throw new Error(`missing --${k}`);
fs.mkdirSync(args.workdir, { recursive: true });

const shakespeare = fs.readFileSync(args.data, "utf8");
const train = shakespeare.slice(0, 100000);
const t0 = performance.now();
const tokenizers = { ...sentencepieceStyle(train, 600), ...byteLevel(train, 600) };
console.log(`trained 2 vocabularies in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
const head = args.full ? shakespeare : shakespeare.slice(0, 100000);
const inputs = { torture: tortureText(), shakespeare, shakespeare_head: head };
for (const [name, text] of Object.entries(inputs)) fs.writeFileSync(path.join(args.workdir, `${name}.txt`), text);
const inputsOf = (tname) => (tname === "llama" || tname === "metaspace"
  ? { torture: inputs.torture, [args.full ? "shakespeare" : "shakespeare_head"]: head } : { torture: inputs.torture, shakespeare });

function retnet(...cli) {
  return execFileSync(args.retnet, cli, { maxBuffer: 1 << 28, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}
function retnetStats(...cli) {
  const r = spawnSync(args.retnet, cli, { maxBuffer: 1 << 28, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`retnet ${cli.join(" ")} failed: ${r.stderr}`);
  return r;
}

let failures = 0;
function firstDifference(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

for (const [tname, json] of Object.entries(tokenizers)) {
  const file = path.join(args.workdir, `${tname}.tokenizer.json`);
  fs.writeFileSync(file, JSON.stringify(json));
  const js = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  const size = new Set([...Object.values(json.model.vocab), ...json.added_tokens.map((t) => t.id)]).size;
  console.log(`${tname}: vocabulary ${size}, ${json.model.merges.length} merges`);
  for (const [iname, text] of Object.entries(inputsOf(tname))) {
    const input = path.join(args.workdir, `${iname}.txt`);
    const j0 = performance.now();
    const expected = js.encode(text, { add_special_tokens: false }).ids;
    const jsSeconds = (performance.now() - j0) / 1000;
    const r = retnetStats("tokenizer", "encode", "--tokenizer", file, "--file", input, "--stats");
    const ours = r.stdout.trim() === "" ? [] : r.stdout.trim().split(",").map(Number);
    const stats = /([0-9.]+) MB\/s/.exec(r.stderr);
    const d = firstDifference(ours, expected);
    let mismatched = 0;
    for (let i = 0; i < Math.max(ours.length, expected.length); ++i) if (ours[i] !== expected[i]) ++mismatched;
    const mbs = (text.length && Buffer.byteLength(text) / 1e6 / jsSeconds).toFixed(2);
    console.log(`  ${iname}: ${Buffer.byteLength(text)} bytes -> ${expected.length} tokens; mismatched ids ${mismatched}; ` +
      `encode MB/s: retnet ${stats ? stats[1] : "?"}, @huggingface/tokenizers ${mbs}`);
    if (d >= 0) {
      ++failures;
      console.log(`    FIRST DIFFERENCE at token ${d}: retnet ${JSON.stringify(ours.slice(d, d + 8))} js ${JSON.stringify(expected.slice(d, d + 8))}` +
        ` (js tokens ${JSON.stringify(js.encode(text, { add_special_tokens: false }).tokens.slice(Math.max(0, d - 3), d + 8))})`);
    }
    const idsFile = path.join(args.workdir, `${tname}.${iname}.ids`);
    fs.writeFileSync(idsFile, expected.join(","));
    const decoded = retnet("tokenizer", "decode", "--tokenizer", file, "--file", idsFile).replace(/\n$/, "");
    const jsDecoded = js.decode(expected);
    if (decoded !== jsDecoded) {
      ++failures;
      const at = firstDifference(decoded, jsDecoded);
      console.log(`    DECODE DIFFERS at character ${at}: retnet ${JSON.stringify(decoded.slice(at, at + 40))} js ${JSON.stringify(jsDecoded.slice(at, at + 40))}`);
    }
  }
  const hello = "Hello there";
  const withBos = js.encode(hello).ids;
  const ours = retnet("tokenizer", "encode", "--tokenizer", file, "--text", hello, "--add-bos").trim().split(",").map(Number);
  if (firstDifference(ours, withBos) >= 0) {
    ++failures;
    console.log(`  with the post-processor: retnet ${ours} js ${withBos}`);
  }
}
// Unicode normalizers written here on top of the trained vocabularies (byte-level as Qwen2 and
// GPT-NeoX use them, and before the SentencePiece-style Prepend/Replace): combining marks,
// compatibility characters (ligatures, full-width and circled digits, Hangul jamo, the Angstrom
// and Ohm signs) and the torture text, encoded and decoded alike.
const unicodeText = "e\u0301 \u00e9 a\u0300\u0301 \u1e9b\u0323 \ufb01ne \ufb03 \uff11\uff12\uff13 \u2460\u2461 " +
  "\u1100\u1161\u11a8 \uac01 \u212b \u2126 \ufdfa \u00bd x\u00b2 \u3000<|fim|>\uff21\uff22 \u0958 \u0e33";
const forms = { NFC: { type: "NFC" }, NFD: { type: "NFD" }, NFKC: { type: "NFKC" }, NFKD: { type: "NFKD" },
  NFKD_NFC: { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "NFC" }] } };
const normalized = [];
for (const [fname, normalizer] of Object.entries(forms)) {
  for (const base of ["gpt2", "llama3"]) normalized.push([`${base}+${fname}`, { ...tokenizers[base], normalizer }]);
}
normalized.push(["llama+NFKC", { ...tokenizers.llama,
  normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, ...tokenizers.llama.normalizer.normalizers] } }]);
for (const [tname, json] of normalized) {
  const file = path.join(args.workdir, `${tname}.tokenizer.json`);
  fs.writeFileSync(file, JSON.stringify(json));
  const js = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  for (const [iname, text] of Object.entries({ unicode: unicodeText, torture: inputs.torture })) {
    const input = path.join(args.workdir, `normalizer.${iname}.txt`);
    fs.writeFileSync(input, text);
    const expected = js.encode(text, { add_special_tokens: false }).ids;
    const raw = retnet("tokenizer", "encode", "--tokenizer", file, "--file", input).trim();
    const ours = raw === "" ? [] : raw.split(",").map(Number);
    const d = firstDifference(ours, expected);
    const idsFile = path.join(args.workdir, `${tname}.${iname}.ids`);
    fs.writeFileSync(idsFile, expected.join(","));
    const decoded = retnet("tokenizer", "decode", "--tokenizer", file, "--file", idsFile).replace(/\n$/, "");
    const same = d < 0 && decoded === js.decode(expected);
    console.log(`${tname} ${iname}: ${expected.length} tokens ${same ? "alike" : "DIFFER"}`);
    if (!same) {
      ++failures;
      console.log(`    first difference at token ${d}: retnet ${JSON.stringify(ours.slice(d, d + 8))} js ${JSON.stringify(expected.slice(d, d + 8))}`);
    }
  }
}
console.log(failures ? `FAILED: ${failures} differences` : "all tokenizers agree with @huggingface/tokenizers");
process.exit(failures ? 1 : 0);
