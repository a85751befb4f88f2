#!/bin/sh
# Installs what is missing, builds, then profiles a numpy workload (Debian's python3-numpy on
# OpenBLAS) under `opjit run` and shows what the profile database learnt (`opjit top`) and which
# signatures the JIT compiled (`opjit variants`).
set -eu
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
echo "== opjit run -- /usr/bin/python3 scripts/demo_workload.py"
build/opjit run -- /usr/bin/python3 scripts/demo_workload.py
echo "== opjit top"
build/opjit top
echo "== opjit variants"
build/opjit variants || true   # none yet when the machine could not compile (no LLVM 19)
