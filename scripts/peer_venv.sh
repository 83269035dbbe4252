#!/usr/bin/env bash
# Build the virtualenvs that hold real Iris/Fray releases from PyPI. They are test peers only
# (tests/peers): fray_ray never imports them.
#
#   scripts/peer_venv.sh client DIR       Python 3.12 + marin-iris and marin-fray 0.2.227.dev40316220070
#   scripts/peer_venv.sh controller DIR   Python 3.11 + marin-iris 0.2.20.dev202606180959
#   scripts/peer_venv.sh all ROOT         both, as ROOT/client and ROOT/controller
#
# Prints the python of each venv it built or found. Idempotent: a venv is reused once its
# .complete marker exists, and rebuilt from scratch when a previous attempt did not finish.
set -euo pipefail

CLIENT_PINS=(marin-iris==0.2.227.dev40316220070 marin-fray==0.2.227.dev40316220070)
CONTROLLER_PINS=(marin-iris==0.2.20.dev202606180959)

die() { echo "peer_venv.sh: $*" >&2; exit 2; }

# find_python 3.12 -> a working interpreter of that minor version, from PATH or pyenv
find_python() {
  local version=$1 candidate
  for candidate in "python$version" "$(command -v "python$version" 2>/dev/null || true)"; do
    # pyenv shims exist even when that version is not selected, so run it to be sure
    if [ -n "$candidate" ] && "$candidate" -c "import sys; assert sys.version_info[:2] == tuple(map(int, '$version'.split('.')))" >/dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  local root
  if command -v pyenv >/dev/null 2>&1; then
    root=$(pyenv root)
  else
    root=${PYENV_ROOT:-$HOME/.pyenv}
  fi
  for candidate in "$root"/versions/"$version"*/bin/python; do
    if [ -x "$candidate" ] && "$candidate" -c "import sys" >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

# build KIND DIR -> prints DIR/bin/python
build() {
  local kind=$1 dir=$2 version python
  local -a pins
  case "$kind" in
    client) version=3.12; pins=("${CLIENT_PINS[@]}") ;;
    controller) version=3.11; pins=("${CONTROLLER_PINS[@]}") ;;
    *) die "unknown kind '$kind' (client, controller or all)" ;;
  esac
  if [ -f "$dir/.complete" ] && [ -x "$dir/bin/python" ]; then
    echo "$dir/bin/python"
    return 0
  fi
  python=$(find_python "$version") || die "no working Python $version on PATH or under pyenv"
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  "$python" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
  "$dir/bin/python" -c "import iris" || die "$kind venv at $dir cannot import iris"
  touch "$dir/.complete"
  echo "$dir/bin/python"
}

[ $# -eq 2 ] || die "usage: $0 client|controller|all DIR"
case "$1" in
  all) build client "$2/client"; build controller "$2/controller" ;;
  *) build "$1" "$2" ;;
esac
