"""Builds the Python package's extension retnet._retnet with the engine's own CMake project, so
that `pip install .` and `pip wheel .` work from the repository root (pyproject.toml; offline with
--no-build-isolation: Debian's setuptools, wheel, pybind11-dev and numpy are enough).

The engine library is compiled once, with only the module's targets (no tests, benchmarks or
command), through ccache when it is installed, for portable x86-64 (RETNET_NATIVE=OFF: every
kernel's instruction-set level is chosen at run time, so a wheel runs on any x86-64 CPU);
RETNET_NATIVE=ON in the environment builds for this machine's CPU instead.
RETNET_CMAKE_BUILD_DIR names an engine build directory configured with the module on
(scripts/build.sh's): the module is built there, incrementally, instead (with that directory's
RETNET_NATIVE). pip hides a build's output unless run with -v, so progress lines
("[12/80] ...") also go to the terminal when there is one.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ENGINE = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


def _terminal():
    """The terminal pip runs in (it captures our stdout), or None."""
    try:
        return open("/dev/tty", "w")
    except OSError:
        return None


def _run(command, what):
    """Runs a build step, echoing its output (pip shows it with -v or on failure) and a progress
    line on the terminal at most every 5 s."""
    tty = _terminal()
    last = 0.0
    try:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace") as process:
            for line in process.stdout:
                sys.stdout.write(line)
                now = time.monotonic()
                if tty is not None and (line.startswith("[") and now - last >= 5):
                    last = now
                    tty.write(f"\rretnet: {what}: {line.strip()[:100]}\n")  # past the spinner
                    tty.flush()
            if process.wait() != 0:
                raise subprocess.CalledProcessError(process.returncode, command)
    finally:
        if tty is not None:
            tty.close()


def _staged_module(staging):
    built = next((staging / "retnet").glob("_retnet*.so"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    if not built.name.endswith(suffix):  # a reused build directory found another Python
        raise RuntimeError(f"{built} was built for another Python than {sys.executable} "
                           f"(expected a name ending in {suffix})")
    return built


def _native_choice():
    """OFF (portable) unless RETNET_NATIVE asks for this machine's CPU."""
    value = os.environ.get("RETNET_NATIVE", "OFF").strip().upper()
    if value not in ("ON", "OFF", "1", "0", "TRUE", "FALSE"):
        raise RuntimeError(f"RETNET_NATIVE={value!r}: expected ON or OFF")
    return "ON" if value in ("ON", "1", "TRUE") else "OFF"


class CMakeBuild(build_ext):
    """Configures the engine with only the Python module on, builds it, and puts the module
    where setuptools packs it."""

    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        reuse = os.environ.get("RETNET_CMAKE_BUILD_DIR")
        if reuse:
            built_dir = Path(reuse).resolve()
            _run(["cmake", "--build", str(built_dir), "--target", "_retnet"],
                 f"building the module in {built_dir}")
            cache = (built_dir / "CMakeCache.txt").read_text()
            staging = next((Path(line.split("=", 1)[1]) for line in cache.splitlines()
                            if line.startswith("RETNET_PYTHON_OUTPUT_DIR:")), built_dir / "python")
        else:
            build = Path(self.build_temp).resolve() / "cmake"
            staging = build / "package"
            configure = ["cmake", "-S", str(ENGINE), "-B", str(build),
                         "-DCMAKE_BUILD_TYPE=Release", "-DRETNET_BUILD_TESTS=OFF",
                         "-DRETNET_BUILD_BENCHMARKS=OFF", "-DRETNET_BUILD_PYTHON=ON",
                         f"-DPython_EXECUTABLE={sys.executable}",
                         f"-DRETNET_PYTHON_OUTPUT_DIR={staging}",
                         f"-DRETNET_NATIVE={_native_choice()}"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            if shutil.which("ccache"):
                configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
            jobs = os.environ.get("RETNET_BUILD_JOBS", str(os.cpu_count() or 1))
            _run(configure, "configuring the engine")
            _run(["cmake", "--build", str(build), "--target", "_retnet", "-j", jobs],
                 "compiling the engine and the module")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_staged_module(staging), target)


# setuptools' own build tree stays out of the engine's CMake build directory `build/`.
setup(ext_modules=[CMakeExtension("retnet._retnet")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-pip"}})
