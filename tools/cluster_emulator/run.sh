#!/usr/bin/env bash
# Builds sampling.cu's kernel for the cluster emulator (emu_runtime.h: every device thread a fiber, the cluster barrier's
# halves, __syncthreads and warp intrinsics as blocking rendezvous) and replays the device test's parity rows on it,
# each row's id against the CPU sampler's. Host only (x86-64, g++); no GPU. From the repository root:
#   tools/cluster_emulator/run.sh [selftest] [VOCAB REPS SEED [FIRST LAST]]
# `selftest` first checks that the emulator catches planted faults: one block of the cluster making an extra exchange
# in the binned top-p path (a barrier sequence that differs), part of one block at an extra __syncthreads (a
# deadlock), and the kernel ignoring a row's penalty count words or a verify row's extra ids (ids that differ). About a second per 512-wide row on one core; hooks and variations through the environment
# (replay_kernels_test.cc). Exit status non-zero on a deadlock, a differing barrier sequence or an id mismatch.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/tools/cluster_emulator
work=${EMU_WORK:-/tmp/cluster_emulator}
mkdir -p "$work"

# The kernel's sources with the cluster barrier's inline PTX and the dynamic shared memory declaration replaced by the
# emulator's calls ($1: where to put them, $2: a planted fault or "none").
prepare() {
  local dst=$1/src/backend/cuda
  mkdir -p "$dst"
  cp "$repo"/src/backend/cuda/{sampling.cu,sampling_binned.h,sampling_cluster.h} "$dst"/
  cp "$here"/stub/{cuda_check.h,dependent_launch.h} "$dst"/
  sed -i 's|asm volatile("barrier.cluster.arrive.release;\\n" ::: "memory");|emu_cluster_arrive(line);|;
          s|asm volatile("barrier.cluster.wait.acquire;\\n" ::: "memory");|emu_cluster_wait(line);|;
          s|asm volatile("barrier.sync 0;\\n" ::: "memory");|emu_syncthreads(line);|' \
    "$dst"/sampling_cluster.h
  sed -i 's|extern __shared__ __align__(16) unsigned char smem_raw\[\];|unsigned char* smem_raw = emu_smem();|;
          s|asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));|t = 0;|' \
    "$dst"/sampling.cu
  [ "$(grep -c 'emu_\(cluster_arrive\|cluster_wait\|syncthreads\)(line)' "$dst"/sampling_cluster.h)" = 3 ] ||
    { echo "run.sh: the barriers' inline PTX was not found in sampling_cluster.h" >&2; exit 1; }
  grep -q 'smem_raw = emu_smem()' "$dst"/sampling.cu ||
    { echo "run.sh: the dynamic shared memory declaration was not found in sampling.cu" >&2; exit 1; }
  grep -q 'globaltimer' "$dst"/sampling.cu &&
    { echo "run.sh: the globaltimer read (global_ns) was not replaced in sampling.cu" >&2; exit 1; }
  local anchor='  const Candidates cand = build_bins(r, q, sm);'
  case $2 in
    extra_exchange)
      sed -i "s|^$anchor\$|$anchor\n  if (block_rank() == 3) { exchange_open(); exchange_publish(); exchange_close(); }|" \
        "$dst"/sampling_binned.h ;;
    partial_barrier)
      sed -i "s|^$anchor\$|$anchor\n  if (block_rank() == 3 \&\& threadIdx.x < 64) block_sync();|" "$dst"/sampling_binned.h ;;
    counts_ignored)  # the row's slot count words never read
      sed -i 's|const uint32_t\* words = penalties \&\& |const uint32_t* words = false \&\& |' "$dst"/sampling.cu ;;
    extras_ignored)  # a verify row's extra ids never read
      sed -i 's|const int32_t\* extras = penalties \&\& |const int32_t* extras = false \&\& |' "$dst"/sampling.cu ;;
  esac
  case $2 in
    none) ;;
    counts_ignored | extras_ignored) grep -q '= false && ' "$dst"/sampling.cu ||
      { echo "run.sh: could not plant $2" >&2; exit 1; } ;;
    *) grep -q 'block_rank() == 3' "$dst"/sampling_binned.h || { echo "run.sh: could not plant $2" >&2; exit 1; } ;;
  esac
}

flags=(-std=c++20 -O1 -w -I"$here"/stub -I"$here" -I"$repo"/src -I"$repo"/tests/cuda)
build() {  # $1: directory prepared by prepare; the binary goes there
  g++ "${flags[@]}" -c "$here"/emu_runtime.cc -o "$1"/emu_runtime.o
  g++ -I"$1"/src "${flags[@]}" -c "$here"/kernel.cc -o "$1"/kernel.o
  g++ "${flags[@]}" -c "$here"/replay_kernels_test.cc -o "$1"/replay.o
  g++ "${flags[@]}" -c "$repo"/src/backend/cpu/sampler.cc -o "$1"/cpu_sampler.o
  g++ -o "$1"/replay "$1"/replay.o "$1"/kernel.o "$1"/emu_runtime.o "$1"/cpu_sampler.o
}

if [ "${1:-}" = selftest ]; then
  shift
  for fault in extra_exchange partial_barrier; do
    rm -rf "$work/$fault"; prepare "$work/$fault" $fault; build "$work/$fault"
    # Row 10 of the first test's cases is a top-p 0.9 row that the binned path decides.
    if "$work/$fault"/replay 512 1 1 10 10 > "$work/$fault.log" 2>&1; then
      echo "selftest: the planted $fault was NOT caught" >&2; cat "$work/$fault.log" >&2; exit 1
    fi
    grep -q "CLUSTER SEQUENCE DIFFERS\|DEADLOCK" "$work/$fault.log" ||
      { echo "selftest: $fault failed for another reason" >&2; cat "$work/$fault.log" >&2; exit 1; }
    echo "selftest: planted $fault caught: $(grep -m1 'CLUSTER SEQUENCE DIFFERS\|DEADLOCK' "$work/$fault.log")"
  done
  # The penalties' inputs: rows 0..40 of the first test's cases hold seven penalized recipes a kind; as verify rows
  # (EMU_EXTRAS=20: every generated id of a row is an extra, only its prompt ids counted) both faults change ids.
  for fault in counts_ignored extras_ignored; do
    rm -rf "$work/$fault"; prepare "$work/$fault" $fault; build "$work/$fault"
    EMU_EXTRAS=20 "$work/$fault"/replay 512 1 1 0 40 > "$work/$fault.log" 2>&1 || true
    grep -q "^MISMATCH" "$work/$fault.log" ||
      { echo "selftest: the planted $fault was NOT caught" >&2; cat "$work/$fault.log" >&2; exit 1; }
    echo "selftest: planted $fault caught: $(grep -c '^MISMATCH' "$work/$fault.log") rows differ"
  done
fi
rm -rf "$work/kernel"; prepare "$work/kernel" none; build "$work/kernel"
exec "$work/kernel"/replay "$@"
