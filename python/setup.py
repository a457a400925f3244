"""setup.py — puts libkvact.so inside the installed package (pyproject.toml holds the rest).

The library is taken from $KVACT_LIB, else the repository's
bazel-bin/libkvact.so (`bazel build -c opt //:libkvact.so` first); the
build stops with a clear message when neither exists, so an install never
yields a package that cannot load.

The package is Python over ctypes, but it carries a native library, so its
wheel must not say `none-any`: BinaryDistribution puts the files in platlib
(auditwheel refuses a shared library under purelib), and bdist_wheel's tag
is `py3-none-<platform>` — any Python 3 (ctypes, no extension module, no
CPython ABI), this platform only. `auditwheel repair` (tools/wheel.sh) then
vendors the library's dependencies and narrows the platform to manylinux.
"""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; Debian 12's setuptools 66 only has wheel's (0.38)
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


def find_library():
    candidates = [os.environ.get("KVACT_LIB"),
                  os.path.join(HERE, "..", "bazel-bin", "libkvact.so")]
    for path in filter(None, candidates):
        if os.path.exists(path):
            return os.path.realpath(path)
    raise SystemExit("libkvact.so not found: run `bazel build -c opt //:libkvact.so` "
                     "in the repository, or set KVACT_LIB")


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "kvact", "libkvact.so")
        shutil.copyfile(find_library(), dest)


class BinaryDistribution(Distribution):
    """Not pure: libkvact.so is platform code, so the files go to platlib."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """Tag py3-none-<platform>: no CPython ABI (ctypes only), but one platform."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution,
      cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})
