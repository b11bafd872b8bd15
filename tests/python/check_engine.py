#!/usr/bin/env python3
"""Checks the engine against the independent PyTorch reference (torch_reference.py).

1. The reference's parallel, recurrent and chunkwise forms agree with each other (float64).
2. The reference reproduces the official torchscale logits in tests/data/torchscale-small.
3. With --retnet BINARY: for random weights exported under torchscale's names, every form of the
   engine (`retnet logits`) equals the float64 reference (relative 1e-5), at eps 0 and 1e-6.

Run with Debian's interpreter: /usr/bin/python3 tests/python/check_engine.py --retnet build/retnet
Exits non-zero with the failing comparisons printed."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
import torch_reference as ref  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "torchscale-small")
failures = []


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def expect(name, err, tol):
    ok = math.isfinite(err) and err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative max error {err:.3g} (tolerance {tol:g})")
    if not ok:
        failures.append(name)


def config(heads, eps, act="swish", scale_embedding=False, layers=2):
    return {"decoder_embed_dim": 8 * heads if heads > 1 else 16, "decoder_value_embed_dim": 12 * heads,
            "decoder_retention_heads": heads, "decoder_ffn_embed_dim": 40, "decoder_layers": layers,
            "vocab_size": 50, "layernorm_eps": eps, "activation_fn": act,
            "no_scale_embedding": not scale_embedding}


def check_reference_forms():
    for heads, eps in [(1, 0.0), (4, 1e-6), (2, 1e-6)]:
        cfg = config(heads, eps)
        w = ref.init_weights(cfg, seed=heads, qk_gain=3.0)
        tokens = torch.randint(0, 50, (2, 37), generator=torch.Generator().manual_seed(1))
        p = ref.forward(w, cfg, tokens, "parallel")
        expect(f"reference recurrent = parallel (H={heads}, eps={eps})",
               rel(ref.forward(w, cfg, tokens, "recurrent"), p), 1e-10)
        for chunk in (5, 37, 64):
            expect(f"reference chunkwise {chunk} = parallel (H={heads}, eps={eps})",
                   rel(ref.forward(w, cfg, tokens, "chunkwise", chunk), p), 1e-10)


def check_official_torchscale():
    weights, _ = safetensors_io.load(os.path.join(DATA, "model.safetensors"))
    cfg = json.load(open(os.path.join(DATA, "config.json")))
    tokens = torch.tensor([[int(t) for t in open(os.path.join(DATA, "tokens.txt")).read().split(",")]])
    _, _, H, dk, _ = ref.dims(cfg)
    half = dk // 2
    theta = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / (half - 1))
    expect("torchscale retnet_rel_pos.angle = our theta grid",
           rel(weights["retnet_rel_pos.angle"], theta.repeat_interleave(2)), 1e-6)
    expect("torchscale retnet_rel_pos.decay = log(1 - 2^(-5-h))",
           rel(weights["retnet_rel_pos.decay"], ref.gammas(cfg).log()), 1e-6)
    for mode in ("parallel", "recurrent", "chunkwise"):
        logits = ref.forward(weights, cfg, tokens, mode, chunk=32)[0].numpy()
        for official in ("parallel", "recurrent", "chunkwise"):
            expect(f"reference {mode} = official torchscale {official}",
                   rel(logits, np.load(os.path.join(DATA, f"ref_{official}.npy"))), 1e-5)


def run_engine(binary, model, cfg_path, tokens, mode, chunk, out):
    cmd = [binary, "logits", "--model", model, "--config-json", cfg_path, "--tokens",
           ",".join(str(t) for t in tokens), "--mode", mode, "--chunk", str(chunk), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(f"engine {mode}: exit {r.returncode}: {r.stderr.strip()}")
        print("FAIL", failures[-1])
        return None
    return np.load(out)


def check_engine(binary, workdir):
    os.makedirs(workdir, exist_ok=True)
    cases = [
        (config(1, 0.0), 1.0, "plain"),
        (config(4, 1e-6), 6.0, "plain"),
        (config(4, 0.0, act="gelu", scale_embedding=True), 6.0, "rel_pos buffers"),
        (config(2, 1e-6, act="gelu", layers=3), 6.0, "decoder. prefix"),
    ]
    for i, (cfg, gain, variant) in enumerate(cases):
        w = ref.init_weights(cfg, seed=100 + i, dtype=torch.float64, qk_gain=gain)
        w = {k: v.to(torch.float32).to(torch.float64) for k, v in w.items()}  # what the file holds
        export = dict(w)
        if variant == "rel_pos buffers":
            _, _, H, dk, _ = ref.dims(cfg)
            half = dk // 2
            theta = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / (half - 1))
            export["retnet_rel_pos.angle"] = theta.repeat_interleave(2)
            export["retnet_rel_pos.decay"] = ref.gammas(cfg).log()
        if variant == "decoder. prefix":
            export = {"decoder." + k: v for k, v in export.items()}
        model = os.path.join(workdir, f"model{i}.safetensors")
        cfg_path = os.path.join(workdir, f"config{i}.json")
        safetensors_io.save(model, export)
        json.dump(cfg, open(cfg_path, "w"))
        T = 45
        tokens = torch.randint(0, cfg["vocab_size"], (1, T), generator=torch.Generator().manual_seed(i))
        ref.clamp_stats[:] = [0, 0]
        expected = ref.forward(w, cfg, tokens, "parallel")[0].numpy()
        clamped, rows = ref.clamp_stats
        if gain > 1 and not 0 < clamped < rows:
            failures.append(f"case {i}: the score normalisation clamps {clamped} of {rows} rows; "
                            "the test data must take both branches")
        print(f"     case {i}: score normalisation clamps {clamped} of {rows} rows")
        for mode in ("parallel", "recurrent", "chunkwise", "scan"):
            got = run_engine(binary, model, cfg_path, tokens[0].tolist(), mode, 8,
                             os.path.join(workdir, "out.npy"))
            if got is not None:
                expect(f"engine {mode} = reference (H={cfg['decoder_retention_heads']}, "
                       f"eps={cfg['layernorm_eps']}, {cfg['activation_fn']}, {variant})",
                       rel(got, expected), 1e-5)


def reference_loss(w, cfg, seq):
    """Mean next-token cross-entropy of the float64 reference."""
    tokens = torch.tensor([seq[:-1]])
    targets = torch.tensor(seq[1:])
    logits = ref.forward(w, cfg, tokens, "parallel")[0]
    return torch.nn.functional.cross_entropy(logits, targets)


def check_gradients(binary, workdir):
    """The engine's backward pass (`retnet grad`, parallel and chunkwise) against autograd of the
    float64 reference; the reference's autograd itself against central finite differences."""
    os.makedirs(workdir, exist_ok=True)
    for i, (cfg, gain) in enumerate([(config(2, 0.0), 6.0), (config(4, 1e-6, act="gelu"), 6.0)]):
        w = ref.init_weights(cfg, seed=200 + i, dtype=torch.float64, qk_gain=gain)
        w = {k: v.to(torch.float32).to(torch.float64).requires_grad_(True) for k, v in w.items()}
        seq = torch.randint(0, cfg["vocab_size"], (30,), generator=torch.Generator().manual_seed(i)).tolist()
        loss = reference_loss(w, cfg, seq)
        loss.backward()
        # Finite differences of the reference at a few coordinates of every tensor.
        gen = torch.Generator().manual_seed(7)
        worst = 0.0
        with torch.no_grad():
            for name, t in w.items():
                for _ in range(2):
                    j = int(torch.randint(0, t.numel(), (1,), generator=gen))
                    x0 = t.view(-1)[j].item()
                    h = 1e-6
                    t.view(-1)[j] = x0 + h
                    lp = reference_loss(w, cfg, seq).item()
                    t.view(-1)[j] = x0 - h
                    lm = reference_loss(w, cfg, seq).item()
                    t.view(-1)[j] = x0
                    fd = (lp - lm) / (2 * h)
                    g = t.grad.view(-1)[j].item()
                    scale = t.grad.abs().max().item()
                    worst = max(worst, abs(fd - g) / max(scale, 1e-30))
        expect(f"reference autograd = finite differences (case {i}, float64)", worst, 1e-6)
        model = os.path.join(workdir, f"grad_model{i}.safetensors")
        cfg_path = os.path.join(workdir, f"grad_config{i}.json")
        safetensors_io.save(model, {k: v.detach() for k, v in w.items()})
        json.dump(cfg, open(cfg_path, "w"))
        for form, chunk in (("parallel", 0), ("chunkwise", 7)):
            out = os.path.join(workdir, "grads.safetensors")
            cmd = [binary, "grad", "--model", model, "--config-json", cfg_path, "--tokens",
                   ",".join(map(str, seq)), "--form", form, "--out", out]
            if chunk:
                cmd += ["--chunk", str(chunk)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                failures.append(f"engine grad {form}: {r.stderr.strip()}")
                print("FAIL", failures[-1])
                continue
            grads, meta = safetensors_io.load(out)
            expect(f"engine loss = reference loss ({form}, case {i})",
                   abs(float(meta["loss"]) - loss.item()) / loss.item(), 1e-5)
            worst, worst_name = 0.0, ""
            for name, t in w.items():
                e = rel(grads[name].numpy(), t.grad.numpy())
                if e > worst:
                    worst, worst_name = e, name
            expect(f"engine gradients = reference autograd ({form}, case {i}, worst tensor "
                   f"{worst_name})", worst, 1e-4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retnet", help="path of the retnet binary; without it only the reference is checked")
    ap.add_argument("--workdir", default=None, help="where to write models (default: a temporary dir)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    check_reference_forms()
    check_official_torchscale()
    if args.retnet:
        with tempfile.TemporaryDirectory() as tmp:
            check_engine(args.retnet, args.workdir or tmp)
            check_gradients(args.retnet, args.workdir or tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
