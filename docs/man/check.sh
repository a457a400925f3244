#!/bin/sh
# docs/man/check.sh — every man page here renders without a warning.
#
#   docs/man/check.sh [PAGE ...]     (default: every docs/man/*.[1-8])
#
# Runs what lintian runs on an installed page (groff-message), then groff's
# own check with every warning on; prints each warning with its page and
# exits 1 if there was any, 2 when man or groff is missing (apt-get install
# man-db groff-base). Run from anywhere.
set -u
dir=$(cd "$(dirname "$0")" && pwd)
command -v man >/dev/null 2>&1 && command -v groff >/dev/null 2>&1 || {
  echo "check.sh: man and groff are needed (apt-get install man-db groff-base)" >&2
  exit 2
}
[ $# -gt 0 ] || set -- "$dir"/*.[1-8]
bad=0
for page in "$@"; do
  [ -f "$page" ] || { echo "$page: no such page"; bad=1; continue; }
  out=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 \
        man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 >/dev/null)
  out2=$(groff -man -ww -z "$page" 2>&1)
  if [ -n "$out$out2" ]; then
    printf '%s:\n%s%s\n' "$page" "$out" "${out2:+${out:+
}$out2}"
    bad=1
  else
    echo "$page: ok"
  fi
done
exit $bad
