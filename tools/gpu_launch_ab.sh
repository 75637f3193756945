#!/usr/bin/env bash
# On the GPU machine: `duet run` decode tok/s under launch settings, alternating, on the 9B-shaped checkpoint that
# tools/make_9b_references.py wrote (WORK/model): 1,024 random ids of seed 1024, 256 tokens, --ignore-eos, each setting
# ROUNDS times in turn so that a drifting machine shows as spread rather than as a difference. A setting is a set of
# environment assignments (`-` for none), e.g. the dependent-launch policy against every step dependent and the
# bisection of which kernels lose by it (docs/benchmarks.md, 26th round; DUET_CUDA_PDL_FLIP in dependent_launch.h):
#   tools/gpu_launch_ab.sh /tmp/9b 64 2 - DUET_CUDA_PDL=1 DUET_CUDA_PDL_FLIP=skinny DUET_CUDA_PDL_FLIP=decode_delta_kernel
# Prints one line a run: the setting, the decode figure and the md5 of the tokens (every setting must give the same).
#   usage: tools/gpu_launch_ab.sh WORK STREAMS ROUNDS SETTING...
set -uo pipefail
work=$1; streams=$2; rounds=$3; shift 3
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
duet=device/bin/duet
ids=$(python3 -c "import random; random.seed(1024); print(','.join(str(random.randrange(248044)) for _ in range(1024)))")
tokens=$(mktemp)
trap 'rm -f "$tokens"' EXIT
for ((round = 0; round < rounds; ++round)); do
  for setting in "$@"; do
    assignments=()
    [[ $setting == - ]] || IFS=' ' read -r -a assignments <<<"$setting"
    line=$(env "${assignments[@]}" timeout 120 "$duet" run "$work/model" --backend cuda --prompt-ids "$ids" \
      --max-tokens 256 --ignore-eos --streams "$streams" 2>&1 >"$tokens" | tail -1 | grep -o 'decode [^|]*')
    echo "[$streams streams] [$setting] ${line:-FAILED} tokens $(md5sum <"$tokens" | cut -c1-12)"
  done
done
