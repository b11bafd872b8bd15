#!/usr/bin/env python3
"""The engine's CLI against the PyTorch reference (retnet_ref.py), on models exported under
torchscale's names.

    /usr/bin/python3 tests/python/check_engine.py --retnet build/retnet [--workdir DIR]
    /usr/bin/python3 tests/python/check_engine.py --self-test [--workdir DIR]

1. Logits. For each case (1, 2 and 4 heads, dk 2, eps 0 and 1e-6, gelu and swish, sqrt embedding
   scale, the paper's decay, 1 to 3 layers, T not a multiple of the chunk, weights where the score
   normalisation c_n is active on part of the rows; files with torchscale's retnet_rel_pos buffers
   and with fairseq's "decoder." prefix), writes float32 weights as safetensors (no __metadata__)
   and a config JSON, runs
       RETNET logits --model M --config-json C --tokens ... --mode MODE [--chunk N] --out out.npy
   for every form and chunk sizes that divide T and that don't, and requires a float32 [T, vocab]
   output equal to float64 reference logits from the same float32 weights (relative 1e-5).
2. Gradients. `RETNET grad --form parallel|chunkwise`: the loss equals the reference's (relative
   1e-5), every gradient tensor equals the reference's autograd (relative 1e-4).
3. Bad input (truncated or corrupt files, wrong shapes and dtypes, bad configs, bad tokens): a clean
   failure, exit code > 0 (no signal, not 134/139) and a message on stderr.
--self-test runs 1 and 3 on fake_engine.py (the reference behind the same CLI) and checks that the
harness notices spoiled logits, NaN logits and a crash. Every comparison fails on NaN or Inf.
Exit code 0 when everything passes."""
import itertools
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import retnet_ref as R  # noqa: E402

MODES = ("parallel", "recurrent", "chunkwise", "scan")
SCALED = dict(qk_gain=6.0, v_gain=0.03, norm_noise=0.2)  # c_n active on about a third of the rows
C = R.make_config

# name, config, T, chunk sizes for the chunkwise form, init options, how the file names tensors
CASES = [
    ("h1-eps0-swish", C(32, 64, 1, 48, 2, 64, 0.0, "swish"), 29, [8, 29], dict(norm_noise=0.2), "plain"),
    ("h4-eps1e-6-gelu-cn-decoder-prefix", C(64, 96, 4, 80, 2, 96, 1e-6, "gelu"), 37, [16, 1], SCALED, "decoder."),
    ("h4-eps0-gelu-sqrt-embed-cn-rel-pos", C(32, 32, 4, 64, 3, 50, 0.0, "gelu", no_scale=False), 40, [7, 8], SCALED,
     "rel_pos"),
    ("h2-eps1e-6-swish", C(48, 80, 2, 64, 1, 70, 1e-6, "swish"), 33, [32, 11], dict(norm_noise=0.2), "plain"),
    ("h4-dk2-eps1e-6-gelu-cn", C(8, 12, 4, 16, 2, 20, 1e-6, "gelu"), 17, [5], SCALED, "plain"),
    ("h4-paper-decay-eps1e-6-swish-cn", C(32, 48, 4, 40, 2, 50, 1e-6, "swish", decay="paper"), 45, [8], SCALED,
     "rel_pos"),
]
# config, T, the forms of `retnet grad` with their chunk sizes
GRAD_CASES = [
    (C(16, 24, 2, 40, 2, 50, 0.0, "swish"), 30, [("parallel", None), ("chunkwise", 7)]),
    (C(32, 48, 4, 40, 2, 50, 1e-6, "gelu"), 30, [("parallel", None), ("chunkwise", 7)]),
]


def export(weights, cfg, layout):
    """The tensors a file holds: torchscale's names, plus its retnet_rel_pos buffers, or all under
    fairseq's "decoder." prefix."""
    out = dict(weights)
    if layout == "rel_pos":
        c = R.check_config(cfg)
        out["retnet_rel_pos.angle"] = R.angles(c["dk"]).repeat_interleave(2).float()
        out["retnet_rel_pos.decay"] = R.decays(c["H"], c["decay"]).log().float()
    elif layout == "decoder.":
        out = {"decoder." + k: v for k, v in out.items()}
    return out


def write_case(directory, cfg, tensors):
    os.makedirs(directory, exist_ok=True)
    model, cfg_path = os.path.join(directory, "model.safetensors"), os.path.join(directory, "config.json")
    harness.write_safetensors(model, {k: v.to(torch.float32) for k, v in tensors.items()})
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    return model, cfg_path


def compare_forms(checks, engine, workdir, cases=CASES, modes=MODES):
    for i, (name, cfg, T, chunks, init, layout) in enumerate(cases):
        W32 = R.init_weights(cfg, seed=100 + i, dtype=torch.float32, **init)
        gen = torch.Generator().manual_seed(i)
        tokens = torch.randint(0, cfg["vocab_size"], (T,), generator=gen)
        tokens[0], tokens[-1] = 0, cfg["vocab_size"] - 1  # both ends of the id range
        stats = []
        ref = R.forward(R.cast(W32, torch.float64), cfg, tokens[None], "parallel", stats=stats)[0].numpy()
        active = torch.cat([s.flatten() for s in stats]).gt(1).double().mean().item()
        print(f"[{name}] T {T}, chunks {chunks}, c_n active on {active:.0%} of rows")
        if init is SCALED:
            checks.require(f"{name}: c_n active on some rows and not others", 0.05 < active < 0.95,
                           f"({active:.0%})")
        model, cfg_path = write_case(os.path.join(workdir, name), cfg, export(W32, cfg, layout))
        runs = [(m, None) for m in modes if m != "chunkwise"] + [("chunkwise", c) for c in chunks if "chunkwise" in modes]
        for mode, chunk in runs:
            label = f"{name} {mode}" + (f" chunk {chunk}" if chunk else "")
            out = os.path.join(workdir, name, f"out_{mode}{chunk or ''}.npy")
            if os.path.exists(out):
                os.remove(out)  # a failing engine must not pass on a stale file
            args = ["logits", "--model", model, "--config-json", cfg_path,
                    "--tokens", harness.tokens_arg(tokens), "--mode", mode, "--out", out]
            p = engine.run(args + (["--chunk", chunk] if chunk else []))
            if p.returncode != 0 or not os.path.exists(out):
                checks.fail(f"{label}: engine failed: {harness.describe(p)}")
                continue
            got = harness.read_float32(checks, label, out)
            if got is None:
                continue
            checks.close(label, ref, got, 1e-5)


def check_gradients(checks, engine, workdir):
    for i, (cfg, T, forms) in enumerate(GRAD_CASES):
        name = f"grad-h{cfg['decoder_retention_heads']}-eps{cfg['layernorm_eps']:g}-{cfg['activation_fn']}"
        W32 = R.init_weights(cfg, seed=200 + i, dtype=torch.float32, **SCALED)
        W = {k: v.to(torch.float64).requires_grad_(True) for k, v in W32.items()}
        seq = torch.randint(0, cfg["vocab_size"], (T,), generator=torch.Generator().manual_seed(i)).tolist()
        loss = R.loss(W, cfg, seq)
        loss.backward()
        model, cfg_path = write_case(os.path.join(workdir, name), cfg, W32)
        for form, chunk in forms:
            label = f"{name} {form}" + (f" chunk {chunk}" if chunk else "")
            out = os.path.join(workdir, name, f"grads_{form}.safetensors")
            if os.path.exists(out):
                os.remove(out)
            p = engine.run(["grad", "--model", model, "--config-json", cfg_path, "--tokens", harness.tokens_arg(seq),
                            "--form", form, "--out", out] + (["--chunk", chunk] if chunk else []))
            if p.returncode != 0 or not os.path.exists(out):
                checks.fail(f"{label}: engine failed: {harness.describe(p)}")
                continue
            grads, meta = harness.load_torch(out)
            checks.error(f"{label}: loss = reference loss", harness.rel_error(loss.item(), float(meta.get("loss", "nan"))), 1e-5)
            missing = sorted(set(W) - set(grads))
            if missing:
                checks.fail(f"{label}: no gradient for {missing}")
                continue
            worst_name, err = harness.worst((k, harness.rel_error(t.grad, grads[k])) for k, t in W.items())
            checks.error(f"{label}: gradients = reference autograd (worst tensor {worst_name})", err, 1e-4)


def bad_input_cases(workdir):
    """Yields (label, CLI args) of inputs the engine must refuse cleanly."""
    d = os.path.join(workdir, "bad")
    os.makedirs(d, exist_ok=True)
    cfg = C(16, 24, 2, 32, 2, 40, 1e-6, "gelu")
    W = R.init_weights(cfg, seed=7, dtype=torch.float32)
    good, good_cfg = write_case(os.path.join(d, "good"), cfg, W)
    with open(good, "rb") as f:
        blob = f.read()

    def file(name, data):
        path = os.path.join(d, name)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def model(name, tensors):
        path = os.path.join(d, name)
        harness.write_safetensors(path, tensors)
        return path

    def cmd(model_path, cfg_path=good_cfg, tokens="5,17,3,0,39"):
        return ["logits", "--model", model_path, "--config-json", cfg_path, "--tokens", tokens,
                "--mode", "parallel", "--out", os.path.join(d, "out.npy")]

    header_len = int.from_bytes(blob[:8], "little")
    yield "truncated safetensors (60% of the file)", cmd(file("trunc.safetensors", blob[:len(blob) * 6 // 10]))
    yield "truncated safetensors (inside the header)", cmd(file("trunc_header.safetensors", blob[:8 + header_len // 2]))
    yield "4-byte file", cmd(file("tiny.safetensors", blob[:4]))
    yield "header length 2^63", cmd(file("huge_header.safetensors", (1 << 63).to_bytes(8, "little") + blob[8:]))
    yield "header not JSON (invalid UTF-8)", cmd(file("garbage.safetensors", blob[:8] + b"\xff\xfe" + blob[10:]))
    yield "missing model file", cmd(os.path.join(d, "does_not_exist.safetensors"))
    wrong = dict(W, **{"layers.0.retention.q_proj.weight": torch.zeros(16, 14)})
    yield "q_proj of wrong shape [16,14]", cmd(model("wrong_shape.safetensors", wrong))
    wrong = dict(W, **{"layers.1.retention.v_proj.weight": W["layers.1.retention.v_proj.weight"].T.contiguous()})
    yield "v_proj transposed [16,24]", cmd(model("transposed.safetensors", wrong))
    wrong = dict(W, **{"layers.0.ffn.fc1.weight": torch.zeros(32, 16, dtype=torch.int32)})
    yield "fc1 stored as I32", cmd(model("wrong_dtype.safetensors", wrong))
    yield "missing tensor layers.1.ffn.fc2.weight", cmd(model("missing.safetensors", {
        k: v for k, v in W.items() if k != "layers.1.ffn.fc2.weight"}))
    # Bad configs with weights of matching shapes (shapes do not depend on the head count), so the only
    # fault is the config itself.
    for label, bad in [("value dim 66 not divisible by 4 heads", dict(cfg, decoder_value_embed_dim=66, decoder_retention_heads=4)),
                       ("key head dim 3 is odd (d 12, 4 heads)", dict(cfg, decoder_embed_dim=12, decoder_retention_heads=4))]:
        shapes = R.weight_shapes(dict(bad, decoder_retention_heads=2))
        tensors = {k: torch.randn(s, generator=torch.Generator().manual_seed(1)) * 0.1 for k, s in shapes.items()}
        stem = label.split()[0] + label.split()[1]
        yield f"config: {label}", cmd(model(f"{stem}.safetensors", tensors), file(f"{stem}.json", json.dumps(bad)))
    yield "config JSON malformed", cmd(good, file("malformed.json", json.dumps(cfg)[:-5]))
    yield "config: decay 'fast'", cmd(good, file("bad_decay.json", json.dumps(dict(cfg, decay="fast"))))
    yield "token id 40 = vocab size", cmd(good, tokens="5,17,40,3")
    yield "token id -1", cmd(good, tokens="5,-1,3")
    yield "token id not a number", cmd(good, tokens="5,x,3")
    yield "empty prompt", cmd(good, tokens="")


def check_bad_inputs(checks, engine, workdir, count=None):
    print("[bad input] each must fail cleanly: exit > 0, not 134/139, message on stderr")
    for label, args in itertools.islice(bad_input_cases(workdir), count):
        p = engine.run(args)
        rc = p.returncode
        problems = []
        if rc == "timeout":
            problems.append("hung")
        elif rc == 0:
            problems.append("exit code 0")
        elif rc < 0 or rc in (134, 139):
            problems.append(f"crashed (exit {rc})")
        if not (p.stderr or "").strip():
            problems.append("empty stderr")
        msg = (p.stderr or "").strip().splitlines()[-1:] or [""]
        checks.require(f"bad input '{label}'", not problems,
                       f"exit {rc}, stderr: {msg[0][:150]}" + (f"  <- {', '.join(problems)}" if problems else ""))


def self_test(checks, workdir):
    """The harness on the fake engine must pass, and must fail on spoiled, NaN or crashing output."""
    fake = [sys.executable, os.path.join(HERE, "fake_engine.py")]
    # A few cases only: each call of the fake engine starts Python and torch.
    compare_forms(checks, harness.Engine(fake), workdir, cases=CASES[:1])
    check_bad_inputs(checks, harness.Engine(fake), workdir, count=4)
    print("[self-test] the harness must notice spoiled and NaN logits and a crash: the FAIL lines below are expected")
    for fault, what in (("perturb", "logits spoiled by 1e-4"), ("nan", "one NaN logit"), ("inf", "one infinite logit")):
        spoiled = harness.Checks()
        compare_forms(spoiled, harness.Engine(fake, {"FAKE_ENGINE_FAULT": fault}), os.path.join(workdir, fault),
                      cases=CASES[:1], modes=("parallel",))
        checks.require(f"self-test: {what} detected", len(spoiled.failures) == 1,
                       f"({len(spoiled.failures)} failure(s) reported)")
    crashed = harness.Checks()
    check_bad_inputs(crashed, harness.Engine(fake, {"FAKE_ENGINE_FAULT": "abort"}), os.path.join(workdir, "crash"), count=3)
    checks.require("self-test: an engine that aborts on bad input detected",
                   len(crashed.failures) == 3 and all("crashed" in f for f in crashed.failures),
                   f"({len(crashed.failures)} failure(s) reported)")


def main():
    args = harness.parse_check_args(__doc__, "where models and outputs are written (default: a new temp dir)",
                                    "run the harness on fake_engine.py instead", "retnet_check_engine_")
    workdir = args.workdir
    torch.set_num_threads(min(4, torch.get_num_threads()))
    checks = harness.Checks()
    if args.self_test:
        return checks.run(lambda: self_test(checks, workdir))
    engine = harness.Engine([os.path.abspath(args.retnet)], timeout=args.timeout)
    return checks.run(lambda: compare_forms(checks, engine, workdir), lambda: check_gradients(checks, engine, workdir),
                      lambda: check_bad_inputs(checks, engine, workdir))


if __name__ == "__main__":
    sys.exit(main())
