#!/usr/bin/env bash
# The GPU machine's scripts (tools/*.sh), checked where there is no GPU, since a call lost to a script costs device
# time that cannot be had back: every one parses (bash -n), and tools/device_pack_env.sh's checkpoint in the
# background is awaited by a script that writes through `exec > >(tee ...)` as tools/gpu_prepared_ab.sh does (bash
# 5.2's `wait` without arguments also waits for the last process substitution: such a script waited for its own tee
# until the call's limit, 43rd round). Planted control: the same script with a bare `wait` must not end.
#   usage: gpu_scripts_test.sh (from anywhere)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for script in "$repo"/tools/*.sh; do
  bash -n "$script" 2>"$work/parse.txt" || fail "$(basename "$script") does not parse: $(cat "$work/parse.txt")"
done

# A fake pack (device/bin/duet, so nothing is unpacked), a fake nvidia-smi, and a checkpoint maker that takes a second.
mkdir -p "$work/pack/device/bin" "$work/pack/tools" "$work/bin"
printf '#!/bin/sh\nexit 0\n' > "$work/pack/device/bin/duet"
printf '#!/bin/sh\necho "Fake GPU, 1 MiB, 1 MHz"\n' > "$work/bin/nvidia-smi"
chmod +x "$work/pack/device/bin/duet" "$work/bin/nvidia-smi"
cat > "$work/pack/tools/make_9b_references.py" <<'PY'
import os, sys, time
out = sys.argv[sys.argv.index("--out") + 1]
time.sleep(1)
os.makedirs(os.path.join(out, "model"), exist_ok=True)
open(os.path.join(out, "model", "config.json"), "w").write("{}")
PY
cat > "$work/pack/stage.sh" <<'SH'
set -uo pipefail
exec > >(tee -a "$1/log") 2>&1
source tools/device_pack_env.sh
start_checkpoint "$1/9b" "$1"
echo "a stage beside the checkpoint"
await_checkpoint "$1/9b" "$1"
echo "checkpoint awaited"
SH
run_stage() {  # run_stage ENV_SCRIPT OUT: the stage script over ENV_SCRIPT as tools/device_pack_env.sh, 5 s at most
  cp "$1" "$work/pack/tools/device_pack_env.sh"
  rm -rf "$2" && mkdir -p "$2"
  (cd "$work/pack" && PATH="$work/bin:$PATH" timeout 5 bash stage.sh "$2" > "$2/stdout" 2>&1)
}
run_stage "$repo/tools/device_pack_env.sh" "$work/out"
status=$?
(( status == 0 )) || fail "the stage ended with status $status (124: it waited until the limit): $(cat "$work/out/stdout")"
grep -qx "checkpoint awaited" "$work/out/log" 2>/dev/null || fail "the stage never got past await_checkpoint"
[[ -f $work/out/9b/model/config.json ]] || fail "no checkpoint made"

# The control: await_checkpoint with a bare `wait` hangs on the tee (from bash 5.1, as Debian 12's and the GPU
# machine's; an older bash's wait does not wait for process substitutions, so there is no hang to see).
sed 's/^  \[\[ -z \$checkpoint_pid \]\] || wait "\$checkpoint_pid"$/  wait/' "$repo/tools/device_pack_env.sh" \
  > "$work/bare_wait.sh"
if (( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501 )); then
  echo "control skipped: bash $BASH_VERSION does not wait for process substitutions"
elif cmp -s "$work/bare_wait.sh" "$repo/tools/device_pack_env.sh"; then
  fail "control: await_checkpoint's wait line was not found to plant the fault"
else
  run_stage "$work/bare_wait.sh" "$work/control"
  status=$?
  (( status == 124 )) || fail "control: a bare wait ended (status $status): the check cannot see the hang"
fi

if (( failures > 0 )); then echo "$failures failure(s)"; exit 1; fi
echo "gpu scripts: every one parses; a tee'd stage awaits its checkpoint (a bare wait hangs, as it should here)"
