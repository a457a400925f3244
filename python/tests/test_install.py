"""test_install.py — `pip install ./python --no-build-isolation` into a fresh venv, offline,
gives a package that finds its own libkvact.so: the README's install path, as written.
Its kvact.__version__ (the library's kva_version()) is the repository's VERSION file."""
import os
import shutil
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(__file__), "..")
VERSION_FILE = os.path.join(PACKAGE, "..", "VERSION")  # //:VERSION, in the test's data
EXAMPLE = """
import kvact, os
assert "KVACT_LIB" not in os.environ
assert os.path.dirname(kvact._lib.lib._name) == os.path.dirname(kvact.__file__)
assert kvact.__version__ == os.environ["EXPECT_VERSION"], kvact.__version__
cfg = kvact.Config({"l1.size_bytes": 1 << 22, "l1.hugepages": False, "l1.pinned": False})
with kvact.Runtime(cfg) as rt:
    keys = kvact.chunk_keys("m", list(range(32)), chunk_tokens=16)
    layout = kvact.MemoryLayoutDesc(shapes=[(8, 8)], dtypes=["uint8"])
    objs = rt.storage.reserve_write(keys, layout)
    for o in objs.values():
        o.array[...] = 3
    rt.storage.finish_write(keys)
    assert rt.storage.submit_prefetch_task(keys, layout).wait(5.0) == 2
    with rt.storage.read_prefetched_results(keys, layout) as got:
        assert all(int(o.array.sum()) == 3 * 64 for o in got)
    rt.storage.finish_read_prefetched(keys)
    rt.storage.flush(timeout=10.0)
    assert rt.storage.memcheck(), rt.storage.memcheck_report()
print("ok")
"""


def test_pip_install_into_a_venv_then_import_from_anywhere(tmp_path):
    lib = os.environ.get("KVACT_LIB")
    if not lib or not os.path.exists(lib):
        pytest.skip("KVACT_LIB names no built libkvact.so")
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, symlinks=False,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
           "--no-build-isolation", str(src)]
    subprocess.run(pip, check=True, env=dict(os.environ, KVACT_LIB=lib))
    env = {k: v for k, v in os.environ.items() if k not in ("KVACT_LIB", "PYTHONPATH")}
    with open(VERSION_FILE) as f:
        env["EXPECT_VERSION"] = f.read().strip()
    out = subprocess.run([str(venv / "bin" / "python"), "-c", EXAMPLE], cwd=str(tmp_path),
                         env=env, check=True, capture_output=True, text=True).stdout
    assert out.strip() == "ok"
