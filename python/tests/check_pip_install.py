"""Installs ./python into a fresh venv the way the README says (Debian's Python, offline, no build
isolation) and imports it from another directory. Run by CTest: check_pip_install.py --workdir DIR
[--reuse-build BUILD_DIR] (RETNET_CMAKE_BUILD_DIR for setup.py: the module is built in the test
suite's own build directory instead of compiling the whole engine a second time)."""
import os
import argparse
import shutil
import subprocess
import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent.parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reuse-build", help="an engine build directory with the Python module on")
    args = parser.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    venv = work / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    env = dict(os.environ)
    if args.reuse_build:
        env["RETNET_CMAKE_BUILD_DIR"] = args.reuse_build
    subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index",
                    str(PYTHON_DIR)], check=True, env=env)
    check = ("import retnet, numpy as np; m = retnet.init({'decoder_layers': 1}, seed=1); "
             "x = m.logits([1, 2, 3]); assert x.shape == (1, 3, 256) and np.isfinite(x).all(); "
             "print(retnet.__file__, m.generate('hi', max_tokens=8, seed=1) is not None)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", check], cwd=str(work), check=True,
                         capture_output=True, text=True).stdout
    assert str(venv) in out, out  # imported from the venv, not from a source or build tree
    print("pip install into a venv: ok:", out.strip())


if __name__ == "__main__":
    sys.exit(main())
