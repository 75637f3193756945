#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs exactly this): the format check,
# the build and every test, then the CPU unit tests again under ASan + UBSan and the fuzz targets (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-build
# The npm references (mostly download time) install while the build compiles.
deps_log=$(mktemp)
trap 'rm -f "$deps_log"' EXIT
scripts/test-deps.sh >"$deps_log" 2>&1 &
deps=$!
scripts/setup.sh build
deps_status=0
wait "$deps" || deps_status=$?
cat "$deps_log"
[[ $deps_status -eq 0 ]] || { echo "test.sh: scripts/test-deps.sh failed" >&2; exit 1; }
scripts/check-format.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 1500)
scripts/sanitize.sh build-sanitize
