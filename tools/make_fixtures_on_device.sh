#!/usr/bin/env bash
# The one command run on the GPU machine to regenerate every committed fixture (see tools/README.md).
# Usage: tools/make_fixtures_on_device.sh OUT [QWEN3_TOKENIZER_JSON]
set -euo pipefail
out=$1; qwen3=${2:-}
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=""
# Pin the CPU math paths so that machines with other vector units (AVX-512, AMX) compute the same bits.
export MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
python3 tools/make_tokenizer_fixtures.py --out "$out" ${qwen3:+--qwen3 "$qwen3"} --chat-template tools/qwen35_chat_template.jinja
python3 tools/make_model_fixtures.py --out "$out"
