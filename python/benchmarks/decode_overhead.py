"""Python overhead per decode step at batch 1 on the default model (256-d, 4 layers, bytes):
  1. Session.step + Session.sample from a Python loop vs the C++ loop of `retnet generate`;
  2. Model.generate() vs `retnet generate` (the same tokens: same seed);
  3. logits of a 2,048-token sequence: load + logits + .npy in Python vs `retnet logits`.
Each figure is the best of --reps interleaved runs (the least disturbed by other processes on a
shared machine); generate()'s per-step time is the slope between a short and a long run, so
start-up and prefill cancel; the CLI's is what its --stats measures around the same loop.

    PYTHONPATH=build/python /usr/bin/python3 python/benchmarks/decode_overhead.py --retnet build/retnet
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import retnet

PROMPT = "The quick brown fox"


def cli_decode_seconds(cli, model, n, seed, threads):
    out = subprocess.run([cli, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "--seed",
                          str(seed), "--ignore-eos", "--json", "--stats", "-t", str(threads)],
                         check=True, capture_output=True, text=True).stdout
    stats = json.loads(out)
    return 1.0 / stats["decode_tokens_per_s"], stats["text"]


def python_loop_seconds(model, n, seed):
    s = retnet.Session(model)
    s.add_sequence()
    s.prefill(0, model.tokenizer.encode(PROMPT))
    start = time.perf_counter()
    for _ in range(n):
        token = s.sample(0, seed=seed)
        s.step([token])
    return (time.perf_counter() - start) / n


def generate_seconds(model, n, seed):
    start = time.perf_counter()
    text = model.generate(PROMPT, max_tokens=n, seed=seed, ignore_eos=True)
    return time.perf_counter() - start, text


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--retnet", required=True, help="the retnet command")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    retnet.set_num_threads(a.threads)
    work = Path(tempfile.mkdtemp())
    path = str(work / "default.safetensors")
    retnet.init(None, seed=1).save(path)
    model = retnet.load(path)

    cli_step, py_step, gen_step = [], [], []
    for rep in range(a.reps):  # interleaved, so load changes on the machine hit both sides
        t, _ = cli_decode_seconds(a.retnet, path, a.tokens, rep, a.threads)
        cli_step.append(t)
        py_step.append(python_loop_seconds(model, a.tokens, rep))
        short, _ = generate_seconds(model, 16, rep)
        long, _ = generate_seconds(model, a.tokens + 16, rep)
        gen_step.append((long - short) / a.tokens)
    c, py, g = min(cli_step), min(py_step), min(gen_step)
    print(f"decode step, batch 1, {a.threads} thread(s), best of {a.reps}:")
    print(f"  C++ loop (retnet generate --stats): {1e6 * c:8.1f} us/token")
    print(f"  Python Session.step + sample loop:  {1e6 * py:8.1f} us/token ({100 * (py / c - 1):+.1f}%)")
    print(f"  Model.generate():                   {1e6 * g:8.1f} us/token ({100 * (g / c - 1):+.1f}%)")

    tokens = np.random.default_rng(0).integers(0, 256, 2048)
    cli_s, py_s = [], []
    for _ in range(a.reps):
        start = time.perf_counter()
        subprocess.run([a.retnet, "logits", "-m", path, "--tokens", ",".join(map(str, tokens)),
                        "-o", str(work / "cli.npy"), "-t", str(a.threads)], check=True,
                       capture_output=True)
        cli_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        np.save(work / "py.npy", retnet.load(path).logits(tokens)[0])
        py_s.append(time.perf_counter() - start)
    assert np.array_equal(np.load(work / "cli.npy"), np.load(work / "py.npy"))
    print(f"logits of 2,048 tokens (load, parallel form, .npy), best of {a.reps}:")
    print(f"  retnet logits (whole process): {1e3 * min(cli_s):7.1f} ms   Python: "
          f"{1e3 * min(py_s):7.1f} ms ({100 * (min(py_s) / min(cli_s) - 1):+.1f}%)")


if __name__ == "__main__":
    main()
