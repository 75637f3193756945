#!/usr/bin/env bash
# Sets everything up and serves the bundled demo model (or the model folder given as the first argument) on
# http://127.0.0.1:8080 with the OpenAI-compatible API. Further arguments go to `duet serve` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build >&2
exec build/src/cli/duet serve "$@"
