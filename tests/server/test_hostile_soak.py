"""A soak of `retnet serve` under hostile clients, with only Python's standard library.

    /usr/bin/python3 test_hostile_soak.py --retnet build/retnet --workdir DIR [--seconds 20]

For --seconds, clients on 127.0.0.2 trickle their headers a byte a second, send bytes that are not
UTF-8 in paths, headers and bodies, flood the server with malformed requests and disconnect
abruptly (mid-request and mid-stream), while normal clients on 127.0.0.1 run completions. Passes
when every normal request succeeds within a generous bound, no hostile request gets a 500, the
slow clients are cut by --read-timeout, and at the end the server is alive, idle, its RSS flat
(not judged in an AddressSanitizer build) and it exits 0 on SIGTERM."""
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import (Server, connect, parse_args, read_all, tiny_model,  # noqa: E402
                            wait_idle)

NORMAL_LATENCY_BOUND_S = 60  # a loaded 2-core CI box; a starved client waits forever
HOSTILE = "127.0.0.2"


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.errors = []

    def add(self, key, error=None):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if error and len(self.errors) < 20:
                self.errors.append(error)


def status_of(data):
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def normal_client(s, stop, tally, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        body = {"prompt": "Once upon a time " * rng.randint(1, 4), "max_tokens": rng.randint(4, 24),
                "stream": rng.random() < 0.5}
        t0 = time.time()
        try:
            st, data = s.request("POST", "/v1/completions", body, timeout=NORMAL_LATENCY_BOUND_S)
            took = time.time() - t0
            ok = st == 200 and (b"[DONE]" in data if body["stream"] else b'"choices"' in data)
            if not ok:
                tally.add("normal_failed", f"normal request: {st} {data[:200]!r}")
            elif took > NORMAL_LATENCY_BOUND_S:
                tally.add("normal_failed", f"normal request took {took:.1f} s")
            else:
                tally.add("normal_ok")
        except OSError as e:
            tally.add("normal_failed", f"normal request: {e!r} after {time.time() - t0:.1f} s")


def slow_header_client(port, stop, tally):
    while not stop.is_set():
        try:
            sock = connect(port, HOSTILE)
        except OSError:
            time.sleep(0.5)
            continue
        request = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        try:
            for i in range(len(request)):
                if stop.is_set():
                    break
                sock.send(request[i:i + 1])
                time.sleep(1)
            if not stop.is_set():
                tally.add("slow_not_cut")
        except OSError:
            tally.add("slow_cut")
        sock.close()


BAD_REQUESTS = [
    b"GET /%ff%fe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"POST /slots/%ff?action=save HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Connection: close\r\n\r\n{}",
    b"GET /v1/models?q=%c3%28 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Bad: \xff\xfe\r\nConnection: close\r\n\r\n",
    b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-\xc0\xaf: 1\r\nConnection: close\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\nConnection: close"
    b"\r\n\r\n{\"prompt\": \"\xff\"}",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 35\r\nConnection: close"
    b"\r\n\r\n{\"prompt\": \"x\", \"max_tokens\": 1e400}",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{\"conten",
    b"\x00\xff\xfe GARBAGE\r\n\r\n",
    b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


def bad_request_flood(port, stop, tally, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        request = rng.choice(BAD_REQUESTS)
        try:
            sock = connect(port, HOSTILE)
            sock.sendall(request)
            data = read_all(sock)
            sock.close()
        except OSError:
            tally.add("bad_no_answer")
            continue
        st = status_of(data)
        if st >= 500 and st != 503:
            tally.add("bad_5xx", f"{request[:60]!r}: {data[:200]!r}")
        elif 400 <= st < 500 or st == 503:
            tally.add("bad_4xx")
        else:
            tally.add("bad_no_answer")


def abrupt_client(port, stop, tally, seed):
    rng = random.Random(seed)
    while not stop.is_set():
        kind = rng.randrange(3)
        try:
            sock = connect(port, HOSTILE)
            if kind == 0:  # half a request, then gone
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            elif kind == 1:  # a stream, left after its first bytes
                body = json.dumps({"prompt": "abandon", "max_tokens": 64, "stream": True})
                sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                              f"{len(body)}\r\n\r\n{body}").encode())
                sock.recv(100)
            # kind 2: connect and close at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            sock.close()  # with linger 0: a reset
            tally.add("abrupt")
        except OSError:
            tally.add("abrupt_refused")
        time.sleep(0.05)


def rss_bytes(pid):
    """Resident bytes of a process (statm's second field counts pages)."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def address_sanitized(binary):
    with open(binary, "rb") as f:
        return b"__asan_init" in f.read()


def main():
    a = parse_args(("--seconds", {"type": float, "default": 20}))
    model = tiny_model(a.retnet, a.workdir)
    s = Server(a.retnet, model, a.workdir, "hostile", "--parallel", "4", "-t", "1",
               "--read-timeout", "3", "--max-connections", "128",
               "--max-connections-per-client", "48", "--max-tokens", "64")
    failures = []
    tally, stop = Tally(), threading.Event()
    threads = [threading.Thread(target=normal_client, args=(s, stop, tally, i)) for i in range(4)]
    threads += [threading.Thread(target=slow_header_client, args=(s.port, stop, tally))
                for _ in range(60)]
    threads += [threading.Thread(target=bad_request_flood, args=(s.port, stop, tally, i))
                for i in range(3)]
    threads += [threading.Thread(target=abrupt_client, args=(s.port, stop, tally, i))
                for i in range(2)]
    try:
        for t in threads:
            t.start()
        start, rss = time.time(), []
        while time.time() - start < a.seconds:
            time.sleep(0.5)
            rss.append((time.time() - start, rss_bytes(s.proc.pid)))
        stop.set()
        for t in threads:
            t.join(NORMAL_LATENCY_BOUND_S + 30)
        if any(t.is_alive() for t in threads):
            failures.append("a client thread did not finish")
        alive = s.proc.poll() is None and s.request("GET", "/health")[0] == 200
        idle = alive and wait_idle(s, 60)
        rss.append((time.time() - start, rss_bytes(s.proc.pid)))
    finally:
        stop.set()
        s.stop()
    c = tally.counts
    base = next((b for t, b in rss if t >= a.seconds * 0.25), rss[0][1])
    growth = (rss[-1][1] - base) / base
    print(f"hostile soak, {a.seconds:.0f} s: {json.dumps(c, sort_keys=True)}; RSS "
          f"{base / 2**20:.1f} MiB after warm-up, {rss[-1][1] / 2**20:.1f} MiB at the end "
          f"({100 * growth:+.1f}%); alive {alive}, idle {idle}, exit {s.proc.returncode}")
    for e in tally.errors:
        print(f"  {e}")
    if c.get("normal_failed", 0) or not c.get("normal_ok", 0):
        failures.append(f"normal requests: {c.get('normal_ok', 0)} ok, "
                        f"{c.get('normal_failed', 0)} failed")
    if c.get("bad_5xx", 0):
        failures.append(f"{c['bad_5xx']} hostile requests got a 5xx")
    if not c.get("slow_cut", 0):
        failures.append("no slow client was cut by --read-timeout")
    if not (alive and idle and s.proc.returncode == 0):
        failures.append(f"the server at the end: alive {alive}, idle {idle}, "
                        f"exit status {s.proc.returncode}")
    if address_sanitized(a.retnet):
        print("RSS growth not judged: an AddressSanitizer build (its quarantine holds freed memory)")
    elif growth > 0.25:
        failures.append(f"RSS grew by {100 * growth:.1f}% after the warm-up (more than 25%)")
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        sys.exit(1)
    print("hostile soak: passed")


if __name__ == "__main__":
    main()
