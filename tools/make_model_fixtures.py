#!/usr/bin/env python3
"""Builds tiny random Qwen3.5 checkpoints with transformers itself and writes goldens from transformers.

Run on the GPU machine (transformers 5.17.0, torch 2.11); everything runs on the CPU in one thread so the
outputs are the same bit for bit on every run from the same seed.

    python3 tools/make_model_fixtures.py --out OUT
    python3 tools/make_model_fixtures.py --out OUT --demo-goldens-only models/demo

Writes, under OUT:
  models/tiny-mm/     Qwen3_5ForConditionalGeneration layout (model.language_model.*, lm_head.weight,
                      model.visual.*, plus one mtp.* tensor), sharded with model.safetensors.index.json,
                      F32 linear_attn.A_log and linear_attn.norm.weight (values that are not bf16), rest BF16.
  models/tiny-text/   Qwen3_5ForCausalLM layout (model.*), tied embeddings, all BF16, custom layer_types.
  goldens/<name>.{fp32,bf16}.safetensors   final-norm rows and logits for prompts of 1, 63, 64, 65, 130, 300
                      tokens, per-layer hidden states for 65, and a greedy prefill-then-decode run.
  goldens/demo.fp32.safetensors   (with --demo-goldens-only: nothing else) the same goldens for the trained demo
                      model (tools/train_demo.py), FP32 only (duet's CPU gate); its logits are kept at fewer rows
                      (every 16th and the last) since its vocabulary is 12 times tiny-text's.
The demo model itself is no longer made here: models/demo is trained (tools/train_demo.py).
"""
import argparse
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import transformers
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5TextConfig)

LENGTHS = [1, 63, 64, 65, 130, 300]
DECODE_PROMPT = 70
DECODE_STEPS = 12


def text_config_dict(vocab, layers, layer_types=None, hidden=64, ffn=96, tie=False):
    config = dict(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=32,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=4096, tie_word_embeddings=tie,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    )
    if layer_types is not None:
        config["layer_types"] = layer_types
    return config


def randomize(model, generator, keep_f32):
    """Random weights at a scale where every path matters, rounded to bf16 except the names in keep_f32."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape = param.shape
            if name.endswith("A_log"):
                value = torch.empty(shape).uniform_(0.0, 2.5, generator=generator)
            elif name.endswith("dt_bias"):
                value = torch.randn(shape, generator=generator) * 0.5
            elif name.endswith("linear_attn.norm.weight"):
                value = 1.0 + torch.randn(shape, generator=generator) * 0.3  # plain weight
            elif name.endswith("norm.weight"):
                value = torch.randn(shape, generator=generator) * 0.3  # used as (1 + w)
            elif "conv1d" in name:
                value = torch.randn(shape, generator=generator) * 0.4
            elif "embed_tokens" in name:
                value = torch.randn(shape, generator=generator) * 0.7
            elif param.dim() >= 2:
                fan_in = shape[-1]
                value = torch.randn(shape, generator=generator) / (fan_in ** 0.5)
            else:
                value = torch.randn(shape, generator=generator) * 0.1
            if not any(name.endswith(k) for k in keep_f32):
                value = value.to(torch.bfloat16).to(torch.float32)
            param.copy_(value)


def rewrite_dtypes(folder, f32_names, extra=None):
    """Saves every tensor as BF16 except f32_names (kept F32 exactly), shard by shard, keeping the index."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    shards = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    for i, shard in enumerate(shards):
        path = os.path.join(folder, shard)
        tensors = {}
        with safe_open(path, "pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
        for key, value in tensors.items():
            if key in f32_names:
                tensors[key] = f32_names[key].contiguous()
            else:
                tensors[key] = value.to(torch.bfloat16).contiguous()
        if extra and i == len(shards) - 1:
            tensors.update(extra)
        save_file(tensors, path, metadata={"format": "pt"})
    if extra and os.path.exists(index_path):
        index = json.load(open(index_path))
        for key in extra:
            index["weight_map"][key] = shards[-1]
        json.dump(index, open(index_path, "w"), indent=2, sort_keys=True)


def make_tiny_mm(out, generator):
    text = text_config_dict(vocab=512, layers=4)
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16, in_channels=3)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=False)
    model = Qwen3_5ForConditionalGeneration(config).eval()
    keep = ("linear_attn.A_log", "linear_attn.norm.weight")
    randomize(model, generator, keep)
    f32 = {}
    for name, param in model.named_parameters():
        if name.endswith(keep):
            f32[name] = param.detach().clone().float()
    folder = os.path.join(out, "models", "tiny-mm")
    model.to(torch.bfloat16).save_pretrained(folder, max_shard_size="150KB")
    # Saved names may differ from parameter names (checkpoint conversion): match on the per-layer suffix.
    saved_names = json.load(open(os.path.join(folder, "model.safetensors.index.json")))["weight_map"].keys()
    by_suffix = {name.split(".layers.")[-1]: value for name, value in f32.items()}
    f32_saved = {s: by_suffix[s.split(".layers.")[-1]] for s in saved_names
                 if s.endswith(keep) and "language_model" in s}
    assert len(f32_saved) == len(f32), (sorted(f32_saved), sorted(f32))
    mtp = {"mtp.fc.weight": (torch.randn(64, 128, generator=generator) * 0.1).to(torch.bfloat16)}
    rewrite_dtypes(folder, f32_saved, extra=mtp)
    return folder


def make_tiny_text(out, generator):
    types = ["linear_attention", "full_attention", "linear_attention", "linear_attention", "full_attention",
             "linear_attention"]
    config = Qwen3_5TextConfig(**text_config_dict(vocab=512, layers=6, layer_types=types, tie=True))
    model = Qwen3_5ForCausalLM(config).eval()
    randomize(model, generator, ())
    folder = os.path.join(out, "models", "tiny-text")
    model.to(torch.bfloat16).save_pretrained(folder)
    return folder


def final_norm_module(model):
    inner = model.model
    return inner.language_model.norm if hasattr(inner, "language_model") else inner.norm


def goldens(folder, dtype, vocab, generator_seed, all_rows_up_to=65, stride=4):
    """Logits are stored for every row of prompts up to all_rows_up_to tokens, else every stride-th row and the last."""
    # The class config.json names: tiny-mm and the demo (since issue 21 item 5, with its vision tower) are
    # Qwen3_5ForConditionalGeneration, tiny-text Qwen3_5ForCausalLM.
    arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
    model_cls = Qwen3_5ForConditionalGeneration if arch == "Qwen3_5ForConditionalGeneration" else Qwen3_5ForCausalLM
    model = model_cls.from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
    captured = []
    final_norm_module(model).register_forward_hook(lambda m, i, o: captured.append(o.detach().float().clone()))
    generator = torch.Generator().manual_seed(generator_seed)
    result = {}
    with torch.no_grad():
        for length in LENGTHS:
            ids = torch.randint(0, vocab, (1, length), generator=generator)
            captured.clear()
            out = model(input_ids=ids, output_hidden_states=(length == 65), use_cache=False)
            rows = captured[-1][0]
            logits = out.logits[0].float()
            keep = list(range(length)) if length <= all_rows_up_to else sorted(set(range(0, length, stride)) | {length - 1})
            result[f"len{length}.ids"] = ids[0].to(torch.int32)
            result[f"len{length}.norm_rows"] = rows
            result[f"len{length}.logit_rows"] = torch.tensor(keep, dtype=torch.int32)
            result[f"len{length}.logits"] = logits[keep]
            if length == 65:
                for i, h in enumerate(out.hidden_states):
                    result[f"len65.hidden.{i}"] = h[0].float()
        prompt = torch.randint(0, vocab, (1, DECODE_PROMPT), generator=generator)
        captured.clear()
        gen = model.generate(input_ids=prompt, max_new_tokens=DECODE_STEPS + 1, min_new_tokens=DECODE_STEPS + 1,
                             do_sample=False, output_logits=True, return_dict_in_generate=True,
                             eos_token_id=None, pad_token_id=0)
        new = gen.sequences[0, DECODE_PROMPT:]
        assert len(captured) == DECODE_STEPS + 1, len(captured)
        assert captured[0].shape[1] == DECODE_PROMPT and all(c.shape[1] == 1 for c in captured[1:])
        result["decode.prompt"] = prompt[0].to(torch.int32)
        result["decode.prefill_logits"] = gen.logits[0].float()
        result["decode.fed"] = new[:DECODE_STEPS].to(torch.int32)
        result["decode.norm_rows"] = torch.cat([c[0] for c in captured[1:]], dim=0)
        result["decode.logits"] = torch.cat([l.float() for l in gen.logits[1:]], dim=0)
    return {k: v.contiguous() for k, v in result.items()}


def write_demo_goldens(out, folder, seed):
    """The FP32 goldens of the trained demo. Its config must be the one transformers reads back (8 layers, the MTP
    layer's mtp.* tensors are not part of transformers' Qwen3.5 classes and are left out of these goldens:
    tests/model/mtp_test.cc checks them against tools/mtp_reference.py). Text only: the demo's vision tower
    (model.visual.*, tools/add_demo_vision_tower.py) is loaded and not run."""
    config = json.load(open(os.path.join(folder, "config.json")))
    vocab = config.get("text_config", config)["vocab_size"]
    tensors = goldens(folder, torch.float32, vocab, seed, all_rows_up_to=1, stride=16)
    os.makedirs(os.path.join(out, "goldens"), exist_ok=True)
    path = os.path.join(out, "goldens", "demo.fp32.safetensors")
    save_file(tensors, path, metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                                       "model": "models/demo", "dtype": "fp32", "seed": str(seed)})
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path):,} bytes", flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--demo-goldens-only", metavar="DEMO_DIR",
                        help="write only goldens/demo.fp32.safetensors, from this model folder (models/demo)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)
    if args.demo_goldens_only:
        return write_demo_goldens(args.out, args.demo_goldens_only, args.seed + 2)
    generator = torch.Generator().manual_seed(args.seed)
    folders = [make_tiny_mm(args.out, generator), make_tiny_text(args.out, generator)]
    os.makedirs(os.path.join(args.out, "goldens"), exist_ok=True)
    for folder in folders:
        name = os.path.basename(folder)
        for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            tensors = goldens(folder, dtype, 512, args.seed + 1)
            path = os.path.join(args.out, "goldens", f"{name}.{label}.safetensors")
            save_file(tensors, path, metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                                               "model": name, "dtype": label, "seed": str(args.seed)})
            print(f"{path}: {len(tensors)} tensors", flush=True)


if __name__ == "__main__":
    sys.exit(main())
