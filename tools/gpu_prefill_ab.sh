#!/usr/bin/env bash
# On the GPU machine: `duet run` prefill time under settings, alternating, on the 9B-shaped checkpoint that
# tools/make_9b_references.py wrote (WORK/model): random ids of seed N for each prompt length N, one stream, 8 tokens,
# each setting ROUNDS times in turn so that a drifting machine shows as spread rather than as a difference. A setting
# is a set of environment assignments (`-` for none), e.g. the delta rule's WY form against the row-by-row form
# (docs/benchmarks.md, 30th round):
#   tools/gpu_prefill_ab.sh /tmp/9b 1024,4096,16384 2 - DUET_DELTA_WY=0
# A setting may begin with bin=PATH to run another build's duet (two packs in one call: PATH=old/device/bin/duet).
# Prints one line a run: the prompt length, the setting and duet run's prefill figure.
#   usage: tools/gpu_prefill_ab.sh WORK LENGTHS ROUNDS SETTING...
set -uo pipefail
work=$1; lengths=$2; rounds=$3; shift 3
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=device/bin/duet
IFS=',' read -r -a sizes <<<"$lengths"
for n in "${sizes[@]}"; do
  ids=$(python3 -c "import random; random.seed($n); print(','.join(str(random.randrange(248044)) for _ in range($n)))")
  for ((round = 0; round < rounds; ++round)); do
    for setting in "$@"; do
      assignments=()
      [[ $setting == - ]] || IFS=' ' read -r -a assignments <<<"$setting"
      binary=$duet
      if [[ ${assignments[0]:-} == bin=* ]]; then binary=${assignments[0]#bin=}; assignments=("${assignments[@]:1}"); fi
      line=$(env "${assignments[@]}" timeout 120 "$binary" run "$work/model" --backend cuda --prompt-ids "$ids" \
        --max-tokens 8 --ignore-eos 2>&1 >/dev/null | tail -1 | grep -o 'prefill [^|]*')
      echo "[$n ids] [$setting] ${line:-FAILED}"
    done
  done
done
