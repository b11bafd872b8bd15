"""Load test of `retnet serve` over loopback: 1, 4, 16 and 64 concurrent streams.

    /usr/bin/python3 scripts/bench_serve.py --retnet build/retnet --model M [--model M2 ...]
        [--streams 1,4,16,64] [--tokens 128] [--reps 3] [--threads N] [--json out.json]

For each model, starts the server (--parallel = the largest stream count), then for each stream
count runs `reps` rounds of that many concurrent streaming completions (distinct prompts and seeds,
ignore_eos, `--tokens` each) and reports the median round's aggregate generated tokens/s, time to
first token and inter-token latency (p50, p99 over every token of the round), and the server's RSS
after the round. The baseline, measured in the same run: `retnet generate --prompts-file` decoding
16 prompts as one batch (its decode tokens/s). The clients share the machine's cores with the
server, so on small machines the figures include their cost.
"""
import argparse
import http.client
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid, field="VmRSS"):
    """A process's resident memory now (VmRSS) or at its peak (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def served_model_meta(port, proc, seconds=120):
    """Waits for the server on `port` to answer; the served model's `meta` from /v1/models."""
    deadline = time.time() + seconds
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/models")
            return json.loads(c.getresponse().read())["data"][0]["meta"]
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)


def one_stream(port, prompt, seed, tokens, out):
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0.8, "seed": seed,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    arrivals, generated = [], 0
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            j = json.loads(event[6:])
            if j.get("usage"):
                generated = j["usage"]["completion_tokens"]
            elif j["choices"] and j["choices"][0].get("finish_reason") is None:
                arrivals.append(time.perf_counter())
    conn.close()
    out.append({"start": t0, "arrivals": arrivals, "generated": generated})


def percentile(values, p):
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def run_round(port, n, tokens, round_index):
    results, threads = [], []
    t0 = time.perf_counter()
    for i in range(n):
        prompt = f"Stream {i} of round {round_index}: once upon a time, "
        threads.append(threading.Thread(target=one_stream,
                                        args=(port, prompt, 1000 * round_index + i, tokens,
                                              results)))
        threads[-1].start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    generated = sum(r["generated"] for r in results)
    ttft = [r["arrivals"][0] - r["start"] for r in results if r["arrivals"]]
    # Inter-token latency: gaps between text chunks, spread over the tokens each chunk carries.
    itl = []
    for r in results:
        a = r["arrivals"]
        if len(a) > 1 and r["generated"] > 1:
            per = (a[-1] - a[0]) / (r["generated"] - 1)
            gaps = [a[k + 1] - a[k] for k in range(len(a) - 1)]
            # Each gap covers at least one token; with one chunk per token (the usual case) the
            # gaps are the latencies themselves.
            itl.extend(gaps if len(gaps) == r["generated"] - 1 else [per] * (r["generated"] - 1))
    return {"tokens_per_s": generated / wall, "wall_s": wall, "generated": generated,
            "ttft_ms_p50": 1e3 * percentile(ttft, 50), "ttft_ms_p99": 1e3 * percentile(ttft, 99),
            "itl_ms_p50": 1e3 * percentile(itl, 50), "itl_ms_p99": 1e3 * percentile(itl, 99)}


def baseline(retnet, model, tokens, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for i in range(16):
            f.write(f"Stream {i} of round 0: once upon a time, \n")
    out = subprocess.run([retnet, "generate", "-m", model, "--prompts-file", f.name, "-n",
                          str(tokens), "--ignore-eos", "--stats", "-s", "1", "-t", str(threads)],
                         capture_output=True, text=True, timeout=600)
    os.unlink(f.name)
    for line in out.stderr.splitlines():
        if line.startswith("{"):
            return json.loads(line)["decode_tokens_per_s"]
    raise RuntimeError(out.stderr)


def bench_model(a, model, counts):
    port = free_port()
    proc = subprocess.Popen([a.retnet, "serve", "-m", model, "--port", str(port), "--parallel",
                             str(max(counts)), "--max-tokens", str(a.tokens),
                             "--state-cache-mib", "0", "-t", str(a.threads)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        info = served_model_meta(port, proc)
        run_round(port, 2, 8, 0)  # warm-up
        rows = []
        for n in counts:
            rounds = [run_round(port, n, a.tokens, r + 1) for r in range(a.reps)]
            rounds.sort(key=lambda r: r["tokens_per_s"])
            row = dict(rounds[len(rounds) // 2], streams=n, rss_bytes=rss_bytes(proc.pid),
                       tokens_per_s_min=rounds[0]["tokens_per_s"],
                       tokens_per_s_max=rounds[-1]["tokens_per_s"])
            rows.append(row)
            print(f"{os.path.basename(model)} streams {n:3d}: {row['tokens_per_s']:8.0f} tok/s "
                  f"(min {row['tokens_per_s_min']:.0f}, max {row['tokens_per_s_max']:.0f}), "
                  f"TTFT p50 {row['ttft_ms_p50']:.1f} ms p99 {row['ttft_ms_p99']:.1f} ms, "
                  f"ITL p50 {row['itl_ms_p50']:.2f} ms p99 {row['itl_ms_p99']:.2f} ms, "
                  f"RSS {row['rss_bytes'] / 2**20:.1f} MiB", flush=True)
        return {"model": model, "parameters": info["parameters"],
                "state_bytes": info["state_bytes"], "rows": rows}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--retnet", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--streams", default="1,4,16,64")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="server and generate threads (0: all)")
    ap.add_argument("--json")
    a = ap.parse_args()
    counts = [int(x) for x in a.streams.split(",")]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    result = {"commit": commit, "cpu": cpu, "cores": os.cpu_count(), "threads": a.threads,
              "load_average": os.getloadavg()[0], "tokens": a.tokens,
              "reps": a.reps, "models": []}
    for model in a.model:
        base = baseline(a.retnet, model, a.tokens, a.threads)
        print(f"{os.path.basename(model)}: retnet generate --prompts-file, batch 16: "
              f"{base:.0f} decode tok/s", flush=True)
        m = bench_model(a, model, counts)
        m["generate_batch16_tokens_per_s"] = base
        for row in m["rows"]:
            if row["streams"] == 16:
                print(f"  16 streams / generate batch 16: {row['tokens_per_s'] / base:.2f}")
        result["models"].append(m)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
