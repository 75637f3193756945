#!/usr/bin/env python3
"""A random Qwen3.5-9B-shaped checkpoint in the stock layout, and transformers' rows on it, for the rows gate.

Run on the GPU machine (transformers 5.17.0, torch 2.11, one H200); nothing here is committed (18 GB):

    python3 tools/make_9b_references.py --out /tmp/9b [--per-bucket 10]

Writes, under OUT:
  model/            Qwen3_5ForConditionalGeneration layout (model.language_model.*, lm_head.weight, a tiny
                    model.visual.* with its preprocessor_config.json), sharded safetensors, BF16 except linear_attn.A_log and linear_attn.norm.weight
                    kept F32 with values BF16 cannot hold (as the stock releases store them); the Qwen3.5-like
                    tokenizer of tests/fixtures/tokenizer/qwen35-synthetic beside it, so `duet serve` runs on it.
                    With --mtp also a random MTP layer (mtp.* in model-mtp.safetensors, mtp_num_hidden_layers 1):
                    useless drafts, but the GPU time MTP drafting costs at this shape.
  prompts.json      {"prompts": [[ids], ...], "buckets": [...]}: per-bucket random prompts in the four length
                    buckets of design/targets.md (<=1K, 1-4K, 4-10K, 10-16K).
  ref/<i>.fp32.f32  transformers FP32 final-norm rows [tokens, 4096] (raw little-endian fp32)
  ref/<i>.bf16.f32  transformers BF16 final-norm rows, as fp32
  ref/<i>.bf16_top1.i32  transformers BF16 next-token argmax at every row
  transformers_speed.json  transformers BF16 prefill (1K, 4K) and single-stream decode on the same machine.
The weights are random with a fixed seed: the gate measures arithmetic, not language.
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch
from safetensors import safe_open

import transformers
from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

KEEP_F32 = ("linear_attn.A_log", "linear_attn.norm.weight")
BUCKETS = [(64, 1024), (1025, 4096), (4097, 10240), (10241, 16384)]
VOCAB_IDS = 248044  # ordinary token ids of Qwen3.5 (added tokens start here); vocab_size is padded to 248320


def text_config_9b():
    layer_types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 8
    return dict(
        vocab_size=248320, hidden_size=4096, intermediate_size=12288, num_hidden_layers=32,
        num_attention_heads=16, num_key_value_heads=4, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
        linear_conv_kernel_dim=4, rms_norm_eps=1e-6, max_position_embeddings=262144, tie_word_embeddings=False,
        layer_types=layer_types, hidden_act="silu", eos_token_id=248046, pad_token_id=248044,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    )


def randomize(model, seed):
    """Random weights on the GPU at a scale where every path matters (as tools/make_model_fixtures.py does for the
    tiny models), rounded to BF16 except KEEP_F32."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape, dev = param.shape, param.device
            if name.endswith("A_log"):
                value = torch.empty(shape, device=dev).uniform_(0.0, 2.5, generator=gen)
            elif name.endswith("dt_bias"):
                value = torch.randn(shape, device=dev, generator=gen) * 0.5
            elif name.endswith("linear_attn.norm.weight"):
                value = 1.0 + torch.randn(shape, device=dev, generator=gen) * 0.3
            elif name.endswith("norm.weight"):
                value = torch.randn(shape, device=dev, generator=gen) * 0.3
            elif "conv1d" in name:
                value = torch.randn(shape, device=dev, generator=gen) * 0.4
            elif "embed_tokens" in name:
                value = torch.randn(shape, device=dev, generator=gen) * 0.7
            elif param.dim() >= 2:
                value = torch.randn(shape, device=dev, generator=gen) / (shape[-1] ** 0.5)
            else:
                value = torch.randn(shape, device=dev, generator=gen) * 0.1
            if not name.endswith(KEEP_F32):
                value = value.to(torch.bfloat16).to(torch.float32)
            param.copy_(value)


def add_random_mtp(folder, model, seed):
    """An MTP layer of random weights (`mtp.*` as Qwen3.5 checkpoints store it: tools/qwen35_mtp_spec.md): its full
    attention decoder layer shaped like the main model's layer 3, fc [h, 2h], the three norms. Transformers does not run
    it and its drafts are noise, but it costs on the GPU what a real one costs: for the speed of MTP drafting."""
    from safetensors.torch import save_file
    gen = torch.Generator(device="cuda").manual_seed(seed + 7)
    h = model.config.text_config.hidden_size
    tensors = {}
    layer = "model.language_model.layers.3."
    for name, param in model.state_dict().items():
        if name.startswith(layer):
            shape = param.shape
            value = (torch.randn(shape, device="cuda", generator=gen) / (shape[-1] ** 0.5) if param.dim() >= 2
                     else torch.randn(shape, device="cuda", generator=gen) * 0.3)
            tensors["mtp.layers.0." + name[len(layer):]] = value.to(torch.bfloat16).contiguous()
    tensors["mtp.fc.weight"] = (torch.randn(h, 2 * h, device="cuda", generator=gen) / (2 * h) ** 0.5).to(torch.bfloat16)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{norm}.weight"] = (torch.randn(h, device="cuda", generator=gen) * 0.3).to(torch.bfloat16)
    shard = "model-mtp.safetensors"
    save_file({k: v.cpu() for k, v in tensors.items()}, os.path.join(folder, shard), metadata={"format": "pt"})
    index_path = os.path.join(folder, "model.safetensors.index.json")
    index = json.load(open(index_path))
    for key in tensors:
        index["weight_map"][key] = shard
    json.dump(index, open(index_path, "w"), indent=2)
    config_path = os.path.join(folder, "config.json")
    config = json.load(open(config_path))
    config["text_config"]["mtp_num_hidden_layers"] = 1
    json.dump(config, open(config_path, "w"), indent=2)


def make_checkpoint(out, seed):
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=4096, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16, in_channels=3)
    config = Qwen3_5Config(text_config=text_config_9b(), vision_config=vision, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = Qwen3_5ForConditionalGeneration(config)
    model.eval()
    randomize(model, seed)
    folder = os.path.join(out, "model")
    state = {k: (v if k.endswith(KEEP_F32) else v.to(torch.bfloat16)) for k, v in model.state_dict().items()}
    model.save_pretrained(folder, state_dict=state, max_shard_size="5GB")
    del state
    # The stock layout, checked: multimodal names, F32 where the releases keep F32, BF16 everywhere else.
    index = json.load(open(os.path.join(folder, "model.safetensors.index.json")))["weight_map"]
    f32 = 0
    for shard in sorted(set(index.values())):
        with safe_open(os.path.join(folder, shard), "pt") as f:
            for key in f.keys():
                if not key.startswith("model.language_model.") or key == "lm_head.weight":
                    continue
                dtype = f.get_slice(key).get_dtype()
                want = "F32" if key.endswith(KEEP_F32) else "BF16"
                assert dtype == want, (key, dtype)
                f32 += dtype == "F32"
    assert f32 == 48, f32  # 24 GDN layers x (A_log, norm)
    assert "lm_head.weight" in index and any(k.startswith("model.visual.") for k in index)
    tok = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizer",
                       "qwen35-synthetic")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, name), os.path.join(folder, name))
    write_image_processor(folder, vision)
    return model


def write_image_processor(folder, vision):
    """The image processor's settings for the tiny tower (the releases ship preprocessor_config.json beside the weights;
    a server that loads a tower needs them): Qwen2-VL's processor with the tower's patch, merge and temporal sizes."""
    factor = vision["patch_size"] * vision["spatial_merge_size"]
    processor = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
                 "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                 "image_processor_type": "Qwen2VLImageProcessor", "merge_size": vision["spatial_merge_size"],
                 "patch_size": vision["patch_size"], "temporal_patch_size": vision["temporal_patch_size"],
                 "resample": 3, "rescale_factor": 1 / 255,
                 "size": {"shortest_edge": 16 * factor * factor, "longest_edge": 4096 * factor * factor}}
    json.dump(processor, open(os.path.join(folder, "preprocessor_config.json"), "w"), indent=2)


def make_prompts(out, per_bucket, seed):
    gen = torch.Generator().manual_seed(seed)
    prompts, buckets = [], []
    for b, (lo, hi) in enumerate(BUCKETS):
        lengths = torch.linspace(lo, hi, per_bucket).round().long().tolist()
        for n in lengths:
            prompts.append(torch.randint(0, VOCAB_IDS, (n,), generator=gen).tolist())
            buckets.append(b)
    json.dump({"prompts": prompts, "buckets": buckets, "bucket_bounds": BUCKETS}, open(os.path.join(out, "prompts.json"), "w"))
    return prompts


def final_rows(model, ids, logits_to_keep):
    captured = []
    hook = model.model.language_model.norm.register_forward_hook(lambda m, i, o: captured.append(o.detach()))
    try:
        out = model(input_ids=torch.tensor([ids], device="cuda"), use_cache=False, logits_to_keep=logits_to_keep)
    finally:
        hook.remove()
    return captured[-1][0], out.logits[0]


def write(path, tensor):
    tensor.contiguous().cpu().numpy().tofile(path)


def references(model, prompts, out):
    os.makedirs(os.path.join(out, "ref"), exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with torch.no_grad():
        start = time.time()
        for i, ids in enumerate(prompts):  # FP32: the checkpoint's values exactly (BF16 upcast, F32 as stored)
            rows, _ = final_rows(model, ids, 1)
            write(os.path.join(out, "ref", f"{i}.fp32.f32"), rows.float())
        print(f"transformers fp32: {len(prompts)} prompts in {time.time() - start:.1f} s", flush=True)
        model.to(torch.bfloat16)  # as from_pretrained(dtype=bfloat16) loads it: A_log and the GDN norms rounded too
        start = time.time()
        for i, ids in enumerate(prompts):
            rows, logits = final_rows(model, ids, 0)
            write(os.path.join(out, "ref", f"{i}.bf16.f32"), rows.float())
            write(os.path.join(out, "ref", f"{i}.bf16_top1.i32"), logits.argmax(dim=-1).to(torch.int32))
            del logits
        print(f"transformers bf16: {len(prompts)} prompts in {time.time() - start:.1f} s", flush=True)


def speed(model, out, seed):
    """transformers BF16 on this machine: prefill at 1K and 4K tokens, and one stream decoding 64 tokens."""
    gen = torch.Generator().manual_seed(seed)
    result = {"transformers": transformers.__version__, "torch": torch.__version__, "attn": "sdpa"}
    with torch.no_grad():
        for n in (1024, 4096):
            ids = torch.randint(0, VOCAB_IDS, (1, n), generator=gen).cuda()
            model(input_ids=ids, use_cache=False, logits_to_keep=1)  # warm-up
            times = []
            for _ in range(3):
                torch.cuda.synchronize()
                t = time.time()
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
                torch.cuda.synchronize()
                times.append(time.time() - t)
            result[f"prefill_{n}_ms"] = min(times) * 1e3
            result[f"prefill_{n}_tok_s"] = n / min(times)
        ids = torch.randint(0, VOCAB_IDS, (1, 1024), generator=gen).cuda()
        model.generate(input_ids=ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up
        torch.cuda.synchronize()
        t = time.time()
        model.generate(input_ids=ids, max_new_tokens=65, min_new_tokens=65, do_sample=False)
        torch.cuda.synchronize()
        total = time.time() - t
        result["decode_1_stream_tok_s"] = 64 / (total - result["prefill_1024_ms"] / 1e3)
        result["ttft_1024_ms"] = result["prefill_1024_ms"]
    json.dump(result, open(os.path.join(out, "transformers_speed.json"), "w"), indent=1)
    print("transformers speed:", json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--per-bucket", type=int, default=10)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--checkpoint-only", action="store_true", help="write model/ and prompts.json, nothing else")
    parser.add_argument("--mtp", action="store_true", help="also a random MTP layer (mtp.*), for drafting's speed")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    start = time.time()
    model = make_checkpoint(args.out, args.seed)
    if args.mtp:
        add_random_mtp(os.path.join(args.out, "model"), model, args.seed)
    print(f"checkpoint: {time.time() - start:.1f} s", flush=True)
    prompts = make_prompts(args.out, args.per_bucket, args.seed + 1)
    print(f"prompts: {[len(p) for p in prompts]}", flush=True)
    if args.checkpoint_only:
        return 0
    references(model, prompts, args.out)
    if not args.skip_speed:
        speed(model, args.out, args.seed + 2)
    print(f"done in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
