#!/usr/bin/env bash
# On the GPU machine, as device/run_gpu_tests.sh (tools/pack_for_device.sh copies it into the pack): runs every CUDA
# test (cuda_*) packed beside it with the libraries packed there, then prints a summary of the suites. The tests find
# their fixtures through tests_dir() (tests/tests_dir.h): the build machine's path compiled in, unless
# DUET_TESTS_DIR_OVERRIDE says otherwise; here the repository is elsewhere, so it points them at this checkout's
# tests/ (device/ sits at the repo root).
# One process a test suite (cuda_tests holds every GPU test file), as when each file was its own binary: a crash or a
# leaked setting ends one suite, not the run. Settings:
#   DUET_GPU_SUITES   a grep -E pattern: only the suites it matches;
#   DUET_GPU_FIRST    a grep -E pattern: the suites it matches start first (the longest, so that lanes end together);
#   DUET_GPU_JOBS=N   N suites at once on the one GPU (default 1: one after another, each one's output as it comes).
#                     Most of the suite's time is the tests' host references on one CPU core (AttentionKernels took 177
#                     of the 42nd round's 313 s), so lanes share the GPU well; each suite's output is printed whole
#                     when it ends, and a suite that had not ended when the run was stopped is named as such;
#   DUET_GPU_TEST_TIMES=DIR  each suite's gtest JSON report (every test's time) into DIR, for
#                     tools/slowest_gpu_tests.py.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DUET_TESTS_DIR_OVERRIDE="${DUET_TESTS_DIR_OVERRIDE:-$repo/tests}"
cd "$repo"

jobs=${DUET_GPU_JOBS:-1}
# In lanes, a stop (a time limit's TERM, which `timeout` sends to the whole process group, so the running suites end
# too) lets the summary name the suites that had not ended: no further suite starts once it came.
stopped=0
(( jobs <= 1 )) || trap 'stopped=1' TERM INT

# Every (test binary, suite) to run, those DUET_GPU_FIRST names first, each in the order gtest lists them.
all=()
while IFS= read -r test; do
  while IFS= read -r suite; do
    all+=("$test"$'\t'"$suite")
  done < <("$test" --gtest_list_tests | awk '/^[A-Za-z0-9_\/]+\.( |$)/ {print $1}' | grep -E "${DUET_GPU_SUITES:-.}")
done < <(find "$here/tests" -type f -executable -name 'cuda_*' | sort)
runs=()
if [[ -n ${DUET_GPU_FIRST:-} ]]; then
  for run in "${all[@]}"; do [[ ${run#*$'\t'} =~ $DUET_GPU_FIRST ]] && runs+=("$run"); done
  for run in "${all[@]}"; do [[ ${run#*$'\t'} =~ $DUET_GPU_FIRST ]] || runs+=("$run"); done
else
  runs=("${all[@]+"${all[@]}"}")
fi

results=$(mktemp -d)
# One suite's process: its header, its gtest output and its exit status in results/INDEX.rc.
run_suite() {
  local index=$1 test=${2%%$'\t'*} suite=${2#*$'\t'} report=()
  if [[ -n ${DUET_GPU_TEST_TIMES:-} ]]; then
    mkdir -p "$DUET_GPU_TEST_TIMES"
    report=(--gtest_output="json:$DUET_GPU_TEST_TIMES/$(basename "$test")-${suite//[^A-Za-z0-9_]/_}.json")
  fi
  echo "=== ${test#"$here/"} $suite"
  "$test" --gtest_brief=1 --gtest_filter="$suite*" "${report[@]}"
  echo $? > "$results/$index.rc"
}

if (( jobs <= 1 )); then
  for i in "${!runs[@]}"; do run_suite "$i" "${runs[$i]}"; done
else
  for i in "${!runs[@]}"; do
    while (( ! stopped )); do  # a free lane
      running=$(jobs -rp 2>/dev/null | wc -l)
      (( ${running:-0} < jobs )) && break
      wait -n
    done
    (( stopped )) && break
    { run_suite "$i" "${runs[$i]}" > "$results/$i.log" 2>&1; flock "$results/lock" cat "$results/$i.log"; } &
  done
  (( stopped )) && kill $(jobs -p) 2>/dev/null
  wait
fi

passed=() failed=() unfinished=()
for i in "${!runs[@]}"; do
  suite=${runs[$i]#*$'\t'}
  if [[ ! -f $results/$i.rc ]]; then
    unfinished+=("$suite")
  elif [[ $(cat "$results/$i.rc") == 0 ]]; then
    passed+=("$suite")
  else
    failed+=("$suite")
  fi
done
rm -rf "$results"
echo "=== summary: ${#passed[@]} passed, ${#failed[@]} failed${unfinished[*]:+, ${#unfinished[@]} not ended}"
for name in "${failed[@]+"${failed[@]}"}"; do echo "FAILED: $name"; done
for name in "${unfinished[@]+"${unfinished[@]}"}"; do echo "NOT ENDED: $name"; done
[[ ${#failed[@]} -eq 0 && ${#unfinished[@]} -eq 0 && ${#passed[@]} -gt 0 ]]
