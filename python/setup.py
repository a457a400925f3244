"""setup.py — puts libkvact.so inside the installed package (pyproject.toml holds the rest).

The library is taken from $KVACT_LIB, else the repository's
bazel-bin/libkvact.so (`bazel build -c opt //:libkvact.so` first); the
build stops with a clear message when neither exists, so an install never
yields a package that cannot load.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

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


setup(cmdclass={"build_py": BuildWithLibrary})
