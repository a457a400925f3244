#!/usr/bin/env bash
# Installs what kvact needs to build and test, on Debian 12, as root.
# Idempotent: installs only the packages that are missing, says which, and
# does nothing (but say so) the second time; then the engines' virtual
# environments (tools/peers/setup.sh), which are just as idempotent.
set -euo pipefail

packages=(
  bazel-bootstrap   # the build (offline, see WORKSPACE)
  build-essential
  libck-dev         # concurrencykit 0.7.1: ck_ring mailboxes
  liburing-dev      # disk tier
  libhiredis-dev    # redis tier
  libmsgpack-dev    # config files
  check libsubunit-dev  # unit tests
  libnuma-dev       # L1 pool placement
  libjansson-dev    # kvconf JSON <-> msgpack
  libxxhash-dev     # checksums
  redis-server      # redis tier tests (started by the tests themselves)
  libcaf-dev        # C++ Actor Framework: anchor benchmark
  fio               # disk anchor benchmark
  clang             # libFuzzer target
  libmicrohttpd-dev # kvactd's Prometheus metrics endpoint
  libzmq3-dev       # ZeroMQ REQ/REP: anchor of the multi-process benchmark
  curl              # kvactd tests scrape the metrics endpoint
  python3-pytest python3-numpy python3-torch  # the Python package (issue 17)
  python3-pip python3-venv python3-setuptools # pip install ./python (offline)
  python3-matplotlib # kvbench's chart (tools/kvbench/report.py, /usr/bin/python3)
  pkgconf           # tests/repo/install_test.sh compiles with pkg-config
  debhelper dpkg-dev fakeroot lintian  # tools/deb.sh: the Debian packages
  libibverbs1 libnl-3-200 libnl-route-3-200 libcurl4 iproute2  # Mooncake's store (tools/peers/mooncake.requirements)
  debootstrap man-db systemd-container  # tools/clean_root_test.sh: the root, its man pages, its boot
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present, nothing to do"
elif [ "$(id -u)" -ne 0 ]; then
  echo "bootstrap: missing ${missing[*]}; run as root to install them" >&2
  exit 1
else
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # redis-server's package starts a system instance on 6379; the tests start
  # their own servers on free ports, so the system one is left as it is.
  echo "bootstrap: installed ${#missing[@]} package(s)"
fi

# The engines' virtual environments (vLLM 0.33: docs/vllm.md; SGLang 0.5.23 and
# Mooncake's store beside it: docs/sglang.md; LMCache 0.5.6, whose StorageManager
# python/tests/lmcache_side runs beside kvact's), after apt, which brings
# python3-venv. Idempotent: a second run says "up to date". The first install
# fetches from Python's package index what takes ~27 GB installed (vLLM 10.5
# min, SGLang 4 min, Mooncake seconds, LMCache 2.75 min, on the 2-core
# development VM); without the index it exits 2, and so does bootstrap: the
# peer suites cannot run without their engines.
"$(dirname "$0")/peers/setup.sh"
