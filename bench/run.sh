#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds opjit and runs its benchmarks: the agent's cost per BLAS call, passed through and
# served by a variant (bench_passthrough), its start-up cost per process and a short program's start and exit
# (bench_startup), what naming a short program's samples costs its exit (bench_symbols), the sampler's cost to a
# BLAS-bound process (bench_sampling: no agent, SAMPLE_HZ=0, the default rate and 1000 Hz,
# plus a check from the databases that sampling happened), what a sample costs threads in
# lock-step by mechanism (bench_lockstep), the JIT's small GEMMs side by side
# with OpenBLAS and LIBXSMM (bench_jit: ns per call, GF/s, speedups, compile latency, goals),
# a program's second run against its first and its steady state (bench_warm: ~50 signatures,
# no agent / cold / warm, the warm start's cost), long GEMMs and large GEMVs on the library's
# threads, the agent's kernels split between the cores or on one (bench_split: runs 1-3 against
# plain), small products called from several host threads at once (bench_threads: profile mode
# and runs 1-3 against plain), llama.cpp with and without the agent
# (bench_ggml: ~110M-parameter random models, prefill and decode tokens/s), ggml's prompt
# attention node against the JIT's kernel in one process (bench_fa) and, when valgrind is installed, the instructions the agent adds to /bin/true (callgrind's
# "Collected" total with vs without LD_PRELOAD): start-up cost without the machine's noise.
#   bench/run.sh [passthrough rounds [startup rounds [sampling rounds [jit rounds [jit set
#                [warm rounds [ggml rounds [smallgemm rounds [split rounds [threads rounds]]]]]]]]]]
# (jit set: default, all or nn; bench_jit builds its LIBXSMM preload library with
# /work/shared/tools/libxsmm-preload.sh unless LIBXSMM_PRELOAD names one; it and
# bench_smallgemm run OpenBLAS on its best core for this CPU and on its own choice, and
# BENCH_DEFAULT_CORETYPE=PRESCOTT makes bench_jit's "default" the core Debian's OpenBLAS
# picks on a CPU it does not recognise)
# BUILD_DIR (default build) names the build folder; a new one is configured without tests.
# Exits non-zero when a benchmark's own checks fail (never on a missed goal).
set -u
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -f "$build/CMakeCache.txt" ] ||
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPJIT_BUILD_TESTS=OFF >/dev/null ||
  exit 1
# Only what the benchmarks need (they depend on the agent and the store module).
cmake --build "$build" -j"$(nproc)" --target bench_passthrough bench_startup bench_symbols \
  bench_sampling bench_lockstep bench_jit bench_warm bench_smallgemm bench_split bench_threads \
  >/dev/null ||
  exit 1
# bench_ggml exists when llama.cpp's libraries are installed (scripts/deps.sh).
cmake --build "$build" -j"$(nproc)" --target bench_ggml >/dev/null 2>&1 || true
cmake --build "$build" -j"$(nproc)" --target bench_fa >/dev/null 2>&1 || true
agent=$(cd "$build" && pwd)/libopjit.so
status=0

echo "== bench_passthrough"
"$build/bench_passthrough" ${1:-} || status=1
echo
echo "== bench_startup"
"$build/bench_startup" ${2:-} || status=1
echo
echo "== bench_symbols"
"$build/bench_symbols" || status=1
echo
echo "== bench_sampling"
"$build/bench_sampling" ${3:-} || status=1
echo
echo "== bench_lockstep"
"$build/bench_lockstep" || status=1
echo
echo "== bench_jit"
"$build/bench_jit" ${4:-11} ${5:-default} || status=1
echo
echo "== bench_warm"
"$build/bench_warm" ${6:-7} || status=1
echo
echo "== bench_smallgemm"
"$build/bench_smallgemm" ${8:-7} || status=1
echo
echo "== bench_split"
"$build/bench_split" ${9:-5} || status=1
echo
echo "== bench_threads"
"$build/bench_threads" ${10:-7} || status=1
echo
echo "== bench_ggml"
if [ -x "$build/bench_ggml" ]; then
  "$build/bench_ggml" ${7:-7} || status=1
else
  echo "skipped: llama.cpp's libraries are not installed (scripts/deps.sh)"
fi
echo
echo "== bench_fa"
if [ -x "$build/bench_fa" ]; then
  "$build/bench_fa" || status=1
else
  echo "skipped: llama.cpp's libraries or the JIT are not installed (scripts/deps.sh)"
fi
echo

echo "== instructions of /bin/true (callgrind)"
if ! command -v valgrind >/dev/null; then
  echo "skipped: valgrind is not installed"
  exit $status
fi
scratch=$(mktemp -d) || exit 1
trap 'rm -rf "$scratch"' EXIT
# Prints the instructions callgrind collected from /bin/true, run with a minimal environment
# plus the assignments given as arguments.
count() {
  env -i PATH="$PATH" "$@" valgrind --tool=callgrind --callgrind-out-file=/dev/null /bin/true 2>&1 |
    sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p'
}
bare=$(count)
with=$(count LD_PRELOAD="$agent" OPJIT_DB="$scratch/callgrind.db")
if [ -z "$bare" ] || [ -z "$with" ]; then
  echo "callgrind printed no \"Collected\" total" >&2
  exit 1
fi
printf '%-26s %12s %12s %12s %8s\n' command bare agent added ratio
printf '%-26s %12d %12d %12d %8.3f\n' /bin/true "$bare" "$with" $((with - bare)) \
  "$(echo "$with $bare" | awk '{print $1 / $2}')"
if [ -z "$(ls -A "$scratch")" ]; then
  echo "no-trace check: ok (no OPJIT_DB file after the callgrind run)"
else
  echo "no-trace check: FAILED ($(ls -A "$scratch" | tr '\n' ' '))"
  status=1
fi
exit $status
