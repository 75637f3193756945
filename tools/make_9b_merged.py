#!/usr/bin/env python3
"""A 9B-shaped "merged" fine-tune for the runtime adapter gate (issue 9), made on the GPU machine with torch.

The 9B twin of tools/make_adapter_fixtures.py: reads the random Qwen3.5-9B-shaped checkpoint of
make_9b_references.py (BASE) and writes OUT with the same shards, names and metadata, where
  - every one of the 248 language-model projections W (linear_attn.in_proj_qkv / in_proj_z / in_proj_b / in_proj_a /
    out_proj, self_attn.q_proj / k_proj / v_proj / o_proj, mlp.gate_proj / up_proj / down_proj) is replaced by
    bf16(W + c U V), U [out, r] and V [r, in] Gaussian (seeded per tensor name), r = min(--rank, out, in), c so that
    |c U V|_F = --scale * |W|_F: like Clef-Flash, the fine-tune touches every projection, with a difference a rank-256
    adapter can hold;
  - the F32 tensors of the language model (A_log and linear_attn.norm.weight) are stored as their BF16 rounding, as
    Clef-Flash stores them (spec/systemone.md: equal after rounding, so no adapter covers them);
  - every other tensor is unchanged, and config.json, the tokenizer files and the index (its total_size recomputed)
    are copied.
Progress and timings are printed per shard.

    python3 tools/make_9b_merged.py --base /tmp/9b/model --out /tmp/9b-merged/model [--rank 128] [--scale 0.1]
"""
import argparse
import json
import os
import re
import shutil
import time
import zlib

PROJECTIONS = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
               "linear_attn.out_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
PROJECTION = re.compile(r"^model\.language_model\.layers\.\d+\.(" + "|".join(re.escape(p) for p in PROJECTIONS) +
                        r")\.weight$")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=128, help="rank of the planted difference (default 128)")
    parser.add_argument("--scale", type=float, default=0.1, help="|difference|_F / |W|_F per projection (0.1)")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    began = time.time()
    index_path = os.path.join(args.base, "model.safetensors.index.json")
    index = json.load(open(index_path))
    os.makedirs(args.out, exist_ok=True)
    projections = rounded = total = 0
    for shard in sorted(set(index["weight_map"].values())):
        tick = time.time()
        tensors = {}
        with safe_open(os.path.join(args.base, shard), "pt", device="cuda") as f:
            metadata = f.metadata()
            for key in f.keys():
                t = f.get_tensor(key)
                if PROJECTION.match(key):
                    w = t.float()
                    out_features, in_features = w.shape
                    r = min(args.rank, out_features, in_features)
                    g = torch.Generator(device="cuda").manual_seed(args.seed + zlib.crc32(key.encode()))
                    u = torch.randn(out_features, r, generator=g, device="cuda")
                    v = torch.randn(r, in_features, generator=g, device="cuda")
                    d = u @ v
                    d *= args.scale * w.norm() / d.norm()
                    t = (w + d).to(torch.bfloat16)
                    projections += 1
                    del w, u, v, d
                elif key.startswith("model.language_model.") and t.dtype == torch.float32:
                    t = t.to(torch.bfloat16)  # A_log and the GDN norms: their BF16 rounding, as Clef-Flash
                    rounded += 1
                tensors[key] = t.cpu()
                total += t.numel() * t.element_size()
        save_file(tensors, os.path.join(args.out, shard), metadata=metadata)
        print(f"{shard}: {len(tensors)} tensors in {time.time() - tick:.1f} s", flush=True)
        del tensors
    assert projections == 248, f"{projections} projections changed; the 9B shape has 248"
    assert rounded == 48, f"{rounded} F32 tensors rounded; the 9B shape has 48 (A_log and norm of 24 GDN layers)"
    index["metadata"] = dict(index.get("metadata", {}), total_size=total)
    json.dump(index, open(os.path.join(args.out, "model.safetensors.index.json"), "w"), indent=2)
    for name in sorted(os.listdir(args.base)):
        if not name.endswith(".safetensors") and name != "model.safetensors.index.json":
            shutil.copy(os.path.join(args.base, name), os.path.join(args.out, name))
    print(f"merged checkpoint {args.out}: {projections} projections + rank {args.rank} difference (scale "
          f"{args.scale}), {rounded} F32 tensors rounded to BF16, {total / 1e9:.2f} GB in {time.time() - began:.1f} s",
          flush=True)


if __name__ == "__main__":
    main()
