#!/usr/bin/env bash
# The CPU unit tests that matter most (base, checkpoint, tokenizer, grammar, server units, engine, model and decisions
# on the CPU backend) built with AddressSanitizer and UndefinedBehaviorSanitizer in their own build folder and run
# once; any finding fails the run (UBSan does not recover, ASan stops at the first error and reports leaks at exit).
# The end-to-end tests are left out: they would need the whole server sanitized and run for minutes. CI runs this from
# scripts/test.sh; docs/benchmarks.md ("Build time") has what it costs.
#   usage: scripts/sanitize.sh [build-dir]   (default: build-sanitize)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-sanitize}
tests=(base_test checkpoint_test tokenizer_test grammar_test server_unit_test engine_sampler_test engine_test
  model_cpu_math_test model_golden_test model_kv_pages_test model_fork_state_test decision_unit_test
  decision_golden_test)

# -O1: what the sanitizers' authors recommend, and far cheaper to compile than the release build's -O3; -g1: line
# numbers in the reports. A Debug build type keeps assert() on.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DDUET_SANITIZE=ON \
  -DDUET_CUDA=OFF ${DUET_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target "${tests[@]}"

export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=()
for test in "${tests[@]}"; do
  binary=$(find "$build_dir/tests" -type f -executable -name "$test" | head -1)
  echo "=== $test"
  if ! "$binary" --gtest_brief=1; then failed+=("$test"); fi
done
echo "=== sanitize: $((${#tests[@]} - ${#failed[@]})) of ${#tests[@]} test binaries clean under ASan + UBSan"
for name in "${failed[@]+"${failed[@]}"}"; do echo "FAILED: $name"; done
[[ ${#failed[@]} -eq 0 ]]
