"""End-to-end tests of `retnet serve` with n > 1 (several choices from one prompt), over loopback.

    /usr/bin/python3 test_choices.py --retnet build/retnet --workdir DIR

Checks: greedy n = 3 gives three texts equal to the n = 1 text; seeded choices are reproducible,
choice 0 equals the request with n = 1 and the others differ; the prompt is read once (prefilled
tokens, usage.prompt_tokens) while usage sums the choices' tokens; streams carry each choice's
index, text and finish chunk; jobs of several choices queue for free slots; --max-n and
--parallel bound n (400 naming n); a client that leaves frees every slot of its choices."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import (Server, check, expect_json_error, finish,  # noqa: E402
                            parse_args, tiny_model, wait_idle)

PROMPT = "The quick brown fox jumps over the lazy dog. " * 3


def texts(r, chat=False):
    return [c["message"]["content"] if chat else c["text"] for c in r["choices"]]


def stream_choices(events, chat):
    """Per choice index: its text and its finish reasons, from SSE payloads."""
    out = {}
    for e in events:
        if e == "[DONE]":
            continue
        for c in json.loads(e).get("choices", []):
            text, reasons = out.setdefault(c["index"], ["", []])
            out[c["index"]][0] = text + (c["delta"].get("content") or "" if chat else c["text"])
            if c["finish_reason"] is not None:
                reasons.append(c["finish_reason"])
    return out


def test_greedy_and_seeded(s):
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0}
    st, one = s.json("POST", "/v1/completions", body)
    prefilled = s.metric("retnet_prompt_tokens_prefilled_total")
    st, three = s.json("POST", "/v1/completions", dict(body, n=3))
    check(st == 200 and len(three["choices"]) == 3, f"n = 3: three choices: {st} {three}")
    check([c["index"] for c in three["choices"]] == [0, 1, 2], "choices are indexed 0, 1, 2")
    check(texts(three) == texts(one) * 3, f"greedy n = 3: three equal texts {texts(three)}")
    u1, u3 = one["usage"], three["usage"]
    check(u3["prompt_tokens"] == u1["prompt_tokens"], f"usage counts the prompt once: {u3}")
    check(u3["completion_tokens"] == 3 * u1["completion_tokens"] and
          u3["total_tokens"] == u3["prompt_tokens"] + u3["completion_tokens"],
          f"usage sums the choices' tokens: {u3}")
    read = s.metric("retnet_prompt_tokens_prefilled_total") - prefilled
    check(read == u1["prompt_tokens"], f"the prompt is read once for n = 3 ({read} tokens)")

    seeded = {"prompt": PROMPT, "max_tokens": 24, "temperature": 1.0, "seed": 77}
    st, alone = s.json("POST", "/v1/completions", seeded)
    st, a = s.json("POST", "/v1/completions", dict(seeded, n=4, logprobs=2))
    st, b = s.json("POST", "/v1/completions", dict(seeded, n=4))
    check(texts(a) == texts(b), "seeded choices are reproducible")
    check(texts(a)[0] == texts(alone)[0], "choice 0 draws what the request with n = 1 draws")
    check(len(set(texts(a))) > 1, f"seeded choices differ by index: {texts(a)}")
    check(all(len(c["logprobs"]["tokens"]) == 24 for c in a["choices"]),
          "each choice has its own log-probabilities")

    st, empty = s.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 0, "n": 2})
    check(st == 200 and texts(empty) == ["", ""] and
          all(c["finish_reason"] == "length" for c in empty["choices"]),
          f"max_tokens 0, n = 2: two empty choices: {st} {empty}")


def test_streams(s):
    messages = [{"role": "user", "content": "Tell me a story."}]
    body = {"messages": messages, "max_tokens": 20, "temperature": 0.8, "seed": 5, "n": 3}
    st, whole = s.json("POST", "/v1/chat/completions", body)
    events = s.stream("/v1/chat/completions",
                      dict(body, stream_options={"include_usage": True}))
    got = stream_choices(events, True)
    check(sorted(got) == [0, 1, 2], f"a stream carries choices 0, 1, 2: {sorted(got)}")
    check([got[i][0] for i in range(3)] == texts(whole, True),
          "each streamed choice's text equals the same request whole")
    check(all(len(got[i][1]) == 1 for i in range(3)), "one finish chunk per choice")
    check(events[-1] == "[DONE]", "the stream ends with [DONE]")
    usage = json.loads(events[-2])["usage"]
    check(usage == whole["usage"], f"the usage chunk sums the choices: {usage}")
    roles = [json.loads(e)["choices"][0]["delta"].get("role") for e in events[:-2]
             if json.loads(e)["choices"]]
    check(roles.count("assistant") == 3, "each choice's first chunk has the role")


def test_queueing_and_limits(s):
    # Two jobs of 3 choices on 4 slots: the second waits for the first's slots.
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0, "n": 3}
    results = [None, None]

    def run(i):
        results[i] = s.json("POST", "/v1/completions", body)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    check(all(r and r[0] == 200 and len(set(texts(r[1]))) == 1 for r in results) and
          texts(results[0][1]) == texts(results[1][1]),
          "two jobs of 3 choices on 4 slots both finish with the same greedy texts")
    for n, what in ((0, "n = 0"), (5, "n above --parallel 4"), (-1, "n = -1")):
        expect_json_error(s, 400, "POST", "/v1/completions", {"prompt": "x", "n": n}, None, "n",
                          what)
    check(wait_idle(s), "no slot leaked")


def test_max_n(retnet, model, workdir):
    s = Server(retnet, model, workdir, "max_n", "--parallel", "4", "--max-n", "2")
    try:
        expect_json_error(s, 400, "POST", "/v1/completions", {"prompt": "x", "n": 3}, None, "n",
                          "n above --max-n 2")
        st, r = s.json("POST", "/v1/completions", {"prompt": "x", "n": 2, "max_tokens": 3})
        check(st == 200 and len(r["choices"]) == 2, f"n = --max-n is served: {st}")
    finally:
        s.stop()


def test_client_leaves(s):
    import socket
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": PROMPT, "max_tokens": 100000, "n": 3, "stream": True,
                       "ignore_eos": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    sock.recv(4096)  # the stream has started
    sock.close()
    check(wait_idle(s, 60), "a streaming client of 3 choices that leaves frees all 3 slots")


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    s = Server(a.retnet, model, a.workdir, "choices", "--parallel", "4", "--state-cache-mib", "0",
               "--max-tokens", "100000")
    try:
        test_greedy_and_seeded(s)
        test_streams(s)
        test_queueing_and_limits(s)
        test_client_leaves(s)
    finally:
        s.stop()
    check(s.proc.returncode == 0, "the server exits 0 on SIGTERM")
    test_max_n(a.retnet, model, a.workdir)
    finish("choices tests")


if __name__ == "__main__":
    main()
