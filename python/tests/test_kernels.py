"""`retnet.kernels()` names the instruction-set level of each kernel family, as `retnet --version`
does, and follows RETNET_MAX_ISA (read at import, like the command reads it at start)."""
import os
import subprocess
import sys

import retnet


def kernels_line(version_text):
    lines = [l for l in version_text.splitlines() if l.startswith("Kernels: ")]
    assert len(lines) == 1, version_text
    return lines[0][len("Kernels: "):]


def test_kernels_match_the_command(cli):
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert retnet.kernels() == kernels_line(out.stdout)


def test_a_cap_lowers_every_family_to_scalar():
    env = dict(os.environ, RETNET_MAX_ISA="scalar")
    out = subprocess.run([sys.executable, "-c", "import retnet; print(retnet.kernels())"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = out.stdout.strip()
    assert summary.startswith("scalar (cpu "), summary
    assert "RETNET_MAX_ISA scalar" in summary, summary
    families = summary.split(":", 1)[1].split(",")
    assert families and all(f.strip().endswith("scalar") for f in families), summary
