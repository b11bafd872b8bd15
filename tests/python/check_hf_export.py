#!/usr/bin/env python3
"""The JSON files of `retnet export` as Hugging Face's readers take them.

    /usr/bin/python3 tests/python/check_hf_export.py --retnet build/retnet --workdir DIR

For a byte-level model exported in each layout (syncdoth from a model file, fla from an fla
directory written by `retnet init`): config.json, generation_config.json, tokenizer_config.json
and tokenizer.json load as dicts with the keys and value types transformers reads
(generation_config: integer token ids only, never null), tokenizer.json's vocabulary is the 256
bytes, and the engine reads the directory back with the byte-level tokenizer (`retnet tokenizer
encode` gives a text's UTF-8 bytes). When transformers or tokenizers are importable, their own
loaders read the files too (Debian packages neither; the JavaScript port is tests/js/export_parity.mjs).
Exit code 0 when everything passes."""
import argparse
import json
import os
import shutil
import subprocess
import sys

CONFIGS = {
    "syncdoth": {"decoder_embed_dim": 32, "decoder_value_embed_dim": 64, "decoder_retention_heads": 2,
                 "decoder_ffn_embed_dim": 64, "decoder_layers": 1, "vocab_size": 256},
    "fla": {"hidden_size": 32, "num_hidden_layers": 1, "num_heads": 2, "vocab_size": 256},
}
TEXTS = ["Hello, world!", "e\u0301 caf\u00e9 \ufb01 \uff11\uff12", "<|user|>\nhi<|end|>\n"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("  FAILED:", what)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_directory(out, retnet):
    config = load(os.path.join(out, "config.json"))
    check(isinstance(config, dict) and isinstance(config.get("vocab_size"), int),
          "config.json is a dict with an integer vocab_size")
    gen = load(os.path.join(out, "generation_config.json"))
    check(isinstance(gen, dict), f"generation_config.json is a dict: {gen!r}")
    if isinstance(gen, dict):
        for key, value in gen.items():
            check(key in ("bos_token_id", "eos_token_id", "pad_token_id"), f"generation_config key {key}")
            check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                  f"generation_config {key} = {value!r} is a token id")
    tc = load(os.path.join(out, "tokenizer_config.json"))
    check(isinstance(tc, dict), "tokenizer_config.json is a dict")
    if isinstance(tc, dict):
        check(isinstance(tc.get("chat_template"), str) and "messages" in tc.get("chat_template", ""),
              "tokenizer_config.json has a chat_template over messages")
        check(tc.get("tokenizer_class") == "PreTrainedTokenizerFast", "tokenizer_class")
        check(tc.get("clean_up_tokenization_spaces") is False, "clean_up_tokenization_spaces false")
        check(all(v is not None for v in tc.values()), "tokenizer_config.json has no null values")
    tok = load(os.path.join(out, "tokenizer.json"))
    check(isinstance(tok, dict), "tokenizer.json is a dict")
    if isinstance(tok, dict):
        for key in ("version", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                    "decoder", "model"):
            check(key in tok, f"tokenizer.json has '{key}'")
        model = tok.get("model", {})
        check(model.get("type") == "BPE" and model.get("merges") == [], "a BPE model without merges")
        vocab = model.get("vocab", {})
        check(sorted(vocab.values()) == list(range(256)), "the vocabulary is the ids 0..255")
    for text in TEXTS:
        r = subprocess.run([retnet, "tokenizer", "encode", "--tokenizer", out, "--text", text],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"retnet tokenizer encode: {r.stderr}")
        ids = [int(x) for x in r.stdout.strip().split(",") if x]
        check(ids == list(text.encode("utf-8")), f"{text!r}: the engine's ids are the UTF-8 bytes")
    try:
        import transformers  # noqa: F401
    except ImportError:
        return
    g = transformers.GenerationConfig.from_pretrained(out)
    check(g.to_dict().get("eos_token_id") == gen.get("eos_token_id"), "transformers reads generation_config")
    t = transformers.PreTrainedTokenizerFast.from_pretrained(out)
    for text in TEXTS:
        check(t.encode(text, add_special_tokens=False) == list(text.encode("utf-8")),
              f"transformers encodes {text!r} as its bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--retnet", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    for layout, config in CONFIGS.items():
        print(layout + ":")
        cfg = os.path.join(a.workdir, layout + ".config.json")
        with open(cfg, "w") as f:
            json.dump(config, f)
        src = os.path.join(a.workdir, layout + ("-src" if layout == "fla" else ".safetensors"))
        out = os.path.join(a.workdir, layout + "-export")
        for cmd in (["init", "--config", cfg, "-o", src], ["export", src, "--format", layout, "-o", out]):
            r = subprocess.run([a.retnet] + cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"retnet {' '.join(cmd)} failed: {r.stderr}")
        check_directory(out, a.retnet)
    print(f"FAILED: {len(failures)} checks" if failures else "the exported JSON files read as Hugging Face's")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
