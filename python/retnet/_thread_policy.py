"""The engine's OpenMP waiting policy, chosen before the extension module loads OpenMP.

OpenMP reads OMP_WAIT_POLICY once, when it loads. Unless the environment sets it or
GOMP_SPINCOUNT, before_load() chooses as the `retnet` command does (src/core/thread_policy.cpp):
sleep at once (passive) when other work holds the cores, else OpenMP's default; it leaves the
choice in RETNET_THREAD_POLICY for the extension to report (retnet.thread_policy()), and
after_load() removes what it set, so that the processes Python starts choose for themselves.
"""
import os
import time

_VARIABLE = "RETNET_THREAD_POLICY"
_set = []


def _openmp_loaded():
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


def _other_work_holds_cores():
    """Some other task was runnable in each of five samples a millisecond apart."""
    fewest = None
    for i in range(5):
        if i:
            time.sleep(0.001)
        try:
            with open("/proc/loadavg") as f:
                runnable = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return False
        others = runnable - 1  # this thread is runnable while it reads
        fewest = others if fewest is None else min(fewest, others)
    return fewest > 0


def before_load():
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    if _openmp_loaded():  # e.g. torch was imported first: its OpenMP already chose
        return
    busy = _other_work_holds_cores()
    if busy:
        os.environ["OMP_WAIT_POLICY"] = "passive"
        _set.append("OMP_WAIT_POLICY")
    os.environ[_VARIABLE] = "busy" if busy else "free"
    _set.append(_VARIABLE)


def after_load():
    for name in _set:
        os.environ.pop(name, None)
    _set.clear()
