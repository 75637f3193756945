#!/usr/bin/env python3
"""Builds the runtime adapter's CI fixture: a tiny "merged" checkpoint made from a base plus a known low-rank difference.

Pure Python (struct, random; no numpy, no torch), deterministic, runs anywhere from the repository root:

    python3 tools/make_adapter_fixtures.py

Reads tests/fixtures/models/tiny-mm-clef (the base: sharded, F32 A_log and GDN norms like the stock Qwen3.5 releases,
with a joint head). Writes:
  tests/fixtures/models/tiny-mm-clef-merged/   config, generation config and joint head copied; model.safetensors with
      every projection W replaced by bf16(W + c U V) (U [out, r], V [r, in] Gaussian, c so that |c U V|_F is DELTA_SCALE
      of |W|_F), the F32 A_log and linear_attn.norm.weight stored as their BF16 rounding (as Clef-Flash stores them),
      every other tensor's bytes unchanged. Like Clef-Flash, it differs from its base in every projection.
  tests/fixtures/adapter/tiny-mm-clef-delta.safetensors   the true difference's factors, F32: {module}.U = c U [out, r]
      and {module}.V = V [r, in], so tests check what `duet adapter` recovers against what was planted.
"""
import json
import math
import os
import random
import shutil
import struct

import safetensors_raw

BASE = "tests/fixtures/models/tiny-mm-clef"
MERGED = "tests/fixtures/models/tiny-mm-clef-merged"
DELTA = "tests/fixtures/adapter/tiny-mm-clef-delta.safetensors"
RANK = 4  # the planted difference's rank (in_proj_a / in_proj_b are [4, 64]: their full rank)
DELTA_SCALE = 0.1
SEED = 20261130
PROJECTIONS = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
               "linear_attn.out_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def read_safetensors(path):
    """[(name, dtype, shape, bytes)] in data order, and the metadata."""
    tensors, meta = safetensors_raw.read(path, data_order=True)
    return [(name, *entry) for name, entry in tensors.items()], meta


write_safetensors = safetensors_raw.write


def bf16_values(raw):
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in struct.unpack(f"<{len(raw) // 2}H", raw)]


def f32_values(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def to_bf16_bits(x):
    """float -> f32 -> bf16, round to nearest even (what torch's cast does for a non-NaN value)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return (u >> 16) | 0x40
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def bf16_bytes(values):
    return struct.pack(f"<{len(values)}H", *[to_bf16_bits(v) for v in values])


def module_of(name):
    """'layers.{i}.{module}' for a projection weight, else None."""
    parts = name.split(".")
    if "layers" not in parts or not name.endswith(".weight"):
        return None
    i = parts.index("layers")
    module = ".".join(parts[i + 2:-1])
    return f"layers.{parts[i + 1]}.{module}" if module in PROJECTIONS else None


def main():
    rng = random.Random(SEED)
    index = json.load(open(os.path.join(BASE, "model.safetensors.index.json")))
    shards = sorted(set(index["weight_map"].values()))
    merged, delta = [], []
    for shard in shards:
        tensors, _ = read_safetensors(os.path.join(BASE, shard))
        for name, dtype, shape, raw in tensors:
            key = module_of(name)
            if key is not None:
                out, cols = shape
                w = bf16_values(raw)
                u = [rng.gauss(0, 1) for _ in range(out * RANK)]
                v = [rng.gauss(0, 1) for _ in range(RANK * cols)]
                d = [sum(u[i * RANK + k] * v[k * cols + j] for k in range(RANK)) for i in range(out) for j in range(cols)]
                c = DELTA_SCALE * math.sqrt(sum(x * x for x in w)) / math.sqrt(sum(x * x for x in d))
                merged.append((name, "BF16", shape, bf16_bytes([w[i] + c * d[i] for i in range(len(w))])))
                delta.append((key + ".U", "F32", [out, RANK], struct.pack(f"<{len(u)}f", *[c * x for x in u])))
                delta.append((key + ".V", "F32", [RANK, cols], struct.pack(f"<{len(v)}f", *v)))
            elif dtype == "F32" and (name.endswith("linear_attn.A_log") or name.endswith("linear_attn.norm.weight")):
                merged.append((name, "BF16", shape, bf16_bytes(f32_values(raw))))
            else:
                merged.append((name, dtype, shape, raw))
    os.makedirs(MERGED, exist_ok=True)
    os.makedirs(os.path.dirname(DELTA), exist_ok=True)
    write_safetensors(os.path.join(MERGED, "model.safetensors"), merged, {"format": "pt"})
    write_safetensors(DELTA, delta, {"format": "pt", "rank": str(RANK), "seed": str(SEED)})
    for name in ("config.json", "generation_config.json", "joint_head.safetensors", "joint_head_config.json"):
        shutil.copyfile(os.path.join(BASE, name), os.path.join(MERGED, name))
    print(f"{MERGED}: {len(merged)} tensors; {DELTA}: {len(delta) // 2} planted rank-{RANK} differences")


if __name__ == "__main__":
    main()
