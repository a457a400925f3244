#!/bin/sh
# abi_test.sh LIBKVACT_SO LIBKVACT_MAP SYMBOLS — the ABI of libkvact.so is
# the one committed in debian/libkvact0.symbols (dpkg-gensymbols' format,
# which the Debian package build checks again): the SONAME is libkvact.so.0,
# every name@node in the file is exported under that node and nothing else
# is, and libkvact.map lists each name under the node the file says, by
# name (no globs: a pattern in an old node would claim later calls).
#
# What breaks a program built against 0.2 is a call that disappears or
# moves to another node; the test fails on either. Adding a call in 0.3:
#  1. declare it KVA_API in kvact.h (exports_test.sh);
#  2. in libkvact.map, a new node that inherits the last one, the old
#     nodes untouched:  KVACT_0.3 { global: kva_new_call; } KVACT_0.2;
#  3. in debian/libkvact0.symbols, the node's line and the call's, with
#     the version that added them (sorted in with the others):
#       " KVACT_0.3@KVACT_0.3 0.3.0" and " kva_new_call@KVACT_0.3 0.3.0".
# dpkg-gensymbols checks the file the same way (run where debian/control
# exists): dpkg-gensymbols -v0.3.0 -plibkvact0 -e<lib>
#   -Idebian/libkvact0.symbols -c4 -O/tmp/new.symbols
# writes what it finds, prints the difference and fails on one.
set -eu
lib=$1 map=$2 symbols=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
bad() {
  echo "$*"
  fail=1
}

soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')
[ "$soname" = libkvact.so.0 ] || bad "SONAME is \"$soname\", not libkvact.so.0"
head=$(head -1 "$symbols")
[ "$head" = "libkvact.so.0 libkvact0 #MINVER#" ] ||
  bad "$symbols: first line \"$head\", want \"libkvact.so.0 libkvact0 #MINVER#\""

# the file: " name@NODE MINVER", the minimal version the node's (KVACT_0.2: 0.2.x);
# "* Field: value" lines are meta-information (Build-Depends-Package)
awk 'NR > 1 && $1 != "*" { print $1 }' "$symbols" | sort > "$work/file"
awk 'NR > 1 && $1 != "*" {
       split($1, s, "@"); node = s[2]; sub(/^KVACT_/, "", node)
       if (index($2, node ".") != 1) print "  " $1 " " $2 ": not the version of its node"
     }' "$symbols" > "$work/minver"
[ -s "$work/minver" ] && bad "$symbols: minimal versions:" && cat "$work/minver"

# the library: each defined global or weak dynamic symbol as name@NODE; a
# node's own symbol (ABS, no @) as NODE@NODE, as dpkg-gensymbols writes it
readelf --dyn-syms -W "$lib" |
  awk '$1 ~ /:$/ && $7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") {
         n = $8; sub(/@@/, "@", n)
         if ($7 == "ABS" && n ~ /^KVACT_[0-9]+\.[0-9]+$/) n = n "@" n
         else if (n !~ /@/) n = n "@(no version node)"
         print n
       }' | sort > "$work/lib"

# the map: each name listed under global: as name@NODE, and NODE@NODE;
# a name with a glob character is refused
perl -0777 -pe 's{/\*.*?\*/}{}gs; s/([{};])/ $1 /g' "$map" | tr -s ' \t\n' '\n\n\n' |
  awk 'depth == 0 && $0 == "{" { node = last; depth = 1; sec = ""; print node "@" node; next }
       depth == 0 { last = $0; next }
       $0 == "}" { depth = 0; last = ""; next }
       $0 == "global:" || $0 == "local:" { sec = $0; next }
       sec == "global:" && $0 != ";" { print $0 "@" node }' | sort > "$work/map"
globs=$(grep '[][*?]' "$work/map" || true)
[ -n "$globs" ] && bad "$map: patterns under global: (list every name):" && echo "$globs"

# name@NODE lines of $1 not in $2, each with the node(s) $2 has for the name
diff_nodes() {
  comm -23 "$1" "$2" | while IFS=@ read -r name node; do
    other=$(grep "^$name@" "$2" | cut -d@ -f2 | paste -sd' ' -)
    echo "  $name@$node${other:+ (there: $other)}"
  done
}
d=$(diff_nodes "$work/file" "$work/lib")
[ -n "$d" ] && bad "in $symbols, not exported by the library under that node:" && echo "$d"
d=$(diff_nodes "$work/lib" "$work/file")
[ -n "$d" ] && bad "exported by the library, not in $symbols:" && echo "$d"
d=$(diff_nodes "$work/file" "$work/map")
[ -n "$d" ] && bad "in $symbols, not listed under that node in $map:" && echo "$d"
d=$(diff_nodes "$work/map" "$work/file")
[ -n "$d" ] && bad "listed in $map, not in $symbols:" && echo "$d"

if [ "$fail" = 0 ]; then
  echo "SONAME $soname; $(wc -l < "$work/file") symbols (nodes: $(grep -c '^KVACT_' "$work/file")), the same in the library, the map and $symbols"
  echo "1 passed, 0 failed"
else
  echo "0 passed, 1 failed"
  exit 1
fi
