"""`mpirun -np 2 retnet train` on loopback: data parallel against one process (also with the
gradient all-reduce in buckets overlapping the backward pass), resume on another
number of ranks, a killed or hung rank, ranks started with other settings or data; sequence
parallel (--seq-parallel) against one process.

Usage: check_data_parallel.py --retnet BIN --workdir DIR CASE   (CASE: equivalence, overlap,
faults, mismatch, sequence). Exits 77 (skipped) when mpirun is missing or retnet was built without MPI, unless
CI=true, where that is a failure."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from harness import read_safetensors, rel_error  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# Loopback TCP between the ranks, as between two hosts; root is allowed here only (CI runs as root).
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl",
          "self,tcp", "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
CONFIG = {"decoder_embed_dim": 32, "decoder_value_embed_dim": 64, "decoder_retention_heads": 2,
          "decoder_ffn_embed_dim": 64, "decoder_layers": 2}
# 2 ranks x batch B against 1 rank x batch 2B: the same rows, gradients summed in another order
# (two half-batch means averaged instead of one mean), so float rounding differs; AdamW's
# normalised steps carry that rounding on. Measured: loss differences 4e-8 relative, weights
# 2e-5 after 20 steps.
LOSS_TOL = 1e-5
WEIGHT_TOL = 1e-4


def skip_or_fail(why):
    if os.environ.get("CI") == "true":
        print(f"FAIL: {why} (CI=true: the MPI tests must run)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(77)


def train_args(a, work, out, batch, steps=20, extra=(), data="data.txt", seq=48,
               config="config.json"):
    return [a.retnet, "train", "--data", os.path.join(work, data), "--config",
            os.path.join(work, config), "--out", os.path.join(work, out), "--steps",
            str(steps), "--batch", str(batch), "--seq", str(seq), "--warmup", "5", "--eval-interval",
            "1000", "--eval-tokens", "2048", "--checkpoint-interval", "10", "--hash-interval", "5",
            "-t", "1", *extra]


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
        sys.exit(1)
    return p


def losses(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def compare_curves(label, got, want, steps):
    bad = 0
    for s in steps:
        if s not in got or s not in want:
            print(f"FAIL: {label}: step {s} missing")
            return 1
        err = rel_error(want[s], got[s])
        if not err <= LOSS_TOL:
            print(f"FAIL: {label}: step {s}: loss {got[s]!r} vs {want[s]!r} (rel {err:.2e} > {LOSS_TOL})")
            bad += 1
    worst = max(rel_error(want[s], got[s]) for s in steps)
    print(f"{label}: steps {steps[0]}-{steps[-1]}: worst loss rel error {worst:.2e} (tol {LOSS_TOL})")
    return bad


def compare_weights(label, got_path, want_path):
    got, _ = read_safetensors(got_path)
    want, _ = read_safetensors(want_path)
    bad, worst = 0, 0.0
    for name, w in want.items():
        err = rel_error(w, got.get(name, [])) if name in got else float("inf")
        worst = max(worst, err) if err == err else float("inf")
        if not err <= WEIGHT_TOL:
            print(f"FAIL: {label}: {name}: rel {err:.2e} > {WEIGHT_TOL}")
            bad += 1
    print(f"{label}: {len(want)} tensors, worst weight rel error {worst:.2e} (tol {WEIGHT_TOL})")
    return bad


def compare_runs(label, got_dir, want_dir, steps):
    """Two run directories: their loss curves over `steps` and their final weights."""
    return (compare_curves(label, losses(got_dir), losses(want_dir), steps) +
            compare_weights(label, os.path.join(got_dir, "model.safetensors"),
                            os.path.join(want_dir, "model.safetensors")))


def copy_at_step_10(run_dir, dest):
    """A copy of a 20-step run directory as it stood after step 10: the step-20 checkpoint and the
    final model removed, so --resume starts from the step-10 checkpoint."""
    shutil.copytree(run_dir, dest)
    for f in os.listdir(dest):
        if f.startswith("checkpoint-00000020") or f == "model.safetensors":
            os.remove(os.path.join(dest, f))
    return dest


def case_equivalence(a, work):
    two = os.path.join(work, "two_ranks")
    one = os.path.join(work, "one_rank")
    run(MPIRUN + ["-np", "2"] + train_args(a, work, "two_ranks", batch=2))
    run(train_args(a, work, "one_rank", batch=4))
    bad = compare_runs("2 ranks x 2 vs 1 rank x 4", two, one, list(range(1, 21)))
    # Resume the 2-rank run's step-10 checkpoint on 1 rank with the same global batch.
    resumed = copy_at_step_10(two, os.path.join(work, "resumed"))
    p = run(train_args(a, work, "resumed", batch=4, extra=["--resume"]))
    if "resuming from step 10" not in p.stderr:
        print(f"FAIL: the resumed run did not start from step 10:\n{p.stderr}")
        bad += 1
    bad += compare_runs("resumed on 1 rank vs 1 rank throughout", resumed, one, list(range(11, 21)))
    # A different global batch is another run: refused with both batches named.
    p = subprocess.run(train_args(a, work, "resumed", batch=2, extra=["--resume"]),
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "other settings" not in p.stderr:
        print(f"FAIL: resuming with another global batch was not refused:\n{p.stderr}")
        bad += 1
    return bad


def exact_or_worst(got, want):
    """'bit-identical' when two loss curves are equal, else the worst relative difference."""
    if got == want:
        return "bit-identical"
    return f"worst rel difference {max(rel_error(want[s], got[s]) for s in want):.2e}"


# Buckets of 0.02 MiB (5242 floats): the test model's ~45k gradient floats go in several buckets
# (the head, each layer, the embedding), each reduced while the backward pass goes on.
SMALL_BUCKETS = ["--bucket-mib", "0.02"]


def case_overlap(a, work):
    """The gradient all-reduce in buckets that overlap the backward pass, with 2 micro-batches
    (each bucket scaled by 1/2 before its reduction): 2 ranks x 2 rows against 1 rank x 4 rows for
    20 steps and the same weights after, and against 2 ranks with one all-reduce after the backward
    pass (--bucket-mib 0)."""
    accum = ["--grad-accum", "2"]
    p = run(MPIRUN + ["-np", "2"] + train_args(a, work, "buckets", batch=2,
                                               extra=accum + SMALL_BUCKETS))
    run(train_args(a, work, "one_rank", batch=4, extra=accum))
    run(MPIRUN + ["-np", "2"] + train_args(a, work, "whole", batch=2,
                                           extra=accum + ["--bucket-mib", "0"]))
    bad = 0
    summary = [x for x in (p.stdout + p.stderr).splitlines() if x.startswith("all-reduce:")]
    buckets = int(summary[0].split(" in ")[1].split()[0]) if summary and " in " in summary[0] else 0
    if buckets < 3:
        print(f"FAIL: expected several buckets per step, the run reports: {summary}")
        bad += 1
    else:
        print(f"2 ranks: {buckets} buckets per step ({summary[0]})")
    b, one, whole = (os.path.join(work, n) for n in ("buckets", "one_rank", "whole"))
    steps = list(range(1, 21))
    bad += compare_runs("2 ranks x 2 in buckets vs 1 rank x 4", b, one, steps)
    bad += compare_runs("2 ranks in buckets vs one all-reduce", b, whole, steps)
    print(f"2 ranks in buckets vs one all-reduce: losses {exact_or_worst(losses(b), losses(whole))}")
    return bad


def case_sequence(a, work):
    """--seq-parallel: 2 ranks, each half of every sequence of 47 tokens (odd: slices of 24 and
    23, neither a multiple of the chunk of 8), against 1 rank on the whole sequences (chunkwise),
    20 steps; the same batch rows on both."""
    extra = ["--form", "chunkwise", "--chunk", "8"]
    run(MPIRUN + ["-np", "2"] + train_args(a, work, "two_ranks", batch=2, seq=47,
                                           extra=extra + ["--seq-parallel"]))
    run(train_args(a, work, "one_rank", batch=2, seq=47, extra=extra))
    two, one = os.path.join(work, "two_ranks"), os.path.join(work, "one_rank")
    bad = compare_runs("2 ranks x half sequences vs 1 rank", two, one, list(range(1, 21)))
    # Resume the 2-rank run's step-10 checkpoint, sliced again: the same curve to step 20.
    resumed = copy_at_step_10(two, os.path.join(work, "resumed_slices"))
    p = run(MPIRUN + ["-np", "2"] + train_args(a, work, "resumed_slices", batch=2, seq=47,
                                               extra=extra + ["--seq-parallel", "--resume"]))
    if "resuming from step 10" not in p.stdout + p.stderr:
        print(f"FAIL: the resumed sliced run did not start from step 10:\n{p.stderr}")
        bad += 1
    bad += compare_runs("resumed with --seq-parallel vs 1 rank", resumed, one, list(range(11, 21)))
    # A mixer that keeps every token cannot be split: refused, naming it.
    with open(os.path.join(work, "attention.json"), "w") as f:
        json.dump({**CONFIG, "mixer": "attention"}, f)
    p = subprocess.run(MPIRUN + ["-np", "2"] + train_args(a, work, "attention", batch=2,
                       config="attention.json", extra=["--seq-parallel"]),
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 0 or "'attention'" not in p.stdout + p.stderr:
        print(f"FAIL: --seq-parallel with attention was not refused by name:\n{p.stderr}")
        bad += 1
    return bad


def rank_pid(mpirun_pid, rank):
    """The pid of the process mpirun started as `rank` (its child with OMPI_COMM_WORLD_RANK)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(pid)
        except (OSError, IndexError, ValueError):
            continue
    return None


def fault_run(a, work, name, sig, expect_text):
    """Starts a long 2-rank run, sends `sig` to rank 1 once steps are logged; the job must end
    non-zero within 30 s with `expect_text` in its output."""
    out = os.path.join(work, name)
    cmd = MPIRUN + ["-np", "2"] + train_args(a, work, name, batch=2, steps=100000,
                                              extra=["--comm-timeout", "5"] + SMALL_BUCKETS)
    log = open(os.path.join(work, name + ".log"), "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        metrics = os.path.join(out, "metrics.jsonl")
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
                break
            time.sleep(0.2)
        pid = rank_pid(p.pid, 1)
        if p.poll() is not None or pid is None:
            log.seek(0)
            print(f"FAIL: {name}: the run did not get going (exit {p.poll()}, rank 1 pid {pid}):\n{log.read()}")
            return 1
        os.kill(pid, sig)
        t0 = time.time()
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"FAIL: {name}: the job still runs 30 s after rank 1 got signal {sig}")
            return 1
        elapsed = time.time() - t0
        log.seek(0)
        text = log.read()
        if rc == 0 or expect_text not in text:
            print(f"FAIL: {name}: exit {rc}; expected a non-zero exit and '{expect_text}':\n{text}")
            return 1
        print(f"{name}: rank 1 got signal {sig}; the job exited {rc} after {elapsed:.1f} s: "
              + next(line for line in text.splitlines() if expect_text in line).strip())
        return 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def case_faults(a, work):
    # A killed rank: mpirun notices and ends the job. A hung (stopped) rank: rank 0's watchdog
    # (--comm-timeout 5) ends it.
    bad = fault_run(a, work, "killed", signal.SIGKILL, "rank 1")
    bad += fault_run(a, work, "hung", signal.SIGSTOP, "died or hung")
    return bad


def case_mismatch(a, work):
    bad = 0
    other = os.path.join(work, "other.txt")
    with open(os.path.join(work, "data.txt")) as f:
        text = f.read()
    with open(other, "w") as f:
        f.write(text[::-1])
    for label, rank1, expect in [
        ("settings", dict(extra=["--weight-decay", "0.5"]), "other settings"),
        ("buckets", dict(extra=SMALL_BUCKETS), "other settings"),
        ("data", dict(data="other.txt"), "other training data"),
    ]:
        cmd = MPIRUN + ["-np", "1"] + train_args(a, work, "mismatch_" + label, batch=2) + [":", "-np", "1"] \
            + train_args(a, work, "mismatch_" + label, batch=2, **rank1)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode == 0 or expect not in p.stderr + p.stdout:
            print(f"FAIL: ranks with other {label}: exit {p.returncode}, expected '{expect}':\n{p.stderr}")
            bad += 1
        else:
            line = next(x for x in (p.stderr + p.stdout).splitlines() if expect in x)
            print(f"ranks with other {label}: refused: {line.strip()[:200]}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--retnet", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--no-mpi-build", action="store_true", help="retnet was built without MPI")
    ap.add_argument("case", choices=["equivalence", "overlap", "faults", "mismatch", "sequence"])
    a = ap.parse_args()
    if a.no_mpi_build:
        skip_or_fail("retnet was built without MPI (RETNET_MPI=OFF)")
    if shutil.which("mpirun") is None:
        skip_or_fail("mpirun not found (install openmpi-bin)")
    work = os.path.join(a.workdir, a.case)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt")) as f:
        text = f.read()[:50000]
    with open(os.path.join(work, "data.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    bad = {"equivalence": case_equivalence, "overlap": case_overlap, "faults": case_faults,
           "mismatch": case_mismatch, "sequence": case_sequence}[a.case](a, work)
    if bad:
        print(f"FAIL: {bad} check(s) failed")
        sys.exit(1)
    print("OK")


if __name__ == "__main__":
    main()
