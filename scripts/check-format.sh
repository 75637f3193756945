#!/usr/bin/env bash
# Checks that the project's C++ and CUDA files are formatted as .clang-format says (CI runs this from scripts/test.sh);
# --fix rewrites them instead. Third-party code (tests/node_modules) is not ours and is not checked.
#   usage: scripts/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
format=$(command -v clang-format-14 || command -v clang-format || true)
[[ -n $format ]] || { echo "check-format: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' ':!:tests/node_modules/**')
if [[ ${1:-} == --fix ]]; then
  "$format" -i --style=file "${files[@]}"
  exit 0
fi
# --dry-run -Werror names every file and line that differs, and fails when any does: print how many lines per file.
report=$(mktemp)
trap 'rm -f "$report"' EXIT
if ! "$format" --dry-run -Werror --style=file "${files[@]}" 2>"$report"; then
  grep -E "^[^ ].*: (error|warning):" "$report" | cut -d: -f1 | sort | uniq -c >&2
  echo "check-format: the files above differ from .clang-format; scripts/check-format.sh --fix rewrites them" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as .clang-format says"
