#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs exactly this): the format check,
# the build and every test, then the CPU unit tests again under ASan + UBSan and the fuzz targets (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start is printed ("=== test.sh +SECONDS: ..."), with the CPU seconds (user + sys) this run's ended
# processes took so far and how busy the machine's cores were since the last line, so that a CI log shows where the
# wall clock went (docs/benchmarks.md, "Build time").
t0=$(date +%s)
read -r _ busy0 idle0 < <(awk '/^cpu /{print "cpu", $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
tick=$(getconf CLK_TCK)
phase() {
  local busy idle cpu
  read -r _ busy idle < <(awk '/^cpu /{print "cpu", $2+$3+$4+$7+$8, $5+$6}' /proc/stat)
  cpu=$(awk -v t="$tick" '{print int(($16 + $17) / t)}' /proc/$$/stat)
  echo "=== test.sh +$(($(date +%s) - t0)) s: $* (CPU $cpu s so far; cores busy $(((busy - busy0) * 100 / (busy - busy0 + idle - idle0 + 1))) % since the last line)"
  busy0=$busy idle0=$idle
}
# This machine's speed now, on a fixed piece of work (SHA-256 of 256 MB of zeros, one core): the same run's CPU
# seconds moved by 16 % from one run to the next on the dev machine (docs/benchmarks.md, "Build time", eleventh pass),
# so a log's times are read beside this line, printed at the start and at the end.
speed() {
  local t=$(date +%s%N)
  head -c 268435456 /dev/zero | sha256sum >/dev/null
  echo "=== test.sh: machine speed: SHA-256 of 256 MB in $((($(date +%s%N) - t) / 1000000)) ms (one core)"
}
speed
phase "apt: what the builds need (scripts/setup.sh --build-packages)"
scripts/setup.sh --build-packages --no-build
phase "the tests' packages and npm references, the sanitizer build (nice 19) and the release build, beside each other"
# What only the tests need (chromium, node and npm, clang-format: most of the packages) and the npm references
# install while the build compiles: download time and dpkg's one process, which left a core idle before the build.
deps_log=$(mktemp)
san_log=$(mktemp)
san=""
# The sanitizer build runs in its own process group, so that an early exit stops its compilers too.
trap '[[ -z $san ]] || kill -- -"$san" 2>/dev/null || true; rm -f "$deps_log" "$san_log"' EXIT
(scripts/setup.sh --test-packages && scripts/test-deps.sh && echo "test packages and npm references ready at +$(($(date +%s) - t0)) s") >"$deps_log" 2>&1 &
deps=$!
# The sanitizer build compiles at the lowest priority from here on: it takes the core time that the release build's
# single-job tail and the tests (the end-to-end ones wait on sockets and sleeps) leave idle, and little else.
# setsid makes it a session of its own, and where the kernel groups each session for scheduling (autogroup, on in
# Debian's kernels) the group's nice, not its processes', sets its share against the release build's session: without
# the autogroup line it took half of the cores, and two compilers a core cost the builds 15 % more CPU time than each
# build alone (docs/benchmarks.md, "Build time", tenth pass). The background jobs' end times go to their logs' last lines.
setsid -w nice -n 19 bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null || true
  scripts/sanitize.sh --build-only build-sanitize; s=$?; echo "sanitizer build ended at +$(($(date +%s) - $1)) s"; exit $s' _ "$t0" >"$san_log" 2>&1 &
san=$!
# The unit tests the sanitizer run covers are not built here (DUET_SANITIZED_TESTS_HERE, CMakeLists.txt): they run there.
# Nor are the benchmarks (DUET_BENCHES): no test runs them. The GPU tests only skip here: their host code at -O0.
release_args="-DDUET_SANITIZED_TESTS_HERE=OFF -DDUET_BENCHES=OFF -DDUET_GPU_TESTS_OPTIMIZED=OFF"
DUET_CMAKE_ARGS="${DUET_CMAKE_ARGS:-} $release_args" scripts/setup.sh --build-packages build
phase "the release build ended"
deps_status=0
wait "$deps" || deps_status=$?
cat "$deps_log"
[[ $deps_status -eq 0 ]] || { echo "test.sh: scripts/setup.sh --test-packages or scripts/test-deps.sh failed" >&2; exit 1; }
scripts/check-format.sh
phase "ctest"
# Twice as many jobs as cores: the end-to-end tests wait on sockets, sleeps and node much of the time (docs/benchmarks.md,
# "Build time", fourth pass: 2 cores, -j2 430 s, -j4 340 s wall, 5 % more CPU).
# The unit tests that scripts/sanitize.sh runs under ASan + UBSan below (label `sanitized`, scripts/sanitized_tests.txt)
# run there only, once each, in the build that checks more (clang, -Werror); model_golden_test, built here for
# tests_dir_override, carries the label too.
(cd build && ctest --output-on-failure -j "$((2 * $(nproc)))" --timeout 1500 -LE sanitized)
# ctest's critical path: the longest tests (wall seconds), which bound the run's tail.
echo "test.sh: the longest tests:"
sort -k3 -g -r build/Testing/Temporary/CTestCostData.txt 2>/dev/null | awk 'NF == 3 && NR <= 8 {printf "  %7.1f s %s\n", $3, $1}'
phase "waiting for the sanitizer build"
san_status=0
wait "$san" || san_status=$?
[[ $san_status -eq 0 ]] || { cat "$san_log"; echo "test.sh: the sanitizer build failed" >&2; exit 1; }
tail -1 "$san_log"
phase "the sanitizer tests and fuzz targets (scripts/sanitize.sh)"
scripts/sanitize.sh build-sanitize
speed
phase "done"
