#!/usr/bin/env bash
# The GPU suite's runner (tools/run_gpu_tests.sh, which the GPU machine runs as device/run_gpu_tests.sh) on a fake
# pack: a gtest-like cuda_fake whose suites pass, fail or take their time, so the runner's own logic is checked where
# there is no GPU. One after another and in lanes: every suite's verdict in the summary, the failing one named and the
# exit status non-zero; DUET_GPU_FIRST's suite started first; DUET_GPU_SUITES picks; DUET_GPU_SPLIT's suite one run a
# parameter, each picked by its literal name as tools/gpu_checks.sh re-runs a failed one; stopped by a time limit, the
# suites not ended are named and none of their processes is left; DUET_GPU_TEST_TIMES's reports read by
# tools/slowest_gpu_tests.py.
#   usage: gpu_runner_test.sh (from anywhere)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)  # its path is in every fake suite's command line, for the stray-process check
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/device/tests/cuda" "$work/device/lib" "$work/tests"
cp "$repo/tools/run_gpu_tests.sh" "$work/device/run_gpu_tests.sh"
cat > "$work/device/tests/cuda/cuda_fake" <<FAKE
#!/usr/bin/env bash
if [[ \$1 == --gtest_list_tests ]]; then printf 'Alpha.\n  One\nShapes/Beta.\n  Two/tiny\n  Two/big\nGamma.\n  Three\n'; exit 0; fi
filter=\${2#--gtest_filter=}
echo "start \$filter" >> "$work/starts"
case \$filter in
  Alpha.*) sleep 0.3; echo "alpha ran" ;;
  Shapes/Beta.*) sleep 2.5; echo "beta ran" ;;
  Gamma.*) sleep 0.3; echo "gamma failed"; exit 1 ;;
esac
if [[ \${3:-} == --gtest_output=json:* ]]; then
  printf '{"testsuites": [{"name": "%s", "testsuite": [{"name": "Case", "time": "0.5s"}]}]}' "\${filter%.*}" > "\${3#--gtest_output=json:}"
fi
exit 0
FAKE
chmod +x "$work/device/tests/cuda/cuda_fake"
cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_in() {  # expect_in WHAT TEXT LINE...
  local what=$1 text=$2; shift 2
  for line in "$@"; do grep -qxF -- "$line" <<<"$text" || fail "$what: no line '$line' in:"$'\n'"$text"; done
}

# One after another.
rm -f starts
out=$(device/run_gpu_tests.sh 2>&1); status=$?
expect_in "serial" "$out" "=== summary: 2 passed, 1 failed" "FAILED: Gamma.*" "alpha ran" "beta ran"
(( status != 0 )) || fail "serial: exit status 0 with a failed suite"

# Two lanes, Beta first, each suite's report kept.
rm -f starts
out=$(DUET_GPU_JOBS=2 DUET_GPU_FIRST=Beta DUET_GPU_TEST_TIMES="$work/times" device/run_gpu_tests.sh 2>&1); status=$?
expect_in "lanes" "$out" "=== summary: 2 passed, 1 failed" "FAILED: Gamma.*" "=== tests/cuda/cuda_fake Shapes/Beta.*"
(( status != 0 )) || fail "lanes: exit status 0 with a failed suite"
[[ $(wc -l <starts) == 3 ]] || fail "lanes: not every suite ran once: $(cat starts)"
slowest=$(python3 "$repo/tools/slowest_gpu_tests.py" "$work/times" 5)
grep -q "Shapes/Beta.Case" <<<"$slowest" || fail "slowest_gpu_tests.py did not list the reports: $slowest"

# DUET_GPU_FIRST's suite first (one lane: the order the runner starts them in is the order they run).
rm -f starts
DUET_GPU_FIRST=Beta device/run_gpu_tests.sh >/dev/null 2>&1
[[ $(head -1 starts) == "start Shapes/Beta.*" ]] || fail "DUET_GPU_FIRST's suite did not start first: $(cat starts)"

# DUET_GPU_SPLIT's suite one run a parameter (a suite it does not name stays one run, as Beta did above), and one of
# those runs picked by its literal name (tools/gpu_checks.sh's escaping of a failed run's name).
rm -f starts
out=$(DUET_GPU_SPLIT=Beta device/run_gpu_tests.sh 2>&1)
expect_in "split" "$out" "=== summary: 3 passed, 1 failed" "=== tests/cuda/cuda_fake Shapes/Beta.*/tiny" \
  "=== tests/cuda/cuda_fake Shapes/Beta.*/big"
grep -qxF "start Shapes/Beta.*/big" starts || fail "split: no run of Beta's second parameter: $(cat starts)"
name='Shapes/Beta.*/big'
pattern=${name//./\\.}; pattern="^${pattern//\*/\\*}\$"
out=$(DUET_GPU_SPLIT=Beta DUET_GPU_SUITES="$pattern" device/run_gpu_tests.sh 2>&1) || fail "split pick: non-zero status"
expect_in "split pick" "$out" "=== summary: 1 passed, 0 failed" "=== tests/cuda/cuda_fake Shapes/Beta.*/big"

# A pick that passes: exit status 0.
out=$(DUET_GPU_JOBS=2 DUET_GPU_SUITES='^Alpha' device/run_gpu_tests.sh 2>&1) || fail "picked Alpha: non-zero status"
expect_in "picked" "$out" "=== summary: 1 passed, 0 failed"

# Stopped by a time limit in lanes: Beta (2.5 s) had not ended at 1 s.
out=$(DUET_GPU_JOBS=2 DUET_GPU_FIRST=Beta timeout 1 device/run_gpu_tests.sh 2>&1); status=$?
(( status == 124 )) || fail "stopped: status $status, not timeout's 124"
expect_in "stopped" "$out" "NOT ENDED: Shapes/Beta.*"
sleep 3
# /proc rather than pgrep (procps is not in every Debian image), read by tr so that no process's own arguments hold
# the path looked for.
for cmdline in /proc/[0-9]*/cmdline; do
  if [[ $({ tr '\0' ' ' <"$cmdline"; } 2>/dev/null) == *"$work/device/tests/cuda/cuda_fake"* ]]; then
    fail "stopped: a suite's process outlived the run ($cmdline)"
  fi
done

if (( failures > 0 )); then echo "$failures failure(s)"; exit 1; fi
echo "gpu runner: serial, lanes, first, split, pick, reports and a stop all as they should be"
