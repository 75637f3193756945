#!/usr/bin/env bash
# Whether a change to a CUDA source moved production's code: compiles the source at a revision (in a temporary git
# worktree) and in the working tree with the build's own command line, keeps the PTX of each, and compares them kernel
# by kernel after taking out what moves without meaning (line records, comments, label numbers, the anonymous
# namespace's hash, debug strings). A change meant to keep every bit (a new form behind a switch, a helper moved to a
# header) should report the old kernels the same and only its own as new. No GPU needed.
#   usage: tools/ptx_compare.sh REV SOURCE [BUILD=build]
#   e.g.   tools/ptx_compare.sh HEAD~1 src/backend/cuda/gdn_delta_rule.cu
set -euo pipefail
rev=$1; source=$2; build=${3:-build}
root=$(git rev-parse --show-toplevel)
cd "$root"
object=$(ninja -C "$build" -t targets all | grep -o "^[^:]*/$(basename "$source").o" | head -1)
[[ -n $object ]] || { echo "ptx_compare: no object for $source in $build"; exit 1; }
command=$(ninja -C "$build" -t commands "$object" | tail -1)
command=${command/ccache /}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/tree" "$rev" > /dev/null 2>&1
mkdir -p "$work/old" "$work/new"
compile() {  # compile TREE OUT: the build's command on TREE's source, its PTX kept in OUT
  local line=${command//"$root/"/"$1/"}
  line=${line//"-o $object"/"-o $2/object.o"}
  (cd "$root/$build" && eval "$line --keep --keep-dir $2" > "$2/log" 2>&1) ||
    { echo "ptx_compare: $1 did not compile:"; tail -20 "$2/log"; exit 1; }
}
compile "$work/tree" "$work/old"
compile "$root" "$work/new"
name=$(basename "$source" .cu)
python3 - "$work/old/$name.ptx" "$work/new/$name.ptx" <<'EOF'
import re, sys

def kernels(path):
    out, current = {}, None
    for line in open(path):
        s = line.strip()
        if s.startswith(('.loc', '//', '.file', '.b8', '$L__info_string')):
            continue
        line = re.sub(r'_GLOBAL__N__[0-9a-f_]+', '', line)
        line = re.sub(r'_cu_[0-9a-f]{8}', '_cu_', line)
        line = re.sub(r'_INTERNAL_[0-9a-f]{8}_', '_INTERNAL_', line)  # a file's internal symbols' hash
        line = re.sub(r'\$L__BB\d+_', '$L__BB_', line)
        m = re.search(r'\.entry (\S+)\(', line)
        if m:
            current = m.group(1)
            out[current] = []
            continue
        if current:
            out[current].append(line.replace(current, 'KERNEL'))
    return out

old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
short = lambda k: re.sub(r'^_ZN\w*?_cu_\d*', '', k)[:90]
same = [k for k in old if k in new and old[k] == new[k]]
gone, added = [k for k in old if k not in new], [k for k in new if k not in old]
# A kernel renamed (e.g. a template parameter added) with the same body counts as the same PTX.
renamed = {g: a for g in gone for a in added if old[g] == new[a]}
for label, names in (('differ', [k for k in old if k in new and old[k] != new[k]]),
                     ('gone', [k for k in gone if k not in renamed]),
                     ('new', [k for k in added if k not in renamed.values()])):
    for k in names:
        print(f'{label}: {short(k)}')
for g, a in renamed.items():
    print(f'renamed, the same PTX: {short(g)} -> {short(a)}')
print(f'{len(same) + len(renamed)} of {len(old)} kernels the same PTX; {len(new)} now')
EOF
