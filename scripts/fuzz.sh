#!/usr/bin/env bash
# Coverage-guided fuzzing of what reads untrusted bytes (tests/fuzz): the HTTP request reader, the JSON body parser,
# the chat / completions, Responses, Messages and System One request parsers, the model-output tool-call parser and
# the image decoders (src/image), as libFuzzer targets built with Debian's clang under ASan and UBSan in the sanitizer
# build (scripts/sanitize-build.sh: the objects the sanitizer unit tests link, assert() on for duet's code). Each
# runs SECONDS from the committed seeds (tests/fuzz/seeds/TARGET) plus what earlier runs found
# (BUILD/fuzz/corpus/TARGET). A crash, a leak, a sanitizer report or an abort fails the run and leaves the input in
# BUILD/fuzz (crash-*): make it a regression test and a seed. The targets are one binary (tests/fuzz/fuzz_targets.h):
# `DUET_FUZZ_TARGET=TARGET BUILD/tests/fuzz/fuzz_targets crash-...` runs one on an input again.
# scripts/sanitize.sh runs it for 10 s a target; long runs are receipts in docs/benchmarks.md.
#   scripts/fuzz.sh [SECONDS=10] [BUILD=build-sanitize] [TARGET...]   exit 77 (skipped) when clang++ is not installed
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
build_dir=${2:-build-sanitize}
shift $(($# < 2 ? $# : 2))
command -v clang++ >/dev/null || { echo "clang++ is not installed: the fuzz targets are skipped"; exit 77; }
targets=("$@")
# DUET_FUZZ_BUILT=1: the caller built fuzz_targets just now (scripts/sanitize.sh, which runs two of these at once in
# the same build folder, where two builds at a time would race).
[[ ${DUET_FUZZ_BUILT:-0} == 1 ]] || scripts/sanitize-build.sh "$build_dir" fuzz_targets
# Every target by default, as the binary lists them (tests/fuzz/fuzz_targets.cc).
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(DUET_FUZZ_LIST=1 "$build_dir/tests/fuzz/fuzz_targets")
[ ${#targets[@]} -gt 0 ] || { echo "fuzz: $build_dir/tests/fuzz/fuzz_targets listed no targets" >&2; exit 1; }
out=$build_dir/fuzz
status=0
for name in "${targets[@]}"; do
  mkdir -p "$out/corpus/$name"
  log="$out/$name.log"
  ran=0
  (cd "$out" && DUET_FUZZ_TARGET=$name ../tests/fuzz/fuzz_targets -max_total_time="$seconds" -max_len=65536 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "corpus/$name" "$OLDPWD/tests/fuzz/seeds/$name") >"$log" 2>&1 ||
    ran=$?
  echo "== $name, $seconds s: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') executions," \
    "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1), exit $ran"
  if [ "$ran" -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|Test unit written|deadly signal' "$log" | head -20
    echo "$name: FAILED (log: $log)"
    status=1
  fi
done
exit $status
