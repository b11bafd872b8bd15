"""End-to-end tests of what front ends read from `retnet serve` beside the text, over loopback.

    /usr/bin/python3 test_front_end.py --retnet build/retnet --workdir DIR

Checks: one access-log line per request (client, method, path, status, tokens, ms) written once a
stream has ended, no prompt text without --log-prompts and the JSON-escaped text with it, odd bytes
in a path percent-encoded; response ids random (chatcmpl-/cmpl- and 24 hex digits), unique, one
per stream and not repeated by a restarted server; llama-server's `timings` agreeing with `usage`;
/tokenize with_pieces, /tokenize and /detokenize refusing other fields; POST /v1/embeddings (inputs
as text or token ids, mean and last pooling, normalization, base64, refusals); GET /props
reporting the server's flags and no key."""
import base64
import json
import math
import os
import re
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, check, finish, parse_args, tiny_model  # noqa: E402

MARKER = "zebra marker 7319"
LINE = re.compile(r"^retnet serve: (\S+) (\S+) (\S+) (\d{3})"
                  r"(?: prompt_tokens=(\d+) cached_tokens=(\d+) completion_tokens=(\d+))?"
                  r" ms=(\d+\.\d)(?: prompt=(.*))?$")


def log_lines(s):
    """The access-log lines, less the harness's /health probes: the line of the probe that found
    the server up may be written after a test has begun counting."""
    with open(s.log_path) as f:
        return [m for m in map(LINE.match, f.read().splitlines()) if m and m.group(3) != "/health"]


def wait_lines(s, count, seconds=30):
    """The access-log lines once there are `count` (written after each response is sent)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        lines = log_lines(s)
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    return log_lines(s)


def test_access_log(s):
    before = len(wait_lines(s, 0))
    prompt = f"{MARKER}: once upon a time"
    st, r = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 7})
    events = s.stream("/v1/chat/completions",
                      {"messages": [{"role": "user", "content": MARKER}], "max_tokens": 9,
                       "stream_options": {"include_usage": True}})
    streamed = json.loads(events[-2])["usage"]
    s.request("GET", "/no/such/route")
    s.request("GET", "/odd%0Apath%20here")
    lines = wait_lines(s, before + 4)[before:]
    check(len(lines) == 4, f"one access-log line per request: {[m.group(0) for m in lines]}")
    if len(lines) < 4:
        return
    # A stream's line is written when its response ends, which may be after the client has
    # read [DONE] and sent its next request: the lines are matched by path, not order.
    by_path = {m.group(3): m for m in lines}
    if len(by_path) != 4:
        check(False, f"one line per path: {[m.group(0) for m in lines]}")
        return
    plain, chat, missing, odd = (by_path.get(p) for p in (
        "/v1/completions", "/v1/chat/completions", "/no/such/route", "/odd%0Apath%20here"))
    if None in (plain, chat, missing, odd):
        check(False, f"a line for each request's path: {[m.group(0) for m in lines]}")
        return
    u = r["usage"]
    check(plain.group(1) == "127.0.0.1" and plain.group(2, 3, 4) ==
          ("POST", "/v1/completions", "200"), f"completion line: {plain.group(0)}")
    check(tuple(map(int, plain.group(5, 6, 7))) ==
          (u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
           u["completion_tokens"]), f"the line's tokens are the usage's: {plain.group(0)} {u}")
    check(chat.group(3) == "/v1/chat/completions" and
          int(chat.group(7)) == streamed["completion_tokens"] == 9,
          f"a stream's line is written when it ends, with its tokens: {chat.group(0)}")
    check(missing.group(3, 4) == ("/no/such/route", "404") and missing.group(5) is None,
          f"a 404's line, without tokens: {missing.group(0)}")
    check(odd.group(3) == "/odd%0Apath%20here",
          f"a path's control bytes and spaces are percent-encoded: {odd.group(0)}")
    check(all(math.isfinite(float(m.group(8))) for m in lines), "ms on every line")
    check(MARKER not in open(s.log_path).read(), "no prompt text without --log-prompts")


def test_log_prompts(retnet, model, workdir):
    s = Server(retnet, model, workdir, "log_prompts", "--log-prompts")
    try:
        prompt = f"{MARKER}\nsecond \"line\""
        s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2})
        lines = wait_lines(s, 1)
        check(lines and lines[-1].group(9) == json.dumps(prompt),
              f"--log-prompts: the prompt JSON-escaped on its line: "
              f"{lines[-1].group(0) if lines else None}")
        st, r = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        return r["id"]
    finally:
        s.stop()


def test_ids(s):
    ids = []
    for chat in (False, True):
        for _ in range(10):
            body = {"max_tokens": 1}
            if chat:
                body["messages"] = [{"role": "user", "content": "hi"}]
            else:
                body["prompt"] = "hi"
            ids.append(s.json("POST", "/v1/chat/completions" if chat else "/v1/completions",
                              body)[1]["id"])
    check(all(re.fullmatch(r"cmpl-[0-9a-f]{24}", i) for i in ids[:10]) and
          all(re.fullmatch(r"chatcmpl-[0-9a-f]{24}", i) for i in ids[10:]),
          f"ids are chatcmpl-/cmpl- and 24 hex digits: {ids[:2]} {ids[-2:]}")
    check(len(set(ids)) == len(ids), "ids are unique")
    events = s.stream("/v1/completions", {"prompt": "hi", "max_tokens": 5})
    stream_ids = {json.loads(e)["id"] for e in events if e != "[DONE]"}
    check(len(stream_ids) == 1 and not stream_ids & set(ids), f"one new id per stream: {stream_ids}")
    return ids


def test_timings(s):
    prompt = "The timings of a completion: " * 4
    for repeat in range(2):
        st, r = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 12, "n": 2})
        t, u = r.get("timings", {}), r["usage"]
        names = ("cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                 "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second")
        if not check(set(names) <= set(t), f"timings has llama-server's fields: {t}"):
            return
        check(all(isinstance(t[k], (int, float)) and math.isfinite(t[k]) and t[k] >= 0
                  for k in names), f"timings are finite and not negative: {t}")
        check(t["predicted_n"] == u["completion_tokens"] == 24 and
              t["cache_n"] == u["prompt_tokens_details"]["cached_tokens"] and
              t["prompt_n"] + t["cache_n"] == u["prompt_tokens"], f"timings agree with usage: {t} {u}")
        check(t["predicted_ms"] > 0 and
              abs(t["predicted_per_second"] - 1e3 * t["predicted_n"] / t["predicted_ms"]) <=
              1e-6 * t["predicted_per_second"], f"predicted_per_second is n / ms: {t}")
        if repeat == 1:
            check(t["cache_n"] > 0, f"a repeated prompt's timings count cached tokens: {t}")
    events = s.stream("/v1/completions", {"prompt": prompt, "max_tokens": 5})
    finals = [json.loads(e) for e in events if e != "[DONE]" and
              json.loads(e)["choices"] and json.loads(e)["choices"][0]["finish_reason"]]
    check(len(finals) == 1 and finals[0].get("timings", {}).get("predicted_n") == 5,
          f"a stream's finish chunk carries the timings: {finals}")


def test_tokenize_pieces(s):
    content = "h\u00e9llo"
    st, plain = s.json("POST", "/tokenize", {"content": content})
    st, r = s.json("POST", "/tokenize", {"content": content, "with_pieces": True})
    check(st == 200 and [t["id"] for t in r["tokens"]] == plain["tokens"],
          f"with_pieces: the same ids, with pieces: {st} {r}")
    pieces = [t["piece"] for t in r["tokens"]]
    check(pieces[0] == "h" and pieces[1] == [0xC3] and pieces[2] == [0xA9] and pieces[3] == "l",
          f"a piece is text, or its bytes where they are not UTF-8 alone: {pieces}")
    joined = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in pieces)
    check(joined == content.encode(), f"the pieces' bytes are the content's: {joined!r}")
    st, r = s.json("POST", "/tokenize", {"content": content, "with_pieces": "yes"})
    check(st == 400 and r["error"]["param"] == "with_pieces", f"with_pieces must be a bool: {r}")
    for path, body in (("/tokenize", {"content": content, "add_special": True}),
                       ("/detokenize", {"tokens": [104], "add_special": True})):
        st, r = s.json("POST", path, body)
        check(st == 400 and r["error"]["param"] == "add_special" and
              "add_special" in r["error"]["message"], f"{path} refuses a field by name: {st} {r}")


def test_embeddings(s):
    def embed(**body):
        st, r = s.json("POST", "/v1/embeddings", body)
        check(st == 200, f"/v1/embeddings {body}: {st} {r}")
        return r if st == 200 else {"data": [{"index": 0, "embedding": []}] * 20,
                                      "usage": {"prompt_tokens": -1, "total_tokens": -2}}

    def near(a, b, tol):
        return len(a) == len(b) and all(math.isfinite(x) and math.isfinite(y) and
                                        abs(x - y) <= tol * (1 + abs(y)) for x, y in zip(a, b))

    ids = s.json("POST", "/tokenize", {"content": "a quiet sea"})[1]["tokens"]
    one = embed(input="a quiet sea")
    v = one["data"][0]["embedding"] if one["data"] else []
    check(one.get("object") == "list" and len(v) > 0 and
          abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 and
          one["usage"]["prompt_tokens"] == one["usage"]["total_tokens"] >= len(ids),
          f"a string: one L2-normalized vector and its tokens: {one['usage']} {v[:4]}")
    many = embed(input=["a quiet sea", "wind"])
    check([d["index"] for d in many["data"]] == [0, 1] and
          near(many["data"][0]["embedding"], v, 1e-6) and
          not near(many["data"][1]["embedding"], v, 1e-3),
          "a list of strings: one vector each, in order, each as alone")
    by_ids = embed(input=[ids, ids[:2]])
    check(len(by_ids["data"]) == 2 and by_ids["usage"]["prompt_tokens"] == len(ids) + 2 and
          near(embed(input=ids)["data"][0]["embedding"], by_ids["data"][0]["embedding"], 1e-6),
          f"token ids, and lists of them: {by_ids['usage']}")
    # Mean pooling is the mean of each position's hidden state, which (the model being causal)
    # is the last position's of each prefix.
    raw = embed(input=ids, embd_normalize=-1)["data"][0]["embedding"]
    prefixes = embed(input=[ids[:k] for k in range(1, len(ids) + 1)], pooling="last",
                     embd_normalize=-1)["data"]
    mean = [sum(p["embedding"][k] for p in prefixes) / len(prefixes) for k in range(len(raw))]
    check(near(raw, mean, 1e-4), f"mean pooling averages the positions: {raw[:3]} {mean[:3]}")
    norm = math.sqrt(sum(x * x for x in raw))
    check(norm > 0 and near(embed(input=ids)["data"][0]["embedding"], [x / norm for x in raw],
                            1e-5), "embd_normalize 2 (the default) is raw / its L2 norm")
    b64 = embed(input="a quiet sea", encoding_format="base64")["data"][0]["embedding"]
    unpacked = list(struct.unpack(f"<{len(v)}f", base64.b64decode(b64)))
    check(unpacked == v, "base64: the same float32 values, little-endian")
    for body, param in (({"input": "x", "dimensions": 8}, "dimensions"),
                        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
                        ({"input": "x", "pooling": "cls"}, "pooling"),
                        ({"input": []}, "input"), ({"input": [[1, "x"]]}, "input[0]"),
                        ({"input": [10 ** 7]}, "input"), ({"input": ""}, "input")):
        st, r = s.json("POST", "/v1/embeddings", body)
        check(st == 400 and r["error"]["param"] == param, f"refused by name: {body}: {st} {r}")


def test_props(retnet, model, workdir):
    s = Server(retnet, model, workdir, "props", "--alias", "tiny", "--parallel", "3",
               "--max-n", "2", "--max-tokens", "77", "--api-key", "sekrit-key-1")
    try:
        st, _ = s.json("GET", "/props")
        check(st == 401, f"/props needs the key: {st}")
        st, data = s.request("GET", "/props", headers=s.auth)
        p = json.loads(data)
        check(st == 200 and p["model"] == "tiny" and p["total_slots"] == 3 and
              p["limits"]["max_n"] == 2 and p["limits"]["max_tokens"] == 77 and
              p["default_generation_settings"]["params"]["n_predict"] == 77 and
              p["default_generation_settings"]["params"]["temperature"] == 0.8 and
              p["api_key_required"] is True and p["model_meta"]["vocab_size"] == 256,
              f"/props reports the flags: {st} {p}")
        check(b"sekrit" not in data, "/props does not show the key")
    finally:
        s.stop()


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    s = Server(a.retnet, model, a.workdir, "front_end", "--parallel", "4")
    try:
        test_access_log(s)
        ids = test_ids(s)
        test_timings(s)
        test_tokenize_pieces(s)
        test_embeddings(s)
    finally:
        s.stop()
    restarted = test_log_prompts(a.retnet, model, a.workdir)
    check(restarted not in ids, f"another server process gives new ids: {restarted}")
    test_props(a.retnet, model, a.workdir)
    finish("front-end tests")


if __name__ == "__main__":
    main()
