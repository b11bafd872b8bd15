"""The same prompts through every front end give the same text, tokens and finish reason.

    /usr/bin/python3 check_front_ends.py --retnet build/retnet --workdir DIR   (PYTHONPATH: the
                                                                             built package)

Trains a small model for a few steps (so that it writes letters), then runs greedy and seeded
cases, one ending by a stop string and others by their length, through `retnet generate --json`,
the server's /v1/completions (plain and streamed) and the Python package (generate, streaming,
generate_batch). The front ends share one decode rule, so their outputs must be equal; the
comparison is checked to catch a front end that differs (a changed seed) before it is trusted.
The Python package's create_completion and create_chat_completion (the model's chat template)
must give the server's choices and usage for the same request bodies.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import FAILURES, Server, check, parse_args  # noqa: E402

# What each front end calls a finish: the CLI names the end-of-sequence token "eos", OpenAI "stop".
CLI_TO_OPENAI = {"stop": "stop", "length": "length", "eos": "stop"}


def train_model(retnet, workdir):
    cfg = os.path.join(workdir, "tiny.json")
    with open(cfg, "w") as f:
        json.dump({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
                   "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "decoder_layers": 2,
                   "vocab_size": 256, "recurrent_chunk_size": 8}, f)
    data = os.path.join(os.path.dirname(__file__), "..", "..", "data", "tinyshakespeare.txt")
    out = os.path.join(workdir, "run")
    subprocess.run([retnet, "train", "--data", data, "--config", cfg, "--out", out, "--overwrite",
                    "--steps", "40", "--batch", "4", "--seq", "64", "--warmup", "5"],
                   check=True, capture_output=True, timeout=900)
    return os.path.join(out, "model.safetensors")


def cli_run(retnet, model, case):
    args = [retnet, "generate", "-m", model, "-p", case["prompt"], "-n", str(case["max_tokens"]),
            "--temp", str(case["temperature"]), "--top-k", str(case["top_k"]),
            "--top-p", str(case["top_p"]), "--repeat-penalty", str(case["repeat_penalty"]),
            "--seed", str(case["seed"]), "--json"]
    for s in case["stop"]:
        args += ["--stop", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    j = json.loads(out.stdout)
    return {"text": j["text"], "finish": CLI_TO_OPENAI[j["finish_reason"]],
            "tokens": j["generated_tokens"]}


def server_body(case):
    return {"prompt": case["prompt"], "max_tokens": case["max_tokens"],
            "temperature": case["temperature"], "top_k": case["top_k"], "top_p": case["top_p"],
            "repeat_penalty": case["repeat_penalty"], "seed": case["seed"],
            "stop": case["stop"] or None}


def server_run(server, case):
    status, j = server.json("POST", "/v1/completions", server_body(case))
    assert status == 200, j
    return {"text": j["choices"][0]["text"], "finish": j["choices"][0]["finish_reason"],
            "tokens": j["usage"]["completion_tokens"]}


def server_stream_text(server, case):
    text = ""
    for e in server.stream("/v1/completions", server_body(case)):
        if e != "[DONE]":
            text += "".join(c["text"] for c in json.loads(e)["choices"])
    return text


def python_runs(model_path, cases):
    """The Python package's texts: generate, streaming and generate_batch of each case."""
    import retnet
    model = retnet.load(model_path)
    out = []
    for c in cases:
        kw = dict(max_tokens=c["max_tokens"], temperature=c["temperature"], top_k=c["top_k"],
                  top_p=c["top_p"], repeat_penalty=c["repeat_penalty"], seed=c["seed"],
                  stop=c["stop"] or None)
        out.append({"generate": model.generate(c["prompt"], **kw),
                    "stream": "".join(model.generate(c["prompt"], stream=True, **kw)),
                    # Prompt 0 of a batch draws from the stream a prompt decoded alone does.
                    "batch": model.generate_batch([c["prompt"], "Other"], **kw)[0]})
    return out


CHAT = {"messages": [{"role": "system", "content": "Be brief."},
                     {"role": "user", "content": "Who art thou?"}],
        "max_tokens": 30, "temperature": 0.9, "top_k": 20, "seed": 5}

# A call the reply must be (tool_choice "required"): the same call from both (ids are random).
TOOL_CHAT = dict(CHAT, max_tokens=300, tool_choice="required", tools=[
    {"type": "function", "function": {"name": "greet", "parameters": {
        "type": "object", "properties": {"whom": {"type": "string", "maxLength": 12}},
        "required": ["whom"]}}}])


def without_call_ids(choices):
    out = json.loads(json.dumps(choices))
    for choice in out:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            call.pop("id", None)
    return out


def openai_diffs(server, model_path, cases):
    """The Python package's OpenAI-shaped calls against the server's replies to the same
    bodies: chat (the model's template and its stop strings) and completions."""
    import retnet
    model = retnet.load(model_path)
    pairs = [("/v1/chat/completions", CHAT, model.create_chat_completion(**CHAT)),
             ("/v1/chat/completions", TOOL_CHAT, model.create_chat_completion(**TOOL_CHAT))]
    pairs += [("/v1/completions", server_body(c), model.create_completion(**server_body(c)))
              for c in cases]
    diffs = []
    for path, body, mine in pairs:
        status, served = server.json("POST", path, body)
        assert status == 200, served
        if body is TOOL_CHAT and mine["choices"][0]["finish_reason"] != "tool_calls":
            diffs.append(f"{path} with tools: Python's reply is not a call: {mine['choices']}")
        for key in ("object", "seed"):
            if mine[key] != served[key]:
                diffs.append(f"{path}: Python {key} {mine[key]!r} != server {served[key]!r}")
        if without_call_ids(mine["choices"]) != without_call_ids(served["choices"]):
            diffs.append(f"{path}: Python choices {mine['choices']} != server "
                         f"{served['choices']}")
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            if mine["usage"][key] != served["usage"][key]:
                diffs.append(f"{path}: Python usage.{key} {mine['usage'][key]} != server "
                             f"{served['usage'][key]}")
    return diffs


def compare(cases, cli, served, streamed, python):
    """What differs between the front ends, one line per difference."""
    diffs = []
    for c, a, s, st, p in zip(cases, cli, served, streamed, python):
        name = c["name"]
        for key in ("text", "finish", "tokens"):
            if a[key] != s[key]:
                diffs.append(f"{name}: server {key} {s[key]!r} != CLI {a[key]!r}")
        if st != a["text"]:
            diffs.append(f"{name}: streamed text {st!r} != CLI {a['text']!r}")
        for kind in ("generate", "stream", "batch"):
            if p[kind] != a["text"]:
                diffs.append(f"{name}: Python {kind} {p[kind]!r} != CLI {a['text']!r}")
    return diffs


def main():
    a = parse_args()
    model = train_model(a.retnet, a.workdir)
    base = {"temperature": 0, "top_k": 40, "top_p": 0.95, "repeat_penalty": 1.0, "seed": 1,
            "stop": []}
    cases = [dict(base, name="greedy, length", prompt="ROMEO:", max_tokens=30),
             dict(base, name="seeded, length", prompt="JULIET: O", max_tokens=30,
                  temperature=0.9, top_k=20, top_p=0.9, repeat_penalty=1.1, seed=7)]
    # A stop string from the greedy text's middle: that case ends by it.
    greedy = cli_run(a.retnet, model, cases[0])["text"]
    cases.append(dict(base, name="greedy, stop string", prompt="ROMEO:", max_tokens=30,
                      stop=[greedy[10:12]]))
    cli = [cli_run(a.retnet, model, c) for c in cases]
    check(cli[0]["finish"] == "length" and cli[2]["finish"] == "stop",
          f"the cases end as meant (length, stop): {cli[0]['finish']}, {cli[2]['finish']}")
    server = Server(a.retnet, model, a.workdir, "front-ends", "--state-cache-mib", "0")
    try:
        served = [server_run(server, c) for c in cases]
        streamed = [server_stream_text(server, c) for c in cases]
        for d in openai_diffs(server, model, cases):
            check(False, d)
    finally:
        server.stop()
    python = python_runs(model, cases)
    for d in compare(cases, cli, served, streamed, python):
        check(False, d)
    # The comparison catches a front end that draws differently: Python with another seed.
    python_other = python_runs(model, [dict(c, seed=c["seed"] + 1) for c in cases])
    check(compare(cases[1:2], cli[1:2], served[1:2], streamed[1:2], python_other[1:2]),
          "a front end with another seed is caught")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print(f"front ends agree on {len(cases)} cases (CLI, server plain and streamed, Python)")


if __name__ == "__main__":
    main()
