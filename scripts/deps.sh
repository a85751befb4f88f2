#!/bin/sh
# Installs the Debian packages opjit builds, tests and demonstrates with. Idempotent: a machine
# that already has them is left alone (no apt-get update, no network).
set -eu
pkgs="build-essential cmake pkg-config libsqlite3-dev sqlite3 libcjson-dev libcriterion-dev
      libblas3 libopenblas0-pthread python3-numpy valgrind libunwind8 llvm-19-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
    missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "opjit deps: installing$missing" >&2
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq $missing >/dev/null
