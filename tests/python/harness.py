"""What every Python check shares: safetensors and .npy I/O (independent of the engine's own), a
runner for a CLI, and comparisons that cannot pass on NaN or Inf.

A comparison is `rel = max|actual - expected| / max|expected|` (absolute when expected is all
zero), per tensor. It is +inf, and the check fails saying where, when the shapes differ or when
any element of either side is NaN or infinite: np.max propagates NaN, but Python's max(), `e > worst`
and `err <= tol` do not fail on it, and numpy broadcasting would compare [T, V] with [1, T, V]."""
import argparse
import json
import math
import os
import struct
import subprocess
import tempfile

import numpy as np

# ------------------------------------------------------------------------------------- safetensors
# Layout: 8-byte little-endian header length N, N bytes of JSON
# {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
# then the raw little-endian data; offsets are relative to the end of the header.
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


# BF16 has no numpy dtype: written from torch.bfloat16 tensors (their raw uint16 bits), read back as
# the exact float32 values (the bits shifted into the top half of a float32).
def _is_bf16(t):
    return hasattr(t, "dtype") and str(t.dtype) == "torch.bfloat16"


def _to_numpy(t):
    if hasattr(t, "detach"):  # a torch tensor, without importing torch here
        t = t.detach().cpu().numpy()
    return np.ascontiguousarray(t)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array or torch tensor}, written in the given order and dtype (cast
    before calling: the engine reads F32). A torch.bfloat16 tensor is written as BF16."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        if _is_bf16(t):
            import torch
            a = _to_numpy(t.detach().cpu().contiguous().view(dtype=torch.int16))
            dtype_name = "BF16"
        else:
            a = _to_numpy(t)
            dtype_name = None
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        raw = a.tobytes()
        header[name] = {"dtype": dtype_name or _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header so the data is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """-> ({name: numpy array in the file's dtype}, metadata dict). ValueError on a malformed file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        try:
            dtype = np.dtype("<u2" if info["dtype"] == "BF16" else _DTYPES[info["dtype"]])
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name}: bad header entry {info!r}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(body)) or end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name}: data_offsets {[begin, end]} do not hold "
                             f"shape {shape} of {info['dtype']} within {len(body)} data bytes")
        a = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
        if info["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a
    return tensors, metadata


def load_torch(path):
    """-> ({name: float64 torch tensor}, metadata): the file's values, to compute references from."""
    import torch
    tensors, metadata = read_safetensors(path)
    return {k: torch.from_numpy(v.astype(np.float64)) for k, v in tensors.items()}, metadata


def read_npy(path):
    return np.load(path, allow_pickle=False)


# -------------------------------------------------------------------------------------- comparison
def _array(x):
    return np.asarray(_to_numpy(x), dtype=np.float64)


def first_non_finite(x):
    """(index tuple, value) of the first NaN or infinite element of x, or None."""
    x = _array(x)
    bad = np.argwhere(~np.isfinite(x))
    if not len(bad):
        return None
    idx = tuple(int(i) for i in bad[0])
    return idx, float(x[idx])


def rel_error(expected, actual):
    """max|actual - expected| / max|expected| (absolute when expected is all zero); +inf when the
    shapes differ or either side holds a NaN or an infinity."""
    e, a = _array(expected), _array(actual)
    if e.shape != a.shape or not np.isfinite(e).all() or not np.isfinite(a).all():
        return math.inf
    if e.size == 0:
        return 0.0
    scale = np.abs(e).max()
    diff = np.abs(a - e).max()
    return float(diff / scale) if scale > 0 else float(diff)


def worst(errors):
    """The largest of (name, error) pairs, where NaN and inf count as the largest: -> (name, error)."""
    top_name, top = "-", 0.0
    for name, e in errors:
        if not (e <= top):  # NaN, or larger
            top_name, top = name, e
            if math.isnan(e):
                break
    return top_name, top


class Checks:
    """Collects and prints the results of one script's checks; `exit_code()` ends it."""

    def __init__(self):
        self.failures, self.skipped = [], []

    def fail(self, message):
        self.failures.append(message)
        print(f"  FAIL {message}")

    def skip(self, message):
        self.skipped.append(message)
        print(f"  SKIP {message}")

    def require(self, label, ok, detail=""):
        print(f"  {'ok  ' if ok else 'FAIL'} {label} {detail}".rstrip())
        if not ok:
            self.failures.append(f"{label} {detail}".rstrip())
        return ok

    def error(self, label, err, tol):
        """A relative error computed elsewhere; NaN and inf fail."""
        ok = math.isfinite(err) and err <= tol
        print(f"  {'ok  ' if ok else 'FAIL'} rel {err:.3e} (tol {tol:.0e})  {label}")
        if not ok:
            self.failures.append(f"{label}: rel {err:.3e} > {tol:.0e}")
        return ok

    def close(self, label, expected, actual, tol):
        """actual = expected within relative max error tol; fails on a shape mismatch and on any
        NaN or Inf on either side, printing where, or the worst mismatches."""
        e, a = _array(expected), _array(actual)
        if e.shape != a.shape:
            return self.require(label, False, f"(shape {list(a.shape)}, expected {list(e.shape)})")
        for side, x, other in (("actual", a, e), ("expected", e, a)):
            bad = first_non_finite(x)
            if bad is not None:
                idx, value = bad
                count = int((~np.isfinite(x)).sum())
                return self.require(label, False, f"(non-finite {side} element at {idx}: {value} "
                                    f"(other side {other[idx]:.8g}); {count} of {x.size} non-finite)")
        err = rel_error(e, a)
        ok = self.error(label, err, tol)
        if not ok:
            diff = np.abs(a - e)
            for flat in np.argsort(diff, axis=None)[::-1][:3]:
                idx = tuple(int(i) for i in np.unravel_index(flat, diff.shape))
                print(f"       at {idx}: expected {e[idx]:.8g}, got {a[idx]:.8g}")
        return ok

    def run(self, *steps):
        """Runs the steps in turn; an exception (a harness crash) is reported like a failed check
        and stops the run. -> the exit code."""
        try:
            for step in steps:
                step()
        except Exception as e:
            import traceback
            traceback.print_exc()
            self.failures.append(f"harness exception: {type(e).__name__}: {e}")
        return self.exit_code()

    def exit_code(self):
        if self.skipped:
            print(f"\nSKIPPED: {len(self.skipped)}: " + "; ".join(self.skipped))
        if self.failures:
            print(f"\nFAILED: {len(self.failures)} check(s):")
            for f in self.failures:
                print("  " + f)
            return 1
        print("\nall checks passed")
        return 0


def finite_difference_error(loss, weights, samples=2, seed=7, h=1e-6):
    """Autograd of loss() (already back-propagated into weights' .grad) against central differences
    at `samples` random coordinates of every tensor, relative to the tensor's largest gradient.
    -> (worst tensor name, worst error), NaN-keeping."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    errors = []
    with torch.no_grad():
        for name, t in weights.items():
            scale = max(t.grad.abs().max().item(), 1e-30)
            for _ in range(samples):
                j = int(torch.randint(0, t.numel(), (1,), generator=gen))
                x0 = t.view(-1)[j].item()
                t.view(-1)[j] = x0 + h
                lp = loss().item()
                t.view(-1)[j] = x0 - h
                lm = loss().item()
                t.view(-1)[j] = x0
                errors.append((name, abs((lp - lm) / (2 * h) - t.grad.view(-1)[j].item()) / scale))
    return worst(errors)


# --------------------------------------------------------------------------------------------- CLI
class Engine:
    """Runs a command line (the `retnet` binary, or fake_engine.py behind the same CLI)."""

    def __init__(self, command, env=None, timeout=300):
        self.command, self.env, self.timeout = list(command), env, timeout

    def run(self, args):
        env = dict(os.environ, **(self.env or {}))
        args = [str(a) for a in args]
        try:
            # errors="replace": an engine may echo the bytes of a corrupt file in its message
            return subprocess.run(self.command + args, capture_output=True, text=True, errors="replace",
                                  env=env, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(self.command + args, "timeout", "",
                                               f"timed out after {self.timeout}s")


def describe(p):
    tail = (p.stderr or "").strip().splitlines()[-3:]
    return f"exit {p.returncode}, stderr: {' | '.join(tail) or '(empty)'}"


def tokens_arg(tokens):
    return ",".join(str(int(t)) for t in tokens)


def parse_check_args(doc, workdir_help, self_test_help, prefix, extra=()):
    """The command line of an engine check: --retnet, --workdir, --self-test, the `extra` options
    ((args, kwargs) pairs for add_argument) and --timeout. Returns the parsed arguments with
    args.workdir made: the given folder, or a new temp dir named `prefix`..."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--retnet", help="path to the engine's CLI binary")
    ap.add_argument("--workdir", help=workdir_help)
    ap.add_argument("--self-test", action="store_true", help=self_test_help)
    for a, kw in extra:
        ap.add_argument(*a, **kw)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per engine call")
    args = ap.parse_args()
    if not args.self_test and not args.retnet:
        ap.error("give --retnet PATH, or --self-test")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(args.workdir, exist_ok=True)
    print(f"workdir: {args.workdir}")
    return args


def read_float32(checks, label, path):
    """The .npy array at path; None, with a failure recorded, when it is not float32."""
    got = read_npy(path)
    if got.dtype != np.float32:
        checks.fail(f"{label}: output {got.dtype}, expected float32")
        return None
    return got
