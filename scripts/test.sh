#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs exactly this): the format check,
# the build and every test, then the CPU unit tests again under ASan + UBSan and the fuzz targets (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-build
# The npm references (mostly download time) install while the build compiles.
deps_log=$(mktemp)
san_log=$(mktemp)
san=""
# The sanitizer build runs in its own process group, so that an early exit stops its compilers too.
trap '[[ -z $san ]] || kill -- -"$san" 2>/dev/null || true; rm -f "$deps_log" "$san_log"' EXIT
scripts/test-deps.sh >"$deps_log" 2>&1 &
deps=$!
# The sanitizer build compiles at the lowest priority from here on: it takes the core time that the release build's
# single-job tail and the tests (the end-to-end ones wait on sockets and sleeps) leave idle, and little else.
setsid -w nice -n 19 scripts/sanitize.sh --build-only build-sanitize >"$san_log" 2>&1 &
san=$!
scripts/setup.sh build
deps_status=0
wait "$deps" || deps_status=$?
cat "$deps_log"
[[ $deps_status -eq 0 ]] || { echo "test.sh: scripts/test-deps.sh failed" >&2; exit 1; }
scripts/check-format.sh
# Twice as many jobs as cores: the end-to-end tests wait on sockets, sleeps and node much of the time (docs/benchmarks.md,
# "Build time", fourth pass: 2 cores, -j2 430 s, -j4 340 s wall, 5 % more CPU).
(cd build && ctest --output-on-failure -j "$((2 * $(nproc)))" --timeout 1500)
san_status=0
wait "$san" || san_status=$?
[[ $san_status -eq 0 ]] || { cat "$san_log"; echo "test.sh: the sanitizer build failed" >&2; exit 1; }
scripts/sanitize.sh build-sanitize
