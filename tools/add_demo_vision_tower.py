#!/usr/bin/env python3
"""Gives the demo model a small random vision tower, in the stock multimodal layout (issue 21 item 5).

    python3 tools/add_demo_vision_tower.py                        # models/demo in place
    python3 tools/add_demo_vision_tower.py --model DIR --out OUT  # DIR read, OUT written (OUT may be DIR)

Python's standard library only; runs anywhere. The language model is not touched: every tensor of it is copied byte
for byte (same dtype, shape and bytes) and only renamed, as transformers' Qwen3_5ForConditionalGeneration names them:

    model.embed_tokens.weight, model.layers.N.*, model.norm.weight  ->  model.language_model.*
    lm_head.weight, mtp.*                                           ->  as they are

(`mtp.*` stays beside the model, as in the released Qwen3.5 checkpoints.) Added: `model.visual.*`, a Qwen3.5 vision
tower (docs/vision.md 1) of depth 2, width 32, 2 heads of 16, MLP 64, patch 16, temporal patch 2, merge 2, an 8 x 8
position table and out_hidden_size = the language model's hidden_size; every tensor BF16, drawn from a fixed seed
with the scales tools/make_vision_fixtures.py gives tiny-vl's tower (LayerNorm weights 1 + 0.2 g, biases 0.1 g, the
position table 0.5 g, weights g / sqrt(fan-in)), except the merger's last linear layer, scaled by 0.1 so that an
image token's row is about as large as a token embedding of the demo (RMS 0.04) instead of ten times larger.
g: a standard normal sample made by a counter-based generator (splitmix64, Irwin-Hall sum of 12 uniforms) in plain
IEEE arithmetic, so every machine writes the same bits.

Written into OUT:
  config.json              Qwen3_5ForConditionalGeneration: the demo's text config under text_config (unchanged
                           values), vision_config, and the token ids of <|image_pad|>, <|video_pad|>,
                           <|vision_start|>, <|vision_end|> read from tokenizer.json
  model.safetensors        the renamed language model + mtp.*, and model.visual.*; F32 tensors first, then BF16,
                           each group by name (as tools/safetensors_file.py writes), metadata {"format": "pt"}
  preprocessor_config.json the Qwen2-VL image processor's settings of tiny-vl with a small pixel range (64 x 64 to
                           256 x 256 pixels: 4 to 64 image tokens, cheap on a CPU)
  every other file of DIR  copied as it is (tokenizer, generation config, joint head)

DIR may be the text-only demo (what tools/train_demo.py writes) or a demo already converted: its language model is
then read back from model.language_model.* and its tower drawn again, so running this on the committed models/demo
writes the committed files again, byte for byte (a check that the conversion is reproducible).
"""
import argparse
import hashlib
import json
import math
import os
import shutil
import struct
import sys
import tempfile

SEED = 20260521
VISION = {  # vision_config as transformers 5.17 writes it for tiny-vl, resized for the demo
    "depth": 2,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_size": 32,
    "in_channels": 3,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "model_type": "qwen3_5_vision",
    "num_heads": 2,
    "num_position_embeddings": 64,
    "patch_size": 16,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "axial"},
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
MIN_PIXELS, MAX_PIXELS = 64 * 64, 256 * 256
PREPROCESSOR = {  # tiny-vl's preprocessor_config.json (transformers 5.17's Qwen2VLImageProcessor), smaller pixel range
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "merge_size": 2,
    "patch_size": 16,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS},
    "temporal_patch_size": 2,
}
# Top-level keys of a multimodal config; the rest of a text-only config.json goes under text_config.
TOP_ONLY = ("architectures", "dtype", "transformers_version")
TOKENS = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
          "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
ITEM = {"F32": 4, "BF16": 2}
MERGER_OUT_SCALE = 0.1


# ----------------------------------------------------------------------------------------------- safetensors
def read_safetensors(path):
    """{name: (dtype, shape, bytes)} in file order, and the metadata."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    metadata = header.pop("__metadata__", {})
    base = 8 + length
    tensors = {}
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        tensors[name] = (entry["dtype"], list(entry["shape"]), raw[base + begin:base + end])
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    """F32 tensors first, then BF16, each by name, back to back from an 8-aligned data start (no gaps, every tensor
    at a multiple of its element size), the header padded with spaces (tools/safetensors_file.py's layout)."""
    order = sorted(tensors, key=lambda n: (-ITEM[tensors[n][0]], n))
    header, offset = {}, 0
    for name in order:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(tensors[name][2])


# ------------------------------------------------------------------------------------------------ the tower
class Normal:
    """Standard normal samples from splitmix64 (a counter-based generator) as the Irwin-Hall sum of 12 uniforms
    minus 6: only integer and IEEE double arithmetic, so the same bits everywhere (no libm)."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def next64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        return z ^ (z >> 31)

    def sample(self):
        total = 0.0
        for _ in range(12):
            total += (self.next64() >> 11) * (1.0 / (1 << 53))  # exact: 53-bit integers times a power of two
        return total - 6.0


def bf16_bytes(values):
    """Each double rounded to float32 (struct) and then to BF16, to nearest even, little-endian."""
    out = bytearray()
    for v in values:
        (u,) = struct.unpack("<I", struct.pack("<f", v))
        out += struct.pack("<H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
    return bytes(out)


def tower_shapes(v, out_hidden):
    """model.visual.* names and shapes (docs/vision.md 1), in a fixed order (the order values are drawn in)."""
    h, inner, merged = v["hidden_size"], v["intermediate_size"], v["hidden_size"] * v["spatial_merge_size"] ** 2
    shapes = [("patch_embed.proj.weight", [h, v["in_channels"], v["temporal_patch_size"], v["patch_size"],
                                           v["patch_size"]]),
              ("patch_embed.proj.bias", [h]),
              ("pos_embed.weight", [v["num_position_embeddings"], h])]
    for i in range(v["depth"]):
        b = f"blocks.{i}."
        shapes += [(b + "norm1.weight", [h]), (b + "norm1.bias", [h]),
                   (b + "attn.qkv.weight", [3 * h, h]), (b + "attn.qkv.bias", [3 * h]),
                   (b + "attn.proj.weight", [h, h]), (b + "attn.proj.bias", [h]),
                   (b + "norm2.weight", [h]), (b + "norm2.bias", [h]),
                   (b + "mlp.linear_fc1.weight", [inner, h]), (b + "mlp.linear_fc1.bias", [inner]),
                   (b + "mlp.linear_fc2.weight", [h, inner]), (b + "mlp.linear_fc2.bias", [h])]
    shapes += [("merger.norm.weight", [h]), ("merger.norm.bias", [h]),
               ("merger.linear_fc1.weight", [merged, merged]), ("merger.linear_fc1.bias", [merged]),
               ("merger.linear_fc2.weight", [out_hidden, merged]), ("merger.linear_fc2.bias", [out_hidden])]
    return shapes


def draw_tower(v, out_hidden, seed):
    """{model.visual.name: ("BF16", shape, bytes)}, each tensor from its own generator (seed + its index)."""
    tensors = {}
    for index, (name, shape) in enumerate(tower_shapes(v, out_hidden)):
        g = Normal(seed * 1000003 + index)
        count = math.prod(shape)
        if "norm" in name and name.endswith("weight"):
            values = [1.0 + 0.2 * g.sample() for _ in range(count)]
        elif name.endswith("bias"):
            values = [0.1 * g.sample() for _ in range(count)]
        elif name.startswith("pos_embed"):
            values = [0.5 * g.sample() for _ in range(count)]
        else:
            scale = 1.0 / math.sqrt(math.prod(shape[1:]))
            values = [scale * g.sample() for _ in range(count)]
        if name.startswith("merger.linear_fc2"):
            values = [MERGER_OUT_SCALE * x for x in values]
        tensors["model.visual." + name] = ("BF16", shape, bf16_bytes(values))
    return tensors


# ----------------------------------------------------------------------------------------------- conversion
def text_of(config, tensors):
    """(the text config dict, {stock name: tensor}) from a text-only or an already converted demo."""
    if config.get("model_type") == "qwen3_5":
        text = dict(config["text_config"])
        kept = {n: t for n, t in tensors.items() if not n.startswith("model.visual.")}
        if any(n.startswith("model.") and not n.startswith("model.language_model.") for n in kept):
            sys.exit("error: a multimodal checkpoint with model.* tensors outside model.language_model.*")
        return text, kept
    if config.get("model_type") != "qwen3_5_text":
        sys.exit(f"error: model_type {config.get('model_type')!r}: expected qwen3_5_text (or qwen3_5)")
    text = {k: v for k, v in config.items() if k not in TOP_ONLY}
    renamed = {}
    for name, tensor in tensors.items():
        if name.startswith("model."):
            renamed["model.language_model." + name[len("model."):]] = tensor
        elif name == "lm_head.weight" or name.startswith("mtp."):
            renamed[name] = tensor
        else:
            sys.exit(f"error: {name}: not a tensor of a Qwen3.5 text checkpoint")
    return text, renamed


def token_ids(tokenizer_path):
    added = {t["content"]: t["id"] for t in json.load(open(tokenizer_path, encoding="utf-8"))["added_tokens"]}
    missing = [t for t in TOKENS.values() if t not in added]
    if missing:
        sys.exit(f"error: {tokenizer_path} lacks {missing}")
    return {key: added[token] for key, token in TOKENS.items()}


def json_text(value):
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="models/demo", help="the demo's folder (text-only or converted)")
    parser.add_argument("--out", help="where to write the converted folder (default: --model, in place)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    source, out = args.model, args.out or args.model

    config = json.load(open(os.path.join(source, "config.json"), encoding="utf-8"))
    tensors, metadata = read_safetensors(os.path.join(source, "model.safetensors"))
    text, language = text_of(config, tensors)
    text["model_type"] = "qwen3_5_text"
    if text.get("tie_word_embeddings"):
        sys.exit("error: the demo's lm_head is its own tensor (tie_word_embeddings false); this one is tied")
    hidden = text["hidden_size"]
    ids = token_ids(os.path.join(source, "tokenizer.json"))
    if ids["image_token_id"] >= text["vocab_size"]:
        sys.exit(f"error: <|image_pad|> {ids['image_token_id']} is outside the vocabulary ({text['vocab_size']})")

    vision = dict(VISION, out_hidden_size=hidden)
    tower = draw_tower(vision, hidden, args.seed)
    converted = {"architectures": ["Qwen3_5ForConditionalGeneration"],
                 "dtype": config.get("dtype", "bfloat16"),
                 "model_type": "qwen3_5",
                 "text_config": text,
                 "tie_word_embeddings": False,
                 "transformers_version": config.get("transformers_version", "5.17.0"),
                 "vision_config": vision,
                 **ids}
    everything = dict(language)
    everything.update(tower)

    # Written beside the destination first, then moved over it, so --out == --model never reads a half-written file.
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".demo-vision-", dir=out)
    try:
        write_safetensors(os.path.join(work, "model.safetensors"), everything, metadata or {"format": "pt"})
        with open(os.path.join(work, "config.json"), "w", encoding="utf-8") as f:
            f.write(json_text(converted))
        with open(os.path.join(work, "preprocessor_config.json"), "w", encoding="utf-8") as f:
            f.write(json_text(PREPROCESSOR))
        for name in sorted(os.listdir(source)):
            path = os.path.join(source, name)
            if os.path.isfile(path) and name not in ("config.json", "model.safetensors", "preprocessor_config.json"):
                if os.path.abspath(source) != os.path.abspath(out):
                    shutil.copyfile(path, os.path.join(work, name))
        # The check that matters: the language model (and MTP layer) written is the one read, byte for byte.
        written, _ = read_safetensors(os.path.join(work, "model.safetensors"))
        for name, tensor in language.items():
            if written[name] != tensor:
                sys.exit(f"error: {name} was not written as it was read")
        for name in os.listdir(work):
            os.replace(os.path.join(work, name), os.path.join(out, name))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    layout = "converted" if config.get("model_type") == "qwen3_5" else "text-only"
    tower_bytes = sum(len(t[2]) for t in tower.values())
    print(f"{source} ({layout}): {len(language)} language-model and MTP tensors "
          f"({sum(len(t[2]) for t in language.values())} bytes) copied byte for byte"
          + (", renamed model.* -> model.language_model.*" if layout == "text-only" else ""))
    print(f"vision tower: {len(tower)} BF16 tensors ({tower_bytes} bytes), depth {vision['depth']}, width "
          f"{vision['hidden_size']}, {vision['num_heads']} heads, MLP {vision['intermediate_size']}, position table "
          f"{vision['num_position_embeddings']}, out {hidden}, seed {args.seed}")
    print("token ids: " + ", ".join(f"{k} {v}" for k, v in ids.items()))
    print(f"processor: {MIN_PIXELS} to {MAX_PIXELS} pixels")
    for name in ("config.json", "model.safetensors", "preprocessor_config.json"):
        print(f"{sha256(os.path.join(out, name))}  {os.path.join(out, name)}")


if __name__ == "__main__":
    main()
