#!/usr/bin/env python3
"""Self-checks of the PyTorch references (retnet_ref.py, family_reference.py), without the engine.

    /usr/bin/python3 tests/python/check_reference.py [--mixers retention,attention,...]

RetNet (retnet_ref.py):
 (a) the three forms agree (float64: rel 1e-10; float32 against float64: rel 1e-5) at eps 0 and
     1e-6, for several shapes (1, 2 and 4 heads, dk 2, sqrt embedding scale, the paper's decay) and
     chunk sizes that divide T and that don't, on torchscale's init and on scaled weights where the
     score normalisation c_n is active on some rows and not on others; batch rows are independent;
     dropping c_n changes the logits (so the checks would notice a form that skips it).
 (b) the parallel form equals a literal loop over the definition in docs/numerics.md.
 (c) the official torchscale outputs in tests/data/torchscale-small: tensor names, the
     retnet_rel_pos buffers against our angles and decays, and every form (float64 and float32,
     chunk 32 and 20) against every official file (rel 1e-5).
 (d) autograd of the loss against central finite differences (float64, rel 1e-6).
The family (family_reference.py):
 (e) per mixer, the recurrent form equals the parallel one (retention: also chunkwise); aft with a
     constant bias and rwkv with w = u = 0 both equal aft-simple; autograd = finite differences.
Every comparison fails on NaN or Inf (harness.py). Exit code 0 when every check passes."""
import argparse
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import family_reference as fref  # noqa: E402
import harness  # noqa: E402
import retnet_ref as R  # noqa: E402

DATA = os.path.join(HERE, "..", "data", "torchscale-small")
SCALED = dict(qk_gain=6.0, v_gain=0.03, norm_noise=0.2)  # c_n active on some rows, not all
checks = harness.Checks()


def retention_by_definition(q, k, v, gamma):
    """Literal loops over the parallel definition in docs/numerics.md; q, k, v: [T, d] of one head."""
    T = q.shape[0]
    out = torch.zeros(T, v.shape[1], dtype=torch.float64)
    for n in range(T):
        S = sum(gamma ** i for i in range(n + 1))
        R_n = [float(q[n] @ k[m]) * gamma ** (n - m) / S ** 0.5 for m in range(n + 1)]
        c = max(abs(sum(R_n)), 1.0)
        out[n] = sum(R_n[m] * v[m] for m in range(n + 1)) / c
    return out


def without_c_n(A, r, S):
    """retnet_ref._normalise with c_n = 1, to show that the checks would notice a form skipping c_n."""
    root = S.sqrt().to(A.dtype)
    return A / root[..., None], r.abs() / root


# name, config (eps set per run), [(B, T, chunk sizes)]
SHAPES = [
    ("H4 d32 v48 gelu", R.make_config(32, 48, 4, 40, 2, 50, 0.0, "gelu"), [(2, 37, [1, 5, 16, 37, 64]), (1, 32, [8, 5])]),
    ("H1 d16 v16 swish sqrt-embed", R.make_config(16, 16, 1, 24, 1, 30, 0.0, "swish", no_scale=False), [(2, 23, [4, 7])]),
    ("H2 d16 v24 swish", R.make_config(16, 24, 2, 40, 2, 50, 0.0, "swish"), [(2, 37, [5, 37, 64])]),
    ("H4 dk2 dv3 gelu", R.make_config(8, 12, 4, 16, 2, 20, 0.0, "gelu"), [(1, 19, [3, 19])]),
    ("H4 d32 v48 swish paper-decay", R.make_config(32, 48, 4, 40, 2, 50, 0.0, "swish", decay="paper"), [(2, 29, [6, 29])]),
]


def check_forms():
    print("(a) RetNet: the forms agree")
    g = torch.Generator().manual_seed(0)
    for name, base, shapes in SHAPES:
        for eps in (0.0, 1e-6):
            cfg = dict(base, layernorm_eps=eps)
            for init, kw in [("init", {}), ("scaled", SCALED)]:
                W64 = R.init_weights(cfg, seed=len(name) + int(eps * 1e6), dtype=torch.float64, **kw)
                W32 = R.cast(W64, torch.float32)
                for B, T, chunks in shapes:
                    tokens = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
                    tag = f"{name} eps {eps:g} {init} B{B} T{T}"
                    stats = []
                    ref = R.forward(W64, cfg, tokens, "parallel", stats=stats)
                    runs = [("recurrent", None)] + [("chunkwise", c) for c in chunks]
                    for mode, c in runs:
                        checks.close(f"{tag} f64 {mode}{c or ''} vs parallel", ref, R.forward(W64, cfg, tokens, mode, c), 1e-10)
                    for mode, c in [("parallel", None)] + runs:
                        checks.close(f"{tag} f32 {mode}{c or ''} vs f64", ref, R.forward(W32, cfg, tokens, mode, c), 1e-5)
                    if B > 1:
                        checks.close(f"{tag} f64 batch row 1 alone", ref[1:], R.forward(W64, cfg, tokens[1:], "parallel"), 1e-12)
                    if init == "scaled":
                        ratio = torch.cat([s.flatten() for s in stats])
                        above = (ratio > 1).double().mean().item()
                        checks.require(f"{tag} c_n active on some rows, not all", 0.05 < above < 0.95,
                                       f"(|r|/sqrt(S) > 1 on {above:.0%} of rows, max {ratio.max():.2f})")
                        if eps > 0:
                            saved, R._normalise = R._normalise, without_c_n
                            try:
                                e = harness.rel_error(ref, R.forward(W64, cfg, tokens, "parallel"))
                            finally:
                                R._normalise = saved
                            checks.require(f"{tag} dropping c_n changes logits", math.isfinite(e) and e > 1e-3,
                                           f"(rel {e:.2e})")


def check_definition():
    print("(b) RetNet: parallel form = literal definition")
    g = torch.Generator().manual_seed(1)
    for H, T in [(3, 9), (1, 6)]:
        q, k, v = (torch.randn(1, H, T, n, generator=g, dtype=torch.float64) * s for n, s in [(4, 1.2), (4, 1.2), (5, 1.0)])
        gamma = R.decays(H)
        O, ratio = R.retention_parallel(q, k, v, gamma)
        for h in range(H):
            checks.close(f"H{H} T{T} head {h} (c_n active on {int((ratio[0, h] > 1).sum())}/{T} rows)",
                         retention_by_definition(q[0, h], k[0, h], v[0, h], gamma[h].item()), O[0, h], 1e-12)


def check_torchscale():
    print("(c) RetNet: official torchscale outputs")
    with open(os.path.join(DATA, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(DATA, "tokens.txt")) as f:
        tokens = torch.tensor([[int(t) for t in f.read().strip().split(",")]])
    tensors, _ = harness.read_safetensors(os.path.join(DATA, "model.safetensors"))
    c = R.check_config(cfg)
    expected = set(R.weight_shapes(cfg)) | {"retnet_rel_pos.angle", "retnet_rel_pos.decay"}
    checks.require("tensor names are torchscale's", set(tensors) == expected,
                   f"(extra {sorted(set(tensors) - expected)}, missing {sorted(expected - set(tensors))})")
    # torchscale stores each angle twice (one per element of its pair) and the decay as log(gamma).
    checks.close("retnet_rel_pos.angle = our angles", tensors["retnet_rel_pos.angle"],
                 R.angles(c["dk"]).repeat_interleave(2), 1e-6)
    checks.close("retnet_rel_pos.decay = log(our gammas)", tensors["retnet_rel_pos.decay"], R.decays(c["H"]).log(), 1e-6)
    refs = {m: harness.read_npy(os.path.join(DATA, f"ref_{m}.npy")) for m in R.FORMS}
    W = {k: torch.from_numpy(v) for k, v in tensors.items()}
    for dtype in (torch.float64, torch.float32):
        Wd = R.cast(W, dtype)
        for mode, chunk in [("parallel", None), ("recurrent", None), ("chunkwise", 32), ("chunkwise", 20)]:
            ours = R.forward(Wd, cfg, tokens, mode, chunk)[0]
            for ref_mode, ref in refs.items():
                checks.close(f"{str(dtype)[6:]} {mode}{chunk or ''} vs torchscale {ref_mode}", ref, ours, 1e-5)


def check_gradients():
    print("(d) RetNet: autograd = finite differences")
    for i, cfg in enumerate([R.make_config(16, 24, 2, 40, 2, 50, 0.0, "swish"),
                             R.make_config(32, 48, 4, 40, 2, 50, 1e-6, "gelu")]):
        W = {k: v.requires_grad_(True) for k, v in R.init_weights(cfg, seed=200 + i, **SCALED).items()}
        seq = torch.randint(0, cfg["vocab_size"], (30,), generator=torch.Generator().manual_seed(i)).tolist()
        R.loss(W, cfg, seq).backward()
        name, err = harness.finite_difference_error(lambda: R.loss(W, cfg, seq), W)
        checks.error(f"case {i} (H{cfg['decoder_retention_heads']}, eps {cfg['layernorm_eps']:g}), worst {name}", err, 1e-6)


def check_family(mixers):
    print("(e) the family: the forms agree, cross-mixer identities, autograd = finite differences")
    for i, mixer in enumerate(fref.MIXERS):
        if mixer not in mixers:
            continue
        cfg = fref.small_config(mixer, i)
        w = fref.init_weights(cfg, seed=10 + i, qk_gain=3.0)
        tokens = torch.randint(0, 50, (2, 29), generator=torch.Generator().manual_seed(i))
        p = fref.forward(w, cfg, tokens, "parallel")
        checks.close(f"{mixer}: recurrent = parallel", p, fref.forward(w, cfg, tokens, "recurrent"), 1e-10)
        if mixer == "retention":
            checks.close("retention: chunkwise 6 = parallel", p, fref.forward(w, cfg, tokens, "chunkwise", 6), 1e-10)
    # aft with a constant bias, and rwkv with w = u = 0, are aft-simple.
    tokens = torch.randint(0, 50, (1, 25), generator=torch.Generator().manual_seed(5))
    simple = fref.small_config("aft-simple")
    w = fref.init_weights(simple, seed=3)
    base = fref.forward(w, simple, tokens)
    for other in ("aft", "rwkv"):
        if other not in mixers:
            continue
        cfg = fref.small_config(other)
        w2 = {name.replace(".aft_simple", "." + fref.SCOPES[other]): t for name, t in w.items()}
        for l in range(cfg["decoder_layers"]):
            n = fref.layer_names(cfg, l)
            if other == "aft":
                w2[n["pos_bias"]] = torch.full((cfg["aft_max_distance"],), 0.7, dtype=torch.float64)
            else:
                w2[n["time_decay"]] = torch.full((24,), -math.inf, dtype=torch.float64)  # w = 0
                w2[n["time_first"]] = torch.zeros(24, dtype=torch.float64)
        for mode in ("parallel", "recurrent"):
            checks.close(f"{other} (constant bias / w = u = 0) {mode} = aft-simple", base,
                         fref.forward(w2, cfg, tokens, mode), 1e-12)
    for i, mixer in enumerate(fref.MIXERS):
        if mixer not in mixers:
            continue
        cfg = fref.small_config(mixer, i)
        w = {k: v.requires_grad_(True) for k, v in fref.init_weights(cfg, seed=40 + i, qk_gain=2.0).items()}
        seq = torch.randint(0, 50, (20,), generator=torch.Generator().manual_seed(i)).tolist()
        fref.loss(w, cfg, seq).backward()
        name, err = harness.finite_difference_error(lambda: fref.loss(w, cfg, seq), w, seed=7 + i)
        checks.error(f"{mixer}: autograd = finite differences (worst {name})", err, 1e-6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mixers", default=",".join(fref.MIXERS), help="family mixers to check (comma-separated)")
    args = ap.parse_args()
    torch.set_num_threads(min(4, torch.get_num_threads()))
    return checks.run(check_forms, check_definition, check_torchscale, check_gradients,
                      lambda: check_family(args.mixers.split(",")))


if __name__ == "__main__":
    sys.exit(main())
