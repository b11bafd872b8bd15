#!/usr/bin/env python3
"""Sends N streaming completions at once to a running `retnet serve` and prints each one's time
to first token (ms, sorted) and their median: the burst of new prompts a server's prefill policy
is for. Standard library only; bounded: every request has a timeout.

    python3 scripts/ttft_burst.py PORT [--streams 16] [--tokens 16]
"""
import argparse
import http.client
import json
import statistics
import sys
import threading
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16, help="max_tokens of each request")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a request may take")
    a = ap.parse_args()
    first = [None] * a.streams
    errors = []

    def go(i: int) -> None:
        body = json.dumps({"prompt": f"Stream {i} of round 1: once upon a time, there was a",
                           "max_tokens": a.tokens, "stream": True, "temperature": 0})
        try:
            c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.timeout)
            start = time.monotonic()
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                errors.append(f"stream {i}: HTTP {r.status}")
                return
            for line in r:
                if line.startswith(b"data: "):
                    first[i] = first[i] or (time.monotonic() - start) * 1e3
        except OSError as e:
            errors.append(f"stream {i}: {e}")

    threads = [threading.Thread(target=go, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors or None in first:
        print("; ".join(errors) or "a stream sent no data", file=sys.stderr)
        return 1
    print(" ".join(f"{x:.0f}" for x in sorted(first)), f"median {statistics.median(first):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
