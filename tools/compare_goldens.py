#!/usr/bin/env python3
"""Compares two folders of golden safetensors tensor by tensor: max |a - b| / max |b| and whether bit-equal.

    python3 tools/compare_goldens.py NEW_DIR OLD_DIR
"""
import os
import sys

import torch
from safetensors.torch import load_file


def main(new_dir, old_dir):
    worst = 0.0
    for name in sorted(os.listdir(old_dir)):
        if not name.endswith(".safetensors"):
            continue
        new, old = load_file(os.path.join(new_dir, name)), load_file(os.path.join(old_dir, name))
        equal = sum(torch.equal(new[k], old[k]) for k in old)
        rel = max(float((new[k].double() - old[k].double()).abs().max() / old[k].double().abs().max().clamp_min(1e-30))
                  for k in old)
        worst = max(worst, rel)
        print(f"{name}: {equal}/{len(old)} tensors bit-equal, max relative difference {rel:.3g}")
    return 0 if worst == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
