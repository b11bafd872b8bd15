"""Hostile input to `retnet serve`: bytes that are not UTF-8 in any part of a request, numbers out
of a field's range, text past --max-prompt-bytes, clients that trickle their requests
(--read-timeout), connection caps (429, 503), numeric options out of range, and SIGTERM while
starting. Run by test_server.py."""
import json
import os
import select
import signal
import socket
import subprocess
import time

from server_harness import (Server, check, expect_json_error, free_port, json_error,
                            raw_exchange, slow_client)


def test_hostile_requests(s):
    """Bytes that are not UTF-8 anywhere in a request, numbers JSON can write but a field cannot
    hold, and text too long to tokenize: each a 4xx with a JSON error, and the server lives on."""
    def expect(status, method, path, body=None, param=None, headers=None, what=""):
        expect_json_error(s, status, method, path, body, headers, param, what)

    for path, what in (("/%ff%fe", "path"), ("/slots/%ff?action=save", "slot path"),
                       ("/v1/models?x=%ff", "query value"), ("/v1/models?%c3%28=1", "query name"),
                       ("/v1/completions%ed%a0%80", "surrogate in the path")):
        expect(400, "POST" if "slots" in path or "compl" in path else "GET", path, {},
               what=f"invalid UTF-8 in the {what}")
    expect(400, "GET", "/v1/models", headers={"X-Name": "\xff\xfe"},
           what="invalid UTF-8 in a header value")
    # A raw header name with a byte that is not UTF-8.
    st, err = json_error(raw_exchange(s.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
                                              b"X-\xff: 1\r\nConnection: close\r\n\r\n"))
    check(st == 400 and err is not None, f"invalid UTF-8 in a header name: {st} {err}")
    expect(400, "POST", "/tokenize", b'{"content": "\xc3"}', what="invalid UTF-8 in a body")
    expect(400, "POST", "/v1/completions", b'{"prompt": "x", "max_tokens": 1e400}', "max_tokens",
           what="1e400")
    for field, value in (("max_tokens", "1e20"), ("n", "1e300"), ("seed", str(2 ** 70)),
                         ("top_k", "1e30"), ("repeat_last_n", str(2 ** 64)),
                         ("temperature", "1e308"), ("logprobs", "-1e19")):
        expect(400, "POST", "/v1/completions",
               f'{{"prompt": "x", "{field}": {value}}}'.encode(), field,
               what=f"{field}: {value}")
    for key, value in (("99999999999999999999", 1), ("-1", 0), ("x", 0), ("1", "1e400"),
                       ("1", 101)):
        body = f'{{"prompt": "x", "logit_bias": {{"{key}": {json.dumps(value)}}}}}'.encode()
        expect(400, "POST", "/v1/completions", body.replace(b'"1e400"', b"1e400"),
               what=f"logit_bias {key}: {value}")
    check(s.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2,
                                             "logit_bias": {"5": 0}})[0] == 200,
          "a logit_bias in range is accepted")
    big = "ab " * 400_000  # 1.2 MB, past the default --max-prompt-bytes of 1 MiB
    expect(413, "POST", "/tokenize", {"content": big}, "content", what="/tokenize past the limit")
    expect(413, "POST", "/v1/completions", {"prompt": big}, "prompt", what="a prompt past the limit")
    expect(413, "POST", "/detokenize", {"tokens": [1] * 1_100_000}, "tokens",
           what="/detokenize past the limit")
    check(s.request("GET", "/health")[0] == 200, "the server is alive after hostile requests")


def test_slow_and_greedy_clients(retnet, model, workdir):
    """--read-timeout cuts a client that trickles its headers or its body, on any request of a
    keep-alive connection; --max-connections-per-client answers 429 and --max-connections 503 at
    once, while other clients are served."""
    s = Server(retnet, model, workdir, "slow", "--read-timeout", "2")
    try:
        request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n\r\n"
                   b'{"prompt": "x", "max_tokens":1}')
        head, body = request.split(b"\r\n\r\n")
        # 0.2 s a byte: the headers alone take 14 s; the body 0.5 s a byte, 15 s.
        for what, prefix, data, interval in (("headers", b"", request, 0.2),
                                             ("body", head + b"\r\n\r\n", body, 0.5)):
            got, cut = slow_client(s.port, data, interval, prefix)
            st, err = json_error(got)
            check(cut and st == 408 and err and "--read-timeout" in err["message"],
                  f"a client trickling its {what} is cut with 408: cut {cut}, {st} {err}")
        # Keep-alive: a first request at full speed, then a second one trickled.
        fast = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        got, cut = slow_client(s.port, fast, 0.2, prefix=fast)
        check(got.startswith(b"HTTP/1.1 200") and b"408 Request Timeout" in got and cut,
              f"the read deadline holds for each request of a keep-alive connection: {got[-300:]!r}")
        check(s.request("GET", "/health")[0] == 200, "alive after slow clients")
    finally:
        s.stop()
    check(s.proc.returncode == 0, f"slow-client server exit status {s.proc.returncode}")

    s = Server(retnet, model, workdir, "caps", "--max-connections", "6",
               "--max-connections-per-client", "3", "--read-timeout", "60")
    held = []
    try:
        def hold(source):
            sock = socket.socket()
            sock.bind((source, 0))
            sock.settimeout(60)
            sock.connect(("127.0.0.1", s.port))
            sock.sendall(b"GET /health HTTP/1.1\r\n")  # a request that is never finished
            held.append(sock)
            return sock
        # Three held connections from one client fill its share (429 for its next one); three
        # more from another fill the server (503 for anyone's next one). The first three pause
        # past httplib's own per-read timeout (5 s), well within --read-timeout, and must still
        # be held. The server counts a connection once a thread has taken it, and a client's
        # closed connection until its thread sees the close: on a busy machine a connection
        # meant to be held can meet the cap and be refused. A held connection is never
        # answered, so one that has an answer is replaced, and the asker retries (bounded).
        def answered(sock):
            return bool(select.select([sock], [], [], 0)[0])

        for holder, asker, status, option, pause in (
                ("127.0.0.2", "127.0.0.2", 429, "--max-connections-per-client", 6),
                ("127.0.0.3", "127.0.0.4", 503, "--max-connections", 0)):
            mine = [hold(holder) for _ in range(3)]
            time.sleep(pause)
            deadline = time.time() + 60
            while True:
                for i, sock in enumerate(mine):
                    if answered(sock):
                        got = sock.recv(4096)
                        check(got.startswith(b"HTTP/1.1 503"),
                              f"a held connection is answered only by a refusal at the cap: "
                              f"{got[:60]!r}")
                        sock.close()
                        held.remove(sock)
                        mine[i] = hold(holder)
                st, err = json_error(raw_exchange(s.port, b"GET /health HTTP/1.1\r\n\r\n",
                                                  source=asker))
                if st == status or time.time() > deadline:
                    break
                time.sleep(0.2)
            check(st == status and err and option in err["message"],
                  f"a connection past {option} gets {status}: {st} {err}")
            if status == 429:
                check(s.request("GET", "/health")[0] == 200, "another client is served meanwhile")
        for sock in held:
            sock.close()
        held.clear()
        deadline, ok = time.time() + 30, False
        while time.time() < deadline and not ok:
            try:
                ok = s.request("GET", "/health")[0] == 200
            except OSError:
                pass
            time.sleep(0.1)
        check(ok, "clients are served again once the connections close")
    finally:
        for sock in held:
            sock.close()
        s.stop()


def test_bad_serve_options_and_startup_signal(retnet, model, workdir):
    """Numeric options out of range name the option; a FIFO as the model is refused by name; SIGTERM
    ends a server that is still starting."""
    for option, value in (("--timeout", "1e10"), ("--timeout", "nan"), ("--read-timeout", "0"),
                          ("--max-connections", "0"), ("--max-connections-per-client", "-1"),
                          ("--max-queue", "1e30"), ("--state-cache-mib", "99999999999999"),
                          ("--max-prompt-bytes", "0")):
        out = subprocess.run([retnet, "serve", "-m", model, "--port", str(free_port()), option,
                              value], capture_output=True, text=True, timeout=120)
        check(out.returncode != 0 and option in out.stderr,
              f"serve {option} {value} is refused naming it: {out.returncode} {out.stderr[-200:]}")
    # A FIFO given as the model is refused by name at once (it used to block in open()).
    fifo = os.path.join(workdir, "fifo.safetensors")
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    out = subprocess.run([retnet, "serve", "-m", fifo, "--port", str(free_port())],
                         capture_output=True, text=True, timeout=120)
    check(out.returncode != 0 and "is a FIFO, not a regular file" in out.stderr,
          f"serve -m FIFO is refused by name: {out.returncode} {out.stderr[-300:]}")
    # A second server on a port in use stops at start, naming it (unless both ask --reuse-port).
    first = Server(retnet, model, workdir, "port_owner", "--no-ui")
    try:
        out = subprocess.run([retnet, "serve", "-m", model, "--port", str(first.port)],
                             capture_output=True, text=True, timeout=120)
        check(out.returncode != 0 and "port is in use" in out.stderr,
              f"a second server on a port in use fails: {out.returncode} {out.stderr[-300:]}")
    finally:
        first.stop()
    # SIGTERM as soon as the process starts (while it loads, or just after it listens): it ends.
    proc = subprocess.Popen([retnet, "serve", "-m", model, "--port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=120)
        # Before main() blocks the signal, its default action ends the process (-15); after, the
        # server says it stopped on SIGTERM. Either way it ends: the point is that it does not hang.
        check(proc.returncode in (0, -signal.SIGTERM) or b"SIGTERM" in out,
              f"SIGTERM ends a server that is starting: {proc.returncode} {out[-300:]!r}")
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        check(False, "SIGTERM did not end a server that was starting")
