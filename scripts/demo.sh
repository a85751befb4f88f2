#!/bin/sh
# Installs what is missing, builds, then runs a numpy workload (Debian's python3-numpy on
# OpenBLAS) under `opjit run` twice: the first run profiles it and compiles its hot signatures,
# the second starts warm from the kernels the first stored. Shows both runs (`opjit runs`), what
# the profile learnt (`opjit top`) and the variants (`opjit variants`).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
for run in first second; do
  echo "== opjit run -- /usr/bin/python3 scripts/demo_workload.py   ($run run)"
  build/opjit run -- /usr/bin/python3 scripts/demo_workload.py
done
echo "== opjit runs --limit 2"
build/opjit runs --limit 2
echo "== opjit top"
build/opjit top
echo "== opjit variants"
build/opjit variants || true   # none yet when the machine could not compile (no LLVM 19)
