"""End-to-end tests of `retnet serve` over loopback, with only Python's standard library.

    /usr/bin/python3 test_server.py --retnet build/retnet --workdir DIR

Starts the real binary on free 127.0.0.1 ports with a small model made by `retnet init`, and
checks: OpenAI shapes (chat and completions, streamed and not), greedy and seeded output equal to
`retnet generate`, 16 concurrent streams each equal to its solo run, prompts that arrive together
read in batched passes (fewer than one per prompt) with each one's solo text, a disconnecting client freeing
its slot, a --chat-template file with --dtype bf16, the prompt cache (cached_tokens, fewer tokens prefilled, the same text as without it, each
chat turn reading only its new text),
bad requests (the right 4xx and a JSON error naming the field, then a good request succeeds), API
keys, a full queue (429), slot save/restore, --timeout, and SIGTERM ending a stream with an error chunk and
exit status 0; hostile input (bytes that are not UTF-8 in the path, query, headers or body, numbers
out of a field's range, text past --max-prompt-bytes), clients that trickle their requests
(--read-timeout), connection caps (429, 503), numeric options out of range, and SIGTERM while
starting. Every wait is bounded."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import (Server, check, expect_json_error, finish,  # noqa: E402
                            free_port, generate, open_long_stream, parse_args, stream_text,
                            tiny_model, wait_idle)
from hostile_cases import (test_bad_serve_options_and_startup_signal,  # noqa: E402
                           test_hostile_requests, test_slow_and_greedy_clients)

def test_shapes_and_parity(s, retnet, model):
    check(s.json("GET", "/v1/models")[1]["data"][0]["id"] == "tiny", "/v1/models lists the alias")
    st, r = s.json("GET", "/v1/models/tiny")
    check(st == 200 and r["id"] == "tiny", f"GET /v1/models/tiny: {st} {r}")
    st, r = s.json("GET", "/v1/models/gpt-9")
    check(st == 404 and r["error"]["param"] == "model", f"GET /v1/models/gpt-9: {st} {r}")
    st, r = s.json("POST", "/v1/completions", {"model": "gpt-9", "prompt": "x", "max_tokens": 2})
    check(st == 200 and r["model"] == "tiny", f"any model name is served by the model: {st} {r}")
    prompt = "The quick brown fox jumps over the lazy dog. " * 3
    want = generate(retnet, model, prompt, 40, "--temp", "0")
    st, r = s.json("POST", "/v1/completions",
                   {"model": "tiny", "prompt": prompt, "max_tokens": 40, "temperature": 0})
    check(st == 200 and r["object"] == "text_completion", f"completion shape: {st} {r}")
    check(r["choices"][0]["text"] == want, "greedy completion equals retnet generate")
    check(r["choices"][0]["finish_reason"] == "length", "finish_reason length")
    u = r["usage"]
    check(u["completion_tokens"] == 40 and u["total_tokens"] == u["prompt_tokens"] + 40 and
          "cached_tokens" in u["prompt_tokens_details"], f"usage: {u}")
    # Seeded sampling: the same text as `retnet generate -s`.
    want = generate(retnet, model, prompt, 30, "--temp", "0.9", "-s", "1234", "--top-k", "20")
    st, r = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 30,
                                               "temperature": 0.9, "seed": 1234, "top_k": 20})
    check(r["choices"][0]["text"] == want, "seeded completion equals retnet generate -s")
    events = s.stream("/v1/completions", {"prompt": prompt, "max_tokens": 30, "temperature": 0.9,
                                          "seed": 1234, "top_k": 20,
                                          "stream_options": {"include_usage": True}})
    check(events[-1] == "[DONE]", "stream ends with [DONE]")
    check(stream_text(events, False) == want, "streamed completion equals the same request whole")
    check(json.loads(events[-2])["usage"]["completion_tokens"] == 30, "include_usage chunk")
    # Chat: the default template, the same text as generate on the rendered prompt.
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    rendered = "<|system|>\nBe brief.<|end|>\n<|user|>\nHi!<|end|>\n<|assistant|>\n"
    want = generate(retnet, model, rendered, 25, "--temp", "0", "--stop", "<|end|>")
    st, r = s.json("POST", "/v1/chat/completions",
                   {"messages": messages, "max_tokens": 25, "temperature": 0})
    check(st == 200 and r["object"] == "chat.completion" and
          r["choices"][0]["message"]["role"] == "assistant", f"chat shape: {r}")
    check(r["choices"][0]["message"]["content"] == want, "greedy chat equals retnet generate")
    events = s.stream("/v1/chat/completions",
                      {"messages": messages, "max_tokens": 25, "temperature": 0})
    first = json.loads(events[0])
    check(first["object"] == "chat.completion.chunk" and
          first["choices"][0]["delta"].get("role") == "assistant", "first chat chunk has the role")
    check(stream_text(events, True) == want, "streamed chat equals retnet generate")
    # Stop strings end the text before them.
    text = r["choices"][0]["message"]["content"]
    ascii_at = [i for i, ch in enumerate(text) if ch.isascii() and ch.isalnum() and i > 0]
    if check(ascii_at, f"no ASCII letter to stop at in {text!r}"):
        stop = text[ascii_at[0]]
        st, r2 = s.json("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": 25,
                                                         "temperature": 0, "stop": [stop]})
        check(r2["choices"][0]["message"]["content"] == text[:text.find(stop)] and
              r2["choices"][0]["finish_reason"] == "stop", f"stop string: {r2}")
    # Log-probabilities: one per token, the greedy token the most likely.
    st, r = s.json("POST", "/v1/completions",
                   {"prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 3})
    lp = r["choices"][0]["logprobs"]
    check(len(lp["token_logprobs"]) == 5 and all(v <= 0 for v in lp["token_logprobs"]) and
          all(v >= max(t.values()) - 1e-6 for t, v in zip(lp["top_logprobs"],
                                                          lp["token_logprobs"])),
          f"completion logprobs: {lp}")
    st, r = s.json("POST", "/v1/chat/completions", {"messages": messages, "max_tokens": 3,
                                                    "logprobs": True, "top_logprobs": 2})
    content = r["choices"][0]["logprobs"]["content"]
    check(len(content) == 3 and len(content[0]["top_logprobs"]) == 2, "chat logprobs")
    # Tokenize and detokenize.
    st, r = s.json("POST", "/tokenize", {"content": "héllo"})
    check(r["tokens"] == list("héllo".encode()), f"tokenize: {r}")
    st, r = s.json("POST", "/detokenize", {"tokens": list("héllo".encode())})
    check(r["content"] == "héllo", f"detokenize: {r}")


def test_chat_page(ui, no_ui):
    """The chat page at / is self-contained HTML (nothing fetched from elsewhere); --no-ui turns
    it off. (tests/server/chat_page.mjs drives it in a browser.)"""
    conn = http.client.HTTPConnection("127.0.0.1", ui.port, timeout=30)
    conn.request("GET", "/")
    resp = conn.getresponse()
    page = resp.read().decode()
    conn.close()
    check(resp.status == 200 and resp.getheader("Content-Type").startswith("text/html") and
          "<title>retnet chat</title>" in page, f"GET / serves the chat page: {resp.status}")
    # Its one link is the inline icon (a data: URL).
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    check(all(u.startswith("data:") for u in links) and "@import" not in page,
          f"the chat page loads nothing from elsewhere: {[u[:40] for u in links]}")
    check(".innerHTML" not in page, "the chat page never writes text as HTML")
    st, data = no_ui.request("GET", "/")
    check(st == 404 and json.loads(data)["error"]["code"] == "not_found", f"--no-ui: / is {st}")


def test_concurrent_streams(s):
    prompts = [f"Stream number {i} says: " + "abc" * i for i in range(16)]
    body = lambda i: {"prompt": prompts[i], "max_tokens": 48, "temperature": 0.8, "seed": i}
    solo = [s.json("POST", "/v1/completions", body(i))[1]["choices"][0]["text"] for i in range(16)]
    results = [None] * 16

    def run(i):
        try:
            results[i] = stream_text(s.stream("/v1/completions", body(i)), False)
        except Exception as e:  # noqa: BLE001 - reported as a mismatch below
            results[i] = f"error: {e}"

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    check(all(results[i] == solo[i] for i in range(16)),
          f"16 concurrent streams equal their solo runs: "
          f"{[i for i in range(16) if results[i] != solo[i]]}")


def test_batched_prefill(retnet, model, workdir):
    """Prompts that arrive together are read in batched passes and give the text each gives alone;
    `--prefill-batch 1` reads one prompt per pass and gives the same text in more passes; the
    default (auto) reads a small model's prompts together. A large embeddings request holds the
    model meanwhile, so the prompts queue up and are read together."""
    prompts = [f"Prompt {i} of the batch reads " + "word " * (3 * i) for i in range(8)]
    body = lambda i: {"prompt": prompts[i], "max_tokens": 8, "temperature": 0}
    hold = {"input": ["Hold the model for a while. " * 70] * 40}
    passes, texts = {}, {}
    for batch in ("0", "1", "auto"):
        s = Server(retnet, model, workdir, f"prefill-batch-{batch}", "--parallel", "8",
                   "--state-cache-mib", "0", "--no-ui", "--prefill-batch", batch)
        try:
            solo = [s.json("POST", "/v1/completions", body(i))[1]["choices"][0]["text"]
                    for i in range(8)]
            before = s.metric("retnet_prefill_passes_total")
            results = [None] * 8

            def run(i):
                try:
                    results[i] = s.json("POST", "/v1/completions", body(i))[1]["choices"][0]["text"]
                except Exception as e:  # noqa: BLE001 - reported as a mismatch below
                    results[i] = f"error: {e}"

            holder = threading.Thread(target=s.json, args=("POST", "/v1/embeddings", hold))
            holder.start()
            time.sleep(0.05)
            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads + [holder]:
                t.join(timeout=120)
            passes[batch] = s.metric("retnet_prefill_passes_total") - before
            texts[batch] = solo
            check(results == solo, f"--prefill-batch {batch}: prompts read together give the "
                  f"text each gives alone: {[i for i in range(8) if results[i] != solo[i]]}")
        finally:
            s.stop()
    check(texts["0"] == texts["1"] == texts["auto"],
          "the same text with prompts read together or one per pass")
    for batch in ("0", "auto"):
        check(passes[batch] < passes["1"], f"prompts read together ({batch}) take fewer passes: "
              f"{passes[batch]} against {passes['1']}")


def test_disconnect(s):
    before = s.metric("retnet_requests_cancelled_total")
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": "Never ending story", "max_tokens": 100000, "stream": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  f"\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(4096)
    busy = s.metric("retnet_slots_busy")
    sock.close()
    check(busy == 1, f"a streaming request holds a slot ({busy})")
    check(wait_idle(s), "a client that disconnects mid-stream frees its slot")
    check(s.metric("retnet_requests_cancelled_total") == before + 1, "the cancel is counted")
    # Non-streamed: nothing is written until the end, yet the slot frees promptly.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    body = json.dumps({"prompt": "Never ending story", "max_tokens": 100000})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  f"\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    deadline = time.time() + 15
    while time.time() < deadline and s.metric("retnet_slots_busy") == 0:
        time.sleep(0.02)
    busy = s.metric("retnet_slots_busy")
    sock.close()
    t0 = time.time()
    check(busy == 1, f"a non-streamed request holds a slot ({busy})")
    check(wait_idle(s, 5), "a non-streamed client that disconnects frees its slot")
    check(time.time() - t0 < 3, f"... promptly ({time.time() - t0:.2f} s)")
    check(s.metric("retnet_requests_cancelled_total") == before + 2, "that cancel is counted")


def test_slow_reader(s):
    """A client that stops reading for a while (a browser busy drawing, a slow link) keeps its
    stream: the server's writes wait for it (up to --timeout), they do not give up after the HTTP
    library's default of 5 s."""
    sock, _ = open_long_stream(s.port, "A slow reader", "Content-Type: application/json\r\n",
                               receive_buffer=4096)
    time.sleep(9)
    # What the buffers held (about 2 MB on loopback) comes first; then the stream must go on to
    # its end ([DONE], at --max-tokens) or still be running after 4 s.
    got, deadline, ended = b"", time.time() + 4, False
    while time.time() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            ended = True
            break
        got += chunk
    sock.close()
    complete = b"data: [DONE]" in got
    check((complete or not ended) and b'"error"' not in got,
          f"a stream paused by its reader for 9 s goes on ({got.count(b'data: ')} events after it;"
          f" closed by the server: {ended}, complete: {complete})")
    check(wait_idle(s), "the slow reader's slot frees when it leaves")


def test_prompt_cache(cached, uncached):
    base = "Once upon a time, in a land of recurrent states, " * 4
    follow = base + "a second question arrived."
    for s in (cached, uncached):
        st, r = s.json("POST", "/v1/completions", {"prompt": base, "max_tokens": 8,
                                                   "temperature": 0})
    prefilled0 = cached.metric("retnet_prompt_tokens_prefilled_total")
    st, hit = cached.json("POST", "/v1/completions", {"prompt": follow, "max_tokens": 32,
                                                      "temperature": 0.7, "seed": 9})
    prefilled = cached.metric("retnet_prompt_tokens_prefilled_total") - prefilled0
    st, miss = uncached.json("POST", "/v1/completions", {"prompt": follow, "max_tokens": 32,
                                                         "temperature": 0.7, "seed": 9})
    n = hit["usage"]["prompt_tokens"]
    c = hit["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(c > 0 and prefilled == n - c, f"cache hit: cached {c}, prefilled {prefilled} of {n}")
    check(miss["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "no cache: nothing cached")
    check(hit["choices"][0]["text"] == miss["choices"][0]["text"],
          "the same text with the prompt cache on and off")
    check(cached.metric("retnet_prompt_cache_hits_total") >= 1 and
          cached.metric("retnet_prompt_cache_tokens_saved_total") >= c, "cache metrics")


def test_logit_bias(s):
    """A bias of 100 forces its token; -100 bans tokens (the tiny model's vocabulary is bytes)."""
    ask = {"prompt": "The sea", "max_tokens": 6, "temperature": 0}
    st, forced = s.json("POST", "/v1/completions", {**ask, "logit_bias": {"65": 100}})
    check(st == 200 and forced["choices"][0]["text"] == "AAAAAA", f"forced 'A': {forced}")
    upper = range(ord("A"), ord("Z") + 1)
    banned = {str(t): -100 for t in range(256) if t not in upper}
    st, r = s.json("POST", "/v1/completions", {**ask, "temperature": 1, "seed": 3,
                                               "logit_bias": banned})
    text = r["choices"][0]["text"] if st == 200 else ""
    check(len(text) == 6 and all(ord(c) in upper for c in text),
          f"all but A-Z banned: {st} {text!r}")


def test_seed_reported(s):
    """A reply names its seed, the server's pick when the request named none: sending that seed
    back gives the same text."""
    ask = {"prompt": "Pick a seed.", "max_tokens": 12, "temperature": 1}
    st, picked = s.json("POST", "/v1/completions", ask)
    check(st == 200 and isinstance(picked.get("seed"), int), f"the seed is reported: {picked}")
    st, again = s.json("POST", "/v1/completions", {**ask, "seed": picked["seed"]})
    check(again.get("seed") == picked["seed"] and
          again["choices"][0]["text"] == picked["choices"][0]["text"],
          f"the reported seed reproduces the text: {picked} vs {again}")
    events = s.stream("/v1/completions", {**ask, "seed": -7})
    check(all(json.loads(e)["seed"] == -7 for e in events[:-1]), "every chunk names the seed")


def test_state_copies(s):
    """A request's state stays in its slot from prompt to last token: one that misses the prompt
    cache copies one state (into the cache, at its last chunk boundary), one that hits copies at
    most two (out of the cache, and its own boundary state back in). The server's prompts here
    fit one prefill block (16 tokens; a longer prompt leaves a state per block it reads)."""
    # The tiny model's state: 2 layers x 4 heads x d_k 8 x (d_v 12 + 1) floats.
    state = 2 * 4 * 8 * 13 * 4

    def copied(prompt):
        before = s.metric("retnet_state_bytes_copied_total")
        st, r = s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 5,
                                                   "temperature": 0})
        check(st == 200, f"request: {st} {r}")
        return s.metric("retnet_state_bytes_copied_total") - before, r

    miss, r = copied("Copy me once.")  # 13 byte tokens: a boundary at 8
    check(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "a new prompt misses")
    check(miss == state, f"a miss copies one state ({state} bytes): {miss}")
    hit, r = copied("Copy me once. Then?")  # 19 tokens: 8 from the cache, a boundary at 16
    check(r["usage"]["prompt_tokens_details"]["cached_tokens"] == 8, f"it hits: {r['usage']}")
    check(0 < hit <= 2 * state, f"a hit copies at most two states ({2 * state} bytes): {hit}")


def test_chat_turns_read_only_new_text(s):
    """Each turn of a chat restores the previous turn's prompt from the cache (up to its last
    chunk boundary, chunks of 8 tokens here) and reads only the rest."""
    messages = [{"role": "system", "content": "You are a terse assistant."}]
    previous = 0
    for turn in range(5):
        messages.append({"role": "user", "content": f"Question number {turn}: why?"})
        st, r = s.json("POST", "/v1/chat/completions",
                       {"messages": messages, "max_tokens": 12, "temperature": 0})
        u = r["usage"]
        if turn > 0:
            check(u["prompt_tokens_details"]["cached_tokens"] >= previous - 7,
                  f"turn {turn}: cached {u['prompt_tokens_details']['cached_tokens']} of the "
                  f"previous prompt's {previous} tokens")
        previous = u["prompt_tokens"]
        messages.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})


def test_bad_requests(s, headers):
    def expect(status, body, param=None, path="/v1/completions", what=""):
        expect_json_error(s, status, "POST", path, body, headers, param, what)

    good = {"prompt": "hello", "max_tokens": 4}
    expect(400, b'{"prompt": "x", ', what="malformed JSON")
    expect(400, b'[1, 2]', what="not an object")
    expect(400, {"prompt": "x", "temperature": "hot"}, "temperature", what="wrong type")
    expect(400, {"prompt": "x", "max_tokens": 2.5}, "max_tokens", what="fractional max_tokens")
    expect(400, {"prompt": "x", "stop": [1]}, "stop[0]", what="bad stop")
    expect(400, {"prompt": 7}, "prompt", what="prompt of a wrong type")
    expect(400, {"prompt": ""}, "prompt", what="empty prompt")
    expect(400, b'{"prompt": "\xff\xfe"}', what="invalid UTF-8")
    expect(400, {"prompt": "x", "max_tokens": -1}, "max_tokens", what="negative max_tokens")
    expect(400, {"prompt": "x", "n": 9}, "n", what="n above --max-n")
    expect(400, {"messages": "hi"}, "messages", path="/v1/chat/completions", what="bad messages")
    expect(400, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content",
           path="/v1/chat/completions", what="bad content")
    expect(413, b'{"prompt": "' + b"a" * (10 << 20) + b'"}', what="10 MB body")
    st, r = s.json("POST", "/v1/completions", good, headers)
    check(st == 200 and r["usage"]["completion_tokens"] == 4, "a good request after bad ones")


def test_cors(port):
    """--cors-origin: the allowed origin's preflight (no key) is answered and its requests carry
    Access-Control-Allow-Origin; another origin's preflight is 403."""
    def exchange(method, origin, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request(method, "/v1/chat/completions", headers=dict(headers or {}, Origin=origin))
            resp = conn.getresponse()
            resp.read()
            return resp.status, resp.getheader("Access-Control-Allow-Origin")
        finally:
            conn.close()
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    st, allow = exchange("OPTIONS", "http://app.example", preflight)
    check(st == 204 and allow == "http://app.example", f"allowed preflight: {st} {allow}")
    st, allow = exchange("OPTIONS", "http://evil.example", preflight)
    check(st == 403 and allow is None, f"another origin's preflight: {st} {allow}")
    st, allow = exchange("POST", "http://app.example", {"Authorization": "Bearer k1"})
    check(allow == "http://app.example", f"a request from the allowed origin carries it: {st}")


def test_keys_and_queue(retnet, model, workdir):
    s = Server(retnet, model, workdir, "keyed", "--api-key", "k1", "--api-key", "secret-two",
               "--parallel", "1", "--max-queue", "0", "--max-tokens", "100000",
               "--cors-origin", "http://app.example")
    try:
        check(s.request("GET", "/health")[0] == 200, "/health needs no key")
        test_cors(s.port)
        for hdr, what in (({}, "missing key"), ({"Authorization": "Bearer nope"}, "wrong key"),
                          ({"Authorization": "secret-two"}, "no Bearer")):
            st, data = s.request("GET", "/v1/models", headers=hdr)
            check(st == 401 and json.loads(data)["error"]["code"] == "invalid_api_key", what)
            st, data = s.request("POST", "/v1/completions", {"prompt": "x"}, hdr)
            check(st == 401, f"{what} on completions")
        ok = {"Authorization": "Bearer secret-two"}
        check(s.request("GET", "/v1/models", headers=ok)[0] == 200, "right key")
        test_bad_requests(s, ok)
        # One slot, no queue: a second request while a stream runs is refused at once.
        sock, got = open_long_stream(s.port, "long", "Authorization: Bearer k1\r\n")
        t0 = time.time()
        st, data = s.request("POST", "/v1/completions", {"prompt": "x"}, ok)
        check(st == 429 and json.loads(data)["error"]["type"] == "rate_limit_exceeded" and
              time.time() - t0 < 5, f"a full queue answers 429 at once: {st}")
        sock.close()
        check(wait_idle(s), "the slot frees after the disconnect")
        check(s.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, ok)[0] == 200,
              "a request succeeds after the 429")
    finally:
        s.stop()
    check(s.proc.returncode == 0, f"keyed server exit status {s.proc.returncode}")


def test_queued_client_leaves(retnet, model, workdir):
    """A non-streamed request waits in the queue behind a stream; its client leaves; the stream
    ends: nothing is left waiting, and the server still stops at once on SIGTERM."""
    s = Server(retnet, model, workdir, "queue", "--parallel", "1", "--max-queue", "4",
               "--max-tokens", "100000")
    try:
        sock, got = open_long_stream(s.port, "long")
        queued = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        body = json.dumps({"prompt": "queued", "max_tokens": 5})
        queued.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                        f"{len(body)}\r\n\r\n{body}").encode())
        deadline = time.time() + 15
        while time.time() < deadline and s.metric("retnet_queue_depth") < 1:
            time.sleep(0.02)
        check(s.metric("retnet_queue_depth") == 1, "the second request waits in the queue")
        queued.close()
        time.sleep(0.5)
        sock.close()
        check(wait_idle(s), "the slot frees")
        check(s.metric("retnet_queue_depth") == 0, "the queue is empty")
        st, r = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        check(st == 200, f"a request after that succeeds: {st}")
        t0 = time.time()
    finally:
        s.stop()
    check(s.proc.returncode == 0 and time.time() - t0 < 10,
          f"the server stops at once on SIGTERM: status {s.proc.returncode}")


def test_slots_save_restore(retnet, model, workdir):
    save_dir = os.path.join(workdir, "slots")
    os.makedirs(save_dir, exist_ok=True)
    s = Server(retnet, model, workdir, "slots", "--slot-save-dir", save_dir, "--parallel", "1")
    try:
        prompt = "Remember this conversation, please. " * 3
        s.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 6, "temperature": 0})
        st, r = s.json("POST", "/slots/0?action=save", {"filename": "conv.bin"})
        check(st == 200 and os.path.exists(os.path.join(save_dir, "conv.bin")), f"save: {r}")
        for name in ("../escape.bin", "/tmp/x", ".hidden", "a/b"):
            st, r = s.json("POST", "/slots/0?action=save", {"filename": name})
            check(st == 400 and r["error"]["param"] == "filename", f"file name {name!r} refused")
        st, r = s.json("POST", "/slots/5?action=save", {"filename": "x.bin"})
        check(st == 400, "unknown slot refused")
        st, r = s.json("POST", "/slots/0?action=restore", {"filename": "conv.bin"})
        check(st == 200 and r["n_restored"] > 0, f"restore: {r}")
        st, r = s.json("POST", "/slots/0?action=restore", {"filename": "missing.bin"})
        check(st == 400, f"restoring a missing file: {st}")
        st, r = s.json("POST", "/slots/0?action=erase", {})
        check(st == 200 and r["n_erased"] > 0, f"erase: {st} {r}")
        st, r = s.json("POST", "/slots/0?action=save", {"filename": "after-erase.bin"})
        check(st == 400 and "nothing to save" in r["error"]["message"], f"erased: {st} {r}")
        st, r = s.json("POST", "/slots/0?action=wipe", {})
        check(st == 400 and r["error"]["param"] == "action", f"an unknown action is named: {r}")
    finally:
        s.stop()


def test_timeout(retnet, model, workdir):
    s = Server(retnet, model, workdir, "timeout", "--timeout", "1", "--max-tokens", "100000000")
    try:
        t0 = time.time()
        st, r = s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 100000000})
        check(st == 504 and r["error"]["type"] == "timeout_error" and time.time() - t0 < 10,
              f"--timeout ends a long request with 504: {st} {r}")
        events = s.stream("/v1/completions", {"prompt": "x", "max_tokens": 100000000})
        check("error" in json.loads(events[-2]) and events[-1] == "[DONE]",
              "--timeout ends a stream with an error chunk")
        check(wait_idle(s), "a request past --timeout frees its slot")
    finally:
        s.stop()


def test_sigterm(retnet, model, workdir):
    s = Server(retnet, model, workdir, "sigterm", "--max-tokens", "100000")
    sock, got = open_long_stream(s.port, "endless")
    s.proc.send_signal(signal.SIGTERM)
    deadline = time.time() + 20
    while time.time() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    sock.close()
    tail = got.decode(errors="replace")[-2000:]
    check('"error"' in tail and "data: [DONE]" in tail, "SIGTERM ends a stream with an error chunk")
    try:
        s.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        s.proc.kill()
    s.log.close()
    check(s.proc.returncode == 0, f"SIGTERM: exit status {s.proc.returncode}")


def test_chat_template_file_and_dtype(retnet, model, workdir):
    """--chat-template FILE renders chats with that Jinja template; --dtype bf16 serves the half
    copy of the weights: greedy chat equals `retnet generate --dtype bf16` on the rendered text. A
    template that does not parse stops the server at start, naming the file."""
    template = os.path.join(workdir, "bracket.jinja")
    with open(template, "w") as f:
        f.write("{% for m in messages %}[{{ m.role | upper }}] {{ m.content | trim }}\n{% endfor %}"
                "{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
    s = Server(retnet, model, workdir, "template", "--chat-template", template, "--dtype", "bf16")
    try:
        messages = [{"role": "user", "content": "  Tell me a tale. "}]
        want = generate(retnet, model, "[USER] Tell me a tale.\n[ASSISTANT] ", 20, "--temp", "0",
                        "--dtype", "bf16")
        st, r = s.json("POST", "/v1/chat/completions",
                       {"messages": messages, "max_tokens": 20, "temperature": 0})
        check(st == 200 and r["choices"][0]["message"]["content"] == want,
              f"--chat-template FILE with --dtype bf16 equals generate: {st} {r}")
    finally:
        s.stop()
    broken = os.path.join(workdir, "broken.jinja")
    with open(broken, "w") as f:
        f.write("{% for m in messages %}{{ m.content }")
    out = subprocess.run([retnet, "serve", "-m", model, "--port", str(free_port()),
                          "--chat-template", broken], capture_output=True, text=True, timeout=60)
    check(out.returncode != 0 and "broken.jinja" in out.stderr,
          f"a broken template stops the server naming it: {out.returncode} {out.stderr[-300:]}")


def main():
    a = parse_args()
    model = tiny_model(a.retnet, a.workdir)
    # Small prefill blocks, so that prompts are read in several blocks between decode steps.
    main_server = Server(a.retnet, model, a.workdir, "main", "--alias", "tiny", "--parallel", "8",
                         "--max-tokens", "100000", "--prefill-block", "16")
    uncached = Server(a.retnet, model, a.workdir, "uncached", "--state-cache-mib", "0", "--no-ui")
    try:
        test_shapes_and_parity(main_server, a.retnet, model)
        test_chat_page(main_server, uncached)
        test_concurrent_streams(main_server)
        test_disconnect(main_server)
        test_slow_reader(main_server)
        test_prompt_cache(main_server, uncached)
        test_state_copies(main_server)
        test_logit_bias(main_server)
        test_seed_reported(main_server)
        test_chat_turns_read_only_new_text(main_server)
        test_hostile_requests(main_server)
        check(wait_idle(main_server), "no slot leaked")
    finally:
        main_server.stop()
        uncached.stop()
    check(main_server.proc.returncode == 0, "main server exits 0 on SIGTERM")
    test_batched_prefill(a.retnet, model, a.workdir)
    test_keys_and_queue(a.retnet, model, a.workdir)
    test_queued_client_leaves(a.retnet, model, a.workdir)
    test_slots_save_restore(a.retnet, model, a.workdir)
    test_timeout(a.retnet, model, a.workdir)
    test_sigterm(a.retnet, model, a.workdir)
    test_chat_template_file_and_dtype(a.retnet, model, a.workdir)
    test_slow_and_greedy_clients(a.retnet, model, a.workdir)
    test_bad_serve_options_and_startup_signal(a.retnet, model, a.workdir)
    finish("server tests")


if __name__ == "__main__":
    main()
