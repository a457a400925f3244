#!/usr/bin/env bash
# gpu_check.sh — the CUDA path on a real GPU (issue 33), in two halves:
#
#   tools/gpu_check.sh bundle   here (Debian 12, Bazel): builds -c opt
#       libkvact.so, libkvact_cuda.so, the CUDA test and kvbench, and puts
#       them in gpu_bundle/ (git-ignored) with the shared libraries they
#       need that a bare CUDA machine lacks (from ldd; not libc's family,
#       libstdc++/libgcc_s or CUDA's own, which that machine has newer).
#   tools/gpu_check.sh run      there (a GPU, CUDA, PyTorch, no Bazel, no
#       Debian libraries): runs everything from gpu_bundle/ and writes each
#       step's output under $OUT (default ./gpu_out):
#         1. the CUDA test (every format the host device has, PAGES too,
#            × dtype × holes, bit for bit against the host device);
#         2. compute-sanitizer --tool memcheck over it;
#         3. kvbench --suite gpu (gather/scatter against cudaMemcpyAsync);
#         4. the serving simulation with its paged cache on the GPU;
#         5. a PagedKVCache round trip of torch CUDA tensors (python/).
#       Each step has a time limit; the whole run stays under ~8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
B=gpu_bundle

bundle() {
  set -e
  bazel build -c opt //:libkvact.so //gpu:libkvact_cuda.so //tests/gpu:gpu_cuda_test \
    //tools:kvbench >/dev/null
  local bin
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
  rm -rf "$B" && mkdir -p "$B/lib"
  cp -L "$bin/libkvact.so" "$bin/gpu/libkvact_cuda.so" "$bin/tests/gpu/gpu_cuda_test" \
    "$bin/tools/kvbench/kvbench" "$bin/tools/kvbench/kvbench_counted" "$B/"
  chmod u+w "$B"/*
  for f in "$B"/libkvact.so "$B"/gpu_cuda_test "$B"/kvbench; do
    ldd "$f" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    grep -v '/usr/local/cuda' | while read -r lib; do cp -L "$lib" "$B/lib/"; done
  du -sh "$B"
}

step() { # step NAME SECONDS CMD...: output to $OUT/NAME.txt, status line to summary
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
}

run() {
  OUT=${OUT:-$PWD/gpu_out}
  mkdir -p "$OUT"
  export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KVACT_CUDA_LIB="$PWD/$B/libkvact_cuda.so" KVACT_LIB="$PWD/$B/libkvact.so"
  { nvidia-smi -L; nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__)'; } \
    >"$OUT/machine.txt" 2>&1
  export CK_FORK=no # one process: the sanitizer sees the kernels
  step cuda_test 90 "$B/gpu_cuda_test"
  step sanitizer 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_cuda_test"
  step kvbench_gpu 90 "$B/kvbench" --suite gpu
  step sim_gpu 45 "$B/kvbench" --duration 20 --svg "$OUT/sim.svg"
  step paged_cuda 60 env PYTHONPATH=python python3 tools/gpu_paged_check.py
  cat "$OUT/summary.txt"
}

case "${1:-}" in
bundle) bundle ;;
run) run ;;
*)
  echo "usage: tools/gpu_check.sh bundle|run" >&2
  exit 2
  ;;
esac
