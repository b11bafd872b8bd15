"""The engine's CLI against the PyTorch reference, on models exported under torchscale's names.

    /usr/bin/python3 tests/python/test_engine_vs_torch.py --retnet build/retnet [--workdir DIR]
    /usr/bin/python3 tests/python/test_engine_vs_torch.py --self-test [--workdir DIR]

For each config (1 and 4 heads, eps 0 and 1e-6, gelu and swish, T not a multiple of the chunk, weights
where the score normalisation c_n is active on part of the rows), writes float32 weights as safetensors
(no __metadata__) and a config JSON, runs
    RETNET logits --model M --config-json C --tokens ... --mode MODE [--chunk N] --out out.npy
for every form, and compares the float32 [T, vocab] output with float64 reference logits computed from
the same float32 weights: rel = max|ref - out| / max|ref| <= 1e-5.
Then feeds it bad input (truncated or corrupt files, wrong shapes and dtypes, bad configs, bad tokens)
and requires a clean failure: exit code > 0 (no signal, not 134/139), a message on stderr.
--self-test runs the same harness on fake_engine.py (the reference behind the same CLI), and checks that
the harness notices spoiled logits and a crash. Exit code 0 when everything passes.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import retnet_ref as R  # noqa: E402
import st_io  # noqa: E402

MODES = ("parallel", "recurrent", "chunkwise", "scan")
SCALED = dict(qk_gain=6.0, v_gain=0.03, norm_noise=0.2)  # c_n active on about a third of the rows


def config(d, value_dim, H, ffn, layers, vocab, eps, act, no_scale=True):
    return dict(decoder_embed_dim=d, decoder_value_embed_dim=value_dim, decoder_retention_heads=H,
                decoder_ffn_embed_dim=ffn, decoder_layers=layers, vocab_size=vocab, layernorm_eps=eps,
                activation_fn=act, no_scale_embedding=no_scale)


# name, config, T, chunk sizes for the chunkwise form, init options
CASES = [
    ("h1-eps0-swish", config(32, 64, 1, 48, 2, 64, 0.0, "swish"), 29, [8, 29], dict(norm_noise=0.2)),
    ("h4-eps1e-6-gelu-cn", config(64, 96, 4, 80, 2, 96, 1e-6, "gelu"), 37, [16, 1], SCALED),
    ("h4-eps0-gelu-sqrt-embed-cn", config(32, 32, 4, 64, 3, 50, 0.0, "gelu", no_scale=False), 40, [7, 8], SCALED),
    ("h2-eps1e-6-swish", config(48, 80, 2, 64, 1, 70, 1e-6, "swish"), 33, [32, 11], dict(norm_noise=0.2)),
    ("h4-dk2-eps1e-6-gelu-cn", config(8, 12, 4, 16, 2, 20, 1e-6, "gelu"), 17, [5], SCALED),
]


class Engine:
    def __init__(self, command, env=None, timeout=300):
        self.command, self.env, self.timeout = command, env, timeout

    def run(self, args):
        env = dict(os.environ, **(self.env or {}))
        try:
            # errors="replace": an engine may echo the bytes of a corrupt file in its message
            return subprocess.run(self.command + args, capture_output=True, text=True, errors="replace",
                                  env=env, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(self.command + args, "timeout", "", f"timed out after {self.timeout}s")


def describe(p):
    tail = (p.stderr or "").strip().splitlines()[-3:]
    return f"exit {p.returncode}, stderr: {' | '.join(tail) or '(empty)'}"


def write_case(directory, cfg, W32):
    os.makedirs(directory, exist_ok=True)
    model, cfg_path = os.path.join(directory, "model.safetensors"), os.path.join(directory, "config.json")
    st_io.write_safetensors(model, W32)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=1)
    return model, cfg_path


def compare_forms(engine, workdir, tol, cases=CASES, modes=MODES):
    """Returns the list of failures; prints one line per comparison."""
    failures, mixed = [], False
    for i, (name, cfg, T, chunks, init) in enumerate(cases):
        W32 = R.init_weights(cfg, seed=100 + i, dtype=torch.float32, **init)
        gen = torch.Generator().manual_seed(i)
        tokens = torch.randint(0, cfg["vocab_size"], (T,), generator=gen)
        tokens[0], tokens[-1] = 0, cfg["vocab_size"] - 1  # both ends of the id range
        stats = []
        ref = R.forward(R.cast(W32, torch.float64), cfg, tokens[None], "parallel", stats=stats)[0].numpy()
        active = torch.cat([s.flatten() for s in stats]).gt(1).double().mean().item()
        mixed |= cfg["layernorm_eps"] > 0 and 0.05 < active < 0.95
        print(f"[{name}] T {T}, chunks {chunks}, c_n active on {active:.0%} of rows")
        model, cfg_path = write_case(os.path.join(workdir, name), cfg, W32)
        runs = [(m, None) for m in modes if m != "chunkwise"] + [("chunkwise", c) for c in chunks if "chunkwise" in modes]
        for mode, chunk in runs:
            label = f"{name} {mode}" + (f" chunk {chunk}" if chunk else "")
            out = os.path.join(workdir, name, f"out_{mode}{chunk or ''}.npy")
            if os.path.exists(out):
                os.remove(out)  # a failing engine must not pass on a stale file
            args = ["logits", "--model", model, "--config-json", cfg_path,
                    "--tokens", ",".join(str(t) for t in tokens.tolist()), "--mode", mode, "--out", out]
            p = engine.run(args + (["--chunk", str(chunk)] if chunk else []))
            if p.returncode != 0 or not os.path.exists(out):
                failures.append(f"{label}: engine failed: {describe(p)}")
                print(f"  FAIL {label}: {describe(p)}")
                continue
            got = st_io.read_npy(out)
            if got.dtype != np.float32 or got.shape != ref.shape:
                failures.append(f"{label}: output {got.dtype} {list(got.shape)}, expected float32 {list(ref.shape)}")
                print(f"  FAIL {failures[-1]}")
                continue
            err = np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max()
            ok = err <= tol  # NaN fails
            print(f"  {'ok  ' if ok else 'FAIL'} rel {err:.3e} (tol {tol:.0e})  {label}")
            if not ok:
                diff = np.abs(got.astype(np.float64) - ref)
                for flat in np.argsort(diff, axis=None)[::-1][:3]:
                    t, v = np.unravel_index(flat, diff.shape)
                    print(f"       at [t {t}, id {v}]: expected {ref[t, v]:.8g}, got {got[t, v]:.8g}")
                failures.append(f"{label}: rel {err:.3e} > {tol:.0e}")
    if not mixed and cases is CASES:
        failures.append("no case at eps > 0 has c_n active on some rows and not others")
    return failures


def bad_input_cases(workdir):
    """Yields (label, CLI args) of inputs the engine must refuse cleanly."""
    d = os.path.join(workdir, "bad")
    os.makedirs(d, exist_ok=True)
    cfg = config(16, 24, 2, 32, 2, 40, 1e-6, "gelu")
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
        st_io.write_safetensors(path, tensors)
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
    yield "token id 40 = vocab size", cmd(good, tokens="5,17,40,3")
    yield "token id -1", cmd(good, tokens="5,-1,3")
    yield "token id not a number", cmd(good, tokens="5,x,3")
    yield "empty prompt", cmd(good, tokens="")


def check_bad_inputs(engine, workdir, count=None):
    failures = []
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
        print(f"  {'FAIL' if problems else 'ok  '} {label}: exit {rc}, stderr: {msg[0][:150]}"
              + (f"  <- {', '.join(problems)}" if problems else ""))
        if problems:
            failures.append(f"bad input '{label}': {', '.join(problems)}")
    return failures


def self_test(workdir, tol):
    """The harness on the fake engine must pass, and must fail on a spoiled or crashing fake engine."""
    fake = [sys.executable, os.path.join(HERE, "fake_engine.py")]
    failures = compare_forms(Engine(fake), workdir, tol) + check_bad_inputs(Engine(fake), workdir)
    print("[self-test] the harness must notice spoiled logits and a crash: the FAIL lines below are expected")
    spoiled = compare_forms(Engine(fake, {"FAKE_ENGINE_FAULT": "perturb"}), os.path.join(workdir, "spoiled"), tol,
                            cases=CASES[:1], modes=("parallel",))
    if not spoiled:
        failures.append("self-test: logits spoiled by 1e-4 went unnoticed")
    crashed = check_bad_inputs(Engine(fake, {"FAKE_ENGINE_FAULT": "abort"}), os.path.join(workdir, "crash"), count=3)
    if len(crashed) != 3 or not all("crashed" in f for f in crashed):
        failures.append("self-test: an engine that aborts on bad input went unnoticed")
    print(f"  {'ok  ' if spoiled else 'FAIL'} spoiled logits detected ({len(spoiled)} failure reported)")
    print(f"  {'ok  ' if crashed else 'FAIL'} aborts detected ({len(crashed)} failures reported)")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retnet", help="path to the engine's CLI binary")
    ap.add_argument("--workdir", help="where models and outputs are written (default: a new temp dir)")
    ap.add_argument("--self-test", action="store_true", help="run the harness on fake_engine.py instead")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per engine call")
    args = ap.parse_args()
    if not args.self_test and not args.retnet:
        ap.error("give --retnet PATH, or --self-test")
    workdir = args.workdir or tempfile.mkdtemp(prefix="retnet_engine_vs_torch_")
    os.makedirs(workdir, exist_ok=True)
    print(f"workdir: {workdir}")
    torch.set_num_threads(min(4, torch.get_num_threads()))
    try:
        if args.self_test:
            failures = self_test(workdir, args.tol)
        else:
            engine = Engine([os.path.abspath(args.retnet)], timeout=args.timeout)
            failures = compare_forms(engine, workdir, args.tol) + check_bad_inputs(engine, workdir)
    except Exception as e:  # a harness crash is reported like a failed check
        import traceback
        traceback.print_exc()
        failures = [f"harness exception: {type(e).__name__}: {e}"]
    if failures:
        print(f"\nFAILED: {len(failures)} check(s):")
        for f in failures:
            print("  " + f)
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
