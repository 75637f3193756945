#!/usr/bin/env bash
# The tests run from a checkout at another path (the GPU pack unpacked elsewhere): a copy of tests/fixtures in a
# temporary folder, DUET_TESTS_DIR_OVERRIDE pointing at it, and a fixture-reading test binary must pass there without
# a skip; then, as the planted control, one fixture of the copy is damaged and the same run must fail, which shows
# the binary read the copy and not the path compiled into it.
#   usage: moved_checkout_test.sh BINARY GTEST_FILTER FIXTURE_TO_DAMAGE (relative to tests/)
set -euo pipefail
binary=$1 filter=$2 damage=$3
source_tests=$(cd "$(dirname "$0")" && pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
mkdir -p "$copy/tests"
cp -r "$source_tests/fixtures" "$copy/tests/fixtures"
export DUET_TESTS_DIR_OVERRIDE="$copy/tests"

if ! output=$("$binary" --gtest_filter="$filter" 2>&1); then
  echo "$output"; echo "FAIL: the run on the moved copy failed"; exit 1
fi
if grep -q "SKIPPED\|0 tests" <<<"$output"; then
  echo "$output"; echo "FAIL: the run on the moved copy skipped or ran nothing"; exit 1
fi
echo "moved copy: passed ($(grep -c '^\[       OK \]' <<<"$output") tests)"

truncate -s 64 "$copy/tests/$damage"
if "$binary" --gtest_filter="$filter" >/dev/null 2>&1; then
  echo "FAIL: damaging $damage in the copy changed nothing: the binary does not read DUET_TESTS_DIR_OVERRIDE"; exit 1
fi
echo "control: damaging $damage in the copy fails the run, as it must"
