"""Self-checks of the PyTorch reference (retnet_ref.py). Exit code 0 when every check passes.

    /usr/bin/python3 tests/python/test_reference_self.py

(a) the three forms agree (float64: rel 1e-10, float32 against float64: rel 1e-5) at eps 0 and 1e-6,
    for several shapes and chunk sizes that divide T and that don't, on weights where the score
    normalisation c_n is active on some rows and not on others; the parallel form equals a literal
    loop over the definition; batch rows are independent.
(b) the reference reproduces the official torchscale logits in tests/data/torchscale-small (rel 1e-5),
    and its angles and decays equal torchscale's buffers.
rel = max|a - b| / max|a|, a the reference side.
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retnet_ref as R  # noqa: E402
import st_io  # noqa: E402

DATA = os.path.join(HERE, "..", "data", "torchscale-small")
failures = []


def rel(ref, x):
    ref, x = torch.as_tensor(ref).double(), torch.as_tensor(x).double()
    return ((ref - x).abs().max() / ref.abs().max()).item()


def check(label, ref, x, tol):
    e = rel(ref, x)
    ok = e <= tol  # NaN compares False, so it fails
    print(f"  {'ok  ' if ok else 'FAIL'} rel {e:.3e} (tol {tol:.0e})  {label}")
    if not ok:
        ref, x = torch.as_tensor(ref).double(), torch.as_tensor(x).double()
        worst = (ref - x).abs().flatten().argsort(descending=True)[:5]
        for i in worst.tolist():
            idx = tuple(int(j) for j in np.unravel_index(i, tuple(ref.shape)))
            print(f"       at {idx}: expected {ref.flatten()[i].item():.8g}, got {x.flatten()[i].item():.8g}")
        failures.append(f"{label}: rel {e:.3e} > {tol:.0e}")


def require(label, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {label} {detail}")
    if not ok:
        failures.append(f"{label} {detail}")


def config(d, value_dim, H, ffn, layers, vocab, eps, act, no_scale=True):
    return dict(decoder_embed_dim=d, decoder_value_embed_dim=value_dim, decoder_retention_heads=H,
                decoder_ffn_embed_dim=ffn, decoder_layers=layers, vocab_size=vocab, layernorm_eps=eps,
                activation_fn=act, no_scale_embedding=no_scale)


def retention_by_definition(q, k, v, gamma):
    """Literal loops over ENGINEERING.md's parallel definition; q, k, v: [T, d] of one head."""
    T = q.shape[0]
    out = torch.zeros(T, v.shape[1], dtype=torch.float64)
    for n in range(T):
        S = sum(gamma ** i for i in range(n + 1))
        R_n = [float(q[n] @ k[m]) * gamma ** (n - m) / S ** 0.5 for m in range(n + 1)]
        c = max(abs(sum(R_n)), 1.0)
        out[n] = sum(R_n[m] * v[m] for m in range(n + 1)) / c
    return out


def without_c_n(A, r, S):
    """_normalise with c_n = 1, to show that the tests would notice a form that skips c_n."""
    root = S.sqrt().to(A.dtype)
    return A / root[..., None], r.abs() / root


def check_forms():
    print("(a) forms agree")
    g = torch.Generator().manual_seed(0)
    for name, base, shapes in [
        ("H4 d32 v48 gelu", config(32, 48, 4, 40, 2, 50, 0.0, "gelu"), [(2, 37, [1, 5, 16, 37, 64]), (1, 32, [8, 5])]),
        ("H1 d16 v16 swish sqrt-embed", config(16, 16, 1, 24, 1, 30, 0.0, "swish", no_scale=False), [(2, 23, [4, 7])]),
        ("H4 dk2 dv3 gelu", config(8, 12, 4, 16, 2, 20, 0.0, "gelu"), [(1, 19, [3, 19])]),
    ]:
        for eps in (0.0, 1e-6):
            cfg = dict(base, layernorm_eps=eps)
            # torchscale's init (c_n never active), and scaled weights where c_n is active on some rows.
            for init, kw in [("init", {}), ("scaled", dict(qk_gain=6.0, v_gain=0.03, norm_noise=0.2))]:
                W64 = R.init_weights(cfg, seed=len(name) + int(eps * 1e6), dtype=torch.float64, **kw)
                W32 = R.cast(W64, torch.float32)
                for B, T, chunks in shapes:
                    tokens = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
                    tag = f"{name} eps {eps:g} {init} B{B} T{T}"
                    stats = []
                    ref = R.forward(W64, cfg, tokens, "parallel", stats=stats)
                    runs = [("recurrent", None)] + [("chunkwise", c) for c in chunks]
                    for mode, c in runs:
                        check(f"{tag} f64 {mode}{c or ''} vs parallel", ref, R.forward(W64, cfg, tokens, mode, c), 1e-10)
                    for mode, c in [("parallel", None)] + runs:
                        check(f"{tag} f32 {mode}{c or ''} vs f64", ref, R.forward(W32, cfg, tokens, mode, c), 1e-5)
                    if B > 1:
                        check(f"{tag} f64 batch row 1 alone", ref[1:], R.forward(W64, cfg, tokens[1:], "parallel"), 1e-12)
                    if init == "scaled":
                        ratio = torch.cat([s.flatten() for s in stats])
                        above = (ratio > 1).double().mean().item()
                        require(f"{tag} c_n active on some rows, not all", 0.05 < above < 0.95,
                                f"(|r|/sqrt(S) > 1 on {above:.0%} of rows, max {ratio.max():.2f})")
                        if eps > 0:
                            saved, R._normalise = R._normalise, without_c_n
                            try:
                                e = rel(ref, R.forward(W64, cfg, tokens, "parallel"))
                            finally:
                                R._normalise = saved
                            require(f"{tag} dropping c_n changes logits", e > 1e-3, f"(rel {e:.2e})")

    print("(a') parallel form = literal definition")
    for H, T in [(3, 9), (1, 6)]:
        q, k, v = (torch.randn(1, H, T, n, generator=g, dtype=torch.float64) * s for n, s in [(4, 1.2), (4, 1.2), (5, 1.0)])
        gamma = R.decays(H)
        O, ratio = R.retention_parallel(q, k, v, gamma)
        for h in range(H):
            check(f"H{H} T{T} head {h} (c_n active on {int((ratio[0, h] > 1).sum())}/{T} rows)",
                  retention_by_definition(q[0, h], k[0, h], v[0, h], gamma[h].item()), O[0, h], 1e-12)


def check_torchscale():
    print("(b) official torchscale logits")
    with open(os.path.join(DATA, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(DATA, "tokens.txt")) as f:
        tokens = torch.tensor([[int(t) for t in f.read().strip().split(",")]])
    tensors, _ = st_io.read_safetensors(os.path.join(DATA, "model.safetensors"))
    c = R.check_config(cfg)
    expected = set(R.weight_shapes(cfg)) | {"retnet_rel_pos.angle", "retnet_rel_pos.decay"}
    require("tensor names are torchscale's", set(tensors) == expected,
            f"(extra {sorted(set(tensors) - expected)}, missing {sorted(expected - set(tensors))})")
    # torchscale stores each angle twice (one per element of its pair) and the decay as log(gamma).
    check("retnet_rel_pos.angle = our angles", tensors["retnet_rel_pos.angle"],
          R.angles(c["dk"]).repeat_interleave(2), 1e-6)
    check("retnet_rel_pos.decay = log(our gammas)", tensors["retnet_rel_pos.decay"], R.decays(c["H"]).log(), 1e-6)
    refs = {m: st_io.read_npy(os.path.join(DATA, f"ref_{m}.npy")) for m in R.FORMS}
    W = {k: torch.from_numpy(v) for k, v in tensors.items()}
    for dtype in (torch.float64, torch.float32):
        Wd = R.cast(W, dtype)
        for mode, chunk in [("parallel", None), ("recurrent", None), ("chunkwise", 32), ("chunkwise", 20)]:
            ours = R.forward(Wd, cfg, tokens, mode, chunk)[0]
            for ref_mode, ref in refs.items():
                check(f"{str(dtype)[6:]} {mode}{chunk or ''} vs torchscale {ref_mode}", torch.from_numpy(ref), ours, 1e-5)


def main():
    torch.set_num_threads(min(4, torch.get_num_threads()))
    try:
        check_forms()
        check_torchscale()
    except Exception as e:  # a crash is a failure too, reported like the others
        import traceback
        traceback.print_exc()
        failures.append(f"exception: {type(e).__name__}: {e}")
    if failures:
        print(f"\nFAILED: {len(failures)} check(s):")
        for f in failures:
            print("  " + f)
        return 1
    print("\nall reference self-checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
