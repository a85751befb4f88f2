#!/bin/sh
# Builds the libFuzzer targets (fuzz/) with clang into build-fuzz (or $OPJIT_FUZZ_BUILD) and
# runs each for SECONDS (default 20), as many at once as there are CPUs, from its seed corpus
# fuzz/corpus/<target> (left as committed: what the run finds goes to the build folder's
# corpus/<target>). A crash, leak or undefined behaviour leaves its input in the build folder's
# crashes/<target>/ and makes the script exit 1. Where clang or its libFuzzer is missing
# (scripts/deps.sh installs clang-19 and libclang-rt-19-dev), it says so and exits 0.
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: objload opt store crash inspect inspect_edit)
# The CI run (scripts/test.sh) is 15 s a target; the long one, before a release or after a
# change to a reader of stored bytes, is `scripts/fuzz.sh 600` (10 minutes a target).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-20}
[ $# -gt 0 ] && shift
targets=${*:-objload opt store crash inspect inspect_edit}
build=${OPJIT_FUZZ_BUILD:-build-fuzz}

cc=${OPJIT_FUZZ_CC:-}
if [ -z "$cc" ]; then
  for c in clang-19 clang; do
    if command -v "$c" >/dev/null 2>&1; then cc=$c; break; fi
  done
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' >"$probe/p.c"
if [ -z "$cc" ] || ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" \
  2>/dev/null; then
  echo "opjit fuzz: skipped: no clang with libFuzzer (${cc:-no clang found}; scripts/deps.sh" \
    "installs clang-19 and libclang-rt-19-dev)" >&2
  exit 0
fi

echo "opjit fuzz: building with $cc into $build" >&2
CC=$cc cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPJIT_FUZZ=ON \
  -DOPJIT_BUILD_TESTS=OFF -DOPJIT_BUILD_BENCH=OFF >/dev/null
set --
for t in $targets; do set -- "$@" "fuzz_$t"; done
cmake --build "$build" -j"$(nproc)" --target "$@" >/dev/null

# The fuzzed databases are written to tmpfs where there is one (SQLite's syncs cost nothing
# there; $OPJIT_FUZZ_TMP chooses another folder).
TMPDIR=${OPJIT_FUZZ_TMP:-$([ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")}
export TMPDIR

# Undefined behaviour is a finding like a crash, but for the reported ones fuzz/ubsan-open.supp
# lists while they wait for their fix ($OPJIT_FUZZ_UBSAN adds options).
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$PWD/fuzz/ubsan-open.supp"
UBSAN_OPTIONS="$UBSAN_OPTIONS${OPJIT_FUZZ_UBSAN:+:$OPJIT_FUZZ_UBSAN}"
export UBSAN_OPTIONS

# One target: -max_total_time seconds from the seeds and the reproducers of what earlier runs
# found (fuzz/crashes/<target>, each must pass), with fuzz/<target>.dict; its log in the build
# folder.
run() {
  mkdir -p "$build/corpus/$1" "$build/crashes/$1"
  dict="" found=""
  [ -f "fuzz/$1.dict" ] && dict="-dict=fuzz/$1.dict"
  [ -d "fuzz/crashes/$1" ] && found="fuzz/crashes/$1"
  # shellcheck disable=SC2086
  "$build/fuzz_$1" -max_total_time="$secs" -timeout=10 -print_final_stats=1 $dict \
    -artifact_prefix="$build/crashes/$1/" "$build/corpus/$1" "fuzz/corpus/$1" $found \
    >"$build/fuzz_$1.log" 2>&1
}

failed=""
n=0
pids=""
for t in $targets; do
  run "$t" &
  pids="$pids $!:$t"
  n=$((n + 1))
  if [ "$n" -ge "$(nproc)" ] || [ "$t" = "${targets##* }" ]; then
    for p in $pids; do
      if wait "${p%%:*}"; then
        echo "opjit fuzz: ${p#*:}: $(grep -E '^#[0-9]+.*DONE' "$build/fuzz_${p#*:}.log")" >&2
      else
        failed="$failed ${p#*:}"
        tail -n 40 "$build/fuzz_${p#*:}.log" >&2
      fi
    done
    n=0
    pids=""
  fi
done
if [ -n "$failed" ]; then
  echo "opjit fuzz: FAILED:$failed (inputs in $build/crashes/)" >&2
  exit 1
fi
echo "opjit fuzz: $targets: no crash in ${secs} s each" >&2
