"""`n` choices by forking one prompt's state against `n` separate requests, over loopback.

    /usr/bin/python3 scripts/bench_serve_fork.py --retnet build/retnet --model M [--n 8]
        [--prompt-tokens 512] [--tokens 64] [--reps 5] [--threads N] [--json out.json]

Starts `retnet serve` (--parallel n, prompt cache off so that the separate requests each read
their prompt, as distinct clients' would), then alternates, `reps` times after a warm-up of each:
one streaming request with `n` choices, and `n` concurrent streaming requests with n = 1 (the
baseline), all on the same prompt with the same seed, ignore_eos, `--tokens` each. Reports the
median and spread of the time to first token (until every one of the n choices has its first
text) and of the total time (the last [DONE]), and the baseline / fork ratios.
"""
import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import free_port, rss_bytes, served_model_meta  # noqa: E402


def stream(port, body, out):
    """Streams one completion; out: {first: [seconds to each choice's first text], end}."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    first, buf, done = {}, b"", False
    while not done:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event == b"data: [DONE]":
                done = True
            elif event.startswith(b"data: "):
                for c in json.loads(event[6:]).get("choices", []):
                    if c.get("text") and c["index"] not in first:
                        first[c["index"]] = time.perf_counter() - t0
    conn.close()
    assert done, "the stream ended without [DONE]"
    out.update(first=list(first.values()), end=time.perf_counter() - t0)


def round_of(port, bodies):
    """Runs the bodies concurrently: (time until every choice has its first text, time to the
    last end)."""
    outs = [{} for _ in bodies]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(port, b, o)) for b, o in zip(bodies, outs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return max(f for o in outs for f in o["first"]), elapsed


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--retnet", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()

    port = free_port()
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(
        [a.retnet, "serve", "-m", a.model, "--port", str(port), "--parallel", str(a.n),
         "--max-n", str(a.n), "--state-cache-mib", "0", "--max-tokens", str(a.tokens),
         "--max-prompt-tokens", str(4 * a.prompt_tokens + 64), "--threads", str(a.threads)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        meta = served_model_meta(port, server)
        # A prompt of about --prompt-tokens tokens (byte-level vocabularies: one per byte).
        prompt = ("Once upon a time, in a land far away, there lived a curious fox. " *
                  (a.prompt_tokens // 60 + 1))[:a.prompt_tokens]
        body = {"prompt": prompt, "max_tokens": a.tokens, "temperature": 0.8, "seed": 7,
                "ignore_eos": True}
        forked = [dict(body, n=a.n)]
        separate = [body] * a.n
        round_of(port, forked)
        round_of(port, separate)
        fork_ttft, fork_total, sep_ttft, sep_total = [], [], [], []
        for _ in range(a.reps):
            f, t = round_of(port, forked)
            fork_ttft.append(f)
            fork_total.append(t)
            f, t = round_of(port, separate)
            sep_ttft.append(f)
            sep_total.append(t)
        peak_rss = rss_bytes(server.pid, "VmHWM")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    result = {
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(), "load_average": os.getloadavg(), "threads": a.threads,
        "version": subprocess.run([a.retnet, "--version"], capture_output=True,
                                  text=True).stdout.strip(),
        "server_peak_rss_bytes": peak_rss,
        "model": a.model, "parameters": meta["parameters"], "state_bytes": meta["state_bytes"],
        "n": a.n, "prompt_chars": len(prompt), "tokens": a.tokens, "reps": a.reps,
        "fork": {"ttft_s": summary(fork_ttft), "total_s": summary(fork_total)},
        "separate": {"ttft_s": summary(sep_ttft), "total_s": summary(sep_total)},
    }
    result["ttft_ratio"] = result["separate"]["ttft_s"]["median"] / \
        result["fork"]["ttft_s"]["median"]
    result["total_ratio"] = result["separate"]["total_s"]["median"] / \
        result["fork"]["total_s"]["median"]
    print(f"n = {a.n}, prompt {len(prompt)} chars, {a.tokens} tokens per choice, "
          f"median of {a.reps} (min-max)")
    for name in ("fork", "separate"):
        r = result[name]
        print(f"  {name:9s} TTFT {r['ttft_s']['median'] * 1e3:8.1f} ms "
              f"({r['ttft_s']['min'] * 1e3:.1f}-{r['ttft_s']['max'] * 1e3:.1f})   total "
              f"{r['total_s']['median'] * 1e3:8.1f} ms "
              f"({r['total_s']['min'] * 1e3:.1f}-{r['total_s']['max'] * 1e3:.1f})")
    print(f"  separate / fork: TTFT x{result['ttft_ratio']:.2f}, "
          f"total x{result['total_ratio']:.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
