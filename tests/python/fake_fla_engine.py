"""Stand-in for the engine CLI on Hugging Face directories (fla and syncdoth layouts), built on
fla_reference.py and hf_dirs.load_model_dir, so that check_fla.py --self-test checks the harness
without the engine:

    fake_fla_engine.py logits -m DIR --tokens 5,17,3 --mode {parallel,recurrent,chunkwise,scan}
                              [--chunk N] -o out.npy
    fake_fla_engine.py generate -m DIR -p TEXT -n N --temperature 0 --ignore-eos --json [--chunk N]

Computes in float64 and writes float32. Byte tokenizer for generate (prompt bytes are the ids).
FAKE_ENGINE_FAULT=perturb spoils the logits by 1e-4 relative, =nan spoils one logit,
=refuse_chunkwise refuses --mode chunkwise and scan (as an engine does for attention layers).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fla_reference as FR  # noqa: E402
import hf_dirs  # noqa: E402


def load(path):
    if not os.path.isdir(path):
        raise ValueError(f"{path}: not a model directory")
    cfg, W = hf_dirs.load_model_dir(path)
    if not FR.is_syncdoth(cfg):
        FR.parse_config(cfg)
    return cfg, W


def logits(args):
    cfg, W = load(args.model)
    fault = os.environ.get("FAKE_ENGINE_FAULT")
    if fault == "refuse_chunkwise" and args.mode in ("chunkwise", "scan"):
        raise ValueError(f"--mode {args.mode}: not available for this model")
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
    except ValueError:
        raise ValueError(f"--tokens {args.tokens!r}: expected comma-separated integers") from None
    mode = "parallel" if args.mode in ("chunkwise", "scan") else args.mode
    out = FR.any_forward(W, cfg, tokens, mode).numpy()
    if fault == "perturb":
        out = out + 1e-4 * np.abs(out).max()
    elif fault == "nan":
        out[len(out) // 2, 1] = float("nan")
    np.save(args.out, out.astype(np.float32))


def generate(args):
    cfg, W = load(args.model)
    prompt = list(args.prompt.encode())
    if FR.is_syncdoth(cfg):
        seq = list(prompt)
        for _ in range(args.max_tokens):
            seq.append(int(torch.argmax(FR.syncdoth_forward(W, cfg, seq, "recurrent")[-1])))
        ids = seq[len(prompt):]
    else:
        ids = FR.greedy(W, cfg, prompt, args.max_tokens)
    if any(i >= 256 for i in ids):
        raise ValueError("generated a token id outside the byte tokenizer")
    print(json.dumps({"text": bytes(ids).decode("utf-8", errors="replace"), "prompt_tokens": len(prompt),
                      "generated_tokens": len(ids), "finish_reason": "length"}))


def main():
    p = argparse.ArgumentParser(prog="fake_fla_engine")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("logits")
    q.add_argument("-m", "--model", required=True)
    q.add_argument("--tokens", required=True)
    q.add_argument("--mode", choices=["parallel", "recurrent", "chunkwise", "scan"], default="parallel")
    q.add_argument("--chunk", type=int)
    q.add_argument("-o", "--out", required=True)
    g = sub.add_parser("generate")
    g.add_argument("-m", "--model", required=True)
    g.add_argument("-p", "--prompt", required=True)
    g.add_argument("-n", "--max-tokens", type=int, default=16)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--ignore-eos", action="store_true")
    g.add_argument("--json", action="store_true")
    g.add_argument("--chunk", type=int)
    args = p.parse_args()
    try:
        (logits if args.command == "logits" else generate)(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
