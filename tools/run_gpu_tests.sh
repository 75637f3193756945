#!/usr/bin/env bash
# On the GPU machine, as device/run_gpu_tests.sh (tools/pack_for_device.sh copies it into the pack): runs every CUDA
# test (cuda_*) packed beside it with the libraries packed there, then prints a summary of the suites. The tests find
# their fixtures through tests_dir() (tests/tests_dir.h): the build machine's path compiled in, unless
# DUET_TESTS_DIR_OVERRIDE says otherwise; here the repository is elsewhere, so it points them at this checkout's
# tests/ (device/ sits at the repo root).
# One process a test suite (cuda_tests holds every GPU test file), as when each file was its own binary: a crash or a
# leaked setting ends one suite, not the run; and the long suites of value-parameterized tests (DUET_GPU_SPLIT:
# Shapes/AttentionKernels.X/Tiny, .../Qwen35_9B, .../WideGroup) one process a parameter, so that one suite's shapes run
# in lanes of their own (the attention suite alone took 200 of the 45th round's 408 s of tests, in one lane, while
# the whole run took 235 s). A run's name is its gtest filter: "Sampling.*", "Shapes/AttentionKernels.*/WideGroup".
# Settings:
#   DUET_GPU_SPLIT    a grep -E pattern: the suites run one process a parameter (default: the three longest; every
#                     process pays the CUDA context's start, so the short suites stay whole);
#   DUET_GPU_SUITES   a grep -E pattern: only the runs whose names it matches;
#   DUET_GPU_FIRST    a grep -E pattern: the runs it matches start first (the longest, so that lanes end together);
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

# Every (test binary, run) to make, those DUET_GPU_FIRST names first, each in the order gtest lists them. The awk
# prints a run's filter for each suite: SUITE.* when its tests have no parameter or one, else SUITE.*/PARAM for each
# parameter in the order listed.
runs_of() {  # runs_of TEST: the runs of one test binary, one a line
  "$1" --gtest_list_tests | awk -v split_re="${DUET_GPU_SPLIT:-AttentionKernels\.|GdnVerifyRowsTest\.|GdnKernelsTest\.}" '
    function flush(   i) {
      if (suite == "") return
      if (n < 2 || plain || suite !~ split_re) {
        print suite "*"
      } else {
        for (i = 1; i <= n; ++i) print suite "*/" params[i]
      }
    }
    /^[A-Za-z0-9_\/]+\.( |$)/ { flush(); suite = $1; n = 0; plain = 0; delete seen; next }
    /^  / {
      name = $1
      if (match(name, /\/[^\/]+$/)) {
        p = substr(name, RSTART + 1)
        if (!(p in seen)) { seen[p] = 1; params[++n] = p }
      } else {
        plain = 1
      }
    }
    END { flush() }'
}
all=()
while IFS= read -r test; do
  while IFS= read -r run; do
    all+=("$test"$'\t'"$run")
  done < <(runs_of "$test" | grep -E "${DUET_GPU_SUITES:-.}")
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
  "$test" --gtest_brief=1 --gtest_filter="$suite" "${report[@]}"
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
