#!/bin/sh
# Installs what is missing, builds, and runs the whole test suite (CTest + Criterion), then a
# short fuzz run and the sanitizer lanes. Arguments go to ctest (and skip the fuzz run and the
# lanes: a chosen subset of tests).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest --output-on-failure -j2 "$@")
# A short fuzz run (fuzz/): 15 s a target, two at a time, over the seeds and every reproducer
# of an earlier finding; it says why and passes where clang's libFuzzer is missing.
# The sanitizer lanes (docs/sanitizers.md): the suite under ASan+UBSan, the agent's threads
# under TSan, each in a build folder of its own.
if [ $# -eq 0 ]; then
  scripts/fuzz.sh 15
  scripts/sanitize.sh
fi
