#!/bin/sh
# The sanitizer lanes (docs/sanitizers.md), each in a build folder of its own:
#   asan  the whole suite built with ASan and UBSan (build-asan): the harness preloads ASan's
#         runtime before the agent; UBSan stops at its first finding; hosts that are not ours
#         (python3, node) run with the agent instrumented but without leak checking.
#   tsan  the agent, its modules and the test hosts built with TSan (build-tsan), run by the
#         integration tests of the plain build (build/, scripts/build.sh) through
#         OPJIT_TEST_ARTEFACTS: Criterion cannot start under TSan (its sandbox maps its shared
#         arena at random fixed addresses, all of which TSan has reserved), so its runners stay
#         uninstrumented and only the programs they start are TSan's. A race in a host fails
#         its test (the harness reads every host's stderr for a sanitizer's report).
# usage: scripts/sanitize.sh [asan|tsan]...   (default: both; scripts/test.sh runs both)
set -eu
cd "$(dirname "$0")/.."
top=$PWD
lanes=${*:-asan tsan}
jobs=$(nproc)

# UBSan: any finding is fatal (the suite's processes, and the hosts through the harness).
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export UBSAN_OPTIONS

asan() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPJIT_SANITIZE=address,undefined \
    -DOPJIT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs" >/dev/null
  # `opjit run` puts the agent before the runtime the harness preloads: the ASan-linked hosts
  # it starts have the runtime as a dependency of their own, which is enough for them.
  # intercept_tls_get_addr=0: gcc 12's LeakSanitizer misreads glibc 2.36's dynamic TLS blocks
  # (LLVM's, in a compile thread) and its tracer dies on the bogus range ("Tracer caught signal
  # 11", google/sanitizers#1322); static TLS, stacks, globals and the heap are still scanned.
  # test_ggml: three of its tests only (the agent's ggml host matching, rewriting, fusing and
  # verifying a real model's graphs; two contexts computing at once): its llama.cpp hosts run
  # an order of magnitude slower under ASan (minutes a test); the plain suite runs them all,
  # the node host among them.
  ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:intercept_tls_get_addr=0
  export ASAN_OPTIONS
  (cd build-asan && ctest --output-on-failure -j2 --timeout 900 -E '^test_ggml$')
  if [ -x build-asan/test_ggml ]; then
    echo "opjit sanitize: test_ggml under ASan: 3 of its tests (the rest in the plain suite)" >&2
    (cd build-asan/tests/integration && ../../test_ggml --jobs=1 \
      --filter='ggml/@(same_tokens_and_logits_with_and_without_the_agent|a_wrong_fused_kernel_is_caught_and_the_output_stays_ggml_s|two_contexts_computing_at_once_keep_their_output)')
  fi
}

# The programs the TSan lane runs: the agent and its modules, the hosts, the `opjit` command.
tsan_targets="opjit opjit_store_module opjit_jit_module opjit_cmd blas_prog host_prog jit_prog
              stack_prog"
# The integration tests over the agent's threads: 8 host threads with publishes, evictions and
# sampling (test_jit, test_preload), the warm start's placing and compiling threads
# (test_warm), samples and stacks (test_sampling). Left to the plain suite, with why:
# - a fork child's tests: a fork child of a threaded host is a run of its own whose first
#   operator call starts its writer; TSan supports no new thread after a multi-threaded fork
#   (with die_after_fork=0 it goes on, then stops at a pthread_t the parent's threads used);
# - where samples land: TSan holds a signal until the thread reaches one of its interceptors,
#   so a sample's PC and stack are wherever that was.
tsan_tests="test_preload test_jit test_warm test_sampling"
tsan_skip="*fork*|sampling/stacks_through_*|sampling/pool_threads_*|sampling/operators_costing_*"

tsan() {
  scripts/build.sh >/dev/null
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPJIT_SANITIZE=thread \
    -DOPJIT_BUILD_BENCH=OFF >/dev/null
  # test_ggml's two llama contexts at once, when llama.cpp's libraries are there (scripts/deps.sh):
  # one thread each, as ggml's worker threads synchronise in its uninstrumented code.
  ggml=
  [ -x build/llama_prog ] && ggml=llama_prog
  # shellcheck disable=SC2086
  cmake --build build-tsan -j"$jobs" --target $tsan_targets $ggml >/dev/null
  OPJIT_TEST_ARTEFACTS="$top/build-tsan"
  TSAN_OPTIONS=second_deadlock_stack=1
  export OPJIT_TEST_ARTEFACTS TSAN_OPTIONS
  for t in $tsan_tests; do
    echo "opjit sanitize: tsan: $t" >&2
    (cd build/tests/integration && "../../$t" --jobs=1 --filter="!($tsan_skip)")
  done
  if [ -n "$ggml" ]; then
    echo "opjit sanitize: tsan: test_ggml (two contexts at once)" >&2
    (cd build/tests/integration &&
      ../../test_ggml --jobs=1 --filter='ggml/two_contexts_computing_at_once_keep_their_output')
  fi
}

for lane in $lanes; do
  start=$(date +%s)
  case $lane in
  asan) asan ;;
  tsan) tsan ;;
  *)
    echo "usage: scripts/sanitize.sh [asan|tsan]..." >&2
    exit 2
    ;;
  esac
  echo "opjit sanitize: $lane lane passed in $(($(date +%s) - start)) s" >&2
done
