#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
scripts/test-deps.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 1500
