#!/usr/bin/env python3
"""The engine's CLI on Hugging Face model directories (fla's RetNet layout and syncdoth's) against
fla_reference.py.

    /usr/bin/python3 tests/python/check_fla.py --retnet build/retnet [--workdir DIR] [--only SUBSTR]
    /usr/bin/python3 tests/python/check_fla.py --self-test [--workdir DIR]

The CLI contract assumed (see CONTRACT below):
    RETNET logits -m DIR --tokens 1,2,3 --mode MODE [--chunk N] -o out.npy
        -> exit 0 and a float32 .npy [T, vocab]; MODE in parallel, recurrent, chunkwise, scan
    RETNET generate -m DIR -p TEXT -n N --temperature 0 --ignore-eos --json [--chunk N]
        -> one JSON object on stdout with "text" (byte tokenizer: a directory without tokenizer
           files; the prompt's bytes are its token ids) and "generated_tokens"
    bad input -> exit code 1..127, a message on stderr naming the file or the config key

1. Logits. For each case of CASES (edit the list to enable or disable cases as the engine gains
   options) and each of its variants (F32 / BF16, one file / shards), writes the directory, reads the
   weights back from the files (BF16 values as stored) and computes float64 reference logits; every
   mode of the case must give them within relative 1e-5. Modes in `optional` may be refused (exit
   1..127 with a message: reported as SKIP) but must be right when they run.
2. Sharded = one file: the engine's logits of the sharded variant equal those of the single-file
   variant of the same dtype bit for bit.
3. Generation (cases with generate=True, vocab 256): greedy text equals the reference's greedy ids.
4. Bad input: BAD_INPUTS must be refused cleanly and name the file or key.
--self-test checks the reference (forms agree, literal definitions, equivalences between options,
fla's own naive_retention when its source is at hand), the file writer and loader, and runs the
harness on fake_fla_engine.py: it must pass, and must notice spoiled logits, a NaN and a refused mode.
Exit code 0 when everything passes."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fla_reference as FR  # noqa: E402
import harness  # noqa: E402
import hf_dirs as D  # noqa: E402
import retnet_ref as R  # noqa: E402

CONTRACT = __doc__.split("The CLI contract assumed (see CONTRACT below):\n")[1].split("\n1. Logits")[0]

TOL = 1e-5
RETENTION_MODES = ("parallel", "recurrent", "chunkwise")
# The variants each case is written in: (dtype, shards). Sharded variants are also compared bit for
# bit with the one-file variant of their dtype.
ALL_VARIANTS = (("F32", 1), ("F32", 3), ("BF16", 1), ("BF16", 2))
HYBRID_1 = {"layers": [1], "num_heads": 4, "num_kv_heads": 2}
HYBRID_WINDOW = [{"layers": [0], "num_heads": 2, "qkv_bias": True, "window_size": 5, "rope_theta": 500.0},
                 {"layers": [2], "num_heads": 4, "num_kv_heads": 1, "window_size": 64}]


def case(name, layout, cfg, T=37, chunks=(8, 11), modes=RETENTION_MODES, optional=("scan",),
         variants=ALL_VARIANTS, generate=False, enabled=True, **init):
    """cfg: overrides of hf_dirs.fla_config / syncdoth_config. modes must run; optional may be refused."""
    return dict(name=name, layout=layout, cfg=cfg, T=T, chunks=list(chunks), modes=list(modes),
                optional=list(optional), variants=list(variants), generate=generate, enabled=enabled, init=init)


# ------------------------------------------------------------------------------------------- CASES
# Set enabled=False on a case the engine does not support yet (or pass --only). Disabled today: none.
CASES = [
    # fla-hub/retnet-1.3B-100B's config, shrunk: expand_k 1, expand_v 2, hidden_ratio 2,
    # intermediate_size null (-> 256), fused swish gate, untied head.
    case("fla-plain", "fla", dict(hidden=64, heads=4, layers=2, vocab=256), generate=True),
    case("fla-expand-k-0.5", "fla", dict(hidden=64, heads=4, layers=2, expand_k=0.5, expand_v=1,
                                         intermediate_size=96, norm_eps=1e-5)),
    case("fla-expand-k-2", "fla", dict(hidden=32, heads=2, layers=2, expand_k=2, expand_v=2, hidden_ratio=3)),
    case("fla-gqa-4q-2kv", "fla", dict(hidden=64, heads=4, layers=2, num_kv_heads=2)),
    case("fla-mqa-4q-1kv", "fla", dict(hidden=64, heads=4, layers=1, num_kv_heads=1)),
    case("fla-feature-map-relu", "fla", dict(hidden=48, heads=3, layers=2, feature_map="relu")),
    case("fla-feature-map-swish", "fla", dict(hidden=48, heads=2, layers=2, feature_map="swish")),
    case("fla-no-output-gate", "fla", dict(hidden=64, heads=4, layers=2, use_output_gate=False)),
    case("fla-no-elementwise-affine", "fla", dict(hidden=64, heads=4, layers=2, elementwise_affine=False)),
    case("fla-unfused-norm", "fla", dict(hidden=64, heads=4, layers=2, fuse_norm=False)),
    case("fla-tied-head", "fla", dict(hidden=64, heads=4, layers=2, tie_word_embeddings=True)),
    case("fla-hybrid-attn-layer-1", "fla", dict(hidden=64, heads=4, layers=3, vocab=256, attn=HYBRID_1),
         modes=("parallel", "recurrent", "chunkwise"), optional=("scan",), generate=True),
    case("fla-hybrid-windows-list", "fla", dict(hidden=64, heads=4, layers=3, vocab=256, attn=HYBRID_WINDOW),
         modes=("parallel", "recurrent", "chunkwise"), optional=("scan",), generate=True),
    case("syncdoth-swish-rel-pos", "syncdoth", dict(d=64, value_dim=128, heads=4, ffn=96, layers=2, vocab=256),
         generate=True),
    case("syncdoth-gelu-no-buffers", "syncdoth", dict(d=32, value_dim=64, heads=2, ffn=64, layers=2,
                                                      activation_fn="gelu"), rel_pos=False),
]
GEN_PROMPT, GEN_TOKENS = "Retention is", 12


# --------------------------------------------------------------------------------------- building
def make_case(c, seed):
    """-> (config, float64 weights) of a case."""
    if c["layout"] == "fla":
        cfg = D.fla_config(**c["cfg"])
        W = D.init_fla_weights(cfg, seed)
        head = "model.embeddings.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    else:
        cfg = D.syncdoth_config(**c["cfg"])
        W = D.init_syncdoth_weights(cfg, seed, rel_pos=c["init"].get("rel_pos", True))
        head = "lm_head.weight"
    if c["generate"]:  # keep greedy text ASCII: the ids 128..255 get small output rows
        W[head] = W[head].clone()
        W[head][128:] *= 0.2
    return cfg, W


def case_tokens(c, cfg, i):
    V = cfg["vocab_size"]
    tokens = torch.randint(0, V, (c["T"],), generator=torch.Generator().manual_seed(1000 + i)).tolist()
    tokens[0], tokens[-1] = 0, V - 1
    return tokens


def variant_name(dtype, shards):
    return f"{dtype.lower()}-" + ("1file" if shards == 1 else f"{shards}shards")


def run_logits(engine, model_dir, tokens, mode, chunk, out):
    if os.path.exists(out):
        os.remove(out)  # a failing engine must not pass on a stale file
    args = ["logits", "-m", model_dir, "--tokens", harness.tokens_arg(tokens), "--mode", mode, "-o", out]
    return engine.run(args + (["--chunk", chunk] if chunk else []))


def refused_cleanly(p):
    return isinstance(p.returncode, int) and 1 <= p.returncode <= 127 and (p.stderr or "").strip()


# ----------------------------------------------------------------------------------------- checks
def check_case(checks, engine, workdir, c, i):
    cfg, W = make_case(c, seed=10 + i)
    tokens = case_tokens(c, cfg, i)
    runs = [(m, None) for m in c["modes"] + c["optional"] if m != "chunkwise"]
    runs += [("chunkwise", k) for k in c["chunks"] if "chunkwise" in c["modes"] + c["optional"]]
    outputs = {}  # (dtype, shards, mode, chunk) -> logits
    for dtype, shards in c["variants"]:
        vname = variant_name(dtype, shards)
        d = os.path.join(workdir, c["name"], vname)
        D.write_model_dir(d, cfg, W, dtype, shards)
        cfg_read, W_read = D.load_model_dir(d)  # the values as the files hold them
        ref = FR.any_forward(W_read, cfg_read, tokens).numpy()
        print(f"[{c['name']} {vname}] T {len(tokens)}, logits std {ref.std():.3f}, max |logit| {np.abs(ref).max():.3f}")
        for mode, chunk in runs:
            label = f"{c['name']} {vname} {mode}" + (f" chunk {chunk}" if chunk else "")
            out = os.path.join(d, f"out_{mode}{chunk or ''}.npy")
            p = run_logits(engine, d, tokens, mode, chunk, out)
            if p.returncode != 0 or not os.path.exists(out):
                if mode in c["optional"] and refused_cleanly(p):
                    checks.skip(f"{label}: refused ({harness.describe(p)})")
                else:
                    checks.fail(f"{label}: engine failed: {harness.describe(p)}")
                continue
            got = harness.read_float32(checks, label, out)
            if got is None:
                continue
            if checks.close(label, ref, got, TOL):
                outputs[(dtype, shards, mode, chunk)] = got
    # sharded = one file, bit for bit
    for (dtype, shards, mode, chunk), got in sorted(outputs.items(), key=str):
        if shards == 1 or (dtype, 1, mode, chunk) not in outputs:
            continue
        same = np.array_equal(got, outputs[(dtype, 1, mode, chunk)])
        checks.require(f"{c['name']} {variant_name(dtype, shards)} {mode}" + (f" chunk {chunk}" if chunk else "")
                       + f" = {variant_name(dtype, 1)} bit for bit", same)
    if c["generate"]:
        check_generate(checks, engine, workdir, c, i)


def check_generate(checks, engine, workdir, c, i):
    """Greedy generation through the CLI against the reference's greedy ids (byte tokenizer)."""
    d = os.path.join(workdir, c["name"], "generate-f32-1file")
    cfg, W = make_case(c, seed=10 + i)
    D.write_model_dir(d, cfg, W, "F32", 1)
    cfg, W = D.load_model_dir(d)
    prompt = list(GEN_PROMPT.encode())
    if FR.is_syncdoth(cfg):
        seq = list(prompt)
        for _ in range(GEN_TOKENS):
            seq.append(int(np.argmax(FR.syncdoth_forward(W, cfg, seq).numpy()[-1])))
        ids = seq[len(prompt):]
    else:
        ids = FR.greedy(W, cfg, prompt, GEN_TOKENS)
    expected = bytes(ids).decode("utf-8", errors="replace")
    ascii_only = all(i < 128 for i in ids)
    label = f"{c['name']} generate greedy ({GEN_TOKENS} tokens{'' if ascii_only else ', non-ASCII: compared after U+FFFD replacement'})"
    p = engine.run(["generate", "-m", d, "-p", GEN_PROMPT, "-n", GEN_TOKENS, "--temperature", 0,
                    "--ignore-eos", "--json", "--chunk", 4])
    if p.returncode != 0:
        checks.fail(f"{label}: engine failed: {harness.describe(p)}")
        return
    try:
        j = json.loads(p.stdout.strip().splitlines()[-1])
        text, n = j["text"], j.get("generated_tokens", GEN_TOKENS)
    except (ValueError, KeyError, IndexError) as e:
        checks.fail(f"{label}: no JSON object with 'text' on stdout ({e}): {p.stdout[-200:]!r}")
        return
    checks.require(label, text == expected and n == GEN_TOKENS,
                   f"(engine {text!r}, {n} tokens; reference {expected!r}, ids {ids})")


# ------------------------------------------------------------------------------------- bad input
def bad_inputs(workdir):
    """Yields (label, model dir, substrings of which stderr must hold one)."""
    root = os.path.join(workdir, "bad")
    shutil.rmtree(root, ignore_errors=True)
    cfg = D.fla_config(hidden=32, heads=2, layers=2, vocab=64)
    W = D.init_fla_weights(cfg, 5)
    n = [0]

    def fresh(shards=2, cfg_=cfg, W_=W):
        n[0] += 1
        d = os.path.join(root, f"case{n[0]:02d}")
        D.write_model_dir(d, cfg_, W_, "F32", shards)
        return d

    def index(d):
        with open(os.path.join(d, D.SHARD_INDEX)) as f:
            return json.load(f)

    def write_index(d, idx):
        with open(os.path.join(d, D.SHARD_INDEX), "w") as f:
            json.dump(idx, f)

    def edited(**changes):  # a fresh directory with `changes` made to its config.json
        d = fresh()
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        c.update(changes)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(c, f)
        return d

    shard1, shard2 = D.shard_names(2)
    d = fresh()
    os.remove(os.path.join(d, shard2))
    yield "missing shard", d, [shard2]
    d = fresh()
    idx = index(d)
    victim = next(k for k, v in idx["weight_map"].items() if v == shard2)
    idx["weight_map"][victim] = "model-00003-of-00002.safetensors"
    write_index(d, idx)
    yield "index names a missing file", d, ["model-00003-of-00002.safetensors"]
    d = fresh()
    idx = index(d)
    victim = next(k for k, v in idx["weight_map"].items() if v == shard1 and "q_proj" in k)
    held, _ = harness.read_safetensors(os.path.join(d, shard1))
    harness.write_safetensors(os.path.join(d, shard1), {k: v for k, v in held.items() if k != victim})
    yield "index names a tensor its shard lacks", d, [victim]
    d = fresh(shards=1, W_={k: v for k, v in W.items() if k != "model.layers.1.mlp.down_proj.weight"})
    yield "tensor missing (one file)", d, ["model.layers.1.mlp.down_proj.weight"]
    d = fresh(W_=dict(W, **{"model.layers.1.attn.q_proj.weight": torch.zeros(32, 24, dtype=torch.float64)}))
    yield "q_proj shape [32,24] contradicts the config", d, ["model.layers.1.attn.q_proj.weight"]
    yield "config intermediate_size 128, tensors 256", edited(intermediate_size=128), ["intermediate_size", "gate_proj", "up_proj", "down_proj"]
    d = fresh(shards=1)
    held, _ = harness.read_safetensors(os.path.join(d, D.SINGLE))
    held["model.layers.0.mlp.up_proj.weight"] = held["model.layers.0.mlp.up_proj.weight"].astype(np.int32)
    harness.write_safetensors(os.path.join(d, D.SINGLE), held)
    yield "tensor stored as I32", d, ["model.layers.0.mlp.up_proj.weight", "I32"]
    d = fresh()
    with open(os.path.join(d, shard1), "rb") as f:
        blob = f.read()
    with open(os.path.join(d, shard1), "wb") as f:
        f.write(blob[:len(blob) * 6 // 10])
    yield "truncated shard (60%)", d, [shard1]
    d = fresh()
    with open(os.path.join(d, "config.json")) as f:
        text = f.read()
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(text[:len(text) // 2])
    yield "malformed config.json", d, ["config.json"]
    d = fresh()
    os.remove(os.path.join(d, "config.json"))
    yield "config.json missing", d, ["config.json"]
    d = fresh()
    with open(os.path.join(d, D.SHARD_INDEX), "w") as f:
        f.write('{"metadata": {"total_size": 10}, "weight_map": {')
    yield "malformed shard index", d, [D.SHARD_INDEX]
    yield "use_short_conv true", edited(use_short_conv=True), ["use_short_conv"]
    yield "attnres_block_size 2", edited(attnres_block_size=2), ["attnres_block_size"]
    yield "feature_map elu (not an ACT2FN name)", edited(feature_map="elu"), ["feature_map"]
    yield "num_kv_heads 3 of 2 heads", edited(num_kv_heads=3), ["num_kv_heads"]
    yield "hidden_act relu", edited(hidden_act="relu"), ["hidden_act"]
    yield "attn.layers names layer 5 of 2", edited(attn={"layers": [5], "num_heads": 2}), ["attn", "layers"]
    scfg = D.syncdoth_config(d=32, value_dim=64, heads=2, ffn=64, layers=1, vocab=64)
    SW = D.init_syncdoth_weights(scfg, 6)
    d = fresh(shards=1, cfg_=dict(scfg, deepnorm=True), W_=SW)
    yield "syncdoth: deepnorm true", d, ["deepnorm"]
    d = fresh(shards=1, cfg_=scfg, W_={k: v for k, v in SW.items() if k != "lm_head.weight"})
    yield "syncdoth: lm_head.weight missing", d, ["lm_head.weight"]


def check_bad_inputs(checks, engine, workdir, count=None):
    print("[bad input] each must fail cleanly: exit 1..127, a message on stderr naming the file or key")
    for j, (label, d, names) in enumerate(bad_inputs(workdir)):
        if count is not None and j >= count:
            break
        out = os.path.join(d, "out.npy")
        p = run_logits(engine, d, [1, 2, 3, 4], "parallel", None, out)
        rc, err = p.returncode, (p.stderr or "").strip()
        problems = []
        if rc == "timeout":
            problems.append("hung")
        elif rc == 0:
            problems.append("exit code 0")
        elif not 1 <= rc <= 127:
            problems.append(f"crashed (exit {rc})")
        if not err:
            problems.append("empty stderr")
        elif not any(s in err for s in names):
            problems.append(f"stderr names none of {names}")
        last = err.splitlines()[-1][:160] if err else ""
        checks.require(f"bad input '{label}'", not problems,
                       f"exit {rc}, stderr: {last}" + (f"  <- {', '.join(problems)}" if problems else ""))


# ------------------------------------------------------------------------------------- self-test
def self_test_reference(checks):
    print("[reference] parallel = recurrent for every case's config (float64)")
    for i, c in enumerate(CASES):
        cfg, W = make_case(c, seed=10 + i)
        tokens = case_tokens(c, cfg, i)
        a = FR.any_forward(W, cfg, tokens).numpy()
        for mode in ("recurrent",) + (("chunkwise",) if c["layout"] == "syncdoth" else ()):
            checks.close(f"{c['name']}: parallel = {mode}", a, FR.any_forward(W, cfg, tokens, mode).numpy(), 1e-12)
        checks.require(f"{c['name']}: logits well-conditioned", 0.3 < a.std() < 5 and np.abs(a).max() < 30,
                       f"(std {a.std():.3f}, max {np.abs(a).max():.3f})")

    gen = torch.Generator().manual_seed(3)
    T, H, dk, dv = 9, 3, 4, 5
    q, k, v = (torch.randn(T, H, n, generator=gen, dtype=torch.float64) for n in (dk, dk, dv))
    gamma = FR.decays(H)
    literal = torch.zeros(T, H, dv, dtype=torch.float64)
    for n in range(T):
        for h in range(H):
            for m in range(n + 1):
                literal[n, h] += gamma[h] ** (n - m) * (q[n, h] @ k[m, h]) / dk ** 0.5 * v[m, h]
    checks.close("retention_parallel = the literal double sum", literal, FR.retention_parallel(q, k, v, gamma), 1e-13)
    print("[reference] against fla's naive_retention (its source, when the mirror is at hand)")
    naive = fla_naive_retention()
    if naive is None:
        checks.skip("fla's naive_retention: mirror /work/.mirror/fla-org+flash-linear-attention not available")
    else:
        o = naive(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])[0].transpose(0, 1)
        checks.close("retention_parallel = fla's naive_retention (float32 there)", o,
                     FR.retention_parallel(q, k, v, gamma), 1e-5)

    x, y = torch.randn(6, 2, 8, generator=gen, dtype=torch.float64), torch.randn(6, 2, 8, generator=gen, dtype=torch.float64)
    pos = torch.arange(6)
    d0 = (FR.rotary(x, pos) * FR.rotary(y, pos)).sum(-1)
    d5 = (FR.rotary(x, pos + 5) * FR.rotary(y, pos + 5)).sum(-1)
    checks.close("rotary: dot products invariant to a shift of both positions", d0, d5, 1e-13)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.exp(1j * pos.double()[:, None, None] * 10000.0 ** (-torch.arange(0, 8, 2).double() / 8))
    checks.close("rotary = complex rotation of (x_i, x_i+D/2) by t / 10000^(2i/D)", torch.cat((z.real, z.imag), -1),
                 FR.rotary(x, pos), 1e-13)

    print("[reference] equivalences between options")
    tokens = torch.randint(0, 300, (21,), generator=gen)
    base = D.fla_config(hidden=64, heads=4, layers=2)
    W = D.init_fla_weights(D.fla_config(hidden=64, heads=4, layers=2, num_kv_heads=2), 1)
    full = dict(W)
    for l in range(2):
        for n in ("k_proj", "v_proj"):
            w = W[f"model.layers.{l}.attn.{n}.weight"]
            full[f"model.layers.{l}.attn.{n}.weight"] = w.view(2, -1, 64).repeat_interleave(2, 0).reshape(-1, 64)
    checks.close("GQA 4q/2kv = 4 heads with repeated k, v rows",
                 FR.forward(full, base, tokens), FR.forward(W, dict(base, num_kv_heads=2), tokens), 1e-12)
    W = D.init_fla_weights(base, 2)
    tied = {k: v for k, v in W.items() if k != "lm_head.weight"}
    checks.close("tied head = lm_head equal to the embeddings",
                 FR.forward(dict(W, **{"lm_head.weight": W["model.embeddings.weight"]}), base, tokens),
                 FR.forward(tied, dict(base, tie_word_embeddings=True), tokens), 0)
    ones = {k: (torch.ones_like(v) if "g_norm" in k else v) for k, v in W.items()}
    checks.close("elementwise_affine false = g_norm weights of ones",
                 FR.forward(ones, base, tokens),
                 FR.forward({k: v for k, v in W.items() if "g_norm" not in k}, dict(base, elementwise_affine=False), tokens), 1e-14)
    unfused = {k.replace("g_norm_swish_gate", "g_norm"): v for k, v in W.items()}
    checks.close("fuse_norm false (attn.g_norm.weight) = fused", FR.forward(W, base, tokens),
                 FR.forward(unfused, dict(base, fuse_norm=False), tokens), 0)
    checks.require("feature_map changes the output", harness.rel_error(
        FR.forward(W, base, tokens), FR.forward(W, dict(base, feature_map="relu"), tokens)) > 1e-3)
    checks.require("use_output_gate false changes the output", harness.rel_error(
        FR.forward(W, base, tokens), FR.forward(unfused, dict(base, use_output_gate=False), tokens)) > 1e-3)
    hyb = dict(base, attn={"layers": [1], "num_heads": 4})
    Wh = D.init_fla_weights(hyb, 3)
    checks.close("attention: window_size >= T = no window", FR.forward(Wh, hyb, tokens),
                 FR.forward(Wh, dict(base, attn={"layers": [1], "num_heads": 4, "window_size": 21}), tokens), 1e-14)
    checks.require("attention: window_size 4 < T changes the output", harness.rel_error(
        FR.forward(Wh, hyb, tokens), FR.forward(Wh, dict(base, attn={"layers": [1], "num_heads": 4, "window_size": 4}), tokens)) > 1e-3)
    q, k, v = (torch.randn(7, 2, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    checks.close("attention: window 1 returns v", v, FR.attention(q, k, v, torch.arange(7), torch.arange(7), 1), 1e-15)
    ids = FR.greedy(W, base, [5, 6, 7], 6)
    chain = FR.forward(W, base, [5, 6, 7] + ids).argmax(-1)[2:-1].tolist()
    checks.require("greedy ids = argmax of the parallel logits of prompt + ids", ids == chain, f"({ids} vs {chain})")
    checks.close("loss: parallel = recurrent", FR.loss(W, base, tokens.tolist()),
                 FR.loss(W, base, tokens.tolist(), "recurrent"), 1e-12)
    for bad, key in ((dict(feature_map="elu"), "feature_map"), (dict(use_short_conv=True), "use_short_conv"),
                     (dict(attnres_block_size=2), "attnres_block_size"), (dict(num_kv_heads=3), "num_kv_heads")):
        try:
            FR.parse_config(dict(base, **bad))
            checks.fail(f"config {bad} accepted")
        except ValueError as e:
            checks.require(f"config {bad} refused naming {key}", key in str(e), f"({e})")


def fla_naive_retention():
    """fla's own naive_retention (pure torch), read from the mirrored source; None if unavailable."""
    repo = "/work/.mirror/fla-org+flash-linear-attention/repo"
    try:
        src = subprocess.run(["git", "-C", repo, "show", "HEAD:fla/ops/retention/naive.py"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if src.returncode != 0:
        return None
    scope = {}
    exec(compile(src.stdout, "fla/ops/retention/naive.py", "exec"), scope)
    return scope.get("naive_retention")


def self_test_files(checks, workdir):
    print("[files] written values read back; sharded = one file; BF16 bits")
    c = CASES[0]
    cfg, W = make_case(c, 10)
    loaded = {}
    for dtype, shards in ALL_VARIANTS:
        d = os.path.join(workdir, "files", variant_name(dtype, shards))
        stored = D.write_model_dir(d, cfg, W, dtype, shards)
        cfg2, W2 = D.load_model_dir(d)
        loaded[(dtype, shards)] = W2
        worst = max(harness.rel_error(stored[k], W2[k]) for k in W)
        checks.require(f"{variant_name(dtype, shards)}: read back = written values", worst == 0 and set(W2) == set(W))
        if shards > 1:
            with open(os.path.join(d, D.SHARD_INDEX)) as f:
                idx = json.load(f)
            files = set(idx["weight_map"].values())
            size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
            checks.require(f"{variant_name(dtype, shards)}: {shards} shard files, total_size = tensor bytes",
                           files == set(D.shard_names(shards)) and 0 < idx["metadata"]["total_size"] < size,
                           f"({sorted(files)}, total_size {idx['metadata']['total_size']}, file bytes {size})")
        else:
            checks.require(f"{variant_name(dtype, shards)}: config.json, generation_config.json, model.safetensors",
                           all(os.path.exists(os.path.join(d, f)) for f in
                               ("config.json", "generation_config.json", D.SINGLE)))
    bf = loaded[("BF16", 1)]
    checks.require("BF16 values are bfloat16-rounded and differ from F32",
                   all(torch.equal(v, v.to(torch.bfloat16).double()) for v in bf.values())
                   and any(not torch.equal(bf[k], loaded[("F32", 1)][k]) for k in bf))


def self_test(checks, workdir):
    self_test_reference(checks)
    self_test_files(checks, workdir)
    fake = [sys.executable, os.path.join(HERE, "fake_fla_engine.py")]
    # Each fake engine call starts Python and torch: few cases, modes and variants.
    few = [("fla-plain", [("F32", 1), ("BF16", 2)], ["parallel", "recurrent"], [8]),
           ("fla-hybrid-windows-list", [("F32", 1)], ["parallel"], []),
           ("syncdoth-swish-rel-pos", [("BF16", 1), ("BF16", 2)], ["parallel"], [])]
    print("[self-test] the harness on fake_fla_engine.py: must pass")
    for name, variants, modes, chunks in few:
        i = [c["name"] for c in CASES].index(name)
        check_case(checks, harness.Engine(fake), os.path.join(workdir, "fake"),
                   dict(CASES[i], variants=variants, modes=modes + (["chunkwise"] if chunks else []),
                        optional=[], chunks=chunks), i)
    print("[self-test] every bad input is refused by the reference's loader, naming the file or key")
    import fake_fla_engine
    for label, d, names in bad_inputs(os.path.join(workdir, "loader")):
        try:
            fake_fla_engine.load(d)
            checks.fail(f"bad input '{label}': the reference's loader accepts it")
        except ValueError as e:
            checks.require(f"bad input '{label}': refused naming one of {names}", any(n in str(e) for n in names),
                           f"({e})")
    check_bad_inputs(checks, harness.Engine(fake), os.path.join(workdir, "fake"), count=3)
    print("[self-test] spoiled output must be noticed: the FAIL lines below are expected")
    one = dict(CASES[0], variants=[("F32", 1)], modes=["parallel"], optional=[], chunks=[], generate=False)
    for fault, what, expect in (("perturb", "logits spoiled by 1e-4", 1), ("nan", "one NaN logit", 1)):
        spoiled = harness.Checks()
        check_case(spoiled, harness.Engine(fake, {"FAKE_ENGINE_FAULT": fault}), os.path.join(workdir, fault), one, 0)
        checks.require(f"self-test: {what} detected", len(spoiled.failures) == expect,
                       f"({len(spoiled.failures)} failure(s))")
    refused = harness.Checks()
    two = dict(one, modes=["parallel", "chunkwise"], optional=["scan"], chunks=[8])
    check_case(refused, harness.Engine(fake, {"FAKE_ENGINE_FAULT": "refuse_chunkwise"}),
               os.path.join(workdir, "refuse"), two, 0)
    checks.require("self-test: a refused required mode fails, a refused optional mode is skipped",
                   len(refused.failures) == 1 and len(refused.skipped) == 1,
                   f"({len(refused.failures)} failure(s), {len(refused.skipped)} skip(s))")


# ------------------------------------------------------------------------------------------- main
def main():
    only = (("--only",), {"help": "run only the cases whose name contains this (also 'bad', 'none')"})
    args = harness.parse_check_args(
        __doc__, "where model directories and outputs are written (default: a new temp dir)",
        "check the reference and the harness (fake engine)", "retnet_check_fla_", extra=[only])
    workdir = args.workdir
    torch.set_num_threads(min(4, torch.get_num_threads()))
    checks = harness.Checks()
    if args.self_test:
        return checks.run(lambda: self_test(checks, workdir))
    print("CLI contract:" + CONTRACT)
    engine = harness.Engine([os.path.abspath(args.retnet)], timeout=args.timeout)
    steps = []
    for i, c in enumerate(CASES):
        if not c["enabled"]:
            checks.skip(f"{c['name']}: disabled in CASES")
        elif args.only is None or args.only in c["name"]:
            steps.append((c["name"], lambda c=c, i=i: check_case(checks, engine, workdir, c, i)))
    if args.only is None or args.only == "bad":
        steps.append(("bad input", lambda: check_bad_inputs(checks, engine, workdir)))
    for name, step in steps:  # a harness exception in one case is reported, and the next case runs
        try:
            step()
        except Exception as e:
            import traceback
            traceback.print_exc()
            checks.fail(f"{name}: harness exception: {type(e).__name__}: {e}")
    summarise(checks, [n for n, _ in steps])
    return checks.exit_code()


def summarise(checks, names):
    """One line per case: how many of its checks failed or were skipped."""
    print("\nper case:")
    for name in names:
        key = "bad input" if name == "bad input" else name + " "
        failed = sum(f.startswith(key) for f in checks.failures)
        skipped = sum(f.startswith(key) for f in checks.skipped)
        print(f"  {'FAIL' if failed else 'ok  '} {name}: {failed} failed" + (f", {skipped} skipped" if skipped else ""))


if __name__ == "__main__":
    sys.exit(main())
