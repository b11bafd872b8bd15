#!/usr/bin/env python3
"""Fingerprint what the engine outputs, to show that a restructuring changed none of it.

Runs fixed models and tokens through every front end and records a SHA-256 per case:
  - logits of every mixer (and hybrid models) in every form the CLI accepts (a refused form is
    recorded by its refusal),
  - logits of every weight type and placement: f32, f16, bf16, q8_0, q4_0, q4_1 quantised at load
    or stored by `retnet quantize` (with its LM head kept f32 too), a tied embedding, rows used in
    place from f32 and bf16 Hugging Face directories; at decode and prefill row counts (13 and
    80 tokens), on both backends,
  - training losses of a few steps, greedy and seeded `retnet generate` texts (alone, in a batch,
    ending by a stop string, by length),
  - the server's completions and chat completions (plain and streamed),
  - the Python package's logits, generate, generate_batch, streaming and Session sampling.

  python3 scripts/check_outputs.py --retnet build/retnet --python-dir build/python --save before.json
  ... change the code, rebuild ...
  python3 scripts/check_outputs.py --retnet build/retnet --python-dir build/python --compare before.json

--compare exits 1 if any case recorded in both runs differs; a form refused before that computes
now is listed apart (a gain, not a change), as are cases only one run has.
Everything runs with one thread so that reductions are ordered the same way in both runs.
"""
import argparse
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

TINY = {"decoder_embed_dim": 32, "decoder_value_embed_dim": 64, "decoder_retention_heads": 2,
        "decoder_ffn_embed_dim": 64, "decoder_layers": 2, "vocab_size": 256,
        "recurrent_chunk_size": 8}
MIXERS = ["retention", "attention", "linear", "performer", "aft", "aft-simple", "rwkv"]
HYBRIDS = {
    "hybrid_retention_attention": {"decoder_layers": 4, "mixer": [
        "retention", "retention", "retention",
        {"mixer": "attention", "heads": 4, "kv_heads": 2, "qkv_bias": True, "value_dim": 32}]},
    "hybrid_attention_window": {"decoder_layers": 3, "rotary": "half_split", "mixer": [
        "attention", "retention", {"mixer": "attention", "heads": 1, "window_size": 5}]},
    "hybrid_retention_rwkv": {"mixer": ["rwkv", "retention"]},
}
TOKENS = "5,17,3,99,200,42,7,7,7,128,64,250,1"
FORMS = ["parallel", "recurrent", "chunkwise", "scan"]
PROMPTS = ["ROMEO:", "JULIET: O", "First Citizen:\nBefore we proceed"]


def sha(data):
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()[:16]


class Runner:
    def __init__(self, retnet, work):
        self.retnet, self.work, self.results = retnet, work, {}

    def cli(self, *args, check=True):
        out = subprocess.run([self.retnet, *args], capture_output=True, text=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
        if check and out.returncode != 0:
            raise RuntimeError(f"retnet {' '.join(args)} failed: {out.stderr}")
        return out

    def record(self, case, value):
        self.results[case] = value
        print(f"{case:64s} {value}", flush=True)

    def path(self, name):
        return os.path.join(self.work, name)


def init_models(r):
    models = {}
    for name in MIXERS:
        cfg = dict(TINY, mixer=name)
        models[name] = cfg
    for name, fields in HYBRIDS.items():
        models[name] = dict(TINY, **fields)
    paths = {}
    for name, cfg in models.items():
        cfg_path = r.path(f"{name}.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        paths[name] = r.path(f"{name}.safetensors")
        r.cli("init", "--config", cfg_path, "-o", paths[name], "--seed", "3")
    return paths


def check_logits(r, models):
    for name, model in models.items():
        for form in FORMS:
            for dtype in (["f32", "q8_0"] if form == "recurrent" else ["f32"]):
                out = r.path(f"{name}.{form}.{dtype}.npy")
                res = r.cli("logits", "-m", model, "--tokens", TOKENS, "--mode", form,
                            "--chunk", "5", "--dtype", dtype, "-t", "1", "-o", out, check=False)
                value = sha(open(out, "rb").read()) if res.returncode == 0 else \
                    "refused: " + sha(res.stderr.strip())
                r.record(f"logits/{name}/{form}/{dtype}", value)


TOKENS_LONG = ",".join(str((i * 37 + 11) % 256) for i in range(80))  # above the 64 decode rows


def check_weight_types(r, models):
    def logits(tag, model, form, tokens, *args):
        out = r.path("weights.npy")
        res = r.cli("logits", "-m", model, "--tokens", tokens, "--mode", form, "--chunk", "5",
                    "-t", "1", "-o", out, *args, check=False)
        r.record(f"weights/{tag}/{form}/{len(tokens.split(','))}",
                 sha(open(out, "rb").read()) if res.returncode == 0 else
                 "refused: " + sha(res.stderr.strip()))
    tied_cfg = r.path("tied.json")
    with open(tied_cfg, "w") as f:
        json.dump(dict(TINY, share_decoder_input_output_embed=True), f)
    tied = r.path("tied.safetensors")
    r.cli("init", "--config", tied_cfg, "-o", tied, "--seed", "3")
    sources = {"retention": models["retention"], "hybrid": models["hybrid_retention_attention"],
               "tied": tied}
    for name, model in sources.items():
        for dtype in ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"]:
            for form in ["parallel", "recurrent"]:
                for tokens in [TOKENS, TOKENS_LONG]:
                    logits(f"{name}/{dtype}", model, form, tokens, "--dtype", dtype)
        for qtype, keep in [("q4_1", []), ("q8_0", ["--keep-head", "f32"])]:
            stored = r.path(f"{name}.{qtype}.safetensors")
            r.cli("quantize", model, stored, "--type", qtype, *keep)
            for tokens in [TOKENS, TOKENS_LONG]:
                logits(f"{name}/stored-{qtype}{''.join(keep)}", stored, "parallel", tokens)
        for dtype in ["f32", "bf16"]:  # a directory in the inference dtype: rows used in place
            hf = r.path(f"{name}.{dtype}.hf")
            if r.cli("export", model, "--format", "syncdoth", "--dtype", dtype, "-o", hf,
                     check=False).returncode != 0:
                r.record(f"weights/{name}/in-place-{dtype}", "refused export")
                continue
            for tokens in [TOKENS, TOKENS_LONG]:
                logits(f"{name}/in-place-{dtype}", hf, "parallel", tokens, "--dtype", dtype)
            logits(f"{name}/in-place-{dtype}", hf, "recurrent", TOKENS, "--dtype", dtype)
        for dtype in ["f32", "bf16", "q4_0"]:
            logits(f"{name}/{dtype}/reference", model, "parallel", TOKENS, "--dtype", dtype,
                   "--backend", "reference")


def train_model(r, data):
    out = r.path("run")
    cfg_path = r.path("train.json")
    with open(cfg_path, "w") as f:
        json.dump(dict(TINY, decoder_layers=2), f)
    r.cli("train", "--data", data, "--config", cfg_path, "--out", out, "--steps", "30",
          "--batch", "4", "--seq", "64", "--warmup", "5", "--log-interval", "5", "-t", "1")
    losses = [json.loads(line).get("loss") for line in open(os.path.join(out, "metrics.jsonl"))]
    r.record("train/losses", sha(json.dumps(losses)))
    return os.path.join(out, "model.safetensors")


def generate_json(r, model, *args):
    res = r.cli("generate", "-m", model, "--json", "-t", "1", *args)
    j = json.loads(res.stdout)
    return {k: j[k] for k in ("text", "finish_reason", "generated_tokens", "prompt_tokens")}


def check_generate(r, model, tag):
    greedy = generate_json(r, model, "-p", PROMPTS[0], "-n", "40", "--temp", "0")
    r.record(f"generate/{tag}/greedy", sha(json.dumps(greedy)))
    seeded = ["--temp", "0.9", "--top-k", "20", "--top-p", "0.9", "--repeat-penalty", "1.1",
              "--seed", "7"]
    r.record(f"generate/{tag}/seeded",
             sha(json.dumps(generate_json(r, model, "-p", PROMPTS[1], "-n", "40", *seeded))))
    stop = greedy["text"][8:11] if len(greedy["text"]) >= 11 else "e"
    stopped = generate_json(r, model, "-p", PROMPTS[0], "-n", "40", "--temp", "0", "--stop", stop)
    r.record(f"generate/{tag}/stop", sha(json.dumps(stopped)) + " " + stopped["finish_reason"])
    prompts = r.path("prompts.txt")
    with open(prompts, "w") as f:
        f.write("\n".join(p.replace("\n", " ") for p in PROMPTS) + "\n")
    batch = r.cli("generate", "-m", model, "--prompts-file", prompts, "-n", "24", "-t", "1",
                  *seeded).stdout
    r.record(f"generate/{tag}/batch", sha(batch))
    return stop


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def strip_volatile(obj):
    """Drop what differs between two runs of the same request: ids, clocks, timings, and the
    seed a reply names (the server's random pick when the request named none)."""
    if isinstance(obj, dict):
        return {k: strip_volatile(v) for k, v in obj.items()
                if k not in ("id", "created", "timings", "system_fingerprint", "seed")}
    if isinstance(obj, list):
        return [strip_volatile(v) for v in obj]
    return obj


def joined_stream(data):
    """A stream's text, finish reasons and logprobs joined: how the server splits the text into
    events depends on timing, what it sends does not."""
    text, finish, logprobs = "", [], {}
    for block in data.split("\n\n"):
        if not block.startswith("data: {"):
            continue
        choice = json.loads(block[6:])["choices"][0]
        text += choice["text"]
        finish.append(choice["finish_reason"]) if choice["finish_reason"] else None
        for key, values in (choice.get("logprobs") or {}).items():
            logprobs.setdefault(key, []).extend(values if isinstance(values, list) else [values])
    return {"text": text, "finish": finish, "logprobs": logprobs}


def check_server(r, model, tag, stop):
    port = free_port()
    log = open(r.path(f"serve-{tag}.log"), "w")
    proc = subprocess.Popen([r.retnet, "serve", "-m", model, "--port", str(port), "-t", "1",
                             "--state-cache-mib", "0"],
                            stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))

    def post(path, body):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read().decode()
        conn.close()
        return resp.status, data

    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"server did not start: {open(log.name).read()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        cases = {
            "greedy": {"prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0},
            "seeded": {"prompt": PROMPTS[1], "max_tokens": 40, "temperature": 0.9, "top_k": 20,
                       "top_p": 0.9, "repeat_penalty": 1.1, "seed": 7},
            "stop": {"prompt": PROMPTS[0], "max_tokens": 40, "temperature": 0, "stop": [stop]},
            "logprobs": {"prompt": PROMPTS[2], "max_tokens": 8, "temperature": 0, "logprobs": 3},
        }
        for name, body in cases.items():
            status, data = post("/v1/completions", body)
            r.record(f"server/{tag}/completions/{name}",
                     f"{status} " + sha(json.dumps(strip_volatile(json.loads(data)))))
            status, data = post("/v1/completions", dict(body, stream=True))
            r.record(f"server/{tag}/stream/{name}", f"{status} " + sha(json.dumps(
                joined_stream(data))))
        chat = {"messages": [{"role": "user", "content": "Speak, Romeo."}], "max_tokens": 30,
                "temperature": 0.7, "seed": 11}
        status, data = post("/v1/chat/completions", chat)
        r.record(f"server/{tag}/chat", f"{status} " + sha(json.dumps(strip_volatile(
            json.loads(data)))))
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def check_python(r, python_dir, models, trained):
    script = r.path("python_outputs.py")
    with open(script, "w") as f:
        f.write(PYTHON_CASES)
    out = subprocess.run([sys.executable if python_dir is None else "/usr/bin/python3", script,
                          json.dumps({"models": models, "trained": trained, "tokens": TOKENS,
                                      "prompts": PROMPTS})],
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=python_dir or "", OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        raise RuntimeError(f"python cases failed: {out.stderr}")
    for case, value in json.loads(out.stdout).items():
        r.record(f"python/{case}", value)


PYTHON_CASES = r'''
import hashlib, json, sys
import numpy as np
import retnet
retnet.set_num_threads(1)
args = json.loads(sys.argv[1])
out = {}
def sha(b):
    return hashlib.sha256(b if isinstance(b, bytes) else b.encode()).hexdigest()[:16]
ids = np.array([int(t) for t in args["tokens"].split(",")], dtype=np.int32)
for name in ("retention", "rwkv", "hybrid_retention_attention"):
    m = retnet.load(args["models"][name])
    for form in ("parallel", "recurrent"):
        out[f"logits/{name}/{form}"] = sha(np.ascontiguousarray(m.logits(ids, form=form)).tobytes())
m = retnet.load(args["trained"])
P = args["prompts"]
out["generate/greedy"] = sha(m.generate(P[0], max_tokens=40, temperature=0).text)
out["generate/seeded"] = sha(m.generate(P[1], max_tokens=40, temperature=0.9, top_k=20, top_p=0.9,
                                        repeat_penalty=1.1, seed=7).text)
out["generate/stream"] = sha(json.dumps(list(m.generate(P[0], max_tokens=40, temperature=0.9,
                                                        seed=5, stream=True))))
out["generate/batch"] = sha(json.dumps([r.text for r in m.generate_batch(
    P, max_tokens=24, temperature=0.9, seed=7)]))
s = retnet.Session(m, capacity=2)
a = s.add_sequence()
s.prefill(a, m.tokenizer.encode(P[0]))
picked = []
for _ in range(20):
    t = s.sample(a, temperature=0.8, seed=1)
    picked.append(int(t))
    s.step([t])
out["session/sample"] = sha(json.dumps(picked))
print(json.dumps(out))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retnet", default="build/retnet", help="the retnet binary")
    ap.add_argument("--python-dir", default="build/python",
                    help="directory holding the built package (PYTHONPATH); '' to skip Python")
    ap.add_argument("--data", default="data/tinyshakespeare.txt", help="training text")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", help="write the fingerprints to this JSON file")
    g.add_argument("--compare", help="compare with fingerprints saved by --save")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="retnet-outputs-") as work:
        r = Runner(os.path.abspath(args.retnet), work)
        models = init_models(r)
        check_logits(r, models)
        check_weight_types(r, models)
        trained = train_model(r, os.path.abspath(args.data))
        for tag, model in (("trained", trained), ("hybrid", models["hybrid_retention_attention"]),
                           ("rwkv", models["rwkv"])):
            stop = check_generate(r, model, tag)
            if tag != "rwkv":
                check_server(r, model, tag, stop)
        if args.python_dir:
            check_python(r, os.path.abspath(args.python_dir), models, trained)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(r.results, f, indent=1, sort_keys=True)
        print(f"{len(r.results)} cases saved to {args.save}")
        return 0
    before = json.load(open(args.compare))
    both = [c for c in before if c in r.results and before[c] != r.results[c]]
    # A form that was refused and now computes is a gain, not a changed output.
    gained = [c for c in both if before[c].startswith("refused:") and
              not r.results[c].startswith("refused:")]
    differ = [c for c in both if c not in gained]
    only = sorted(set(before) ^ set(r.results))
    for c in gained:
        print(f"NOW COMPUTED {c} (refused before)")
    for c in differ:
        print(f"DIFFERS {c}: {before[c]} -> {r.results[c]}")
    for c in only:
        print(f"ONLY IN {'before' if c in before else 'after'}: {c}")
    same = len([c for c in before if c in r.results]) - len(both)
    print(f"{same} cases identical, {len(differ)} differ, {len(gained)} refused before and "
          f"computed now, {len(only)} in one run only")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
