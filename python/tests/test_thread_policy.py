"""`import retnet` chooses OpenMP's waiting policy before the extension loads OpenMP, as the
`retnet` command does, and the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT win. Each case imports
retnet in a child Python with OMP_DISPLAY_ENV set, so OpenMP itself says what it got."""
import os
import re
import subprocess
import sys

import pytest

CHILD = """
import os, retnet
print(retnet.thread_policy())
print(sorted(k for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "RETNET_THREAD_POLICY")
             if k in os.environ))
"""


def import_retnet(**env_vars):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "RETNET_THREAD_POLICY")}
    env.update(OMP_DISPLAY_ENV="verbose", **env_vars)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    policy, left = out.stdout.strip().splitlines()
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", out.stderr)
    return policy, left, spins[-1] if spins else None


@pytest.fixture
def busy_cores():
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
             for _ in range(os.cpu_count() or 1)]
    yield
    for p in loops:
        p.kill()
        p.wait()


def test_beside_busy_processes_openmp_sleeps_at_once(busy_cores):
    policy, left, spins = import_retnet()
    assert policy.startswith("sleep at once, OMP_WAIT_POLICY=passive (engine"), policy
    assert spins in ("0", None), spins  # None: LLVM's OpenMP prints no GOMP_SPINCOUNT
    assert left == "[]", f"the package left {left} in os.environ"


def test_the_users_environment_wins(busy_cores):
    policy, left, spins = import_retnet(GOMP_SPINCOUNT="123")
    assert policy == "GOMP_SPINCOUNT=123 (environment)", policy
    assert spins in ("123", None), spins
    assert left == "['GOMP_SPINCOUNT']", left
