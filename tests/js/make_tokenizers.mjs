// Builds the tokenizer.json files and the torture text of the parity test: two small BPE
// vocabularies trained here on Tiny Shakespeare (a SentencePiece-style one with byte fallback and
// a byte-level one), each written in the layouts real models use.
const SP = "\u2581";

// Greedy BPE training on weighted words (arrays of symbols): the most frequent pair first, ties
// broken by the pair's text so the result is deterministic.
function train(wordCounts, merges) {
  const words = [...wordCounts].map(([w, n]) => ({ syms: Array.from(w), n }));
  const out = [];
  for (let m = 0; m < merges; ++m) {
    const counts = new Map();
    for (const { syms, n } of words)
      for (let i = 0; i + 1 < syms.length; ++i) {
        const k = syms[i] + "\u0000" + syms[i + 1];
        counts.set(k, (counts.get(k) ?? 0) + n);
      }
    let best = null, bestN = 1;
    for (const [k, n] of counts) if (n > bestN || (n === bestN && best !== null && k < best)) { best = k; bestN = n; }
    if (best === null) break;
    const [a, b] = best.split("\u0000");
    out.push([a, b]);
    for (const w of words) {
      const s = w.syms;
      if (s.length < 2) continue;
      const merged = [];
      for (let i = 0; i < s.length; ++i) {
        if (i + 1 < s.length && s[i] === a && s[i + 1] === b) { merged.push(a + b); ++i; } else merged.push(s[i]);
      }
      w.syms = merged;
    }
  }
  return out;
}

function countWords(pieces) {
  const counts = new Map();
  for (const p of pieces) counts.set(p, (counts.get(p) ?? 0) + 1);
  return counts;
}

function addMerges(vocab, merges) {
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
}

// SentencePiece-style: <unk> <s> </s>, the 256 <0xNN> byte pieces, the text's characters but the
// line break (byte fallback covers it and every other character), then the merges.
export function sentencepieceStyle(text, nMerges) {
  const normalized = SP + text.replaceAll(" ", SP);
  const pieces = normalized.match(/▁*[^▁\n]+|▁+|\n/gu);
  const vocab = { "<unk>": 0, "<s>": 1, "</s>": 2 };
  for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = 3 + b;
  for (const ch of [...new Set(Array.from(normalized))].sort()) if (ch !== "\n") vocab[ch] = Object.keys(vocab).length;
  const merges = train(countWords(pieces), nMerges);
  addMerges(vocab, merges);
  const special = (content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  const added = [special("<unk>", 0), special("<s>", 1), special("</s>", 2)];
  const model = { type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab };
  const post = { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } } };
  // Llama 2: normalizer Prepend + Replace, no pre-tokenizer, merges as "a b" strings.
  const llama = { version: "1.0", truncation: null, padding: null, added_tokens: added,
    normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: SP }, { type: "Replace", pattern: { String: " " }, content: SP }] },
    pre_tokenizer: null, post_processor: post,
    decoder: { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: SP }, content: " " }, { type: "ByteFallback" }, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 0 }] },
    model: { ...model, merges: merges.map(([a, b]) => `${a} ${b}`) } };
  // Newer exports: a Metaspace pre-tokenizer (prepend_scheme first) and [a, b] merges.
  const metaspace = { ...llama, normalizer: null,
    pre_tokenizer: { type: "Metaspace", replacement: SP, prepend_scheme: "first", split: false },
    decoder: { type: "Sequence", decoders: [{ type: "Metaspace", replacement: SP, prepend_scheme: "first", split: false }, { type: "ByteFallback" }, { type: "Fuse" }] },
    model: { ...model, merges } };
  return { llama, metaspace };
}

function bytesToUnicode() {
  const map = [];
  let n = 0;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    map.push(String.fromCharCode(printable ? b : 256 + n++));
  }
  return map;
}

const LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA3_JS = /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

// Byte-level: the 256 byte characters, then the merges; Llama-3 and GPT-2 layouts.
export function byteLevel(text, nMerges) {
  const b2u = bytesToUnicode();
  const enc = new TextEncoder();
  const mapped = (s) => Array.from(enc.encode(s), (b) => b2u[b]).join("");
  const merges = train(countWords(text.match(LLAMA3_JS).map(mapped)), nMerges);
  const vocab = {};
  for (const ch of b2u) vocab[ch] = Object.keys(vocab).length;
  addMerges(vocab, merges);
  const n = Object.keys(vocab).length;
  const tok = (content, id, special, extra = {}) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special, ...extra });
  const added = [tok("<|begin_of_text|>", n, true, { normalized: false }), tok("<|end_of_text|>", n + 1, true, { normalized: false }),
    tok("<|fim|>", n + 2, false, { lstrip: true, rstrip: true })];
  const model = { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, vocab };
  const llama3 = { version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: LLAMA3 }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: "Sequence", processors: [{ type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
      { type: "TemplateProcessing", single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [n], tokens: ["<|begin_of_text|>"] } } }] },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { ...model, ignore_merges: true, merges } };
  const gpt2 = { ...llama3, added_tokens: added.slice(1, 2),
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    model: { ...model, ignore_merges: false, merges: merges.map(([a, b]) => `${a} ${b}`) } };
  return { llama3, gpt2 };
}

// Text that exercises the corners: scripts, emoji and ZWJ sequences, combining marks, long runs
// of spaces, tabs and line breaks, digit runs, contractions, special tokens inside the text.
export function tortureText() {
  const parts = [
    "Hello, World! It's, I'm, we'll, they'd, you've, WE'RE, DON'T, She'S.",
    "  two spaces, \tthen a tab;\r\nWindows line\r\n\r\nand\n\n\nthree breaks.",
    "naïve café résumé — déjà vu; Ω≈ç√∫; Ελληνικά; русский текст; עברית; العربية",
    "中文字符测试，日本語のテキスト、한국어 텍스트。",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flag 🇫🇷 heart ❤️ keycap 1️⃣",
    "combining: e\u0301 a\u0300\u0301 n\u0303 Z\u0351\u0352\u0357",
    "digits 1234567890 3.14159 1,000,000 ٣٤٥ ४५६ ½ ²³",
    " ".repeat(300) + "after many spaces" + "\t".repeat(40) + "tabs" + "\n".repeat(50),
    "x" + " ".repeat(5000) + "y",
    "<s>start</s> mid <s> end</s><unk>",
    "<|begin_of_text|>Hi<|end_of_text|> text <|fim|>  middle  <|fim|>end",
    "a<|fim|>b <|end_of_text|><|end_of_text|>",
    "punctuation!!! ??? ... --- ''' \"quoted\" (paren) [brack] {brace} @#$%^&*",
    "mixed123abc 4five 六seven ' s 's 'S 'll 'LL",
    "\u00a0nbsp\u2003em\u3000ideographic space\u2028line sep",
    "trailing spaces   \n   leading spaces\n \n",
  ];
  return parts.join("\n") + " end   ";
}
