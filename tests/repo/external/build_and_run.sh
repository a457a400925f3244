#!/bin/sh
# build_and_run.sh HELLO_C KVACT_H LIBKVACT_SO — compiles a program against
# the public header and the shared library exactly as README says a user
# does (cc app.c -I<dir> -L<dir> -lkvact), then runs it.
set -eu
src=$1 hdr=$2 lib=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/inc" "$work/lib"
cp "$hdr" "$work/inc/kvact.h"
cp -L "$lib" "$work/lib/libkvact.so"
# a sanitizer build of the library needs the same runtime in the program
san=
case $(ldd "$work/lib/libkvact.so") in
  *libasan*) san=-fsanitize=address,undefined ;;
  *libtsan*) san=-fsanitize=thread ;;
esac
cc -std=c11 -Wall -Wextra -Werror $san "$src" -I"$work/inc" -L"$work/lib" -lkvact -o "$work/hello"
out=$(LD_LIBRARY_PATH="$work/lib" "$work/hello")
echo "$out"
[ "$out" = "hello, kvact (tag 7)" ]
echo "1 passed, 0 failed"
