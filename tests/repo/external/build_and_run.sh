#!/bin/sh
# build_and_run.sh HELLO_C KVACT_H LIBKVACT_SO — compiles a program against
# the public header and the shared library exactly as README says a user
# does (cc app.c -I<dir> -L<dir> -lkvact), then runs it, twice:
#  - as installed: the library file under its SONAME, libkvact.so.0 (the
#    name the program records and the loader looks for), and the link
#    libkvact.so that -lkvact finds at link time;
#  - as built: LIBKVACT_SO's own folder (bazel-bin, or the test's runfiles),
#    which must hold the libkvact.so.0 link (//:libkvact_so_0) beside it.
set -eu
src=$1 hdr=$2 lib=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/inc" "$work/lib"
cp "$hdr" "$work/inc/kvact.h"
cp -L "$lib" "$work/lib/libkvact.so.0"
ln -s libkvact.so.0 "$work/lib/libkvact.so"
# a sanitizer build of the library needs the same runtime in the program
san=
case $(ldd "$work/lib/libkvact.so.0") in
  *libasan*) san=-fsanitize=address,undefined ;;
  *libtsan*) san=-fsanitize=thread ;;
esac

# build_and_run DIR: link with -L DIR, run with LD_LIBRARY_PATH=DIR
build_and_run() {
  cc -std=c11 -Wall -Wextra -Werror $san "$src" -I"$work/inc" -L"$1" -lkvact -o "$work/hello"
  out=$(LD_LIBRARY_PATH="$1" "$work/hello")
  echo "$2: $out"
  [ "$out" = "hello, kvact (tag 7)" ]
}
build_and_run "$work/lib" "as installed"
build_and_run "$(dirname "$lib")" "as built"
echo "1 passed, 0 failed"
