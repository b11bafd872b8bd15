"""End-to-end tests of `retnet serve --lookup N --draft-max K` and `--draft-model M` (speculative
decoding with prompt lookup or a draft model), over loopback.

    /usr/bin/python3 test_speculative.py --retnet build/retnet --workdir DIR

Checks: with the server-wide --lookup, and a request's "speculative" object turning it off or
changing it, greedy and seeded text is the plain text on several prompts (completions and chat,
with a stop string, n = 2, logprobs), streams with and without speculation running at once
included; usage.speculative and /metrics count drafted and accepted tokens; bad "speculative"
values are 400s naming the key. With --draft-model (the model itself, whose greedy drafts are all
kept, and another random model), the same texts, and the draft's usage counted; --draft-model
beside --lookup, or of another vocabulary, stops the server with an error naming it."""
import json
import os
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import (Server, check, expect_json_error, finish,  # noqa: E402
                            free_port, parse_args, stream_text, tiny_model, wait_idle)

PROMPTS = ["The quick brown fox jumps over the lazy dog. " * 3,
           "abc abc abc abc abc abc abc abc abc abc abc abc",
           "First Citizen: Before we proceed any further, hear me speak.", "x"]
OFF = {"lookup": 0}


def text_of(r, chat=False):
    return [c["message"]["content"] if chat else c["text"] for c in r["choices"]]


def complete(s, body, speculative=None, chat=False):
    if speculative is not None:
        body = dict(body, speculative=speculative)
    st, r = s.json("POST", "/v1/chat/completions" if chat else "/v1/completions", body)
    assert st == 200, (st, r)
    return r


def test_same_text(s):
    accepted = 0
    for prompt in PROMPTS:
        for sampling in ({"temperature": 0}, {"temperature": 0.9, "seed": 12}):
            body = dict({"prompt": prompt, "max_tokens": 40}, **sampling)
            plain = complete(s, body, OFF)
            fast = complete(s, body)
            other = complete(s, body, {"lookup": 2, "draft_max": 3})
            check(text_of(fast) == text_of(plain) == text_of(other),
                  f"{prompt[:20]!r} {sampling}: the text with lookup is the plain text")
            check("speculative" not in plain["usage"], "no usage.speculative when it is off")
            spec = fast["usage"].get("speculative", {})
            check(set(spec) == {"checks", "drafted_tokens", "accepted_tokens"} and
                  0 <= spec["accepted_tokens"] <= spec["drafted_tokens"],
                  f"usage.speculative counts: {fast['usage']}")
            check(fast["usage"]["completion_tokens"] == plain["usage"]["completion_tokens"],
                  "the same completion tokens")
            accepted += spec.get("accepted_tokens", 0)
    check(accepted > 0, "copy-heavy prompts keep drafted tokens")

    body = {"prompt": PROMPTS[0], "max_tokens": 30, "temperature": 0}
    plain = text_of(complete(s, body, OFF))[0]
    stop = plain[len(plain) // 2:len(plain) // 2 + 3]
    check(text_of(complete(s, dict(body, stop=stop)))[0] == plain[:plain.index(stop)],
          "a stop string ends the speculative text where it ends the plain one")
    two = complete(s, dict(body, n=2, logprobs=2))
    check(text_of(two) == [plain, plain], f"n = 2 with lookup: two plain texts {text_of(two)}")
    check(all(len(c["logprobs"]["tokens"]) == 30 for c in two["choices"]),
          "log-probabilities for every token, drafted ones included")
    chat = {"messages": [{"role": "user", "content": "abc abc abc abc"}], "max_tokens": 24,
            "temperature": 0}
    check(text_of(complete(s, chat, chat=True), True) ==
          text_of(complete(s, chat, OFF, chat=True), True), "chat: the plain text")


def test_concurrent_streams(s, expect_checks=True):
    bodies = [{"prompt": p, "max_tokens": 48, "temperature": 0} for p in PROMPTS]
    expected = [text_of(complete(s, b, OFF))[0] for b in bodies]
    checks_before = s.metric("retnet_speculative_checks_total")
    results = {}

    def run(i, speculate, stream):
        b = dict(bodies[i], speculative=None if speculate else OFF)
        if b["speculative"] is None:
            del b["speculative"]
        if stream:
            results[(i, speculate)] = stream_text(s.stream("/v1/completions", b), False)
        else:
            results[(i, speculate)] = text_of(complete(s, b))[0]

    # Eight streams on four slots: each prompt with and without speculation at once.
    threads = [threading.Thread(target=run, args=(i, spec, i % 2 == 0))
               for i in range(len(bodies)) for spec in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    for (i, spec), text in sorted(results.items()):
        check(text == expected[i], f"prompt {i}, speculative {spec}, concurrent: the plain text")
    check(len(results) == len(threads), f"every stream answered ({len(results)})")
    check(wait_idle(s), "no slot leaked")
    checks = s.metric("retnet_speculative_checks_total")
    drafted = s.metric("retnet_speculative_drafted_tokens_total")
    accepted = s.metric("retnet_speculative_accepted_tokens_total")
    check(not expect_checks or (checks > checks_before and drafted >= accepted > 0),
          f"/metrics counts checks, drafted and accepted tokens: {checks} {drafted} {accepted}")


def test_bad_values(s):
    for value, param in ((3, "speculative"), ({"lookup": 65}, "speculative.lookup"),
                         ({"lookup": -1}, "speculative.lookup"),
                         ({"lookup": "3"}, "speculative.lookup"),
                         ({"draft_max": 0}, "speculative.draft_max"),
                         ({"n_max": 4}, "speculative.n_max")):
        expect_json_error(s, 400, "POST", "/v1/completions",
                          {"prompt": "x", "speculative": value}, None, param,
                          f"speculative {json.dumps(value)}")


def init_model(retnet, workdir, name, seed, vocab=256):
    """The tiny model's shape with other weights (`seed`) or another vocabulary: its path."""
    cfg = os.path.join(workdir, f"{name}.json")
    with open(cfg, "w") as f:
        json.dump({"decoder_embed_dim": 32, "decoder_value_embed_dim": 48,
                   "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 40,
                   "decoder_layers": 2, "vocab_size": vocab, "recurrent_chunk_size": 8}, f)
    path = os.path.join(workdir, f"{name}.safetensors")
    subprocess.run([retnet, "init", "--config", cfg, "-o", path, "-s", str(seed)], check=True,
                   capture_output=True, timeout=120)
    return path


def test_draft_model_refused(a, model):
    wide = init_model(a.retnet, a.workdir, "wide_vocab", 6, vocab=300)
    for args, words in ((["--draft-model", model, "--lookup", "3"], "--lookup or --draft-model"),
                        (["--draft-model", wide], "vocabulary of 300 tokens")):
        r = subprocess.run([a.retnet, "serve", "-m", model, "--port", str(free_port()), *args],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode != 0 and words in r.stderr,
              f"serve {' '.join(args[-2:])}: refused naming {words!r} ({r.returncode}, "
              f"{r.stderr.strip()[-200:]!r})")


def test_draft_model(a, model):
    # The model as its own draft: its greedy drafts are what decoding picks, so checks keep them.
    s = Server(a.retnet, model, a.workdir, "draft_self", "--parallel", "4", "--draft-model",
               model, "--draft-max", "5", "--state-cache-mib", "0", "--lookup-max-streams", "4")
    try:
        test_same_text(s)
        test_concurrent_streams(s)
        body = {"prompt": PROMPTS[2], "max_tokens": 30, "temperature": 0}
        spec = complete(s, body)["usage"]["speculative"]
        # (A draft's step and the check's pass round differently: a near tie may still differ.)
        check(0.9 * spec["drafted_tokens"] <= spec["accepted_tokens"] > 0,
              f"the model drafting for itself: its greedy drafts kept {spec}")
    finally:
        s.stop()
    check(s.proc.returncode == 0, "the server exits 0 on SIGTERM")
    # Another model's drafts, mostly not kept: the text stays the plain one.
    other = init_model(a.retnet, a.workdir, "other_draft", 11)
    s = Server(a.retnet, model, a.workdir, "draft_other", "--parallel", "4", "--draft-model",
               other, "--state-cache-mib", "0", "--lookup-max-streams", "4")
    try:
        test_concurrent_streams(s, expect_checks=False)
        for sampling in ({"temperature": 0}, {"temperature": 0.9, "seed": 3}):
            body = dict({"prompt": PROMPTS[2], "max_tokens": 40, "n": 2}, **sampling)
            check(text_of(complete(s, body)) == text_of(complete(s, body, OFF)),
                  f"another draft model, n = 2, {sampling}: the plain texts")
    finally:
        s.stop()
    check(s.proc.returncode == 0, "the server exits 0 on SIGTERM")


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    # Every stream speculates, whatever the others do: mixed batches are the case to test.
    s = Server(a.retnet, model, a.workdir, "speculative", "--parallel", "4", "--lookup", "3",
               "--draft-max", "6", "--state-cache-mib", "0", "--lookup-max-streams", "4")
    try:
        test_same_text(s)
        test_concurrent_streams(s)
        test_bad_values(s)
    finally:
        s.stop()
    check(s.proc.returncode == 0, "the server exits 0 on SIGTERM")
    # The default pauses speculation while other streams decode: streams switch between checking
    # passes and the batched step as others come and go, and keep the plain text.
    s = Server(a.retnet, model, a.workdir, "speculative_paused", "--parallel", "4", "--lookup",
               "3", "--state-cache-mib", "0")
    try:
        test_concurrent_streams(s, expect_checks=False)
    finally:
        s.stop()
    check(s.proc.returncode == 0, "the server exits 0 on SIGTERM")
    test_draft_model(a, model)
    test_draft_model_refused(a, model)
    finish("speculative server tests")


if __name__ == "__main__":
    main()
