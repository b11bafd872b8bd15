#!/usr/bin/env python3
"""Speed of two builds of `retnet`, side by side: alternating runs, medians, and the ratio B/A.

  python3 scripts/ab_speed.py --a /path/to/old/retnet --b build/retnet [--rounds 5] [--big]

Figures (tokens/s, higher is better; each from the command's own report):
  decode-b1      greedy decoding of the default model, batch 1 (`generate -n 400`)
  decode-b16     the same with 16 prompts decoded together (`generate --prompts-file`)
  prefill        the default model reading a 4,000-byte prompt (`generate`'s prompt eval)
  train          training the default model, 30 steps (`train`'s tokens/s)
  big-bf16       --big: batch-1 decoding of a model with fla-hub/retnet-1.3B-100B's shapes
  big-q4_0       (random weights, 2.5 GiB in bf16 used in place; q4_0 quantised at load), 32
                 tokens (`bench model`)
  big-ttft-ms    --big, when the 1.3B directory has a tokenizer: the server's time to first
                 token on one request to it in bf16, in milliseconds (lower is better; `bench
                 serve --streams 1`)
The runs alternate A B A B ..., so a machine that drifts affects both; quote the median ratio.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

FLA_13B = {
    "architectures": ["RetNetForCausalLM"], "attn_mode": "chunk", "bos_token_id": 1,
    "elementwise_affine": True, "eos_token_id": 2, "expand_k": 1, "expand_v": 2,
    "feature_map": None, "fuse_norm": True, "hidden_act": "swish", "hidden_ratio": 2,
    "hidden_size": 2048, "intermediate_size": None, "model_type": "retnet", "norm_eps": 1e-06,
    "num_heads": 8, "num_hidden_layers": 24, "num_kv_heads": None, "tie_word_embeddings": False,
    "use_output_gate": True, "use_short_conv": False, "vocab_size": 32000}


def run(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return out


def eval_rates(stderr):
    """(prompt eval tokens/s, eval tokens/s) from generate's timing lines."""
    prompt = re.search(r"prompt eval time =.*?([\d.]+) tokens per second", stderr)
    decode = re.search(r"\n\S+\s+eval time =.*?([\d.]+) tokens per second", stderr)
    return (float(prompt.group(1)) if prompt else None, float(decode.group(1)) if decode else None)


def setup(work, retnet, big):
    os.makedirs(work, exist_ok=True)
    paths = {"default": os.path.join(work, "default.safetensors")}
    if not os.path.exists(paths["default"]):
        run([retnet, "init", "-o", paths["default"], "--seed", "1"])
    paths["prompts"] = os.path.join(work, "prompts16.txt")
    with open(paths["prompts"], "w") as f:
        f.write("\n".join(f"Speaker {i}: tell me about the sea" for i in range(16)) + "\n")
    paths["long"] = os.path.join(work, "long.txt")
    with open(paths["long"], "w") as f:
        f.write(("To be, or not to be, that is the question: " * 100)[:4000])
    if big:
        paths["big"] = os.path.join(work, "fla13b")
        if not os.path.exists(os.path.join(paths["big"], "config.json")):
            cfg = os.path.join(work, "fla13b.json")
            with open(cfg, "w") as f:
                json.dump(FLA_13B, f)
            run([retnet, "init", "--config", cfg, "--out", paths["big"], "--dtype", "bf16"])
    return paths


def measure(retnet, paths, big, work):
    gen = [retnet, "generate", "--temp", "0", "--ignore-eos"]
    figures = {}
    figures["decode-b1"] = eval_rates(run(gen + ["-m", paths["default"], "-p", "ROMEO:",
                                                 "-n", "400"]).stderr)[1]
    figures["decode-b16"] = eval_rates(run(gen + ["-m", paths["default"], "--prompts-file",
                                                  paths["prompts"], "-n", "200"]).stderr)[1]
    figures["prefill"] = eval_rates(run(gen + ["-m", paths["default"], "-f", paths["long"],
                                               "-n", "1"]).stderr)[0]
    train = run([retnet, "train", "--data", "data/tinyshakespeare.txt", "--out",
                 os.path.join(work, "train"), "--overwrite", "--steps", "30",
                 "--log-interval", "10"])
    figures["train"] = float(re.search(r"([\d.]+) tokens/s; model in", train.stdout +
                                       train.stderr).group(1))
    if big:
        report = os.path.join(work, "bench-model.json")
        run([retnet, "bench", "model", "-m", paths["big"], "--dtype", "bf16,q4_0", "--prefill",
             "64", "--decode", "32", "--reps", "1", "--probe-mib", "16", "--json", report])
        for r in json.load(open(report))["runs"]:
            figures[f"big-{r['model']['dtype']}"] = r["decode"]["tokens_per_s"]
        # The server reads text: only a directory with its tokenizer (a real checkpoint's) has
        # this figure; `retnet init`'s 32,000-token vocabulary comes without one.
        if any(os.path.exists(os.path.join(paths["big"], name))
               for name in ("tokenizer.json", "tokenizer.model")):
            report = os.path.join(work, "bench-serve.json")
            run([retnet, "bench", "serve", "-m", paths["big"], "--dtype", "bf16", "--streams",
                 "1", "-n", "4", "--reps", "3", "--json", report])
            figures["big-ttft-ms"] = json.load(open(report))["results"][0]["ttft_ms_p50"]
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the baseline retnet binary")
    ap.add_argument("--b", required=True, help="the retnet binary to compare")
    ap.add_argument("--rounds", type=int, default=5, help="alternated pairs (default 5)")
    ap.add_argument("--big", action="store_true", help="also the 1.3B shape (bf16, q4_0)")
    ap.add_argument("--work", default="/tmp/retnet-ab-speed", help="models and scratch")
    args = ap.parse_args()
    paths = setup(args.work, args.a, args.big)
    rows = {}
    for r in range(args.rounds):
        for side, binary in (("a", args.a), ("b", args.b)):
            for name, value in measure(binary, paths, args.big, args.work).items():
                rows.setdefault(name, {"a": [], "b": []})[side].append(value)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'figure':12s} {'A median':>10s} {'B median':>10s} {'B/A median':>11s} "
          f"{'B/A min..max':>14s}")
    for name, v in rows.items():
        ratios = [b / a for a, b in zip(v["a"], v["b"])]
        print(f"{name:12s} {statistics.median(v['a']):10.1f} {statistics.median(v['b']):10.1f} "
              f"{statistics.median(ratios):11.3f} {min(ratios):6.3f}..{max(ratios):.3f}")


if __name__ == "__main__":
    main()
