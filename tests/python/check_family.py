#!/usr/bin/env python3
"""Checks every token mixer of the engine (the config's "mixer") against its float64 PyTorch
reference (family_reference.py; the reference's own checks are in check_reference.py).

With --retnet BINARY, per mixer: weights from `retnet init` (so the performer's random matrix is the
engine's; their names and shapes must be the reference's layout, and the file's metadata must name
the mixer), perturbed (norms away from ones, biases and decays away from their init, q/k gain
moderate) and written back with the engine's metadata; then
  - `retnet logits --mode M` for every form the mixer has = reference (relative 1e-5);
  - the forms it lacks are refused: non-zero exit, a message "no <form> form";
  - `retnet grad --form F` (parallel, and chunkwise where the mixer has it): loss = reference
    (relative 1e-5), every gradient tensor = torch autograd (relative 1e-4, worst printed), the
    performer's frozen feature matrix gets a zero gradient; chunkwise is refused where it is lacking.
A mixer the engine does not know or has not wired yet ("unknown mixer") is reported as SKIP.
Every comparison fails on NaN or Inf (harness.py).

Run with Debian's interpreter: /usr/bin/python3 tests/python/check_family.py --retnet build/retnet
Exits non-zero with the failing comparisons printed."""
import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_reference as fref  # noqa: E402
import harness  # noqa: E402

checks = harness.Checks()
engine = None  # harness.Engine of --retnet


# ---- the engine --------------------------------------------------------------------------------
def unknown_mixer(p):
    return p.returncode != 0 and ("unknown mixer" in p.stderr or "not built" in p.stderr)


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
        elif name.endswith("time_decay") or name.endswith("time_first"):
            new = t + 0.3 * r()
        elif t.dim() == 1:  # RMSNorm weights
            new = t * (1 + 0.2 * r())
        else:
            new = t * (1 + 0.3 * r()) + 0.3 * t.std() * r()
            if name.endswith("q_proj.weight") or name.endswith("k_proj.weight"):
                new = new * qk_gain
        out[name] = new.to(torch.float32).to(torch.float64)  # what the file holds
    return out


def make_model(cfg, seed, workdir, tag):
    """-> (weights as float64 of the file's float32 values, model path), or None (skipped or failed,
    as reported)."""
    cfg_path = os.path.join(workdir, f"{tag}_config.json")
    init_path = os.path.join(workdir, f"{tag}_init.safetensors")
    path = os.path.join(workdir, f"{tag}.safetensors")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    p = engine.run(["init", "--config", cfg_path, "--seed", seed, "-o", init_path])
    if unknown_mixer(p):
        checks.skip(f"{tag}: the engine does not know mixer {cfg['mixer']} or has not wired it yet")
        return None
    if p.returncode != 0:
        checks.fail(f"{tag}: retnet init: {harness.describe(p)}")
        return None
    weights, meta = harness.load_torch(init_path)
    expected = {k: tuple(s) for k, s in fref.param_shapes(cfg).items()}
    got = {k: tuple(v.shape) for k, v in weights.items()}
    if not checks.require(f"{tag}: the engine's tensors are the reference's layout", got == expected,
                          f"(engine only {sorted(set(got) - set(expected))}, reference only "
                          f"{sorted(set(expected) - set(got))}, shapes "
                          f"{[(k, got[k], expected[k]) for k in got if k in expected and got[k] != expected[k]]})"):
        return None
    if not checks.require(f"{tag}: `retnet init` writes config metadata naming mixer {cfg['mixer']}",
                          "config" in meta and json.loads(meta["config"]).get("mixer", "retention") == cfg["mixer"],
                          "" if "config" in meta else f"(metadata {meta})"):
        return None
    weights = perturb(weights, cfg["mixer"], seed)
    # same names, order and metadata as init's file
    harness.write_safetensors(path, {k: v.to(torch.float32) for k, v in weights.items()}, meta)
    return weights, path


def logits(model, tokens, form, chunk, out):
    if os.path.exists(out):
        os.remove(out)  # a failing engine must not pass on a stale file
    return engine.run(["logits", "--model", model, "--tokens", harness.tokens_arg(tokens), "--mode", form,
                       "--chunk", chunk, "--out", out])


def check_engine_logits(workdir):
    for i, mixer in enumerate(fref.MIXERS):
        cfg = fref.small_config(mixer, i)
        made = make_model(cfg, 300 + i, workdir, f"logits_{mixer}")
        if made is None:
            continue
        w, model = made
        tokens = torch.randint(0, cfg["vocab_size"], (1, 30), generator=torch.Generator().manual_seed(i))
        expected = fref.forward(w, cfg, tokens, "parallel")[0].numpy()
        out = os.path.join(workdir, "out.npy")
        probe = logits(model, tokens[0], "parallel", 8, out)
        if unknown_mixer(probe):
            checks.skip(f"{mixer}: the engine does not know this mixer or has not wired it yet "
                        f"({probe.stderr.strip()})")
            continue
        for form in ("parallel", "recurrent", "chunkwise", "scan"):
            for chunk in (7, 64) if form == "chunkwise" else (8,):
                label = f"engine {mixer} {form}" + (f" (chunk {chunk})" if form == "chunkwise" else "")
                p = logits(model, tokens[0], form, chunk, out)
                if form not in fref.FORMS[mixer]:
                    msg = f"no {form} form"
                    checks.require(f"{label}: refused", p.returncode != 0 and msg in p.stderr,
                                   f"(expected a message containing '{msg}'; {harness.describe(p)})")
                    break
                if p.returncode != 0 or not os.path.exists(out):
                    checks.fail(f"{label}: {harness.describe(p)}")
                    continue
                checks.close(f"{label} logits = reference", expected, harness.read_npy(out), 1e-5)


def check_engine_gradients(workdir):
    for i, mixer in enumerate(fref.MIXERS):
        cfg = fref.small_config(mixer, i + 1)
        made = make_model(cfg, 500 + i, workdir, f"grad_{mixer}")
        if made is None:
            continue
        w, model = made
        w = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        seq = torch.randint(0, cfg["vocab_size"], (26,), generator=torch.Generator().manual_seed(50 + i)).tolist()
        loss = fref.loss(w, cfg, seq)
        loss.backward()
        out = os.path.join(workdir, "grads.safetensors")
        forms = [("parallel", None)] + ([("chunkwise", 6)] if "chunkwise" in fref.FORMS[mixer] else [])
        for form, chunk in forms:
            label = f"engine {mixer} grad {form}"
            if os.path.exists(out):
                os.remove(out)
            p = engine.run(["grad", "--model", model, "--tokens", harness.tokens_arg(seq), "--form", form,
                            "--out", out] + (["--chunk", chunk] if chunk else []))
            if unknown_mixer(p):
                checks.skip(f"{mixer} gradients: the engine does not know this mixer or has not wired it yet "
                            f"({p.stderr.strip()})")
                break
            if p.returncode != 0 or not os.path.exists(out):
                checks.fail(f"{label}: {harness.describe(p)}")
                continue
            grads, meta = harness.load_torch(out)
            checks.error(f"{label}: loss = reference", harness.rel_error(loss.item(), float(meta.get("loss", "nan"))),
                         1e-5)
            errors = []
            for name, t in w.items():
                if name not in grads:
                    checks.fail(f"{label}: no gradient for {name}")
                elif name.endswith("feature_matrix"):
                    # FAVOR+'s random matrix is drawn at init and never trained: the engine's
                    # gradient for it is zero (the reference's, checked by finite differences, is not).
                    checks.close(f"{label}: {name} gradient is 0 (a frozen matrix)", torch.zeros_like(grads[name]),
                                 grads[name], 0.0)
                else:
                    errors.append((name, harness.rel_error(t.grad, grads[name])))
            worst_name, err = harness.worst(errors)
            checks.error(f"{label}: gradients = reference autograd (worst tensor {worst_name})", err, 1e-4)
        else:
            if "chunkwise" not in fref.FORMS[mixer]:
                p = engine.run(["grad", "--model", model, "--tokens", harness.tokens_arg(seq), "--form", "chunkwise",
                                "--out", out])
                checks.require(f"engine {mixer} grad chunkwise: refused",
                               p.returncode != 0 and "no chunkwise form" in p.stderr,
                               f"(expected a message containing 'no chunkwise form'; {harness.describe(p)})")


def main():
    global engine
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retnet", required=True, help="path of the retnet binary")
    ap.add_argument("--workdir", default=None, help="where to write models (default: a temporary dir)")
    ap.add_argument("--mixers", default=",".join(fref.MIXERS), help="comma-separated subset to check")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fref.MIXERS = tuple(m for m in fref.MIXERS if m in args.mixers.split(","))
    engine = harness.Engine([os.path.abspath(args.retnet)])
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        return checks.run(lambda: check_engine_logits(workdir), lambda: check_engine_gradients(workdir))


if __name__ == "__main__":
    sys.exit(main())
