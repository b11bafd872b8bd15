"""`pip install .` and `pip wheel .` from the repository root, as docs/python.md says (Debian's
Python, offline, no build isolation), then the package imported from another directory: once
installed from the tree, once from the wheel in a second fresh venv. Run by CTest:

    check_pip_install.py --workdir DIR --reuse-build BUILD_DIR   (RETNET_CMAKE_BUILD_DIR for
        setup.py: the module is built in the test suite's own build directory instead of
        compiling the engine a second time)
    check_pip_install.py --workdir DIR --clean-copy   (a copy of the tracked and untracked
        files, as a clean clone has them, built from scratch as a user's pip does)
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ("import importlib.metadata as md, retnet, numpy as np; "
         "m = retnet.init({'decoder_layers': 1}, seed=1); x = m.logits([1, 2, 3]); "
         "assert x.shape == (1, 3, 256) and np.isfinite(x).all(); "
         "assert md.version('retnet') == retnet.__version__, (md.version('retnet'), "
         "retnet.__version__); "
         "r = m.create_completion('hi', max_tokens=4, seed=1); "
         "print(retnet.__file__, r['usage']['completion_tokens'])")


def venv(path):
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(path)],
                   check=True)
    return path / "bin"


def check_import(bin_dir, work):
    out = subprocess.run([str(bin_dir / "python"), "-c", CHECK], cwd=str(work), check=True,
                         capture_output=True, text=True).stdout
    # Imported from the venv, not from a source or build tree.
    assert str(bin_dir.parent) in out, out
    return out.strip()


def clean_copy(work):
    """The repository's files as a clone has them (tracked and not ignored), without builds."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    copy = work / "clone"
    for name in filter(None, (f.decode() for f in files)):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reuse-build", help="an engine build directory with the Python module on")
    parser.add_argument("--clean-copy", action="store_true",
                        help="build from scratch in a copy of the repository")
    args = parser.parse_args()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ)
    source = ROOT
    if args.reuse_build:
        env["RETNET_CMAKE_BUILD_DIR"] = str(Path(args.reuse_build).resolve())
    if args.clean_copy:
        env.pop("RETNET_CMAKE_BUILD_DIR", None)
        source = clean_copy(work)
    pip = ["--no-build-isolation", "--no-index", str(source)]

    started = time.monotonic()
    bin_dir = venv(work / "venv")
    subprocess.run([str(bin_dir / "pip"), "install", *pip], check=True, env=env)
    print(f"pip install . ({time.monotonic() - started:.0f} s): ok:",
          check_import(bin_dir, work), flush=True)

    started = time.monotonic()
    dist = work / "dist"
    subprocess.run([str(bin_dir / "pip"), "wheel", "--no-deps", "-w", str(dist), *pip],
                   check=True, env=env)
    wheels = list(dist.glob("retnet-*.whl"))
    assert len(wheels) == 1, wheels
    # The wheel installs where nothing could build: no compiler, no CMake.
    bare = dict(os.environ, PATH="/nonexistent", CC="/bin/false", CXX="/bin/false")
    wheel_bin = venv(work / "wheel-venv")
    subprocess.run([str(wheel_bin / "pip"), "install", "--no-index", str(wheels[0])], check=True,
                   env=bare)
    print(f"pip wheel . ({time.monotonic() - started:.0f} s): {wheels[0].name}: ok:",
          check_import(wheel_bin, work))


if __name__ == "__main__":
    sys.exit(main())
