"""Builds retnet._retnet with the engine's own CMake project (the directory above this one)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ENGINE = Path(__file__).resolve().parent.parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures the engine with only the Python module on, builds it, and puts the module
    where setuptools packs it."""

    def build_extension(self, ext):
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        reuse = os.environ.get("RETNET_CMAKE_BUILD_DIR")
        if reuse:
            # An engine build directory configured with RETNET_BUILD_PYTHON=ON (e.g. the test
            # suite's): build the module there, incrementally, instead of compiling the engine again.
            built_dir = Path(reuse).resolve()
            subprocess.check_call(["cmake", "--build", str(built_dir), "--target", "_retnet"])
            cache = (built_dir / "CMakeCache.txt").read_text()
            staging = next((Path(line.split("=", 1)[1]) for line in cache.splitlines()
                            if line.startswith("RETNET_PYTHON_OUTPUT_DIR:")), built_dir / "python")
            built = next((staging / "retnet").glob("_retnet*.so"))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built, target)
            return
        build = Path(self.build_temp).resolve() / "cmake"
        staging = build / "package"
        configure = ["cmake", "-S", str(ENGINE), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DRETNET_BUILD_TESTS=OFF", "-DRETNET_BUILD_BENCHMARKS=OFF",
                     "-DRETNET_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}",
                     f"-DRETNET_PYTHON_OUTPUT_DIR={staging}"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        jobs = os.environ.get("RETNET_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_retnet", "-j", jobs])
        built = next((staging / "retnet").glob("_retnet*.so"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)


setup(ext_modules=[CMakeExtension("retnet._retnet")], cmdclass={"build_ext": CMakeBuild})
