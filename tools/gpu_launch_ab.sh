#!/usr/bin/env bash
# On the GPU machine: `duet run` decode tok/s under launch settings, alternating, on the 9B-shaped checkpoint that
# tools/make_9b_references.py wrote (WORK/model): 1,024 random ids of seed 1024 (PROMPT_LEN), 256 tokens, --ignore-eos, each setting
# ROUNDS times in turn so that a drifting machine shows as spread rather than as a difference. A setting is a set of
# environment assignments (`-` for none), e.g. the dependent-launch policy against every step dependent and the
# bisection of which kernels lose by it (docs/benchmarks.md, 26th round; DUET_CUDA_PDL_FLIP in dependent_launch.h):
#   tools/gpu_launch_ab.sh /tmp/9b 64 2 - DUET_CUDA_PDL=1 DUET_CUDA_PDL_FLIP=skinny DUET_CUDA_PDL_FLIP=decode_delta_kernel
# A setting may begin with @PATH, another duet binary to run (e.g. an earlier build's, unpacked elsewhere):
#   tools/gpu_launch_ab.sh /tmp/9b 64 2 - @/tmp/old/device/bin/duet
# PROMPT_LEN (default 1024) sets the prompt's length, e.g. decode after a 16K prompt, where a row's attention reads
# 16 times the keys (PROMPT_LEN=16384 tools/gpu_launch_ab.sh /tmp/9b 1 2 - DUET_ATTN_QUERY_SPLIT_ROWS=4).
# RUN_ARGS in the environment adds flags to every `duet run`, e.g. the engine's path (steps launched ahead and all:
# `duet run`'s own greedy passes drive the model without the engine) against its lookahead off:
#   RUN_ARGS="--draft none" tools/gpu_launch_ab.sh /tmp/9b 1 2 DUET_LOOKAHEAD=0 DUET_LOOKAHEAD=1
# Prints one line a run: the setting, the decode figure and the md5 of the tokens (every setting must give the same),
# then each setting's mean and its difference from the first setting's.
#   usage: tools/gpu_launch_ab.sh WORK STREAMS ROUNDS SETTING...
set -uo pipefail
work=$1; streams=$2; rounds=$3; shift 3
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=device/bin/duet
ids=$(python3 -c "import random, sys; random.seed(1024); print(','.join(str(random.randrange(248044)) for _ in range(int(sys.argv[1]))))" \
  "${PROMPT_LEN:-1024}")
tokens=$(mktemp)
trap 'rm -f "$tokens"' EXIT
declare -A total runs
for ((round = 0; round < rounds; ++round)); do
  for setting in "$@"; do
    assignments=()
    [[ $setting == - ]] || IFS=' ' read -r -a assignments <<<"$setting"
    binary=$duet
    if [[ ${assignments[0]:-} == @* ]]; then binary=${assignments[0]#@}; assignments=("${assignments[@]:1}"); fi
    line=$(env "${assignments[@]}" timeout 120 "$binary" run "$work/model" --backend cuda --prompt-ids "$ids" \
      --max-tokens 256 --ignore-eos --streams "$streams" ${RUN_ARGS:-} 2>&1 >"$tokens" | grep -E '^(model|engine)' |
      tail -1 | grep -o 'decode [^|]*')
    echo "[$streams streams] [$setting] ${line:-FAILED} tokens $(md5sum <"$tokens" | cut -c1-12)"
    rate=$(grep -o '([0-9.]* tok/s)' <<<"$line" | tr -dc '0-9.')
    if [[ -n $rate ]]; then
      total[$setting]=$(awk -v a="${total[$setting]:-0}" -v b="$rate" 'BEGIN { print a + b }')
      runs[$setting]=$(( ${runs[$setting]:-0} + 1 ))
    fi
  done
done
# The mean of each setting's runs and its ratio to the first setting's, when more than one run or setting was asked.
if (( rounds > 1 || $# > 1 )) && [[ -n ${runs[$1]:-} ]]; then
  base=$(awk -v t="${total[$1]}" -v n="${runs[$1]}" 'BEGIN { print t / n }')
  for setting in "$@"; do
    [[ -n ${runs[$setting]:-} ]] || { echo "[$streams streams] mean [$setting] no run finished"; continue; }
    awk -v s="$setting" -v t="${total[$setting]}" -v n="${runs[$setting]}" -v b="$base" -v S="$streams" \
      'BEGIN { m = t / n; printf "[%s streams] mean [%s] %.0f tok/s over %d runs, %+.1f%% against the first\n", S, s, m, n, 100 * (m / b - 1) }'
  done
fi
