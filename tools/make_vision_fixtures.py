#!/usr/bin/env python3
"""Image fixtures for issue 21: a tiny random multimodal Qwen3.5 and transformers' goldens of its image path.

Run on the GPU machine from the repository root (transformers 5.17.0, torch 2.11, Pillow), on the CPU in one thread
with the pins of make_fixtures_on_device.sh (set below before torch loads). No network. NOT RUN YET: it was written
on a machine without torch; the parts that need only Pillow and NumPy ran there (--images-only). It checks itself
and says what it found; read its log before trusting the goldens.

    python3 tools/make_vision_fixtures.py --out OUT                 # everything
    python3 tools/make_vision_fixtures.py --out OUT --images-only   # the images and Pillow's references only

Writes, under OUT:
  models/tiny-vl/     Qwen3_5ForConditionalGeneration (model.language_model.*, model.visual.*, lm_head.weight), all
                      BF16 (values rounded to BF16 before saving, so the FP32 goldens are of exactly these weights),
                      with preprocessor_config.json (the stock 9B processor settings: patch 16, merge 2, min 256*256,
                      max 4096*4096 pixels, mean/std 0.5). Tower: depth 2, width 32, 2 heads, patch 16, a 6 x 6
                      position grid (so interpolation is live), out 64 = the text width. Token ids of the tiny
                      vocabulary: vision_start 500, vision_end 501, image 502, video 503.
  vision/images/<name>.<png|jpg|webp|gif>   the encoded test images (several sizes, aspect ratios, modes)
  goldens/vision.fp32.safetensors, with for each image <name>:
      img.<name>.rgb            u8 [H, W, 3]   Pillow's decode, through convert("RGB") (transparency dropped), i.e.
                                               what the processor resized (rgb_rule checks it)
      img.<name>.stock.grid     i64 [3]        image_grid_thw with the stock settings
      img.<name>.stock.resized  u8 [h, w, 3]   the processor's resized image, recovered exactly from pixel_values
                                               ((v * 127.5) + 127.5 is an integer; checked)
      img.<name>.bounded.grid / .resized       the same with min 64*64, max 128*128 pixels (both resize branches)
      img.<name>.pil_resized    u8 [h, w, 3]   Pillow's resize(BICUBIC) of .rgb to the stock size (the log gives the
                                               max difference against .stock.resized: docs/vision.md question 2)
      tower.<name>.patch_embed  f32 [N, 32]    patch embedding (before positions), N = t*h*w patches
      tower.<name>.pos_added    f32 [N, 32]    after adding the interpolated positions (input of block 0)
      tower.<name>.embeds       f32 [N/4, 64]  the merger's output: the rows that replace the <|image_pad|> tokens
  pixel_values.<first image>    f32 [N, 1536]  one image's full pixel_values (the patch layout test)
  and for each prompt p in (one, two, decode):
      p.ids i32 [L], p.mm_types i32 [L], p.positions i64 [3, L], p.rope_delta i64 [1], p.grids i64 [images, 3],
      p.norm_rows f32 [L, 64]
      (decode: p.fed i32 [S] the greedy tokens fed back, p.decode_rows f32 [S, 64] the final-norm rows of the steps)
  vision/report.json        what was checked and found (versions, processor class and backend, the PIL-resize
                            differences, the independent tower and position checks)
Exits 1 (after writing) if a self-check disagrees: the independent FP32 tower written from docs/vision.md against
transformers' tower, the positions from docs/vision.md section 5 against get_rope_index, the exact inverse of the
patch layout, the placeholder count.
"""
import os

for _key, _value in (("CUDA_VISIBLE_DEVICES", ""), ("MKL_CBWR", "COMPATIBLE"), ("ATEN_CPU_CAPABILITY", "avx2"),
                     ("ONEDNN_MAX_CPU_ISA", "AVX2"), ("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                     ("PYTHONUNBUFFERED", "1")):
    os.environ[_key] = _value

import argparse  # noqa: E402
import inspect  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

SEED = 20261202
VISION_START, VISION_END, IMAGE_TOKEN, VIDEO_TOKEN = 500, 501, 502, 503
STOCK = {"shortest_edge": 256 * 256, "longest_edge": 4096 * 4096}
BOUNDED = {"shortest_edge": 64 * 64, "longest_edge": 128 * 128}
PATCH, MERGE, TEMPORAL = 16, 2, 2


# ---------------------------------------------------------------------------------------------- the test images
def pattern(height, width, seed):
    """A deterministic RGB pattern with gradients, edges and noise (so resampling and patch order both matter)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 255 * x / max(1, width - 1)
    g = 255 * y / max(1, height - 1)
    b = 127.5 + 127.5 * np.sin(x / 3.0 + y / 5.0)
    checker = (((x // 7) + (y // 5)) % 2) * 60 - 30
    img = np.stack([r + checker, g - checker, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def encode(array, fmt, mode=None, **kwargs):
    image = Image.fromarray(array)
    if mode is not None:
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


def make_images():
    """(name, extension, bytes). Sizes cover upscaling (below 256*256 pixels), no scaling, odd sides, 1:7 aspect."""
    images = []
    a = pattern(48, 64, SEED)
    images.append(("small_png", "png", encode(a, "PNG")))
    b = pattern(300, 200, SEED + 1)
    images.append(("portrait_jpg", "jpg", encode(b, "JPEG", quality=90)))
    c = pattern(37, 259, SEED + 2)
    images.append(("wide_png", "png", encode(c, "PNG")))
    d = pattern(320, 272, SEED + 3)
    images.append(("large_jpg", "jpg", encode(d, "JPEG", quality=85, subsampling=2)))  # 4:2:0
    e = np.dstack([pattern(120, 160, SEED + 4), (np.arange(160)[None, :].repeat(120, 0) * 255 // 159).astype(np.uint8)])
    images.append(("alpha_png", "png", encode(e, "PNG")))  # RGBA: the processor drops the alpha (rgb_rule below)
    f = pattern(50, 70, SEED + 5)
    images.append(("gray_png", "png", encode(f, "PNG", mode="L")))
    g = pattern(80, 60, SEED + 6)
    images.append(("palette_gif", "gif", encode(g, "GIF", mode="P")))
    h = pattern(140, 100, SEED + 7)
    try:
        images.append(("lossy_webp", "webp", encode(h, "WEBP", quality=80)))
    except Exception as error:  # Pillow without WebP: say so, go on
        print(f"note: no WebP encoder in this Pillow ({error}); lossy_webp left out", flush=True)
    return images


def convert_to_rgb(image):
    """The RGB that Qwen2VLImageProcessor (transformers 5.17, torchvision backend) resizes: Pillow's convert("RGB"),
    which drops an alpha channel and a palette's transparency (measured by rgb_rule below, for every mode with
    transparency; an earlier reading of the code expected RGBA over white, and the alpha_png check disproved it)."""
    return image if image.mode == "RGB" else image.convert("RGB")


def over_white(image):
    """RGBA over opaque white (Image.alpha_composite): the other candidate rule, which rgb_rule must tell apart."""
    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255)), rgba).convert("RGB")


def transparent_images():
    """64x64 images (the bounded processor's grid 4x4, no resize) in each mode that carries transparency."""
    rgb = pattern(64, 64, SEED + 20)
    alpha = (np.add.outer(np.arange(64), np.arange(64)) * 2).clip(0, 255).astype(np.uint8)
    alpha[:8, :8] = 0
    rgba = Image.fromarray(np.dstack([rgb, alpha]), "RGBA")
    la = Image.merge("LA", [Image.fromarray(rgb[..., 0]), Image.fromarray(alpha)])
    palette = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=32)
    palette.info["transparency"] = 3
    palette_png = Image.open(io.BytesIO(encode_image(palette, "PNG")))
    palette_gif = Image.open(io.BytesIO(encode_image(palette, "GIF", transparency=3)))
    return {"RGBA": rgba, "LA": la, "P_png_trns": palette_png, "P_gif_transparent": palette_gif}


def encode_image(image, fmt, **kwargs):
    out = io.BytesIO()
    image.save(out, format=fmt, **kwargs)
    return out.getvalue()


# ------------------------------------------------------------------------------- independent references (docs)
def smart_resize(height, width, factor, min_pixels, max_pixels):
    """docs/vision.md 2.2 (tools/smart_resize.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from smart_resize import smart_resize as from_docs

    return from_docs(height, width, factor, min_pixels, max_pixels)


def unpatchify(pixel_values, grid):
    """Inverse of docs/vision.md 2.5 for one still image: [t*h*w, C*2*P*P] -> [H, W, C] of temporal slice 0 (and
    checks that slice 1 equals it)."""
    t, gh, gw = (int(v) for v in grid)
    assert t == 1, grid
    x = pixel_values.reshape(gh // MERGE, gw // MERGE, MERGE, MERGE, 3, TEMPORAL, PATCH, PATCH)
    # axes: bh, bw, mh, mw, c, tp, py, px  ->  (bh, mh, py), (bw, mw, px), c
    assert np.array_equal(x[:, :, :, :, :, 0], x[:, :, :, :, :, 1]), "the two temporal slices differ"
    x = x[:, :, :, :, :, 0].transpose(0, 2, 5, 1, 3, 6, 4)
    return x.reshape(gh * PATCH, gw * PATCH, 3)


def reference_positions(mm_types, grids, merge):
    """docs/vision.md section 5, for one prompt: (positions [3, L], rope_delta)."""
    out = [[], [], []]
    pos, i, image = 0, 0, 0
    n = len(mm_types)
    while i < n:
        j = i
        while j < n and mm_types[j] == mm_types[i]:
            j += 1
        if mm_types[i] == 0:
            for k in range(j - i):
                for s in range(3):
                    out[s].append(pos + k)
            pos += j - i
        else:
            t, h, w = (int(v) for v in grids[image])
            image += 1
            lh, lw = h // merge, w // merge
            assert j - i == t * lh * lw, (j - i, t, lh, lw)
            for ti in range(t):
                for r in range(lh):
                    for c in range(lw):
                        out[0].append(pos + ti)
                        out[1].append(pos + r)
                        out[2].append(pos + c)
            pos += max(h, w) // merge
        i = j
    positions = np.array(out, dtype=np.int64)
    return positions, int(positions.max()) + 1 - n


def reference_tower(torch, sd, vc, pixel_values, grids):
    """The tower as docs/vision.md section 3 writes it, in FP32 from the state dict: the merger's rows per image."""
    F = torch.nn.functional
    hidden, heads = vc["hidden_size"], vc["num_heads"]
    head_dim = hidden // heads
    side = int(vc["num_position_embeddings"] ** 0.5)
    merge = vc["spatial_merge_size"]
    w = {k: v.float() for k, v in sd.items()}
    x = pixel_values.float() @ w["patch_embed.proj.weight"].reshape(hidden, -1).T + w["patch_embed.proj.bias"]
    rows, cols = [], []
    for t, h, wd in grids.tolist():
        for k in range(t * h * wd):
            within = k % (h * wd)
            in_col, in_row = within % merge, (within // merge) % merge
            block_col = (within // (merge * merge)) % (wd // merge)
            block_row = within // (merge * merge * (wd // merge))
            rows.append((block_row * merge + in_row, h))
            cols.append((block_col * merge + in_col, wd))
    table = w["pos_embed.weight"]
    pos = torch.zeros_like(x)
    for n, ((r, h), (c, wd)) in enumerate(zip(rows, cols)):
        sy = r * (side - 1) / (h - 1) if h > 1 else 0.0
        sx = c * (side - 1) / (wd - 1) if wd > 1 else 0.0
        y0, x0 = math.floor(sy), math.floor(sx)
        y1, x1 = min(y0 + 1, side - 1), min(x0 + 1, side - 1)
        dy, dx = sy - y0, sx - x0
        pos[n] = ((1 - dy) * (1 - dx) * table[y0 * side + x0] + (1 - dy) * dx * table[y0 * side + x1]
                  + dy * (1 - dx) * table[y1 * side + x0] + dy * dx * table[y1 * side + x1])
    pos_added = x + pos
    inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim // 2, 2, dtype=torch.float32) / (head_dim // 2)))
    r_ids = torch.tensor([r for r, _ in rows], dtype=torch.float32)
    c_ids = torch.tensor([c for c, _ in cols], dtype=torch.float32)
    f = torch.cat([r_ids[:, None] * inv, c_ids[:, None] * inv], dim=-1)
    emb = torch.cat([f, f], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rotate(v):
        half = v.shape[-1] // 2
        return torch.cat([-v[..., half:], v[..., :half]], dim=-1)

    sizes = [t * h * wd for t, h, wd in grids.tolist()]
    h_ = pos_added
    for b in range(vc["depth"]):
        p = f"blocks.{b}."
        y = F.layer_norm(h_, (hidden,), w[p + "norm1.weight"], w[p + "norm1.bias"], 1e-6)
        qkv = (y @ w[p + "attn.qkv.weight"].T + w[p + "attn.qkv.bias"]).reshape(-1, 3, heads, head_dim)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        q, k = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
        outs = []
        for qs, ks, vs in zip(q.split(sizes), k.split(sizes), v.split(sizes)):
            scores = torch.einsum("qhd,khd->hqk", qs, ks) * head_dim ** -0.5
            outs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs).reshape(-1, hidden))
        a = torch.cat(outs) @ w[p + "attn.proj.weight"].T + w[p + "attn.proj.bias"]
        h_ = h_ + a
        y = F.layer_norm(h_, (hidden,), w[p + "norm2.weight"], w[p + "norm2.bias"], 1e-6)
        y = F.gelu(y @ w[p + "mlp.linear_fc1.weight"].T + w[p + "mlp.linear_fc1.bias"], approximate="tanh")
        h_ = h_ + y @ w[p + "mlp.linear_fc2.weight"].T + w[p + "mlp.linear_fc2.bias"]
    y = F.layer_norm(h_, (hidden,), w["merger.norm.weight"], w["merger.norm.bias"], 1e-6)
    y = y.reshape(-1, hidden * merge * merge)
    y = F.gelu(y @ w["merger.linear_fc1.weight"].T + w["merger.linear_fc1.bias"])
    return y @ w["merger.linear_fc2.weight"].T + w["merger.linear_fc2.bias"], pos_added


# ------------------------------------------------------------------------------------------------- the model
def make_model(torch, out):
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_model_fixtures import randomize, text_config_dict

    text = text_config_dict(vocab=512, layers=4)
    vision = dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, patch_size=PATCH,
                  temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE, num_position_embeddings=36, in_channels=3)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False,
                           image_token_id=IMAGE_TOKEN, video_token_id=VIDEO_TOKEN,
                           vision_start_token_id=VISION_START, vision_end_token_id=VISION_END)
    model = Qwen3_5ForConditionalGeneration(config).eval()
    generator = torch.Generator().manual_seed(SEED)
    randomize(model, generator, ())
    with torch.no_grad():  # the tower: LayerNorms are plain w (around 1), conv fan-in is C*T*P*P
        for name, param in model.named_parameters():
            if ".visual." not in f".{name}":
                continue
            shape = param.shape
            if "norm" in name and name.endswith("weight"):
                value = 1.0 + torch.randn(shape, generator=generator) * 0.2
            elif name.endswith("bias"):
                value = torch.randn(shape, generator=generator) * 0.1
            elif "pos_embed" in name:
                value = torch.randn(shape, generator=generator) * 0.5
            else:
                value = torch.randn(shape, generator=generator) / math.sqrt(max(1, param[0].numel()))
            param.copy_(value.to(torch.bfloat16).to(torch.float32))
    folder = os.path.join(out, "models", "tiny-vl")
    model.to(torch.bfloat16).save_pretrained(folder)
    return folder


def make_processor(size):
    """The processor AutoImageProcessor gives the 9B (Qwen2VLImageProcessor, the torchvision backend), or the PIL
    backend where this machine has no torchvision (the report says which ran: docs/vision.md assumes torchvision)."""
    kwargs = dict(size=dict(size), patch_size=PATCH, temporal_patch_size=TEMPORAL, merge_size=MERGE,
                  image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
    try:
        from transformers import Qwen2VLImageProcessor

        return Qwen2VLImageProcessor(**kwargs)
    except Exception as error:  # ImportError, or the dummy class that names the missing backend
        print(f"note: Qwen2VLImageProcessor unavailable ({error}); using the PIL backend", flush=True)
        from transformers import Qwen2VLImageProcessorPil

        return Qwen2VLImageProcessorPil(**kwargs)


def torch_uint8_resize(rgb, width, height):
    """docs/vision.md 2.3 in NumPy: torch's uint8 antialiased bicubic (int16 weights), horizontal then vertical."""

    def cubic(x):
        a, x = -0.5, abs(x)
        if x < 1.0:
            return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
        if x < 2.0:
            return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
        return 0.0

    def axis(n_in, n_out):
        scale = n_in / n_out
        support = 2.0 * scale if scale >= 1.0 else 2.0
        inverse = 1.0 / scale if scale >= 1.0 else 1.0
        taps = int(math.ceil(support)) * 2 + 1
        rows, largest = [], 0.0
        for i in range(n_out):
            center = scale * (i + 0.5)
            xmin = max(int(center - support + 0.5), 0)
            xsize = min(max(min(int(center + support + 0.5), n_in) - xmin, 0), taps)
            w = [cubic((j + xmin - center + 0.5) * inverse) for j in range(xsize)]
            total = sum(w)
            if total != 0.0:
                w = [v / total for v in w]
                largest = max([largest] + w)
            rows.append((xmin, w))
        precision = 0
        while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
            precision += 1
        return [(xmin, [int(v * (1 << precision) - 0.5) if v < 0 else int(v * (1 << precision) + 0.5) for v in w])
                for xmin, w in rows], precision

    def one_pass(image, n_out, along):  # along 1: columns change (horizontal), 0: rows
        taps, precision = axis(image.shape[along], n_out)
        moved = np.moveaxis(image.astype(np.int64), along, 0)
        out = np.zeros((n_out,) + moved.shape[1:], np.int64)
        for i, (xmin, w) in enumerate(taps):
            acc = np.full(moved.shape[1:], 1 << (precision - 1), np.int64)
            for j, v in enumerate(w):
                acc += moved[xmin + j] * v
            out[i] = np.clip(acc >> precision, 0, 255)
        return np.moveaxis(out, 0, along).astype(np.uint8)

    out = rgb
    if width != rgb.shape[1]:
        out = one_pass(out, width, 1)
    if height != rgb.shape[0]:
        out = one_pass(out, height, 0)
    return out


def image_features(model, pixel_values, grid):
    """get_image_features across 5.x: an output with pooler_output (a tuple per image), or the rows themselves."""
    out = model.model.get_image_features(pixel_values, grid)
    features = getattr(out, "pooler_output", out)
    if isinstance(features, (list, tuple)):
        features = torch_cat(features)
    return features


def torch_cat(parts):
    import torch

    return torch.cat(list(parts), dim=0)


def multimodal_kwargs(model, pixel_values, grid, mm_types):
    """The forward's image arguments; mm_token_type_ids only where this transformers' forward takes it."""
    kwargs = {"pixel_values": pixel_values, "image_grid_thw": grid}
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        kwargs["mm_token_type_ids"] = mm_types
    return kwargs


def rope_index(model, ids, mm_types, grids):
    fn = model.model.get_rope_index
    params = inspect.signature(fn).parameters
    kwargs = {"image_grid_thw": grids}
    if "mm_token_type_ids" in params:
        kwargs["mm_token_type_ids"] = mm_types
    return fn(ids, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--images-only", action="store_true")
    args = parser.parse_args()
    report = {"checks": {}, "notes": []}
    failures = []

    def check(name, ok, detail):
        report["checks"][name] = {"ok": bool(ok), "detail": detail}
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if not ok:
            failures.append(name)

    images = make_images()
    image_dir = os.path.join(args.out, "vision", "images")
    os.makedirs(image_dir, exist_ok=True)
    decoded = {}
    for name, ext, data in images:
        with open(os.path.join(image_dir, f"{name}.{ext}"), "wb") as f:
            f.write(data)
        pil = Image.open(io.BytesIO(data))
        pil.load()
        decoded[name] = pil
    rgb = {name: np.asarray(convert_to_rgb(pil)) for name, pil in decoded.items()}
    pil_resized = {}
    for name, array in rgb.items():
        h, w = smart_resize(array.shape[0], array.shape[1], PATCH * MERGE, STOCK["shortest_edge"],
                            STOCK["longest_edge"])
        pil_resized[name] = np.asarray(Image.fromarray(array).resize((w, h), Image.BICUBIC))
        print(f"{name}: {array.shape[1]}x{array.shape[0]} -> {w}x{h}", flush=True)
    if args.images_only:
        return 0

    import torch
    from safetensors.torch import save_file
    import transformers

    torch.set_num_threads(1)
    report["versions"] = {"transformers": transformers.__version__, "torch": torch.__version__,
                          "PIL": Image.__version__, "numpy": np.__version__}
    print(f"versions: {report['versions']}", flush=True)
    tensors = {}
    for name in rgb:
        tensors[f"img.{name}.rgb"] = torch.from_numpy(rgb[name].copy())
        tensors[f"img.{name}.pil_resized"] = torch.from_numpy(pil_resized[name].copy())

    processors = {"stock": make_processor(STOCK), "bounded": make_processor(BOUNDED)}
    stock = processors["stock"]
    report["processor"] = {"class": type(stock).__name__, "backend": getattr(stock, "backend", "?"),
                           "resample": str(stock.resample)}
    print(f"processor: {report['processor']}", flush=True)
    pixel_values, grids = {}, {}
    sizes = {"stock": STOCK, "bounded": BOUNDED}
    for label, processor in processors.items():
        for name, pil in decoded.items():
            result = processor(images=[pil], return_tensors="pt")
            pv, grid = result["pixel_values"].float(), result["image_grid_thw"][0].clone()
            size = sizes[label]
            expected = smart_resize(pil.height, pil.width, PATCH * MERGE, size["shortest_edge"], size["longest_edge"])
            got = (int(grid[1]) * PATCH, int(grid[2]) * PATCH)
            check(f"{label}.{name}.smart_resize", got == expected and int(grid[0]) == 1,
                  f"grid {grid.tolist()}, docs say {expected}")
            image = unpatchify(pv.numpy(), grid.tolist()) * 127.5 + 127.5
            resized = np.rint(image)
            check(f"{label}.{name}.layout_inverse", np.abs(image - resized).max() < 1e-3 and resized.min() >= 0
                  and resized.max() <= 255, f"max distance to an integer {np.abs(image - resized).max():.2e}")
            resized = resized.astype(np.uint8)
            mine = torch_uint8_resize(rgb[name], int(grid[2]) * PATCH, int(grid[1]) * PATCH)
            check(f"{label}.{name}.resize_algorithm", np.array_equal(mine, resized),
                  f"docs/vision.md 2.3 resize vs the processor's: {int((mine != resized).sum())} values differ")
            tensors[f"img.{name}.{label}.grid"] = grid.to(torch.int64)
            tensors[f"img.{name}.{label}.resized"] = torch.from_numpy(resized.copy())
            if label == "stock":
                pixel_values[name], grids[name] = pv, grid
                diff = np.abs(resized.astype(np.int32) - pil_resized[name].astype(np.int32))
                report.setdefault("pil_resize_difference", {})[name] = {"max": int(diff.max()),
                                                                        "count": int((diff > 0).sum())}
                print(f"  {name}: processor resize vs Pillow BICUBIC: max {diff.max()}, "
                      f"{(diff > 0).sum()} of {diff.size} values differ", flush=True)
    first = next(iter(decoded))
    tensors[f"pixel_values.{first}"] = pixel_values[first].contiguous()

    # Which RGB the processor sees for each mode with transparency: convert("RGB") (what duet does) or over white.
    for mode, pil in transparent_images().items():
        pil.load()
        result = processors["bounded"](images=[pil], return_tensors="pt")
        grid = result["image_grid_thw"][0].tolist()
        seen = np.rint(unpatchify(result["pixel_values"].float().numpy(), grid) * 127.5 + 127.5).astype(np.uint8)
        dropped, white = np.asarray(convert_to_rgb(pil)), np.asarray(over_white(pil))
        same_size = seen.shape == dropped.shape
        rule = ("convert_rgb" if same_size and np.array_equal(seen, dropped) else
                "over_white" if same_size and np.array_equal(seen, white) else "neither")
        report.setdefault("rgb_rule", {})[mode] = rule
        check(f"rgb_rule.{mode}", rule == "convert_rgb",
              f"grid {grid}: the processor's pixels are {rule}'s (over white differs in "
              f"{int((dropped != white).sum())} values)")

    folder = make_model(torch, args.out)
    stock.save_pretrained(folder)
    from transformers import Qwen3_5ForConditionalGeneration
    model = Qwen3_5ForConditionalGeneration.from_pretrained(folder, dtype=torch.float32,
                                                            attn_implementation="eager").eval()
    visual = model.model.visual
    vc = model.config.vision_config.to_dict()
    sd = {k: v for k, v in visual.state_dict().items()}
    captured = {}
    visual.patch_embed.register_forward_hook(lambda m, i, o: captured.__setitem__("patch", o.detach().clone()))
    visual.blocks[0].register_forward_pre_hook(
        lambda m, args: captured.__setitem__("pos", args[0].detach().clone()))

    with torch.no_grad():
        for name in decoded:
            pv, grid = pixel_values[name], grids[name][None]
            embeds = image_features(model, pv, grid)
            tensors[f"tower.{name}.patch_embed"] = captured["patch"].float().contiguous()
            tensors[f"tower.{name}.pos_added"] = captured["pos"].float().contiguous()
            tensors[f"tower.{name}.embeds"] = embeds.float().contiguous()
            mine, mine_pos = reference_tower(torch, sd, vc, pv, grid)
            err = (mine - embeds.float()).abs().max().item()
            err_pos = (mine_pos - captured["pos"].float()).abs().max().item()
            check(f"tower.{name}", err < 1e-4 and err_pos < 1e-5,
                  f"docs/vision.md tower vs transformers: embeds max |d| {err:.2e}, positions added {err_pos:.2e}, "
                  f"{embeds.shape[0]} tokens")

        final = []
        model.model.language_model.norm.register_forward_hook(lambda m, i, o: final.append(o.detach().float().clone()))
        generator = torch.Generator().manual_seed(SEED + 1)

        def text(n):
            return torch.randint(0, VISION_START, (n,), generator=generator).tolist()

        def image_run(name):
            t, h, w = (int(v) for v in grids[name])
            return [VISION_START] + [IMAGE_TOKEN] * (t * h * w // (MERGE * MERGE)) + [VISION_END]

        names = list(decoded)
        prompts = {"one": ([names[1]], text(7) + image_run(names[1]) + text(5)),
                   "two": ([names[2], names[0]],
                           text(4) + image_run(names[2]) + text(3) + image_run(names[0]) + text(6)),
                   "decode": ([names[0]], text(3) + image_run(names[0]) + text(4))}
        for label, (used, ids) in prompts.items():
            ids_t = torch.tensor([ids])
            mm = (ids_t == IMAGE_TOKEN).to(torch.int32)
            pv = torch.cat([pixel_values[n] for n in used])
            grid = torch.stack([grids[n] for n in used])
            check(f"{label}.placeholders", int(mm.sum()) == int(grid.prod(-1).sum()) // 4, f"{int(mm.sum())} tokens")
            positions, delta = rope_index(model, ids_t, mm, grid)
            mine, mine_delta = reference_positions(mm[0].tolist(), grid.tolist(), MERGE)
            check(f"{label}.positions", np.array_equal(positions[:, 0].numpy(), mine) and int(delta.flatten()[0]) ==
                  mine_delta, f"rope_delta {int(delta.flatten()[0])}, docs say {mine_delta}")
            tensors[f"{label}.ids"] = ids_t[0].to(torch.int32)
            tensors[f"{label}.mm_types"] = mm[0]
            tensors[f"{label}.positions"] = positions[:, 0].to(torch.int64).contiguous()
            tensors[f"{label}.rope_delta"] = delta.flatten()[:1].to(torch.int64).clone()
            tensors[f"{label}.grids"] = grid.to(torch.int64).contiguous()  # [images, 3] (t, h, w), prompt order
            report.setdefault("prompts", {})[label] = {"images": used, "length": len(ids)}
            final.clear()
            model(input_ids=ids_t, use_cache=False, **multimodal_kwargs(model, pv, grid, mm))
            tensors[f"{label}.norm_rows"] = final[-1][0].contiguous()
            if label == "decode":
                steps = 6
                final.clear()
                gen = model.generate(input_ids=ids_t, **multimodal_kwargs(model, pv, grid, mm),
                                     max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False,
                                     eos_token_id=None, pad_token_id=0)
                new = gen[0, len(ids):]
                check("decode.steps", len(final) == steps + 1 and final[0].shape[1] == len(ids),
                      f"{len(final)} forward calls")
                prefill_err = (final[0][0] - tensors["decode.norm_rows"]).abs().max().item()
                check("decode.prefill_matches_forward", prefill_err < 1e-5, f"max |d| {prefill_err:.2e}")
                tensors["decode.fed"] = new[:steps].to(torch.int32)
                tensors["decode.decode_rows"] = torch.cat([c[0] for c in final[1:]], dim=0).contiguous()
                report["prompts"]["decode"]["fed"] = new[:steps].tolist()

    os.makedirs(os.path.join(args.out, "goldens"), exist_ok=True)
    path = os.path.join(args.out, "goldens", "vision.fp32.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path,
              metadata={"transformers": transformers.__version__, "torch": torch.__version__, "seed": str(SEED)})
    report["failures"] = failures
    with open(os.path.join(args.out, "vision", "report.json"), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path):,} bytes; {len(failures)} failed checks", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
