"""The harness of the server tests: a `retnet serve` on a free 127.0.0.1 port with bounded waits,
raw HTTP exchanges and slow clients, and the failure list the checks append to."""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

FAILURES = []


def tiny_model(retnet, workdir):
    """A small random model (`retnet init`, seed 5) in workdir: its path."""
    cfg = os.path.join(workdir, "tiny.json")
    with open(cfg, "w") as f:
        json.dump({"decoder_embed_dim": 32, "decoder_value_embed_dim": 48,
                   "decoder_retention_heads": 4, "decoder_ffn_embed_dim": 40,
                   "decoder_layers": 2, "vocab_size": 256, "recurrent_chunk_size": 8}, f)
    model = os.path.join(workdir, "tiny.safetensors")
    subprocess.run([retnet, "init", "--config", cfg, "-o", model, "-s", "5"], check=True,
                   capture_output=True, timeout=120)
    return model


def expect_json_error(s, status, method, path, body, headers, param, what):
    """Checks that a request gets `status` and a JSON error (naming `param`, if given)."""
    st, data = s.request(method, path, body, dict({"Content-Type": "application/json"},
                                                  **(headers or {})))
    try:
        err = json.loads(data)["error"]
    except (ValueError, KeyError):
        return check(False, f"{what}: no JSON error ({st} {data[:200]!r})")
    ok = st == status and err.get("message")
    if param:
        ok = ok and err.get("param") == param
    return check(ok, f"{what}: expected {status} naming {param}, got {st} {err}")


def parse_args(*extra):
    """--retnet and --workdir (created), and any (flag, kwargs) pairs in `extra`."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--retnet", required=True)
    ap.add_argument("--workdir", required=True)
    for flag, kwargs in extra:
        ap.add_argument(flag, **kwargs)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    return a


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}", flush=True)
    return cond


def finish(what):
    """Exits 1 naming the count of failed checks, else says `what` passed."""
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        sys.exit(1)
    print(f"{what}: all passed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, retnet, model, workdir, name, *args):
        self.port = free_port()
        self.auth = {"Authorization": f"Bearer {args[args.index('--api-key') + 1]}"} \
            if "--api-key" in args else {}
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [retnet, "serve", "-m", model, "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {name} exited: {open(self.log_path).read()}")
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server {name} did not answer /health within 60 s")

    def request(self, method, path, body=None, headers=None, timeout=60):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        return resp.status, data

    def json(self, method, path, body=None, headers=None):
        status, data = self.request(method, path, body, headers)
        return status, json.loads(data)

    def stream(self, path, body, headers=None):
        """SSE `data:` payloads of a streamed request, [DONE] included."""
        status, data = self.request("POST", path, dict(body, stream=True), headers)
        assert status == 200, (status, data)
        events = []
        for block in data.decode().split("\n\n"):
            if block.startswith("data: "):
                events.append(block[len("data: "):])
        return events

    def metric(self, name):
        _, data = self.request("GET", "/metrics", headers=self.auth)
        for line in data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def generate(retnet, model, prompt, n, *args):
    out = subprocess.run([retnet, "generate", "-m", model, "-p", prompt, "-n", str(n), "--json",
                          *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["text"]


def stream_text(events, chat):
    text = ""
    for e in events:
        if e == "[DONE]":
            continue
        j = json.loads(e)
        for c in j.get("choices", []):
            text += c["delta"].get("content", "") if chat else c["text"]
    return text


def wait_idle(s, seconds=15):
    deadline = time.time() + seconds
    while time.time() < deadline:
        slots = s.json("GET", "/slots", headers=s.auth)[1]
        if all(x["state"] == "idle" for x in slots) and s.metric("retnet_slots_busy") == 0:
            return True
        time.sleep(0.05)
    return False


def connect(port, source="127.0.0.1", timeout=30):
    """A socket to the server from the loopback address `source`."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(timeout)
    sock.connect(("127.0.0.1", port))
    return sock


def read_all(sock):
    """What the server sends until it closes the connection (or the socket times out)."""
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got


def raw_exchange(port, data, source="127.0.0.1", timeout=60):
    """Sends raw bytes from `source` and reads until the server closes (or `timeout`)."""
    sock = connect(port, source, timeout)
    sock.sendall(data)
    got = read_all(sock)
    sock.close()
    return got


def json_error(data):
    """The status and the JSON error of a raw HTTP response, or (status, None)."""
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        return 0, None
    try:
        return status, json.loads(body)["error"]
    except (ValueError, KeyError):
        return status, None


def slow_client(port, data, interval, prefix=b"", source="127.0.0.1", limit=120):
    """Sends `prefix`, then `data` a byte per `interval` s until the server closes; returns what
    it answered (read meanwhile, so a reset after the answer loses nothing) and whether the server
    cut the client before all was sent."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(limit)
    sock.connect(("127.0.0.1", port))
    got = []

    def read():
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got.append(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read)
    reader.start()
    cut, start = False, time.time()
    try:
        sock.sendall(prefix)
        for i in range(len(data)):
            sock.send(data[i:i + 1])
            time.sleep(interval)
            if time.time() - start > limit:
                break
    except OSError:
        cut = True
    reader.join(limit)
    sock.close()
    return b"".join(got), cut


def open_long_stream(port, prompt, extra_headers="", receive_buffer=None):
    """A raw streamed completion of 100,000 tokens, read until its first event (at most 30 s);
    returns the socket and the bytes read so far. `receive_buffer`: the socket's SO_RCVBUF, set
    before connecting (a small one makes the server's writes block soon)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"prompt": prompt, "max_tokens": 100000, "stream": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{extra_headers}"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got, deadline = b"", time.time() + 30
    while b"data: " not in got and time.time() < deadline:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    return sock, got
