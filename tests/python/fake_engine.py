"""Stand-in for the C++ CLI's `logits` subcommand, built on the PyTorch reference, so that
check_engine.py --self-test can check the harness itself without the engine.

    fake_engine.py logits --model M.safetensors [--config-json C.json] --tokens 5,17,3
                          --mode {parallel,recurrent,chunkwise,scan} [--chunk N] --out out.npy

Computes in float32 like the engine. The reference has no scan form; scan runs the recurrent form.
Reads fairseq's "decoder." prefix and checks torchscale's retnet_rel_pos buffers like the engine.
FAKE_ENGINE_FAULT=perturb spoils the logits by 1e-4 relative, =nan and =inf spoil one logit,
=abort dies of SIGABRT on bad input: the self-test uses them to check that the harness notices
wrong output and crashes.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import retnet_ref as R  # noqa: E402


def logits(args):
    tensors, metadata = harness.read_safetensors(args.model)
    if tensors and all(k.startswith("decoder.") for k in tensors):
        tensors = {k[len("decoder."):]: v for k, v in tensors.items()}
    if args.config_json:
        with open(args.config_json) as f:
            config = json.load(f)
    elif "config" in metadata:
        config = json.loads(metadata["config"])
    else:
        raise ValueError(f"{args.model} has no config in __metadata__; pass --config-json")
    if not isinstance(config, dict):
        raise ValueError("config JSON is not an object")
    c = R.check_config(config)
    for name, t in tensors.items():
        if t.dtype != np.float32:
            raise ValueError(f"tensor {name} is {t.dtype}, expected float32")
    weights = {k: torch.from_numpy(v) for k, v in tensors.items()}
    R.check_weights(weights, config)
    buffers = {"retnet_rel_pos.angle": R.angles(c["dk"]).repeat_interleave(2),
               "retnet_rel_pos.decay": R.decays(c["H"], c["decay"]).log()}
    for name, ours in buffers.items():
        if name in weights and harness.rel_error(ours, weights[name]) > 1e-6:
            raise ValueError(f"{name} disagrees with the config")
    try:
        tokens = [int(t) for t in args.tokens.split(",")] if args.tokens.strip() else []
    except ValueError:
        raise ValueError(f"--tokens {args.tokens!r}: expected comma-separated integers") from None
    if not tokens:
        raise ValueError("--tokens: empty prompt")
    mode = "recurrent" if args.mode == "scan" else args.mode
    out = R.forward(weights, config, torch.tensor([tokens]), mode, args.chunk)[0].numpy()
    fault = os.environ.get("FAKE_ENGINE_FAULT")
    if fault == "perturb":
        out = out + 1e-4 * np.abs(out).max()
    elif fault in ("nan", "inf"):
        out[len(out) // 2, 1] = float(fault)
    np.save(args.out, out.astype(np.float32))


def main():
    p = argparse.ArgumentParser(prog="fake_engine")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("logits")
    q.add_argument("-m", "--model", required=True)
    q.add_argument("--config-json")
    q.add_argument("--tokens", required=True)
    q.add_argument("--mode", choices=["parallel", "recurrent", "chunkwise", "scan"], default="parallel")
    q.add_argument("--chunk", type=int)
    q.add_argument("-o", "--out", required=True)
    args = p.parse_args()
    try:
        logits(args)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        if os.environ.get("FAKE_ENGINE_FAULT") == "abort":
            os.abort()
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
