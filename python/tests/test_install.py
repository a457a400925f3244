"""test_install.py — the README's install paths, offline, each into a fresh venv that sees
Debian's numpy: `pip install ./python --no-build-isolation`, and `pip wheel ./python` then
`pip install` of that wheel (tagged for this platform, never none-any, with libkvact.so in
it). From `/`, without KVACT_LIB or PYTHONPATH, the installed package loads its own
libkvact.so and does a put/get round trip. Also the library search of a package without a
library: the system's libkvact.so.0 by soname, and an ImportError that lists the places
tried. tools/wheel.sh's auditwheel repair needs the package index: it is not run here.
kvact.__version__ (the library's kva_version()) is the repository's VERSION file."""
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile

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
print("ok", kvact.__file__)
"""


@pytest.fixture
def lib():
    path = os.environ.get("KVACT_LIB")
    if not path or not os.path.exists(path):
        pytest.fail("KVACT_LIB names no built libkvact.so (bazel build //:kvact_shared): "
                    "a failed set-up, not a skip")
    return path


def copy_package(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src, symlinks=False,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return src


def make_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    return venv / "bin" / "python"


def clean_env(**extra):
    """Without KVACT_LIB, and without PYTHONPATH: pip would take a kvact.egg-info on it
    for an installed kvact and install nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("KVACT_LIB", "PYTHONPATH")}
    with open(VERSION_FILE) as f:
        env["EXPECT_VERSION"] = f.read().strip()  # EXAMPLE checks kvact.__version__
    env.update(extra)
    return env


def run_from_root(python, code, **env):
    """`cd / && python -c code`: nothing of the source tree on the path."""
    return subprocess.run([str(python), "-c", code], cwd="/", env=clean_env(**env),
                          capture_output=True, text=True)


def assert_round_trip_from_root(python, venv_python):
    done = run_from_root(python, EXAMPLE)
    assert done.returncode == 0, done.stderr
    ok, where = done.stdout.split()
    assert ok == "ok"
    assert where.startswith(str(venv_python.parent.parent)), where  # the venv's, not the tree's


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def test_pip_install_into_a_venv_then_import_from_anywhere(tmp_path, lib):
    src = copy_package(tmp_path)
    python = make_venv(tmp_path)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index",
                    "--no-build-isolation", str(src)],
                   check=True, env=clean_env(KVACT_LIB=lib))
    assert_round_trip_from_root(python, python)


def test_pip_wheel_is_tagged_for_this_platform_and_carries_libkvact(tmp_path, lib):
    src = copy_package(tmp_path)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-index",
                    "--no-build-isolation", "--no-deps", "-w", str(dist), str(src)],
                   check=True, env=dict(os.environ, KVACT_LIB=lib))
    (whl,) = dist.glob("kvact-*.whl")
    name, version, py, abi, plat = whl.name[:-len(".whl")].split("-")
    assert (name, py, abi) == ("kvact", "py3", "none"), whl.name
    assert plat.startswith("linux_"), whl.name  # never "any": it carries libkvact.so
    with zipfile.ZipFile(whl) as z:
        wheel = z.read("kvact-%s.dist-info/WHEEL" % version).decode()
        assert "Root-Is-Purelib: false" in wheel, wheel
        assert "Tag: py3-none-%s" % plat in wheel, wheel
        with open(lib, "rb") as f:
            assert sha256(z.read("kvact/libkvact.so")) == sha256(f.read())
    python = make_venv(tmp_path)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    str(whl)], check=True, env=clean_env())
    assert_round_trip_from_root(python, python)


def system_has_libkvact():
    """Whether the loader finds a libkvact.so.0 of the system's. Asked in a fresh process:
    this one loaded KVACT_LIB, whose SONAME the loader would match."""
    probe = run_from_root(sys.executable, "import ctypes; ctypes.CDLL('libkvact.so.0')")
    return probe.returncode == 0


def test_a_package_without_its_library_loads_the_systems_libkvact_so_0(tmp_path, lib):
    site = tmp_path / "site"
    shutil.copytree(os.path.join(PACKAGE, "kvact"), site / "kvact",
                    ignore=shutil.ignore_patterns("__pycache__", "libkvact.so"))
    code = "import kvact; print(kvact._lib.lib._name, kvact.Config().get('l1.size_bytes'))"
    missing = run_from_root(sys.executable, code, PYTHONPATH=str(site))
    if system_has_libkvact():  # an installed libkvact0 (or install.sh): the package finds it
        assert missing.returncode == 0, missing.stderr
        assert missing.stdout.split()[0] == "libkvact.so.0", missing.stdout
    else:  # none: the ImportError names every place tried
        assert missing.returncode != 0
        message = missing.stderr.strip().splitlines()[-1]
        assert message.startswith("ImportError: libkvact.so not found"), missing.stderr
        assert str(site / "kvact" / "libkvact.so") in message, message
        assert "libkvact.so.0" in message and "bazel-bin" not in message, message
    system = tmp_path / "system"
    system.mkdir()
    shutil.copyfile(lib, system / "libkvact.so.0")
    found = run_from_root(sys.executable, code, PYTHONPATH=str(site),
                          LD_LIBRARY_PATH=str(system))
    assert found.returncode == 0, found.stderr
    assert found.stdout.split()[0] == "libkvact.so.0", found.stdout
