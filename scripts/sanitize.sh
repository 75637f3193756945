#!/usr/bin/env bash
# The CPU unit tests that matter most (base, checkpoint, tokenizer, grammar, server units, engine, model and decisions
# on the CPU backend) built with AddressSanitizer and UndefinedBehaviorSanitizer in their own build folder and run
# once, and the libFuzzer targets 10 s each (scripts/fuzz.sh) from the same build: any finding fails the run (UBSan
# does not recover, ASan stops at the first error and reports leaks at exit). The end-to-end tests are left out: they
# would need the whole server sanitized and run for minutes. CI runs this from scripts/test.sh; docs/benchmarks.md
# ("Build time") has what it costs.
#   usage: scripts/sanitize.sh [--build-only] [build-dir]   (default: build-sanitize; --build-only: build, run nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
build_dir=${1:-build-sanitize}
# The binaries, longest first: scripts/sanitized_tests.txt (tests/CMakeLists.txt labels their tests `sanitized`).
mapfile -t tests < <(grep -E '^[a-z_]+$' scripts/sanitized_tests.txt)

# With clang++ the same build has the libFuzzer targets (fuzz_targets): their run, 10 s a target, is two jobs among
# the tests (half of the targets each, first), so that no one job is as long as all of the tests beside it: as one
# job of 95 s it was about as long as the 14 binaries on the other core (95-116 s), and a little shorter tests would
# have left that core idle at the end (docs/benchmarks.md, "Build time", eleventh pass: 104-109 s either way today).
fuzz=()
command -v clang++ >/dev/null && fuzz=(fuzz_targets)
scripts/sanitize-build.sh "$build_dir" "${tests[@]}" "${fuzz[@]+"${fuzz[@]}"}"
[[ $build_only == 0 ]] || exit 0
[[ ${#fuzz[@]} -eq 0 ]] || tests=(fuzz_first_half fuzz_second_half "${tests[@]}")

export ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# One binary per core at a time (most run one thread), in the order above (the longest first): each one's output is
# printed whole, with its time, once all have ended.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
run_one() {
  local test=$1 binary start status=0
  start=$(date +%s%N)
  if [[ $test == fuzz_first_half || $test == fuzz_second_half ]]; then
    local -a all half
    mapfile -t all < <(DUET_FUZZ_LIST=1 "$build_dir/tests/fuzz/fuzz_targets")
    local middle=$((${#all[@]} / 2))
    if [[ $test == fuzz_first_half ]]; then half=("${all[@]:0:middle}"); else half=("${all[@]:middle}"); fi
    if [[ ${#half[@]} -eq 0 ]]; then
      echo "sanitize: fuzz_targets listed no targets" >"$logs/$test.log"
      status=1
    else
      DUET_FUZZ_BUILT=1 scripts/fuzz.sh 10 "$build_dir" "${half[@]}" >"$logs/$test.log" 2>&1 || status=$?
    fi
  else
    binary=$(find "$build_dir/tests" -type f -executable -name "$test" | head -1)
    "$binary" --gtest_brief=1 >"$logs/$test.log" 2>&1 || status=$?
  fi
  echo "$status $((($(date +%s%N) - start) / 100000000))" >"$logs/$test.status"
}
export -f run_one
export build_dir logs
printf '%s\n' "${tests[@]}" | xargs -P "$(nproc)" -I{} bash -c 'run_one {}'
failed=()
for test in "${tests[@]}"; do
  status=missing tenths=0
  [[ -f $logs/$test.status ]] && read -r status tenths <"$logs/$test.status"
  echo "=== $test"
  cat "$logs/$test.log"
  echo "=== $test: exit $status, $((tenths / 10)).$((tenths % 10)) s"
  [[ $status == 0 ]] || failed+=("$test")
done
[[ ${#fuzz[@]} -gt 0 ]] || echo "=== the fuzz targets skipped: clang++ is not installed (scripts/setup.sh installs it)"
echo "=== sanitize: $((${#tests[@]} - ${#failed[@]})) of ${#tests[@]} runs clean under ASan + UBSan"
for name in "${failed[@]+"${failed[@]}"}"; do echo "FAILED: $name"; done
[[ ${#failed[@]} -eq 0 ]]
