#!/usr/bin/env bash
# setup.sh — the virtual environments of the engines kvact is checked against
# (DESIGN.md §11), one per peer, at fixed paths, with pinned versions.
#
#   tools/peers/setup.sh [--freeze] [PEER...]      PEER: vllm, sglang, mooncake, lmcache
#                                                  (default: all)
#
# Interpreter: Debian's /usr/bin/python3 (3.11, `-m venv`; python3-venv comes
# from tools/bootstrap.sh). It is the one every fresh machine and CI has once
# bootstrap ran, and the one the rest of the Python suite uses; pyenv's
# python3 on a developer's PATH is not installed by anything in this
# repository. Override with KVACT_PEERS_PYTHON. mooncake's environment is made
# with the sglang environment's interpreter and sees its packages (base_python).
#
# Where: $KVACT_PEERS_DIR/<peer> (default /opt/kvact-peers/<peer>); each can
# also be named alone, with KVACT_VLLM_VENV or KVACT_SGLANG_VENV.
#
# What: tools/peers/<peer>.requirements (the top-level pins) installed under
# tools/peers/<peer>.constraints (`pip freeze` of a resolve: the exact
# version of everything they pull), so every install gets the same versions.
# --freeze resolves the requirements afresh (no constraints), then writes the
# environment's `pip freeze` into the constraints file: the way to move a pin.
#
# Idempotent: a stamp file in the environment holds the sha256 of the
# interpreter's version, the requirements and the constraints. When it
# matches, nothing is done (and that is said). When it does not, the
# environment is made again from nothing, so no package of an older resolve
# stays behind. The stamp is written only once an install has succeeded.
#
# Exit status: 0 done or nothing to do; 1 bad use or a failed install; 2 the
# package index cannot be reached (checked before anything is changed).
#
# First install of vllm, measured on the 2-core development VM (docs/vllm.md):
# 10 min 31 s wall (597 s of it pip, bound by the download: 24% of a CPU),
# 9.5 GB in the environment (`du -sh`); a second run takes 0.4 s. Of sglang:
# 241 s wall, 11 GB; of mooncake: 6 s, 170 MB; of lmcache (torch 2.15.0 of its
# own): 2 min 45 s wall (156 s of it pip), 6.2 GB.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
python="${KVACT_PEERS_PYTHON:-/usr/bin/python3}"
peers_dir="${KVACT_PEERS_DIR:-/opt/kvact-peers}"
stamp_name=".kvact-peer-stamp"
all_peers=(vllm sglang mooncake lmcache)  # mooncake after sglang: it is made from it

say() { echo "peers: $*"; }
die() { echo "peers: $1" >&2; exit "${2:-1}"; }

venv_of() {
  case "$1" in
    vllm) echo "${KVACT_VLLM_VENV:-$peers_dir/vllm}" ;;
    sglang) echo "${KVACT_SGLANG_VENV:-$peers_dir/sglang}" ;;
    *) echo "$peers_dir/$1" ;;
  esac
}

# The interpreter a peer's environment is made with. mooncake's is the sglang
# environment's, and it sees that environment's packages (a .pth file, below):
# SGLang's own MooncakeStore backend is what python/bench/bench_sglang.py runs,
# and the sglang environment's pins stay untouched.
base_python() {
  case "$1" in
    mooncake)
      local sg
      sg="$(venv_of sglang)/bin/python"
      [ -x "$sg" ] || die "mooncake: no sglang environment at $(venv_of sglang); run '$0 sglang' first"
      echo "$sg" ;;
    *) echo "$python" ;;
  esac
}

# After the venv is made, before pip: mooncake's .pth naming sglang's packages.
prepare_venv() {
  local peer="$1" venv="$2" site
  [ "$peer" = mooncake ] || return 0
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  "$(venv_of sglang)/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    >"$site/kvact-sglang-peer.pth"
}

# The hash a finished environment carries: interpreter, requirements, constraints.
wanted_hash() {
  local peer="$1"
  {
    "$(base_python "$peer")" -c 'import sys; print(sys.version)'
    cat "$here/$peer.requirements"
    cat "$here/$peer.constraints" 2>/dev/null || echo "no constraints"
  } | sha256sum | cut -d' ' -f1
}

# One query of the index for the peer's own package, short timeouts, no retry
# storm: exit 2 with a message when it does not answer.
check_index() {
  local pip="$1" package="$2"
  if ! "$pip" index versions "$package" --timeout 20 --retries 1 >/dev/null 2>"$tmp/index.err"; then
    sed 's/^/  /' "$tmp/index.err" >&2
    die "cannot reach the Python package index (pip index versions $package failed).
  This needs network access to the index pip is configured for (pip config list;
  PIP_INDEX_URL). Nothing was changed." 2
  fi
}

# Makes the environment of one peer (or says it is there already).
setup_peer() {
  local peer="$1" freeze="$2" venv want
  [ -f "$here/$peer.requirements" ] || die "unknown peer '$peer' (no $here/$peer.requirements)"
  venv="$(venv_of "$peer")"
  want="$(wanted_hash "$peer")"
  if [ "$freeze" = 0 ] && [ -x "$venv/bin/python" ] &&
     [ "$(cat "$venv/$stamp_name" 2>/dev/null)" = "$want" ]; then
    say "$peer: $venv is up to date (stamp $(echo "$want" | cut -c1-12)), nothing to do"
    return 0
  fi
  if [ "$freeze" = 0 ] && [ ! -f "$here/$peer.constraints" ]; then
    die "$peer: no $here/$peer.constraints; run '$0 --freeze $peer' to resolve and write it"
  fi

  if [ -e "$venv" ] && [ ! -e "$venv/$stamp_name" ] && [ ! -e "$venv/.kvact-peer" ]; then
    die "$venv exists and was not made by this script; remove it or set KVACT_PEERS_DIR"
  fi
  # A scratch venv checks the index before the old environment is touched.
  local base
  base="$(base_python "$peer")"
  "$base" -m venv "$tmp/probe" >/dev/null || die "$base -m venv failed (python3-venv missing? run tools/bootstrap.sh)"
  check_index "$tmp/probe/bin/pip" "$(main_package "$peer")"

  if [ -e "$venv" ]; then
    say "$peer: remaking $venv (requirements, constraints or interpreter changed)"
    rm -rf "$venv"
  fi
  mkdir -p "$(dirname "$venv")"
  "$base" -m venv "$venv"
  prepare_venv "$peer" "$venv"
  touch "$venv/.kvact-peer"
  local cons=()
  [ "$freeze" = 1 ] || cons=(-c "$here/$peer.constraints")
  say "$peer: installing $(grep -v '^#' "$here/$peer.requirements" | xargs) into $venv with $base"
  local t0=$SECONDS
  "$venv/bin/pip" install --quiet -r "$here/$peer.requirements" "${cons[@]}" ||
    die "$peer: pip install failed; $venv is left without a stamp (the next run remakes it)"
  if [ "$freeze" = 1 ]; then
    write_constraints "$peer" "$venv"
    want="$(wanted_hash "$peer")"
  fi
  echo "$want" >"$venv/$stamp_name"
  say "$peer: done in $((SECONDS - t0)) s, $(du -sh "$venv" | cut -f1) in $venv"
}

main_package() { grep -v '^#' "$here/$1.requirements" | head -n1 | sed 's/[=<>!~ ].*//'; }

write_constraints() {
  local peer="$1" venv="$2"
  {
    echo "# pip freeze of the $peer peer environment (tools/peers/setup.sh --freeze $peer),"
    echo "# $("$venv/bin/python" -c 'import sys; print("Python", sys.version.split()[0])'), $(date -u +%Y-%m-%d)."
    echo "# Installed as constraints (-c) beside $peer.requirements; do not edit by hand."
    # this environment's own packages (--path): not those a .pth lets it see
    "$venv/bin/pip" freeze --all --exclude-editable \
      --path "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" |
      grep -v -E '^(pip|setuptools|wheel)=='
  } >"$here/$peer.constraints"
  say "$peer: wrote $here/$peer.constraints ($(grep -vc '^#' "$here/$peer.constraints") pins)"
}

main() {
  local freeze=0 peers=()
  for arg in "$@"; do
    case "$arg" in
      --freeze) freeze=1 ;;
      -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
      -*) die "unknown option $arg" ;;
      *) peers+=("$arg") ;;
    esac
  done
  [ ${#peers[@]} -gt 0 ] || peers=("${all_peers[@]}")
  [ -x "$python" ] || die "$python not found (set KVACT_PEERS_PYTHON, or run tools/bootstrap.sh)"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  for peer in "${peers[@]}"; do
    setup_peer "$peer" "$freeze"
  done
}

main "$@"
