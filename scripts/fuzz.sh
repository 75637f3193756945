#!/usr/bin/env bash
# Coverage-guided fuzzing of what reads untrusted bytes (tests/fuzz): the HTTP request reader, the JSON body parser,
# the chat / completions, Responses and System One request parsers and the model-output tool-call parser, as libFuzzer
# targets built with Debian's clang under ASan and UBSan. Each runs SECONDS from the committed seeds
# (tests/fuzz/seeds/TARGET) plus what earlier runs found (OUT/corpus/TARGET). A crash, a leak, a sanitizer report or an
# abort fails the run and leaves the input in OUT (crash-*): make it a regression test and a seed. ctest runs it for
# 10 s a target (fuzz_short); long runs are receipts in docs/benchmarks.md.
#   scripts/fuzz.sh [SECONDS=10] [OUT=build/fuzz] [TARGET...]   exit 77 (skipped) when clang++ is not installed
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
out=${2:-build/fuzz}
shift $(($# < 2 ? $# : 2))
command -v clang++ >/dev/null || { echo "clang++ is not installed: the fuzz targets are skipped"; exit 77; }
mkdir -p "$out/obj"
# NDEBUG as in the Release build that ships: Boost.Beast asserts `n >= 5` in parse_chunk_header on a malformed
# trailer (seeds/request_reader_fuzz/beast_chunk_header_assert, found by this fuzzer); compiled out, as shipped,
# that input reads nothing out of bounds under ASan. What ships is what is fuzzed.
flags=(-std=c++20 -O1 -g -DNDEBUG -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc)

# One object per source, shared by the targets that link it; rebuilt when the source or a header it included (its
# depfile) is newer. Targets link only the sources they need: most of the server would drag in the engine. Objects
# compile in parallel, a job a core.
declare -A compiled=()
compile() {
  local source=$1 object="$out/obj/${1//\//_}.o"
  [ -z "${compiled[$object]:-}" ] || return 0
  compiled[$object]=1
  if [ ! -f "$object" ] || [ -n "$(find "$source" $(sed -e '1s/^[^:]*://' -e 's/\\$//' "$object.d") \
    -newer "$object" 2>/dev/null | head -1)" ]; then
    while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
    nice -n 15 clang++ "${flags[@]}" -MMD -MF "$object.d" -c "$source" -o "$object" &
  fi
}
link() {
  local name=$1 source objects=()
  shift
  for source in "tests/fuzz/$name.cc" "$@"; do objects+=("$out/obj/${source//\//_}.o"); done
  if [ ! -x "$out/$name" ] || [ -n "$(find "${objects[@]}" -newer "$out/$name" | head -1)" ]; then
    nice -n 15 clang++ -fsanitize=fuzzer,address,undefined "${objects[@]}" -lfmt -o "$out/$name"
  fi
}
# The grammar's schema reading, without the vocabulary and the masks (which need the tokenizer): the tool-call parser
# reads each parameter by the grammar's rule (grammar::parameter_written_as_text).
grammar=(src/grammar/char_set.cc src/grammar/compiled_grammar.cc src/grammar/expr.cc src/grammar/follow_bytes.cc
  src/grammar/grammar_builder.cc src/grammar/json_schema.cc src/grammar/json_values.cc src/grammar/parser.cc
  src/grammar/plain_text.cc src/grammar/regex.cc src/grammar/tool_call_grammar.cc)
# What the chat-shaped request parsers share: the body's JSON, the field readers, tools and tool_choice, the output
# format, and the chat template the routes render the conversation with.
requests=(src/server/request_parsing.cc src/server/errors.cc src/server/ignored_fields.cc src/server/tool_choice.cc
  src/server/output_format.cc src/server/system_messages.cc src/base/exact_json.cc src/base/json_depth.cc
  src/base/log.cc src/base/python_float.cc src/tokenizer/chat_template.cc src/tokenizer/python_json.cc
  src/tokenizer/utf8.cc)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request_reader_fuzz json_body_fuzz tool_call_fuzz chat_request_fuzz
  responses_request_fuzz systemone_request_fuzz)
# Each target's sources, after its own tests/fuzz/TARGET.cc.
sources_of() {
  case $1 in
    request_reader_fuzz) echo src/server/request_reader.cc src/server/errors.cc ;;
    json_body_fuzz) echo src/base/exact_json.cc ;;
    tool_call_fuzz) echo src/server/tool_call_parser.cc src/base/json_depth.cc "${grammar[@]}" ;;
    chat_request_fuzz) echo src/server/chat_request.cc src/server/completions_request.cc "${requests[@]}" ;;
    responses_request_fuzz)
      echo src/server/responses_request.cc src/server/responses_state.cc src/server/response_store.cc \
        src/server/ids.cc "${requests[@]}"
      ;;
    systemone_request_fuzz)
      echo src/decision/validation.cc src/decision/options.cc src/decision/render.cc src/decision/encoder.cc \
        src/base/exact_json.cc src/base/python_float.cc src/tokenizer/python_json.cc
      ;;
    *) echo "unknown target $1" >&2 && return 2 ;;
  esac
}
for name in "${targets[@]}"; do
  sources=$(sources_of "$name")
  for source in "tests/fuzz/$name.cc" $sources; do compile "$source"; done
done
while [ -n "$(jobs -rp)" ]; do wait -n; done
for name in "${targets[@]}"; do link "$name" $(sources_of "$name"); done
status=0
for name in "${targets[@]}"; do
  mkdir -p "$out/corpus/$name"
  log="$out/$name.log"
  ran=0
  (cd "$out" && "./$name" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "corpus/$name" "$OLDPWD/tests/fuzz/seeds/$name") >"$log" 2>&1 || ran=$?
  echo "== $name, $seconds s: $(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}') executions," \
    "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1), exit $ran"
  if [ "$ran" -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|Test unit written|deadly signal' "$log" | head -20
    echo "$name: FAILED (log: $log)"
    status=1
  fi
done
exit $status
