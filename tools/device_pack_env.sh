# Sourced by the GPU machine's check scripts (tools/gpu_checks.sh, tools/gpu_lookahead_check.sh), from the repository
# root: unpacks .devpack/device.tar.xz when device/ is missing, points the loader and the tests at it, and names the
# GPU. Exits the calling script when there is nothing to unpack. Its two functions make the 9B-shaped checkpoint of
# tools/make_9b_references.py beside a script's first stages: start_checkpoint WORK OUT (in the background, when
# WORK/model has none), then await_checkpoint WORK OUT (waits; exits the script when there is still none). And
# run_gpu_test FILTER LOG [SECONDS=90]: the GPU tests FILTER picks, their log into LOG, their verdicts printed. And
# elapsed: the seconds since it was sourced (the scripts' stage times and budgets).
if [[ ! -x device/bin/duet ]]; then
  [[ -f .devpack/device.tar.xz ]] || { echo "no device/ and no .devpack/device.tar.xz: pack first" >&2; exit 1; }
  tar -xJf .devpack/device.tar.xz
fi
export LD_LIBRARY_PATH="$PWD/device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DUET_TESTS_DIR_OVERRIDE="$PWD/tests"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
[[ -f device/PACKED_FROM ]] && echo "pack: $(cat device/PACKED_FROM)"

start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
# Waits for the checkpoint's own process, not `wait` for all: bash 5.2 (the GPU machine's) also waits there for the
# last process substitution, and a script whose output goes through `exec > >(tee ...)` then waits for its own tee
# (session 59: a call's 440 s lost so).
checkpoint_pid=""
start_checkpoint() {
  [[ -f $1/model/config.json ]] && return
  python3 tools/make_9b_references.py --out "$1" --checkpoint-only > "$2/make9b.log" 2>&1 &
  checkpoint_pid=$!
}
await_checkpoint() {
  [[ -z $checkpoint_pid ]] || wait "$checkpoint_pid"
  [[ -f $1/model/config.json ]] || { echo "no checkpoint in $1"; tail -5 "$2/make9b.log"; exit 1; }
}
run_gpu_test() {
  timeout "${3:-90}" device/tests/cuda/cuda_tests --gtest_filter="$1" > "$2" 2>&1
  grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure" "$2" | head -12
}
