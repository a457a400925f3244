#!/bin/sh
# exports_test.sh LIBKVACT_SO KVACT_H — libkvact.so exports the API and
# nothing else: every name in its dynamic symbol table is a function that
# kvact.h declares with KVA_API, every such declaration is exported, and no
# function declaration in kvact.h lacks the mark.
#
# Why it matters: a user's program links libkvact.so next to its own code,
# so an exported internal name (pool_create, key_hash, config_get) can bind
# to the user's function of the same name, or theirs to ours; an exported
# test seam (a writable function pointer) is a way into the library.
#
# No exceptions are allowed. Not exports, so not counted: the undefined
# names (libc, libck, ...; nm --defined-only drops them) and the local
# ones, which nm prints with a lower-case type letter. ld keeps a local
# entry for each thread-local that gcc reaches with the general-dynamic TLS
# model (rt_current, ...): no other object can bind to it and dlsym does
# not find it. The names ld defines itself (_edata, _end, __bss_start) go
# local under the version script. A version node of libkvact.map (KVACT_0.2)
# is also in the table, as an absolute symbol (type A, value 0) that names
# the node, not a function: those are skipped by that exact shape, and
# abi_test.sh checks the nodes.
set -eu
lib=$1 hdr=$2
exported=$(mktemp) declared=$(mktemp)
trap 'rm -f "$exported" "$declared"' EXIT
fail=0

# global (upper-case type), unique (u) and weak (v, w) definitions, but
# for the version nodes' own names
nm -D --defined-only "$lib" |
  awk '$(NF - 1) == "A" && $1 ~ /^0+$/ && $NF ~ /^KVACT_[0-9]+\.[0-9]+$/ { next }
       $(NF - 1) ~ /^[A-Zuvw]$/ { print $NF }' | sed 's/@.*//' | sort -u > "$exported"
# the function names of KVA_API declarations (the mark opens the line)
grep -E '^KVA_API ' "$hdr" | grep -oE '\bkva_[a-z0-9_]+\(' | tr -d '(' | sort -u > "$declared"

bad=$(grep -v '^kva_' "$exported" || true)
if [ -n "$bad" ]; then
  echo "libkvact.so exports $(echo "$bad" | wc -l) names outside kva_*:"
  echo "$bad" | head -40
  fail=1
fi
extra=$(grep '^kva_' "$exported" | comm -23 - "$declared")
if [ -n "$extra" ]; then
  echo "libkvact.so exports kva_ names that kvact.h does not declare with KVA_API:"
  echo "$extra"
  fail=1
fi
missing=$(comm -13 "$exported" "$declared")
if [ -n "$missing" ]; then
  echo "kvact.h declares with KVA_API names that libkvact.so does not export:"
  echo "$missing"
  fail=1
fi
# A declaration opens at column 0 with its return type; typedefs of
# function pointers and static inline helpers are not exported.
unmarked=$(grep -E '^[A-Za-z_]' "$hdr" | grep -E '\bkva_[a-z0-9_]+\(' |
  grep -vE '^(KVA_API|typedef|static|#)' || true)
if [ -n "$unmarked" ]; then
  echo "kvact.h declares functions without KVA_API (not exported):"
  echo "$unmarked"
  fail=1
fi

if [ "$fail" = 0 ]; then
  echo "$(wc -l < "$exported") names exported, all of them KVA_API in kvact.h"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
