#!/bin/sh
# Installs what is missing, builds, and runs the whole test suite (CTest + Criterion).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
cd build && ctest --output-on-failure -j2 "$@"
