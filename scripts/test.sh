#!/bin/sh
# Installs what is missing, builds, and runs the whole test suite (CTest + Criterion), then a
# short fuzz run. Arguments go to ctest (and skip the fuzz run: a chosen subset of tests).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j2 "$@")
# A short fuzz run (fuzz/): 15 s a target, two at a time, over the seeds and every reproducer
# of an earlier finding; it says why and passes where clang's libFuzzer is missing.
if [ $# -eq 0 ]; then
  scripts/fuzz.sh 15
fi
