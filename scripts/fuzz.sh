#!/usr/bin/env bash
# Coverage-guided fuzzing of what reads untrusted bytes (tests/fuzz): the HTTP request reader, the JSON body parser
# and the model-output tool-call parser, as libFuzzer targets built with Debian's clang under ASan and UBSan. Each
# runs SECONDS from the committed seeds (tests/fuzz/seeds/TARGET) plus what earlier runs found (OUT/corpus/TARGET).
# A crash, a leak, a sanitizer report or an abort fails the run and leaves the input in OUT (crash-*): make it a
# regression test. ctest runs it for 20 s a target; long runs are receipts in docs/benchmarks.md.
#   scripts/fuzz.sh [SECONDS=20] [OUT=build/fuzz]      exit 77 (skipped) when clang++ is not installed
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
out=${2:-build/fuzz}
command -v clang++ >/dev/null || { echo "clang++ is not installed: the fuzz targets are skipped"; exit 77; }
mkdir -p "$out"
# NDEBUG as in the Release build that ships: Boost.Beast asserts `n >= 5` in parse_chunk_header on a malformed
# trailer (seeds/request_reader_fuzz/beast_chunk_header_assert, found by this fuzzer); compiled out, as shipped,
# that input reads nothing out of bounds under ASan. What ships is what is fuzzed.
flags=(-std=c++20 -O1 -g -DNDEBUG -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)
build() {
  local name=$1
  shift
  local sources=("tests/fuzz/$name.cc" "$@")
  # Rebuilt only when a source, its header, or a header they all share is newer than the binary.
  local inputs=("${sources[@]}" src/base/exact_json.h src/base/json_depth.h src/server/http_limits.h
    src/server/http_types.h src/server/errors.h)
  for source in "$@"; do inputs+=("${source%.cc}.h"); done
  if [ ! -x "$out/$name" ] || [ -n "$(find "${inputs[@]}" -newer "$out/$name" | head -1)" ]; then
    nice -n 15 clang++ "${flags[@]}" "${sources[@]}" -lfmt -o "$out/$name"
  fi
}
build request_reader_fuzz src/server/request_reader.cc src/server/errors.cc
build json_body_fuzz src/base/exact_json.cc
# The tool-call parser reads each parameter by the grammar's rule (grammar::parameter_written_as_text): the grammar's
# schema reading comes with it, without the vocabulary and the masks (which need the tokenizer).
build tool_call_fuzz src/server/tool_call_parser.cc src/base/json_depth.cc src/grammar/char_set.cc \
  src/grammar/compiled_grammar.cc src/grammar/expr.cc src/grammar/follow_bytes.cc src/grammar/grammar_builder.cc \
  src/grammar/json_schema.cc src/grammar/json_values.cc src/grammar/parser.cc src/grammar/plain_text.cc \
  src/grammar/regex.cc src/grammar/tool_call_grammar.cc
status=0
for name in request_reader_fuzz json_body_fuzz tool_call_fuzz; do
  mkdir -p "$out/corpus/$name"
  log="$out/$name.log"
  ran=0
  (cd "$out" && "./$name" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "corpus/$name" "$OLDPWD/tests/fuzz/seeds/$name") >"$log" 2>&1 || ran=$?
  echo "== $name, $seconds s: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') executions," \
    "$(grep -oE 'cov: [0-9]+' "$log" | tail -1) edges, exit $ran"
  if [ "$ran" -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|Test unit written|deadly signal' "$log" | head -20
    echo "$name: FAILED (log: $log)"
    status=1
  fi
done
exit $status
