#!/usr/bin/env bash
# The decode GEMM's kernels as ptxas builds them: registers and spills per kernel, and any advisory that ptxas
# serialized a kernel's wgmma instructions (C7515: an instruction it could not keep out of a wgmma's pipeline stage,
# which silently turns the asynchronous MMAs synchronous; docs/benchmarks.md, 28th round). Compiles
# src/backend/cuda/skinny_gemm.cu once more with -Xptxas -v, with BUILD's own command (about 40 s), into a scratch
# object. Exits 1 on a C7515 advisory. tools/pack_for_device.sh runs it before packing (PACK_NO_PTXAS_CHECK=1 skips).
# Its control: the report of the build that had it (session 42, branch swiglu-epilogue's first build; six regs
# kernels named), through --log, exits 1.
#   usage: tools/ptxas_report.sh [BUILD=build] [--table]   (--table: every kernel's registers and spills)
#          tools/ptxas_report.sh --log FILE [--table]    (a saved `-Xptxas -v` report instead of a compile)
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [[ ${1:-} == --log ]]; then
  cp "$2" "$scratch/ptxas.txt"
else
  build=${1:-build}
  object=src/backend/cuda/CMakeFiles/duet_cuda.dir/skinny_gemm.cu.o
  command=$(ninja -C "$build" -t commands "$object" | tail -1)
  [[ -n $command ]] || { echo "ptxas_report: $build has no rule for $object" >&2; exit 2; }
  # The same command, its object into the scratch folder, with ptxas's report.
  command=${command//"-o $object"/"-o $scratch/skinny_gemm.cu.o"}
  (cd "$build" && eval "$command -Xptxas -v") >"$scratch/ptxas.txt" 2>&1 ||
    { cat "$scratch/ptxas.txt" >&2; exit 2; }
fi
table=0
[[ ${2:-} == --table || ${3:-} == --table ]] && table=1
if [[ $table == 1 ]]; then
  awk '/Compiling entry function/ {match($0, /_Z[^'"'"']*/); name = substr($0, RSTART, RLENGTH)}
       /spill stores/ {spill = $5 "/" $9}
       /Used [0-9]+ registers/ {print $5, "registers, spills (stores/loads bytes)", spill, name}' "$scratch/ptxas.txt" |
    c++filt | sort -k5
fi
if grep -q C7515 "$scratch/ptxas.txt"; then
  echo "ptxas_report: wgmma instructions serialized (C7515) in:" >&2
  grep C7515 "$scratch/ptxas.txt" | grep -o "_Z[A-Za-z0-9_]*" | c++filt | sed 's/^/  /' >&2
  exit 1
fi
echo "ptxas_report: no wgmma serialization advisory in skinny_gemm.cu ($(grep -c 'Compiling entry' "$scratch/ptxas.txt") kernels)"
