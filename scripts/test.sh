#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs exactly this): the format check,
# the build and every test, then the CPU unit tests again under ASan + UBSan (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/test-deps.sh
scripts/check-format.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 1500)
scripts/sanitize.sh build-sanitize
