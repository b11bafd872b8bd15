#!/usr/bin/env python3
"""Checks every token mixer of the engine (the config's "mixer") against the independent float64
PyTorch reference in family_reference.py.

1. The reference checks itself: its recurrent (token by token) form equals its parallel one
   (relative 1e-10) for every mixer; rwkv with w = u = 0 and aft with zero biases both equal
   aft-simple; retention's chunkwise form equals its parallel one.
2. The reference's autograd equals central finite differences at a few coordinates of every tensor.
3. With --retnet BINARY, per mixer: weights from `retnet init` (so the performer's random matrix is
   the engine's), perturbed (norms away from ones, biases and decays away from their init, q/k gain
   moderate) and written back with the engine's metadata; then
     - `retnet logits --mode M` for every form the mixer has = reference (relative 1e-5);
     - the forms it lacks are refused: non-zero exit, a message "no <form> form";
     - `retnet grad --form F` (parallel, and chunkwise where the mixer has it): loss = reference
       (relative 1e-5), every gradient tensor = torch autograd (relative 1e-4, worst printed).
   A mixer the engine does not know or has not wired yet ("unknown mixer") is reported as SKIP.

Run with Debian's interpreter: /usr/bin/python3 tests/python/check_family.py --retnet build/retnet
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
import family_reference as fref  # noqa: E402
import safetensors_io  # noqa: E402

failures = []
skipped = []


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def expect(name, err, tol):
    ok = math.isfinite(err) and err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: relative max error {err:.3g} (tolerance {tol:g})")
    if not ok:
        failures.append(name)


def fail(msg):
    failures.append(msg)
    print("FAIL", msg)


def config(mixer, variant=0):
    """Small configs; aft_max_distance < T so the clamp of the bias index matters."""
    return {"decoder_embed_dim": 16, "decoder_value_embed_dim": 24, "decoder_retention_heads": 2,
            "decoder_ffn_embed_dim": 20, "decoder_layers": 2, "vocab_size": 50,
            "layernorm_eps": 1e-6 if variant % 2 == 0 else 0.0,
            "activation_fn": "swish" if variant % 2 == 0 else "gelu",
            "no_scale_embedding": variant % 3 != 1, "recurrent_chunk_size": 16,
            "mixer": mixer, "performer_features": 12, "aft_max_distance": 7}


# ---- 1. the reference against itself ------------------------------------------------------------
def check_reference_forms():
    for i, mixer in enumerate(fref.MIXERS):
        cfg = config(mixer, i)
        w = fref.init_weights(cfg, seed=10 + i, qk_gain=3.0)
        tokens = torch.randint(0, 50, (2, 29), generator=torch.Generator().manual_seed(i))
        p = fref.forward(w, cfg, tokens, "parallel")
        expect(f"reference {mixer}: recurrent = parallel", rel(fref.forward(w, cfg, tokens, "recurrent"), p),
               1e-10)
        if mixer == "retention":
            expect("reference retention: chunkwise 6 = parallel",
                   rel(fref.forward(w, cfg, tokens, "chunkwise", 6), p), 1e-10)
    # Cross-mixer identities: aft with zero biases, and rwkv with w = u = 0, are aft-simple.
    tokens = torch.randint(0, 50, (1, 25), generator=torch.Generator().manual_seed(5))
    simple = config("aft-simple")
    w = fref.init_weights(simple, seed=3)
    base = fref.forward(w, simple, tokens)
    for other in ("aft", "rwkv"):
        cfg = config(other)
        w2 = {}
        for name, t in w.items():
            w2[name.replace(".aft_simple", "." + fref.SCOPES[other])] = t
        for l in range(cfg["decoder_layers"]):
            n = fref.layer_names(cfg, l)
            if other == "aft":
                w2[n["pos_bias"]] = torch.full((cfg["aft_max_distance"],), 0.7, dtype=torch.float64)
            else:
                w2[n["time_decay"]] = torch.full((24,), -math.inf, dtype=torch.float64)  # w = 0
                w2[n["time_first"]] = torch.zeros(24, dtype=torch.float64)
        for mode in ("parallel", "recurrent"):
            expect(f"reference {other} (constant bias / w = u = 0) {mode} = aft-simple",
                   rel(fref.forward(w2, cfg, tokens, mode), base), 1e-12)


def check_reference_gradients():
    """Autograd of the float64 reference against central finite differences."""
    for i, mixer in enumerate(fref.MIXERS):
        cfg = config(mixer, i)
        w = {k: v.requires_grad_(True) for k, v in fref.init_weights(cfg, seed=40 + i, qk_gain=2.0).items()}
        seq = torch.randint(0, 50, (20,), generator=torch.Generator().manual_seed(i)).tolist()
        fref.loss(w, cfg, seq).backward()
        gen = torch.Generator().manual_seed(7 + i)
        worst, worst_name = 0.0, ""
        with torch.no_grad():
            for name, t in w.items():
                scale = max(t.grad.abs().max().item(), 1e-30)
                for _ in range(2):
                    j = int(torch.randint(0, t.numel(), (1,), generator=gen))
                    x0 = t.view(-1)[j].item()
                    h = 1e-6
                    t.view(-1)[j] = x0 + h
                    lp = fref.loss(w, cfg, seq).item()
                    t.view(-1)[j] = x0 - h
                    lm = fref.loss(w, cfg, seq).item()
                    t.view(-1)[j] = x0
                    e = abs((lp - lm) / (2 * h) - t.grad.view(-1)[j].item()) / scale
                    if e > worst:
                        worst, worst_name = e, name
        expect(f"reference {mixer}: autograd = finite differences (worst {worst_name or '-'})", worst, 1e-6)


# ---- 3. the engine --------------------------------------------------------------------------------
def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def unknown_mixer(r):
    return "unknown mixer" in r.stderr or "not built" in r.stderr


def perturb(weights, mixer, seed):
    """Moves `retnet init`'s weights to generic ones: norms not all ones, projections with
    per-entry noise, q/k with a moderate gain, biases and decays away from their init."""
    g = torch.Generator().manual_seed(seed)
    qk_gain = {"attention": 3.0, "linear": 2.0, "performer": 2.0}.get(mixer, 2.5)
    out = {}
    for name, t in weights.items():
        r = lambda: torch.randn(t.shape, generator=g, dtype=torch.float64)  # noqa: E731
        if name.endswith("feature_matrix"):
            new = t.clone()  # the engine's FAVOR+ matrix, as drawn at init
        elif name.endswith("pos_bias"):
            new = 0.8 * r()
        elif name.endswith("time_decay"):
            new = t + 0.3 * r()
        elif name.endswith("time_first"):
            new = t + 0.3 * r()
        elif t.dim() == 1:  # RMSNorm weights
            new = t * (1 + 0.2 * r())
        else:
            new = t * (1 + 0.3 * r()) + 0.3 * t.std() * r()
            if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                new = new * qk_gain
        out[name] = new.to(torch.float32).to(torch.float64)  # what the file holds
    return out


def make_model(binary, cfg, seed, workdir, tag):
    """-> (weights as float64 of the file's float32 values, model path) or None (SKIP)."""
    cfg_path = os.path.join(workdir, f"{tag}_config.json")
    init_path = os.path.join(workdir, f"{tag}_init.safetensors")
    path = os.path.join(workdir, f"{tag}.safetensors")
    json.dump(cfg, open(cfg_path, "w"))
    r = run([binary, "init", "--config", cfg_path, "--seed", str(seed), "-o", init_path])
    if r.returncode != 0:
        if unknown_mixer(r):
            return None
        fail(f"{tag}: retnet init: exit {r.returncode}: {r.stderr.strip()}")
        return False
    weights, meta = safetensors_io.load(init_path)
    expected = fref.param_shapes(cfg)
    got = {k: tuple(v.shape) for k, v in weights.items()}
    if got != {k: tuple(s) for k, s in expected.items()}:
        fail(f"{tag}: the engine's tensors differ from the reference's layout: "
             f"engine only {sorted(set(got) - set(expected))}, reference only "
             f"{sorted(set(expected) - set(got))}, shapes "
             f"{[(k, got[k], expected[k]) for k in got if k in expected and got[k] != tuple(expected[k])]}")
        return False
    if "config" not in meta or json.loads(meta["config"]).get("mixer", "retention") != cfg["mixer"]:
        fail(f"{tag}: `retnet init` wrote no config metadata naming mixer {cfg['mixer']}: {meta}")
        return False
    weights = perturb(weights, cfg["mixer"], seed)
    safetensors_io.save(path, weights, meta)  # same names, order and metadata as init's file
    return weights, path


def check_engine_logits(binary, workdir):
    for i, mixer in enumerate(fref.MIXERS):
        cfg = config(mixer, i)
        made = make_model(binary, cfg, 300 + i, workdir, f"logits_{mixer}")
        if made is None:
            skipped.append(mixer)
            print(f"SKIP {mixer}: the engine does not know this mixer or has not wired it yet")
            continue
        if made is False:
            continue
        w, model = made
        T = 30
        tokens = torch.randint(0, cfg["vocab_size"], (1, T), generator=torch.Generator().manual_seed(i))
        expected = fref.forward(w, cfg, tokens, "parallel")[0].numpy()
        tok = ",".join(map(str, tokens[0].tolist()))
        out = os.path.join(workdir, "out.npy")
        probe = run([binary, "logits", "--model", model, "--tokens", tok, "--mode", "parallel",
                     "--out", out])
        if probe.returncode != 0 and unknown_mixer(probe):
            skipped.append(mixer)
            print(f"SKIP {mixer}: the engine does not know this mixer or has not wired it yet "
                  f"({probe.stderr.strip()})")
            continue
        for form in ("parallel", "recurrent", "chunkwise", "scan"):
            chunks = (7, 64) if form == "chunkwise" else (8,)
            for chunk in chunks:
                r = run([binary, "logits", "--model", model, "--tokens", tok, "--mode", form,
                         "--chunk", str(chunk), "--out", out])
                label = f"engine {mixer} {form}" + (f" (chunk {chunk})" if form == "chunkwise" else "")
                if form not in fref.FORMS[mixer]:
                    if form == "scan" and mixer == "retention":
                        continue
                    msg = f"no {form} form"
                    if r.returncode != 0 and msg in r.stderr:
                        print(f"ok   {label}: refused ({r.stderr.strip().splitlines()[-1]})")
                    else:
                        fail(f"{label}: expected a refusal containing '{msg}', got exit "
                             f"{r.returncode}: {r.stderr.strip()}")
                    break
                if r.returncode != 0 and unknown_mixer(r):
                    break
                if r.returncode != 0:
                    fail(f"{label}: exit {r.returncode}: {r.stderr.strip()}")
                    continue
                expect(f"{label} logits = reference", rel(np.load(out), expected), 1e-5)


def check_engine_gradients(binary, workdir):
    for i, mixer in enumerate(fref.MIXERS):
        cfg = config(mixer, i + 1)
        made = make_model(binary, cfg, 500 + i, workdir, f"grad_{mixer}")
        if made is None:
            if mixer not in skipped:
                skipped.append(mixer)
            print(f"SKIP {mixer} gradients: the engine does not know this mixer or has not wired it yet")
            continue
        if made is False:
            continue
        w, model = made
        w = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        seq = torch.randint(0, cfg["vocab_size"], (26,), generator=torch.Generator().manual_seed(50 + i)).tolist()
        loss = fref.loss(w, cfg, seq)
        loss.backward()
        forms = [("parallel", 0)]
        if "chunkwise" in fref.FORMS[mixer]:
            forms += [("chunkwise", 6)]
        for form, chunk in forms:
            out = os.path.join(workdir, "grads.safetensors")
            cmd = [binary, "grad", "--model", model, "--tokens", ",".join(map(str, seq)),
                   "--form", form, "--out", out]
            if chunk:
                cmd += ["--chunk", str(chunk)]
            r = run(cmd)
            if r.returncode != 0 and unknown_mixer(r):
                if mixer not in skipped:
                    skipped.append(mixer)
                print(f"SKIP {mixer} gradients: the engine does not know this mixer or has not "
                      f"wired it yet ({r.stderr.strip()})")
                break
            if r.returncode != 0:
                fail(f"engine {mixer} grad {form}: exit {r.returncode}: {r.stderr.strip()}")
                continue
            grads, meta = safetensors_io.load(out)
            expect(f"engine {mixer} grad {form}: loss = reference",
                   abs(float(meta["loss"]) - loss.item()) / loss.item(), 1e-5)
            worst, worst_name = 0.0, "-"
            for name, t in w.items():
                if name not in grads:
                    fail(f"engine {mixer} grad {form}: no gradient for {name}")
                    continue
                if name.endswith("feature_matrix"):
                    # FAVOR+'s random matrix is drawn at init and never trained: the engine's
                    # gradient for it is zero (the reference's, checked by finite differences, is not).
                    z = float(grads[name].abs().max())
                    if z != 0.0:
                        fail(f"engine {mixer} grad {form}: {name} has gradient {z:.3g}, expected 0 "
                             "(a frozen matrix)")
                    continue
                e = rel(grads[name].numpy(), t.grad.numpy())
                if e > worst or not math.isfinite(e):
                    worst, worst_name = e, name
            expect(f"engine {mixer} grad {form}: gradients = reference autograd (worst tensor "
                   f"{worst_name})", worst, 1e-4)
        if "chunkwise" not in fref.FORMS[mixer] and mixer not in skipped:
            r = run([binary, "grad", "--model", model, "--tokens", ",".join(map(str, seq)),
                     "--form", "chunkwise", "--out", os.path.join(workdir, "grads.safetensors")])
            if r.returncode != 0 and "no chunkwise form" in r.stderr:
                print(f"ok   engine {mixer} grad chunkwise: refused ({r.stderr.strip().splitlines()[-1]})")
            else:
                fail(f"engine {mixer} grad chunkwise: expected a refusal containing 'no chunkwise form', "
                     f"got exit {r.returncode}: {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retnet", help="path of the retnet binary; without it only the reference is checked")
    ap.add_argument("--workdir", default=None, help="where to write models (default: a temporary dir)")
    ap.add_argument("--mixers", default=",".join(fref.MIXERS), help="comma-separated subset to check")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fref.MIXERS = tuple(m for m in fref.MIXERS if m in args.mixers.split(","))
    check_reference_forms()
    check_reference_gradients()
    if args.retnet:
        with tempfile.TemporaryDirectory() as tmp:
            workdir = args.workdir or tmp
            os.makedirs(workdir, exist_ok=True)
            check_engine_logits(args.retnet, workdir)
            check_engine_gradients(args.retnet, workdir)
    if skipped:
        print(f"SKIP: the engine has not wired {', '.join(skipped)}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
