# sanitizer_preload.sh — sourced with KVACT_LIB set: a sanitizer build of
# libkvact.so needs its runtime loaded before the interpreter's own
# libraries, so whatever libasan/libubsan/libtsan it links goes into
# LD_PRELOAD. The interpreter and torch are not instrumented, so leak
# reports would be theirs: leak detection is off (kva_memcheck still runs).
preload=$(ldd "$KVACT_LIB" | awk '/lib(asan|ubsan|tsan)\.so/ {print $3}' | paste -sd: -)
if [ -n "$preload" ]; then
  export LD_PRELOAD="$preload" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
fi
