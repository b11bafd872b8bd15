#!/usr/bin/env python3
"""OpenMP waiting policies side by side, on an idle machine and beside a busy one.

  python3 scripts/bench_thread_policy.py [--retnet build/retnet] [--rounds 5] [--python]
      [--serve] [--conditions idle,busy] [--policy NAME=VAR=VALUE ...] [--model M]

Each round runs every policy once, in turn (A B C A B C ...), so a machine that drifts affects
them all; the table gives each policy's median tokens/s and the medians of the per-round ratios
against `passive` and `spin`. Policies (the environment each run gets):
  engine   neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: the engine's own policy
  passive  OMP_WAIT_POLICY=passive: OpenMP's threads sleep at once
  spin     GOMP_SPINCOUNT=300000: libgomp's default when nothing is set (spin about 3 ms)
  --policy adds more, e.g. --policy spin10k=GOMP_SPINCOUNT=10000.
Conditions:
  idle     nothing started beside the run (other users of the machine are not stopped)
  busy     another `retnet generate` of the same model in a loop (the engine's policy) and two
           busy-looping processes, started before the round and stopped after it
  one      one busy-looping process beside the run
Figures (tokens/s from each run's own report):
  cli      `retnet generate -n 400` of the model (decode tokens/s; -n sets the count)
  python   --python: Model.generate(max_tokens=400) from the Python package (wall time)
  serve    --serve: `retnet bench serve --streams 1`, one stream's decode (first chunk to last);
           its ratio to generate's decode in the same run (alternated) is printed as serve/gen
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

POLICIES = {"engine": {}, "passive": {"OMP_WAIT_POLICY": "passive"},
            "spin": {"GOMP_SPINCOUNT": "300000"}}
PY_GENERATE = """
import sys, time, retnet
model = retnet.load(sys.argv[1])
model.generate("ROMEO:", max_tokens=16, temperature=0, ignore_eos=True)
t = time.perf_counter()
r = model.generate("ROMEO:", max_tokens=int(sys.argv[2]), temperature=0, ignore_eos=True)
print(len(r.tokens) / (time.perf_counter() - t))
print(retnet.thread_policy())
"""


def run(cmd, env):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return out


def env_for(policy, extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(policy)
    env.update(extra or {})
    return env


def cli_rate(retnet, model, tokens, env):
    err = run([retnet, "generate", "-m", model, "-p", "ROMEO:", "-n", str(tokens), "--temp", "0",
               "--ignore-eos"], env).stderr
    return float(re.search(r"\n\S+\s+eval time =.*?([\d.]+) tokens per second", err).group(1))


def python_rate(python, pythonpath, model, tokens, env):
    """(tokens/s, the policy retnet.thread_policy() named)."""
    env = dict(env, PYTHONPATH=pythonpath)
    lines = run([python, "-c", PY_GENERATE, model, str(tokens)], env).stdout.strip().splitlines()
    return float(lines[-2]), lines[-1]


def cli_policy(retnet, env):
    """The policy `retnet --version` names with this environment, now."""
    out = run([retnet, "--version"], env).stdout
    return next((line.split(": ", 1)[1] for line in out.splitlines()
                 if line.startswith("OpenMP waits")), "not named (a build without a policy)")


def serve_rates(retnet, model, tokens, env):
    """(the stream's decode tokens/s, its ratio to generate's decode in the same run) of one
    stream, from one bench serve run (its figures from first chunk to last, so that reading the
    prompt is left out as generate's decode figure leaves it out)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        run([retnet, "bench", "serve", "-m", model, "--streams", "1", "-n", str(tokens),
             "--reps", "3", "--json", path], env)
        with open(path) as f:
            row = json.load(f)["results"][0]
    finally:
        os.remove(path)
    return row["decode_tokens_per_s"]["median"], row["decode_ratio_to_generate"]["median"]


class BusyLoad:
    """busy: another generate of the model in a loop and two busy-looping processes; one: a
    single busy-looping process."""

    def __init__(self, condition, retnet, model, tokens):
        gen = (f"while :; do '{retnet}' generate -m '{model}' -p ROMEO: -n {tokens} --temp 0 "
               f"--ignore-eos >/dev/null 2>&1; done")
        self.procs = []
        if condition == "busy":
            self.procs.append(subprocess.Popen(["sh", "-c", gen], env=env_for({}),
                                               start_new_session=True))
        for _ in range(2 if condition == "busy" else 1):
            self.procs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"],
                                               start_new_session=True))
        time.sleep(1)

    def stop(self):
        for p in self.procs:
            os.killpg(p.pid, 15)
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--retnet", default="build/retnet", help="the retnet binary")
    ap.add_argument("--model", help="model file (default: `retnet init --seed 1` in --work)")
    ap.add_argument("--tokens", "-n", type=int, default=400,
                    help="tokens per generate (default 400; bench serve: a third of it)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per condition (default 5)")
    ap.add_argument("--conditions", default="idle,busy",
                    help="comma-separated: idle, busy, one (default idle,busy)")
    ap.add_argument("--python", action="store_true", help="also Python's Model.generate")
    ap.add_argument("--python-exe", default=sys.executable, help="the Python to run it with")
    ap.add_argument("--pythonpath", default="build/python", help="where `import retnet` finds it")
    ap.add_argument("--serve", action="store_true", help="also `retnet bench serve`, one stream")
    ap.add_argument("--no-cli", action="store_true", help="skip `retnet generate`")
    ap.add_argument("--policy", action="append", default=[], metavar="NAME=VAR=VALUE[,VAR=VALUE]",
                    help="another policy to compare")
    ap.add_argument("--skip", default="", help="comma-separated policies to leave out")
    ap.add_argument("--work", default="/tmp/retnet-thread-policy", help="models and scratch")
    args = ap.parse_args()
    # A SIGTERM unwinds like Ctrl-C, so that the busy load is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    retnet = os.path.abspath(args.retnet)
    policies = dict(POLICIES)
    for p in args.policy:
        name, settings = p.split("=", 1)
        policies[name] = dict(s.split("=", 1) for s in settings.split(","))
    for name in filter(None, args.skip.split(",")):
        policies.pop(name)
    model = args.model
    if not model:
        os.makedirs(args.work, exist_ok=True)
        model = os.path.join(args.work, "default.safetensors")
        if not os.path.exists(model):
            run([retnet, "init", "-o", model, "--seed", "1"], env_for({}))
    figures = [] if args.no_cli else ["cli"]
    figures += (["python"] if args.python else []) + (["serve", "serve/gen"] if args.serve else [])
    cpu = next((line.split(":", 1)[1].strip() for line in run(["lscpu"], os.environ).stdout
                .splitlines() if line.startswith("Model name")), "?")
    print(f"retnet {retnet}, model {model}, {args.rounds} rounds, CPU {cpu}, "
          f"{os.cpu_count()} cores, load average before {os.getloadavg()[0]:.2f}")
    for condition in args.conditions.split(","):
        rows = {(f, p): [] for f in figures for p in policies}
        chosen = {}  # the engine's choices: policy -> count
        for r in range(args.rounds):
            load = BusyLoad(condition, retnet, model, args.tokens) if condition != "idle" else None
            try:
                for name, policy in policies.items():
                    env = env_for(policy)
                    if "cli" in figures:
                        if name == "engine":
                            p = "cli: " + cli_policy(retnet, env)
                            chosen[p] = chosen.get(p, 0) + 1
                        rows[("cli", name)].append(cli_rate(retnet, model, args.tokens, env))
                    if args.python:
                        rate, p = python_rate(args.python_exe, os.path.abspath(args.pythonpath),
                                              model, args.tokens, env)
                        rows[("python", name)].append(rate)
                        if name == "engine":
                            chosen["python: " + p] = chosen.get("python: " + p, 0) + 1
                    if args.serve:
                        server, ratio = serve_rates(retnet, model, max(1, args.tokens // 3), env)
                        rows[("serve", name)].append(server)
                        rows[("serve/gen", name)].append(ratio)
            finally:
                if load:
                    load.stop()
            print(f"{condition}: round {r + 1}/{args.rounds} done, load average "
                  f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
        print(f"\n{condition} (medians of {args.rounds}; ratios: median of per-round ratios, "
              f"min..max)")
        print(f"{'figure':10s} {'policy':10s} {'median':>10s} {'min..max':>19s} "
              f"{'/passive':>18s} {'/spin':>18s}")
        for (figure, name), values in rows.items():
            def ratio(base):
                if (figure, base) not in rows:
                    return "-"
                q = [v / b for v, b in zip(values, rows[(figure, base)])]
                return f"{statistics.median(q):6.3f} ({min(q):.2f}..{max(q):.2f})"
            print(f"{figure:10s} {name:10s} {statistics.median(values):10.2f} "
                  f"{min(values):9.1f}..{max(values):<8.1f} {ratio('passive'):>18s} "
                  f"{ratio('spin'):>18s}")
        for p, n in chosen.items():
            print(f"engine's choice, {n} of {args.rounds} rounds: {p}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
