#!/usr/bin/env python3
"""Cross-check of duet's CPU vision tower against docs/vision.md written again in NumPy, on the build machine (no
torch, no transformers): writes a fake fixture tree (a random tiny tower in the stock layout, BF16, config.json with
the layout keys left out as save_pretrained leaves them, and goldens of the NumPy tower under the names
make_vision_fixtures.py uses), then runs model_test's VisionGolden cases on it through
DUET_TESTS_DIR_OVERRIDE. It checks duet against the document, not against transformers: the fixtures of
make_vision_fixtures.py do that.

    python3 tools/vision_tower_numpy_check.py build/tests/model/model_test
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

PATCH, TEMPORAL, MERGE = 16, 2, 2
VISION = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=48, out_hidden_size=64,
              num_position_embeddings=36, model_type="qwen3_5")


def bf16(a):
    """Round float32 to the nearest BF16 (ties to even); returns (float32 values, uint16 bits)."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return (rounded.astype(np.uint32) << 16).view(np.float32), rounded


def save_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make_weights(rng):
    h, f, m = VISION["hidden_size"], VISION["intermediate_size"], VISION["hidden_size"] * MERGE * MERGE
    shapes = {"patch_embed.proj.weight": (h, 3, TEMPORAL, PATCH, PATCH), "patch_embed.proj.bias": (h,),
              "pos_embed.weight": (VISION["num_position_embeddings"], h)}
    for b in range(VISION["depth"]):
        p = f"blocks.{b}."
        shapes.update({p + "norm1.weight": (h,), p + "norm1.bias": (h,), p + "norm2.weight": (h,),
                       p + "norm2.bias": (h,), p + "attn.qkv.weight": (3 * h, h), p + "attn.qkv.bias": (3 * h,),
                       p + "attn.proj.weight": (h, h), p + "attn.proj.bias": (h,),
                       p + "mlp.linear_fc1.weight": (f, h), p + "mlp.linear_fc1.bias": (f,),
                       p + "mlp.linear_fc2.weight": (h, f), p + "mlp.linear_fc2.bias": (h,)})
    shapes.update({"merger.norm.weight": (h,), "merger.norm.bias": (h,), "merger.linear_fc1.weight": (m, m),
                   "merger.linear_fc1.bias": (m,), "merger.linear_fc2.weight": (VISION["out_hidden_size"], m),
                   "merger.linear_fc2.bias": (VISION["out_hidden_size"],)})
    weights, stored = {}, {}
    for name, shape in shapes.items():  # as make_vision_fixtures.py randomises the tower
        if "norm" in name and name.endswith("weight"):
            value = 1.0 + rng.standard_normal(shape) * 0.2
        elif name.endswith("bias"):
            value = rng.standard_normal(shape) * 0.1
        elif "pos_embed" in name:
            value = rng.standard_normal(shape) * 0.5
        else:
            value = rng.standard_normal(shape) / math.sqrt(int(np.prod(shape[1:])))
        weights[name], bits = bf16(value.astype(np.float32))
        stored["model.visual." + name] = ("BF16", shape, bits.tobytes())
    return weights, stored


def pixel_values(image):
    """docs/vision.md 2.4-2.5: (x - 127.5) / 127.5 in float32, the frame repeated, rows in merge-block order."""
    hh, ww = image.shape[0] // PATCH, image.shape[1] // PATCH
    x = (image.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)  # [H, W, C]
    x = x.transpose(2, 0, 1)[None].repeat(TEMPORAL, 0)  # [tp, C, H, W]
    x = x.reshape(TEMPORAL, 3, hh // MERGE, MERGE, PATCH, ww // MERGE, MERGE, PATCH)
    x = x.transpose(2, 5, 3, 6, 1, 0, 4, 7)  # bh, bw, mh, mw, C, tp, py, px
    return np.ascontiguousarray(x.reshape(hh * ww, -1)), (1, hh, ww)


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True, dtype=np.float64)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (((x - mean) / np.sqrt(var + 1e-6)) * w + b).astype(np.float32)


def tower(w, pv, grid):
    """docs/vision.md 3 in float32 (float64 where NumPy's functions want it), one still image."""
    h, heads = VISION["hidden_size"], VISION["num_heads"]
    d, side = h // heads, int(math.isqrt(VISION["num_position_embeddings"]))
    _, gh, gw = grid
    x = pv @ w["patch_embed.proj.weight"].reshape(h, -1).T + w["patch_embed.proj.bias"]
    patch = x.copy()
    places = [(bh * MERGE + mh, bw * MERGE + mw) for bh in range(gh // MERGE) for bw in range(gw // MERGE)
              for mh in range(MERGE) for mw in range(MERGE)]
    table = w["pos_embed.weight"]
    for n, (r, c) in enumerate(places):  # bilinear, align_corners (closed form, 3.2)
        sy = r * (side - 1) / (gh - 1) if gh > 1 else 0.0
        sx = c * (side - 1) / (gw - 1) if gw > 1 else 0.0
        y0, x0 = int(sy), int(sx)
        y1, x1 = min(y0 + 1, side - 1), min(x0 + 1, side - 1)
        dy, dx = sy - y0, sx - x0
        x[n] += ((1 - dy) * (1 - dx) * table[y0 * side + x0] + (1 - dy) * dx * table[y0 * side + x1]
                 + dy * (1 - dx) * table[y1 * side + x0] + dy * dx * table[y1 * side + x1]).astype(np.float32)
    pos_added = x.copy()
    inv = 1.0 / (10000.0 ** (np.arange(0, d // 2, 2, dtype=np.float64) / (d // 2)))
    rows = np.array([r for r, _ in places], np.float64)
    cols = np.array([c for _, c in places], np.float64)
    f = np.concatenate([rows[:, None] * inv, cols[:, None] * inv], -1)
    emb = np.concatenate([f, f], -1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]

    def rotate(v):
        return np.concatenate([-v[..., d // 2:], v[..., :d // 2]], -1)

    for b in range(VISION["depth"]):
        p = f"blocks.{b}."
        y = layer_norm(x, w[p + "norm1.weight"], w[p + "norm1.bias"])
        qkv = (y @ w[p + "attn.qkv.weight"].T + w[p + "attn.qkv.bias"]).reshape(-1, 3, heads, d)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        a = np.einsum("hqk,khd->qhd", scores, v).reshape(-1, h)
        x = (x + a @ w[p + "attn.proj.weight"].T + w[p + "attn.proj.bias"]).astype(np.float32)
        y = layer_norm(x, w[p + "norm2.weight"], w[p + "norm2.bias"])
        y = y @ w[p + "mlp.linear_fc1.weight"].T + w[p + "mlp.linear_fc1.bias"]
        y = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
        x = (x + y @ w[p + "mlp.linear_fc2.weight"].T + w[p + "mlp.linear_fc2.bias"]).astype(np.float32)
    y = layer_norm(x, w["merger.norm.weight"], w["merger.norm.bias"]).reshape(-1, h * MERGE * MERGE)
    y = y @ w["merger.linear_fc1.weight"].T + w["merger.linear_fc1.bias"]
    y = 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))
    out = y @ w["merger.linear_fc2.weight"].T + w["merger.linear_fc2.bias"]
    return patch.astype(np.float32), pos_added.astype(np.float32), out.astype(np.float32)


def main():
    test = sys.argv[1] if len(sys.argv) > 1 else "build/tests/model/model_test"
    rng = np.random.default_rng(20261202)
    weights, stored = make_weights(rng)
    root = tempfile.mkdtemp(prefix="vision-numpy-")
    model = os.path.join(root, "fixtures", "models", "tiny-vl")
    os.makedirs(model)
    os.makedirs(os.path.join(root, "fixtures", "goldens"))
    save_safetensors(os.path.join(model, "model.safetensors"), stored)
    config = {"model_type": "qwen3_5", "image_token_id": 502, "video_token_id": 503, "vision_start_token_id": 500,
              "vision_end_token_id": 501, "text_config": {"hidden_size": 64}, "vision_config": VISION}
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(config, f)
    goldens = {}
    for name, (height, width) in {"square": (64, 64), "wide": (64, 224), "tall": (160, 64), "big": (224, 192),
                                  "single_block": (32, 32)}.items():
        image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        pv, grid = pixel_values(image)
        patch, pos, out = tower(weights, pv, grid)
        goldens[f"img.{name}.stock.resized"] = ("U8", image.shape, image.tobytes())
        goldens[f"img.{name}.stock.grid"] = ("I64", (3,), np.array(grid, np.int64).tobytes())
        goldens[f"pixel_values.{name}"] = ("F32", pv.shape, pv.tobytes())
        goldens[f"tower.{name}.patch_embed"] = ("F32", patch.shape, patch.tobytes())
        goldens[f"tower.{name}.pos_added"] = ("F32", pos.shape, pos.tobytes())
        goldens[f"tower.{name}.embeds"] = ("F32", out.shape, out.tobytes())
    save_safetensors(os.path.join(root, "fixtures", "goldens", "vision.fp32.safetensors"), goldens)
    env = dict(os.environ, DUET_TESTS_DIR_OVERRIDE=root)
    result = subprocess.run([test, "--gtest_filter=VisionGolden.*"], env=env)
    print(f"fixture tree kept in {root}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
