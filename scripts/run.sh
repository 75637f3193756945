#!/usr/bin/env bash
# Sets everything up and runs duet on the bundled demo model (or the model folder given as the first argument).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build >&2
exec build/src/cli/duet run "$@"
