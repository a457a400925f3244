#!/usr/bin/env bash
# clean_root_test.sh DEBS_DIR WHEEL — proves the packages and the wheel in a
# clean Debian 12 root that holds nothing of this build tree:
#
#   1. debootstrap a minbase bookworm root from Debian's archive
#   2. apt install ./libkvact0 ./libkvact-dev ./kvactd ./kvact-tools (apt
#      finds their dependencies, so a missing one fails here)
#   3. compile hello.c and client.c with pkg-config and run hello
#   4. start kvactd as the unit would (its ExecStart, User, RuntimeDirectory,
#      read from the installed unit) and connect client as an engine user in
#      group kvact (admitted), as a user outside the group (the socket's
#      permissions refuse it) and as root (kvactd's peer check refuses it)
#   5. systemd-analyze verify the unit (man-db installed: its man page too)
#   6. pip install the wheel into a fresh venv, run the Python example
#      embedded and against the daemon, from /
#   7. stop kvactd (SIGTERM: exit 0, socket removed)
#   8. boot the root with systemd (systemd-nspawn) and run the same clients
#      and the example against kvactd.service itself, sandboxed, with a disk
#      tier (io_uring) in its StateDirectory; stop it (exit 0, clean)
#   9. purge the packages, and check nothing of kvact is left: files, users,
#      groups, sockets, shm segments, processes
#
# Run as root, by .ci/run (not by bazel test: it needs root, mounts and
# the network to Debian's archive and Python's index). Prints each step
# with its time; stops at the first that fails. KVACT_ROOT (default
# /var/tmp/kvact-root) is the root, made afresh each run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
debs=$(cd "${1:?usage: clean_root_test.sh DEBS_DIR WHEEL}" && pwd)
wheel=$(realpath "${2:?usage: clean_root_test.sh DEBS_DIR WHEEL}")
root=${KVACT_ROOT:-/var/tmp/kvact-root}
[ "$(id -u)" = 0 ] || { echo "clean_root_test.sh: run as root" >&2; exit 1; }
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
mirror=${mirror:-http://deb.debian.org/debian}

t0=$(date +%s%N)
step_start=$t0
step() { # ends the step before (its time) and names the next
  local now
  now=$(date +%s%N)
  printf '   (%d.%d s)\n' $(((now - step_start) / 1000000000)) $(((now - step_start) / 100000000 % 10))
  step_start=$now
  echo "== $*"
}
in_root() { chroot "$root" "$@"; }
as_user() { # USER CMD...: a login-less shell of USER in the root, from /
  local u=$1
  shift
  in_root setpriv --reuid="$u" --regid="$(in_root id -g "$u")" --init-groups \
    env -i HOME=/tmp PATH=/usr/bin:/bin "$@"
}

mount_root() { # what chroot needs (nspawn mounts its own)
  mount -t proc proc "$root/proc"
  mount --bind /dev "$root/dev"
  mount --bind /dev/pts "$root/dev/pts"             # apt's log wants a pty
  mount -t tmpfs -o mode=1777 shm "$root/dev/shm"   # its own: the leftover check reads it
}

daemon=
cleanup() {
  local - # set +e for this function only
  set +e
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  for m in dev/shm dev/pts dev proc; do
    if mountpoint -q "$root/$m"; then umount -l "$root/$m"; fi
  done
  return 0
}
trap cleanup EXIT

echo "== clean root $root from $mirror"
cleanup
rm -rf "$root"
mkdir -p "$root"
debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
  { tail -20 "$root.debootstrap.log"; exit 1; }
echo "   minbase root: $(du -sh "$root" | cut -f1)"
mount_root
cp /etc/resolv.conf "$root/etc/resolv.conf"

step "what a user brings: a compiler, pkg-config, Python's venv, systemd, man-db"
in_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -qq --no-install-recommends \
  gcc libc6-dev pkgconf python3-venv systemd man-db > /dev/null
echo "   root now: $(du -sxh "$root" | cut -f1)"

step "apt install ./*.deb (dependencies from Debian's archive)"
mkdir -p "$root/tmp/debs"
for p in libkvact0 libkvact-dev kvactd kvact-tools; do
  cp "$debs"/${p}_*.deb "$root/tmp/debs/"
done
DEBIAN_FRONTEND=noninteractive in_root sh -c 'apt-get install -y -qq --no-install-recommends /tmp/debs/*.deb' |
  grep -E '^(Setting up|Unpacking) ' | sed 's/^/   /' || true
in_root dpkg-query -W -f='   ${Package} ${Version} ${Installed-Size} KiB\n' libkvact0 libkvact-dev kvactd kvact-tools
in_root getent passwd kvact | sed 's/^/   user: /'
for f in kvactd kvconf kvinspect kvbench; do in_root "$f" --version | sed 's/^/   /'; done

step "pkg-config: compile hello.c and client.c, run hello"
mkdir -p "$root/srv/src"
cp "$here/tests/repo/external/hello.c" "$here/tests/repo/external/client.c" "$root/srv/src/"
echo "   pkg-config --cflags --libs kvact: $(in_root pkg-config --cflags --libs kvact)"
in_root sh -c 'cd /srv/src && for p in hello client; do
  gcc -std=c11 -Wall -Wextra -Werror -o $p $p.c $(pkg-config --cflags --libs kvact) || exit 1
done'
in_root ldd /srv/src/hello | grep kvact | sed 's/^\s*/   /'
out=$(in_root /srv/src/hello)
echo "   hello: $out"
[ "$out" = "hello, kvact (tag 7)" ]

step "kvactd from the installed unit, as user kvact"
unit=$root/lib/systemd/system/kvactd.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
user=$(sed -n 's/^User=//p' "$unit")
rundir=/run/$(sed -n 's/^RuntimeDirectory=//p' "$unit")
statedir=/var/lib/$(sed -n 's/^StateDirectory=//p' "$unit")
mode=$(sed -n 's/^RuntimeDirectoryMode=//p' "$unit")
echo "   ExecStart=$exec_start (User=$user, $rundir $mode)"
# what systemd does before ExecStart: the runtime and state directories
install -d -m "$mode" -o "$(in_root id -u "$user")" -g "$(in_root id -g "$user")" "$root$rundir" "$root$statedir"
# chroot itself, not the in_root function (a subshell): $! is kvactd's pid
# once chroot, sh, setpriv and env have exec'ed
chroot "$root" sh -c "exec setpriv --reuid=$user --regid=$user --init-groups env -i XDG_RUNTIME_DIR=$rundir $exec_start" \
  > "$root.kvactd.log" 2>&1 &
daemon=$!
sock=$(in_root kvconf show /etc/kvact/kvactd.msgpack | sed -n 's/.*"socket": *"\([^"][^"]*\)".*/\1/p' | head -1)
for _ in $(seq 100); do [ -S "$root$sock" ] && break; sleep 0.1; done
[ -S "$root$sock" ] || { cat "$root.kvactd.log"; echo "no socket $sock"; exit 1; }
in_root stat -c '   %A %U:%G %n' "$rundir" "$sock"

step "clients: engine (group kvact) admitted, other refused by the socket, root refused by kvactd"
in_root useradd --create-home --groups kvact engine
in_root useradd --create-home other
client() { # WHO EXPECTED(0 admitted, 3 refused) CMD...
  local who=$1 want=$2 out rc=0
  shift 2
  out=$("$@" /srv/src/client "$sock") || rc=$?
  echo "   $who: $out (exit $rc)"
  [ "$rc" = "$want" ] || { echo "   $who: expected exit $want"; exit 1; }
}
client engine 0 as_user engine
client other 3 as_user other
client root 3 in_root env -i PATH=/usr/bin:/bin
grep -E 'refused' "$root.kvactd.log" | tail -1 | sed 's/^/   kvactd: /'
grep -q "refused pid .* uid 0" "$root.kvactd.log"

step "systemd-analyze verify (and the sandbox's exposure score)"
in_root systemd-analyze verify /lib/systemd/system/kvactd.service
in_root systemd-analyze security --offline=yes /lib/systemd/system/kvactd.service 2>/dev/null |
  tail -1 | sed 's/^/   /'

step "the wheel in a fresh venv, from /: embedded and as a client of kvactd"
mkdir -p "$root/tmp/wheel"
cp "$wheel" "$root/tmp/wheel/"
cp "$here/python/examples/roundtrip.py" "$root/srv/src/"
# the host's network settings, as resolv.conf above: the CA bundle that its
# proxy to Python's index (if any) is trusted with
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
in_root python3 -m venv /opt/kvact-venv
in_root /opt/kvact-venv/bin/pip install -q "/tmp/wheel/$(basename "$wheel")"
in_root /opt/kvact-venv/bin/pip list 2>/dev/null | grep -E '^(kvact|numpy) ' | sed 's/^/   /'
as_user engine /opt/kvact-venv/bin/python /srv/src/roundtrip.py | sed 's/^/   /'
as_user engine /opt/kvact-venv/bin/python /srv/src/roundtrip.py "$sock" | sed 's/^/   /'
[ "$(as_user engine /opt/kvact-venv/bin/python /srv/src/roundtrip.py "$sock" | tail -1)" = ok ]
[ "$(as_user engine /opt/kvact-venv/bin/python /srv/src/roundtrip.py | tail -1)" = ok ]

step "SIGTERM: kvactd exits 0 and removes its socket"
kill -TERM "$daemon"
rc=0
wait "$daemon" || rc=$?
daemon=
tail -2 "$root.kvactd.log" | sed 's/^/   kvactd: /'
[ "$rc" = 0 ] || { echo "kvactd exited $rc"; exit 1; }
[ ! -e "$root$sock" ] || { echo "socket left: $sock"; exit 1; }

step "kvactd under systemd: the unit's sandbox, a disk tier in its StateDirectory"
# systemd-nspawn boots the root with systemd as PID 1 (this host has none);
# a oneshot unit there does the checks once kvactd.service is up, writes
# what it saw, and powers the container off. The drop-in gives kvactd a
# disk tier (io_uring, O_DIRECT) in /var/lib/kvact, the one writable place.
dropin=$root/etc/systemd/system/kvactd.service.d
mkdir -p "$dropin"
cat > "$dropin/disk-tier.conf" <<'UNIT'
[Service]
ExecStart=
ExecStart=/usr/sbin/kvactd --config /etc/kvact/kvactd.msgpack -o 'l2=[{"type":"disk","path":"/var/lib/kvact/l2.bin","capacity_bytes":268435456}]'
UNIT
# the checks, run by a oneshot unit once kvactd.service is up (/srv, not
# /tmp: nspawn gives the container a /tmp of its own)
cat > "$root/srv/src/check.sh" <<'SH'
#!/bin/sh
exec > /root/kvact-check.out 2>&1
as() { u=$1; shift; setpriv --reuid="$u" --regid="$u" --init-groups env -i HOME=/tmp "$@"; }
systemctl is-active kvactd
as engine /srv/src/client /run/kvact/kvact.sock; echo "client engine $?"
as other /srv/src/client /run/kvact/kvact.sock; echo "client other $?"
as engine /opt/kvact-venv/bin/python /srv/src/roundtrip.py /run/kvact/kvact.sock
ls -l /var/lib/kvact
systemctl stop kvactd
systemctl show kvactd -p Result -p ExecMainStatus
kvconf fsck /var/lib/kvact/l2.bin
ls -A /run/kvact /dev/shm
journalctl -u kvactd -o cat --no-pager
echo checks done
SH
cat > "$root/etc/systemd/system/kvact-check.service" <<'UNIT'
[Unit]
Description=kvact clean-root checks of kvactd.service
Wants=kvactd.service
After=kvactd.service
[Service]
Type=oneshot
ExecStart=/bin/sh /srv/src/check.sh
ExecStartPost=/bin/systemctl poweroff --no-block
[Install]
WantedBy=multi-user.target
UNIT
in_root systemctl enable kvact-check.service 2>&1 | sed 's/^/   /'
cleanup # nspawn mounts what it needs itself
timeout 180 systemd-nspawn --quiet --keep-unit --register=no -D "$root" --console=pipe --boot \
  < /dev/null > "$root.nspawn.log" 2>&1 || { tail -20 "$root.nspawn.log"; echo "nspawn: $?"; }
out=$root/root/kvact-check.out
grep -vE '^(total |kvact info: kvactd: client pid)' "$out" | sed 's/^/   /'
for want in '^active$' '^admitted: ' '^client engine 0$' '^refused: ' '^client other 3$' '^ok$' \
  'l2\.bin$' '^valid 8 superseded 0 torn 0' '^Result=success$' '^ExecMainStatus=0$' '^checks done$'; do
  grep -qE "$want" "$out" || { echo "   kvactd under systemd: no line matching $want"; exit 1; }
done
rm -rf "$dropin" "$root/etc/systemd/system/kvact-check.service" \
  "$root/etc/systemd/system/multi-user.target.wants/kvact-check.service" "$out"
mount_root

step "purge, and nothing of kvact is left"
rm -rf "$root/opt/kvact-venv" "$root/tmp/debs" "$root/tmp/wheel" "$root/srv/src"
in_root userdel --remove engine 2>/dev/null
in_root userdel --remove other 2>/dev/null
kvact_uid=$(in_root id -u kvact)
DEBIAN_FRONTEND=noninteractive in_root apt-get purge -y -qq libkvact0 libkvact-dev kvactd kvact-tools > /dev/null
left=$( (in_root dpkg -l | awk '/kvact/ {print "package " $2}'
  # not man-db's cache of the page `man kvactd` formatted during verify
  # (its own cron expires it, as for any removed package's page)
  find "$root" -mindepth 1 -xdev -path "$root/var/cache/man" -prune -o \
    \( -iname '*kvact*' -o -uid "$kvact_uid" \) -print | sed "s|^$root|file |"
  in_root getent passwd kvact | sed 's/^/user /'
  in_root getent group kvact | sed 's/^/group /'
  ls -A "$root/dev/shm" | sed 's/^/shm /'
  for d in /run/kvact /etc/kvact /var/lib/kvact; do [ -e "$root$d" ] && echo "dir $d"; done
  ps -eo uid=,comm= | awk -v u="$kvact_uid" '$1 == u {print "process " $2}') || true)
if [ -n "$left" ]; then
  echo "$left" | sed 's/^/   left: /'
  exit 1
fi
echo "   nothing left: no package, file, user, group, directory, socket, shm segment or process"
step "done"
echo "clean_root_test.sh: passed in $((($(date +%s%N) - t0) / 1000000000)) s"
