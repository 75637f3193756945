#!/usr/bin/env python3
"""A 9B-shaped "merged" fine-tune for the runtime adapter gate (issue 9), made on the GPU machine with torch; and,
with --adapter-out, the runtime adapter of exactly that fine-tune, written from the planted factors.

The 9B twin of tools/make_adapter_fixtures.py: reads the random Qwen3.5-9B-shaped checkpoint of
make_9b_references.py (BASE) and writes OUT with the same shards, names and metadata, where
  - every one of the 248 language-model projections W (linear_attn.in_proj_qkv / in_proj_z / in_proj_b / in_proj_a /
    out_proj, self_attn.q_proj / k_proj / v_proj / o_proj, mlp.gate_proj / up_proj / down_proj) is replaced by
    bf16(W + c U V), U [out, r] and V [r, in] Gaussian (seeded per tensor name), r = min(--rank, out, in), c so that
    |c U V|_F = --scale * |W|_F: like Clef-Flash, the fine-tune touches every projection, with a difference a rank-256
    adapter can hold;
  - the F32 tensors of the language model (A_log and linear_attn.norm.weight) are stored as their BF16 rounding, as
    Clef-Flash stores them (spec/systemone.md: equal after rounding, so no adapter covers them);
  - every other tensor is unchanged, and every other file of BASE (config.json, the tokenizer files, a joint head when
    BASE has one) is copied; the index, when BASE has one, with its total_size recomputed.
Progress and timings are printed per shard.

--adapter-out DIR also writes DIR as `duet adapter --merged OUT --base BASE --rank R` would (tools/adapter_folder.py
says the format), without the SVD (390 s on the 9B shape): the planted difference is already low rank, so its factors
ARE the adapter. Per projection, V = L Q (Gram-Schmidt of V's rows: Q [r, in] orthonormal rows, L [r, r] lower
triangular), so c U V = (c U L) Q and
    lora_A = bf16(Q) [r, in],  lora_B = bf16(c U L) [out, r]   (the scale folded in, y = x W^T + (x A^T) B^T)
at the rank of the difference: r = --rank (pass --rank 256, the spec's rank), and in_proj_a / in_proj_b at their full
rank (32 on the 9B shape), their exact difference. The adapter holds the planted difference exactly up to the BF16
rounding of its factors, and the merged checkpoint holds it up to the rounding of bf16(W + c U V): manifest.json
reports per module |merged - base|, the residual |merged - base - B A| with the factors as stored, and the BF16 floor
of the merge (as `duet adapter` reports them); a residual near 1x the floor is the merge's own rounding. The joint head
(joint_head.safetensors + config) comes from --adapter-head DIR, else from OUT when BASE had one; with neither (the 9B
base has no head: the decisions gate makes it later) DIR has the factors and the manifest only, and
`tools/adapter_folder.py finish DIR --head-from HEAD --out ADAPTER` completes and signs it (gpu_adapter_gate.sh, stage
planted).

Backends: torch (the default; --device cuda, the GPU machine, where it takes about 30 s; --device cpu for a small
checkpoint) and python (the standard library alone, for the tiny checkpoints of the tests: a test runs it on
models/demo). Each is deterministic; they draw different Gaussians from the same seed.

    python3 tools/make_9b_merged.py --base /tmp/9b/model --out /tmp/9b-merged/model [--rank 128] [--scale 0.1]
        [--adapter-out /tmp/9b-merged/planted-adapter --rank 256] [--backend torch|python] [--device cuda|cpu]
"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import adapter_folder  # noqa: E402  (standard library)

PROJECTIONS = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
               "linear_attn.out_proj", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
PROJECTION = re.compile(r"^model\.language_model\.layers\.(\d+)\.(" + "|".join(re.escape(p) for p in PROJECTIONS) +
                        r")\.weight$")
INDEX = "model.safetensors.index.json"
SPEC_RANK = 256


def shards_of(base):
    """The shard files and the index (None for a single model.safetensors)."""
    path = os.path.join(base, INDEX)
    if os.path.exists(path):
        index = json.load(open(path))
        return sorted(set(index["weight_map"].values())), index
    if os.path.exists(os.path.join(base, "model.safetensors")):
        return ["model.safetensors"], None
    raise SystemExit(f"--base {base}: neither {INDEX} nor model.safetensors")


def expected_counts(base):
    """(projections, F32 tensors to round) of the config's layers: 248 and 48 on the 9B shape."""
    config = json.load(open(os.path.join(base, "config.json")))
    types = config.get("text_config", config)["layer_types"]
    linear = sum(t == "linear_attention" for t in types)
    return 5 * linear + 4 * (len(types) - linear) + 3 * len(types), 2 * linear


def bf16_spacing_exponent(bits):
    """log2 of the gap between neighbouring BF16 values around the BF16 value `bits` (as the C++ bf16_spacing)."""
    return max((bits >> 7) & 0xFF, 1) - 127 - 7


class PythonBackend:
    """Tensors as (dtype, shape, raw bytes); arithmetic in Python floats (double). For tiny checkpoints."""

    def __init__(self, args):
        self.args = args

    @staticmethod
    def values(dtype, raw):
        if dtype == "BF16":
            n = len(raw) // 2
            words = [h << 16 for h in struct.unpack(f"<{n}H", raw)]
            return list(struct.unpack(f"<{n}f", struct.pack(f"<{n}I", *words)))
        assert dtype == "F32", dtype
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))

    @staticmethod
    def bf16_bits(values):
        """float -> f32 -> bf16, round to nearest even (torch's cast; the values are finite)."""
        n = len(values)
        words = struct.unpack(f"<{n}I", struct.pack(f"<{n}f", *values))
        return [((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in words]

    def read_shard(self, path):
        tensors, metadata = adapter_folder.read_safetensors(path)  # in the header's order
        return list(tensors.items()), metadata

    def is_f32(self, t):
        return t[0] == "F32"

    def round_f32(self, t):
        return ("BF16", t[1], struct.pack(f"<{len(t[2]) // 4}H", *self.bf16_bits(self.values("F32", t[2]))))

    def nbytes(self, t):
        return len(t[2])

    def write_shard(self, path, tensors, metadata):
        adapter_folder.write_safetensors(path, [(k, t[0], t[1], t[2]) for k, t in tensors.items()], metadata)

    def plant(self, key, t, want_factors):
        """(merged tensor, (lora_A bytes, lora_B bytes) or None, fit)."""
        dtype, (out, cols), raw = t
        w = self.values(dtype, raw)
        r = min(self.args.rank, out, cols)
        rng = random.Random(self.args.seed + zlib.crc32(key.encode()))
        u = [[rng.gauss(0.0, 1.0) for _ in range(r)] for _ in range(out)]
        v = [[rng.gauss(0.0, 1.0) for _ in range(cols)] for _ in range(r)]
        d = []
        for i in range(out):
            row = [0.0] * cols
            for k in range(r):
                uk = u[i][k]
                row = [a + uk * b for a, b in zip(row, v[k])]
            d.extend(row)
        c = self.args.scale * math.sqrt(sum(x * x for x in w)) / math.sqrt(sum(x * x for x in d))
        merged_bits = self.bf16_bits([a + c * b for a, b in zip(w, d)])
        merged = ("BF16", [out, cols], struct.pack(f"<{len(merged_bits)}H", *merged_bits))
        if not want_factors:
            return merged, None, None
        # V = L Q by modified Gram-Schmidt over V's rows.
        q, lower = [], [[0.0] * r for _ in range(r)]
        for k in range(r):
            row = list(v[k])
            for j in range(k):
                lower[k][j] = sum(a * b for a, b in zip(row, q[j]))
                row = [a - lower[k][j] * b for a, b in zip(row, q[j])]
            lower[k][k] = math.sqrt(sum(a * a for a in row))
            q.append([a / lower[k][k] for a in row])
        a_bits = self.bf16_bits([x for row in q for x in row])
        b_bits = self.bf16_bits([c * sum(u[i][k] * lower[k][j] for k in range(j, r)) for i in range(out)
                                 for j in range(r)])
        a_stored = self.values("BF16", struct.pack(f"<{len(a_bits)}H", *a_bits))
        b_stored = self.values("BF16", struct.pack(f"<{len(b_bits)}H", *b_bits))
        m = self.values("BF16", merged[2])
        difference = residual = floor = 0.0
        for i in range(out):
            p = [0.0] * cols
            for k in range(r):
                bk = b_stored[i * r + k]
                p = [x + bk * y for x, y in zip(p, a_stored[k * cols:(k + 1) * cols])]
            for j in range(cols):
                dm = m[i * cols + j] - w[i * cols + j]
                difference += dm * dm
                residual += (dm - p[j]) ** 2
                floor += 4.0 ** bf16_spacing_exponent(merged_bits[i * cols + j]) / 12.0
        fit = {"rank": r, "difference_norm": math.sqrt(difference), "residual_norm": math.sqrt(residual),
               "bf16_floor_norm": math.sqrt(floor)}
        return merged, (struct.pack(f"<{len(a_bits)}H", *a_bits), struct.pack(f"<{len(b_bits)}H", *b_bits)), fit


class TorchBackend:
    """torch tensors on --device; shards read and written by the safetensors package (tools/safetensors_file.py where
    it is not installed)."""

    def __init__(self, args):
        import torch
        self.torch, self.args, self.device = torch, args, args.device
        try:
            from safetensors import safe_open
            from safetensors.torch import save_file
            self.safe_open, self.save_file = safe_open, save_file
        except ImportError:
            self.safe_open = self.save_file = None
        import safetensors_file
        self.safetensors_file = safetensors_file

    def read_shard(self, path):
        if self.safe_open is None:
            tensors, metadata = self.safetensors_file.read(path)
            return [(k, t.to(self.device)) for k, t in tensors.items()], metadata
        with self.safe_open(path, "pt", device=self.device) as f:
            metadata = f.metadata()

        def tensors():
            with self.safe_open(path, "pt", device=self.device) as f:
                for key in f.keys():
                    yield key, f.get_tensor(key)
        return tensors(), metadata

    def is_f32(self, t):
        return t.dtype == self.torch.float32

    def round_f32(self, t):
        return t.to(self.torch.bfloat16)

    def nbytes(self, t):
        return t.numel() * t.element_size()

    def write_shard(self, path, tensors, metadata):
        if self.save_file is None:
            self.safetensors_file.write(path, tensors, metadata)
        else:
            self.save_file(tensors, path, metadata=metadata)

    def plant(self, key, t, want_factors):
        torch = self.torch
        w = t.float()
        out_features, in_features = w.shape
        r = min(self.args.rank, out_features, in_features)
        g = torch.Generator(device=self.device).manual_seed(self.args.seed + zlib.crc32(key.encode()))
        u = torch.randn(out_features, r, generator=g, device=self.device)
        v = torch.randn(r, in_features, generator=g, device=self.device)
        d = u @ v
        c = self.args.scale * w.norm() / d.norm()
        d *= c
        merged = (w + d).to(torch.bfloat16)
        del d
        if not want_factors:
            return merged, None, None
        q, upper = torch.linalg.qr(v.T)  # v^T = q upper: v = upper^T q^T, c u v = (c u upper^T) q^T
        a = q.T.contiguous().to(torch.bfloat16)
        b = (c * (u @ upper.T)).to(torch.bfloat16)
        dm = merged.float() - w
        residual = (dm - b.float() @ a.float()).double().norm().item()
        exponent = (merged.view(torch.int16).to(torch.int32) >> 7) & 0xFF
        spacing = torch.exp2((exponent.clamp(min=1) - 127 - 7).double())
        fit = {"rank": r, "difference_norm": dm.double().norm().item(), "residual_norm": residual,
               "bf16_floor_norm": math.sqrt((spacing * spacing).sum().item() / 12.0)}
        factors = tuple(self.safetensors_file.tensor_bytes(x) for x in (a, b))
        return merged, factors, fit


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=128,
                        help=f"rank of the planted difference and of the adapter (default 128; the spec's {SPEC_RANK})")
    parser.add_argument("--scale", type=float, default=0.1, help="|difference|_F / |W|_F per projection (0.1)")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--adapter-out", help="also write the planted difference as a runtime adapter folder here")
    parser.add_argument("--adapter-head", help="the folder whose joint head the adapter carries (default: OUT's)")
    parser.add_argument("--backend", choices=("torch", "python"), default="torch")
    parser.add_argument("--device", default="cuda", help="torch backend: cuda (default) or cpu")
    args = parser.parse_args()
    if args.rank < 1:
        raise SystemExit(f"--rank {args.rank}: must be at least 1")
    if args.adapter_out and os.path.exists(args.adapter_out) and os.listdir(args.adapter_out):
        raise SystemExit(f"--adapter-out {args.adapter_out}: exists and is not empty; the adapter goes into a new one")
    if args.adapter_head:
        adapter_folder.require_head(args.adapter_head)
    if args.adapter_out and args.rank != SPEC_RANK:
        print(f"note: an adapter of rank {args.rank}; the spec's (and `duet adapter`'s on the 9B gate) is {SPEC_RANK}",
              flush=True)
    backend = TorchBackend(args) if args.backend == "torch" else PythonBackend(args)

    began = time.time()
    shards, index = shards_of(args.base)
    want_projections, want_rounded = expected_counts(args.base)
    os.makedirs(args.out, exist_ok=True)
    projections = rounded = total = 0
    factors, fits, not_adapted = {}, {}, []
    worst = (-1.0, "")
    for shard in shards:
        tick = time.time()
        tensors = {}
        items, metadata = backend.read_shard(os.path.join(args.base, shard))
        for key, t in items:
            match = PROJECTION.match(key)
            if match:
                t, pair, fit = backend.plant(key, t, args.adapter_out is not None)
                projections += 1
                if pair is not None:
                    module = adapter_folder.module_key(int(match.group(1)), match.group(2))
                    factors[module] = pair
                    fits[module] = fit
                    ratio = fit["residual_norm"] / fit["bf16_floor_norm"] if fit["bf16_floor_norm"] else 0.0
                    worst = max(worst, (ratio, module))
            elif key.startswith("model.language_model.") and backend.is_f32(t):
                t = backend.round_f32(t)  # A_log and the GDN norms: their BF16 rounding, as Clef-Flash
                rounded += 1
                not_adapted.append(key)
            tensors[key] = t if args.backend == "python" else t.cpu()
            total += backend.nbytes(t)
        backend.write_shard(os.path.join(args.out, shard), tensors, metadata)
        print(f"{shard}: {len(tensors)} tensors in {time.time() - tick:.1f} s", flush=True)
        del tensors
    assert projections == want_projections, f"{projections} projections changed; the config has {want_projections}"
    assert rounded == want_rounded, \
        f"{rounded} F32 tensors rounded; the config has {want_rounded} (A_log and norm of every GDN layer)"
    if index is not None:
        index["metadata"] = dict(index.get("metadata", {}), total_size=total)
        json.dump(index, open(os.path.join(args.out, INDEX), "w"), indent=2)
    for name in sorted(os.listdir(args.base)):
        path = os.path.join(args.base, name)
        if name not in shards and name != INDEX and os.path.isfile(path) and (
                not name.endswith(".safetensors") or name in adapter_folder.HEAD_FILES):
            shutil.copy(path, os.path.join(args.out, name))
    print(f"merged checkpoint {args.out}: {projections} projections + rank {args.rank} difference (scale "
          f"{args.scale}), {rounded} F32 tensors rounded to BF16, {total / 1e9:.2f} GB in {time.time() - began:.1f} s",
          flush=True)
    if args.adapter_out:
        write_adapter(args, factors, fits, not_adapted, worst)


def write_adapter(args, factors, fits, not_adapted, worst):
    tick = time.time()
    os.makedirs(args.adapter_out, exist_ok=True)
    tensors = []
    for module in sorted(factors):
        fit = fits[module]
        a, b = factors[module]
        r = fit["rank"]
        cols, out = len(a) // 2 // r, len(b) // 2 // r
        fit["shape"] = [out, cols]
        tensors.append((module + ".lora_A", "BF16", [r, cols], a))
        tensors.append((module + ".lora_B", "BF16", [out, r], b))
    adapter_folder.write_safetensors(os.path.join(args.adapter_out, adapter_folder.FACTORS_FILE), tensors,
                                     {"format": "pt"})
    modules = {m: {"shape": f["shape"], "rank": f["rank"], "svd": "none: the planted factors",
                   "difference_norm": f["difference_norm"], "residual_norm": f["residual_norm"],
                   "bf16_floor_norm": f["bf16_floor_norm"]} for m, f in fits.items()}
    source = {"tool": "tools/make_9b_merged.py", "backend": args.backend, "seed": args.seed, "scale": args.scale}
    adapter_folder.write_manifest(args.adapter_out, args.base, args.out, args.rank, modules, not_adapted, source)
    size = sum(len(t[3]) for t in tensors)
    print(f"adapter {args.adapter_out}: {len(factors)} modules, rank {args.rank} (full rank where smaller), "
          f"{size / 1e6:.1f} MB of BF16 factors; worst residual {worst[0]:.3f}x the BF16 floor of the merge "
          f"({worst[1]}); {time.time() - tick:.1f} s", flush=True)
    head = args.adapter_head or args.out
    if adapter_folder.has_head(head):
        adapter_folder.add_head(args.adapter_out, head)
        print(f"adapter {args.adapter_out}: joint head of {head}, signed ({adapter_folder.CHECKSUMS_FILE})", flush=True)
    else:
        print(f"adapter {args.adapter_out}: no joint head in {head} yet; finish it with\n"
              f"  python3 tools/adapter_folder.py finish {args.adapter_out} --head-from HEAD_DIR --out ADAPTER",
              flush=True)


if __name__ == "__main__":
    main()
