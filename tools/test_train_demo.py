#!/usr/bin/env python3
"""Toy-scale tests of the demo training tools on a CPU machine with torch and without transformers:

    python3 tools/test_train_demo.py

The MTP reference's properties (causality, row-by-row equals batched, RoPE depends on relative positions only,
the fused and the eager attention agree, the checkpoint's tensor names), the safetensors writer (round trip,
alignment, the demo checkpoint read back), corpus packing, and a whole --toy training run (stand-in model and
byte tokenizer) whose output folder has the stock layout duet loads.
"""
import csv
import json
import os
import struct
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_file  # noqa: E402
import train_demo  # noqa: E402
import train_demo_data as data  # noqa: E402
from mtp_reference import Qwen35Mtp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "models", "demo")
MTP_NAMES = sorted(["fc.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight", "norm.weight"] + [
    "layers.0." + n for n in (
        "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
        "self_attn.k_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")])


def small_mtp(seed=0):
    config = json.load(open(os.path.join(DEMO, "config.json")))
    config = dict(config.get("text_config", config))  # the demo is multimodal (tools/add_demo_vision_tower.py)
    config["mtp_num_hidden_layers"] = 1
    torch.manual_seed(seed)
    mtp = Qwen35Mtp.from_config(config).double().eval()
    with torch.no_grad():
        for p in mtp.parameters():  # norms random too: zero (1+w) weights would hide a swapped norm
            p.copy_(torch.randn(p.shape, dtype=p.dtype) * (0.3 if p.dim() == 1 else p.shape[-1] ** -0.5))
    return config, mtp


class MtpReference(unittest.TestCase):
    def test_names_and_shapes(self):
        config, mtp = small_mtp()
        self.assertEqual(sorted(mtp.state_dict()), MTP_NAMES)
        h, d = config["hidden_size"], config["head_dim"]
        shapes = {k: tuple(v.shape) for k, v in mtp.state_dict().items()}
        self.assertEqual(shapes["fc.weight"], (h, 2 * h))
        self.assertEqual(shapes["layers.0.self_attn.q_proj.weight"], (config["num_attention_heads"] * 2 * d, h))
        self.assertEqual(mtp.layers[0].self_attn.rotary_dim, 8)  # 32 x partial_rotary_factor 0.25

    def test_rows_one_at_a_time_equal_the_batch_and_are_causal(self):
        config, mtp = small_mtp()
        g = torch.Generator().manual_seed(1)
        hidden = torch.randn(2, 20, config["hidden_size"], generator=g, dtype=torch.float64)
        embeds = torch.randn(2, 20, config["hidden_size"], generator=g, dtype=torch.float64)
        positions = torch.arange(20)
        batch = mtp(hidden, embeds, positions)
        for t in (0, 7, 19):  # a decode step sees rows 0..t only
            row = mtp(hidden[:, :t + 1], embeds[:, :t + 1], positions[:t + 1])[:, -1]
            self.assertLess((row - batch[:, t]).abs().max().item(), 1e-10)
        changed = embeds.clone()
        changed[:, 12] += 1.0
        after = mtp(hidden, changed, positions)
        self.assertLess((after[:, :12] - batch[:, :12]).abs().max().item(), 1e-12)
        self.assertGreater((after[:, 12] - batch[:, 12]).abs().max().item(), 1e-3)

    def test_rope_reads_relative_positions_and_matters(self):
        config, mtp = small_mtp()
        g = torch.Generator().manual_seed(2)
        hidden = torch.randn(1, 16, config["hidden_size"], generator=g, dtype=torch.float64)
        embeds = torch.randn(1, 16, config["hidden_size"], generator=g, dtype=torch.float64)
        base = mtp(hidden, embeds, torch.arange(16))
        shifted = mtp(hidden, embeds, torch.arange(16) + 777)
        self.assertLess((base - shifted).abs().max().item(), 1e-5)  # angles are fp32, as transformers has them
        spread = mtp(hidden, embeds, torch.arange(16) * 3)
        self.assertGreater((base - spread).abs().max().item(), 1e-4)

    def test_fused_and_eager_attention_agree(self):
        config, mtp = small_mtp()
        mtp = mtp.float()
        g = torch.Generator().manual_seed(3)
        hidden = torch.randn(2, 33, config["hidden_size"], generator=g)
        embeds = torch.randn(2, 33, config["hidden_size"], generator=g)
        a = mtp(hidden, embeds, torch.arange(33), fast=False)
        b = mtp(hidden, embeds, torch.arange(33), fast=True)
        self.assertLess((a - b).abs().max().item(), 1e-4)

    def test_embedding_half_comes_first(self):
        config, mtp = small_mtp()
        h = config["hidden_size"]
        g = torch.Generator().manual_seed(4)
        hidden = torch.randn(1, 5, h, generator=g, dtype=torch.float64)
        embeds = torch.randn(1, 5, h, generator=g, dtype=torch.float64)
        with torch.no_grad():
            mtp.fc.weight[:, h:] = 0  # only the embedding half left: the hidden input must not matter
        a = mtp(hidden, embeds, torch.arange(5))
        b = mtp(hidden * 3 + 1, embeds, torch.arange(5))
        self.assertLess((a - b).abs().max().item(), 1e-12)


class SafetensorsFile(unittest.TestCase):
    def test_round_trip_and_alignment(self):
        tensors = {"b.bf16": torch.randn(3, 5).to(torch.bfloat16), "a.f32": torch.randn(7),
                   "c.bf16": torch.randn(1).to(torch.bfloat16), "d.f32": torch.randn(2, 3)}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.safetensors")
            safetensors_file.write(path, tensors, {"format": "pt"})
            back, metadata = safetensors_file.read(path)
            raw = open(path, "rb").read()
        self.assertEqual(metadata, {"format": "pt"})
        for k, v in tensors.items():
            self.assertEqual(back[k].dtype, v.dtype)
            self.assertTrue(torch.equal(back[k], v), k)
        (length,) = struct.unpack("<Q", raw[:8])
        self.assertEqual((8 + length) % 8, 0)
        header = json.loads(raw[8:8 + length])
        header.pop("__metadata__")
        spans = sorted(e["data_offsets"] for e in header.values())
        self.assertEqual(spans[0][0], 0)
        for (a, b), (c, _) in zip(spans, spans[1:]):
            self.assertEqual(b, c)  # no gaps: the safetensors package refuses them
        for e in header.values():
            self.assertEqual((8 + length + e["data_offsets"][0]) % safetensors_file.SIZES[e["dtype"]], 0)

    def test_reads_the_demo_checkpoint(self):
        tensors, _ = safetensors_file.read(os.path.join(DEMO, "model.safetensors"))
        self.assertEqual(tensors["model.embed_tokens.weight"].shape, (6080, 128))
        self.assertEqual(tensors["model.embed_tokens.weight"].dtype, torch.bfloat16)


class Data(unittest.TestCase):
    def test_encoding_and_windows(self):
        tok = data.ByteTokenizer(DEMO)
        ids = tok.encode_batch(["hi<|im_end|>é"])[0]
        self.assertEqual(ids, [104, 105, 6002, 0xC3, 0xA9])
        self.assertEqual(tok.decode(ids), "hi<|im_end|>é")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.txt")
            open(path, "w").write("abc<|endoftext|>de<|endoftext|>")
            stream = data.encode_corpus(tok, path)
        self.assertEqual(stream.tolist(), [97, 98, 99, 6000, 100, 101, 6000])
        stream = torch.arange(1000, dtype=torch.int32)
        w = data.random_windows(stream, 4, 16, torch.Generator().manual_seed(0))
        self.assertEqual(tuple(w.shape), (4, 17))
        self.assertTrue(torch.equal(w[:, 1:] - w[:, :-1], torch.ones(4, 16, dtype=torch.long)))
        self.assertTrue(torch.equal(data.fixed_windows(stream, 5, 16), data.fixed_windows(stream, 5, 16)))


class ToyTraining(unittest.TestCase):
    def test_toy_run_writes_the_stock_layout(self):
        with tempfile.TemporaryDirectory() as tmp:
            text = os.path.join(tmp, "text")
            os.makedirs(text)
            corpus = os.path.join(ROOT, ".carry", "demo-text")
            for name in ("train.txt", "heldout.txt"):
                src = os.path.join(corpus, name)
                body = open(src).read(200_000) if os.path.exists(src) else \
                    "<|endoftext|>".join(f"The value {i} is stored in a list. " * 20 for i in range(200))
                open(os.path.join(text, name), "w").write(body)
            out = os.path.join(tmp, "out")
            torch.set_num_threads(1)
            metrics = train_demo.main(["--toy", "--text", text, "--tokenizer", DEMO, "--out", out,
                                       "--minutes", "0.4", "--hidden", "64", "--ffn", "128", "--layers", "4",
                                       "--seq", "64", "--batch", "8", "--warmup-steps", "10", "--lr", "3e-3",
                                       "--eval-seconds", "5", "--eval-windows", "4", "--final-windows", "16",
                                       "--sample-tokens", "6",
                                       "--print-seconds", "2"])
            with open(os.path.join(out, "config.json")) as f:
                config = json.load(f)
            tensors, _ = safetensors_file.read(os.path.join(out, "model.safetensors"))
            with open(os.path.join(out, "loss.csv")) as f:
                rows = list(csv.DictReader(f))
            files = sorted(os.listdir(out))
        self.assertEqual(config["mtp_num_hidden_layers"], 1)
        self.assertEqual(config["layer_types"], ["linear_attention"] * 3 + ["full_attention"])
        self.assertEqual(config["max_position_embeddings"], 65536)
        self.assertEqual((config["eos_token_id"], config["pad_token_id"]), (6002, 6000))
        self.assertEqual(sorted(k[4:] for k in tensors if k.startswith("mtp.")), MTP_NAMES)
        for name, t in tensors.items():
            want = torch.float32 if name.endswith(("linear_attn.A_log", "linear_attn.norm.weight")) \
                else torch.bfloat16
            self.assertEqual(t.dtype, want, name)
            self.assertTrue(name.startswith(("model.", "lm_head.", "mtp.")), name)
        self.assertEqual(sum(n.endswith("linear_attn.A_log") for n in tensors), 3)
        self.assertEqual(tensors["mtp.fc.weight"].shape, (64, 128))
        self.assertIn("lm_head.weight", tensors)
        for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "loss.csv",
                     "samples.txt", "metrics.json"):
            self.assertIn(name, files)
        self.assertLess(float(rows[-1]["train_loss"]), float(rows[0]["train_loss"]))
        self.assertGreater(metrics["steps"], 5)
        self.assertTrue(0.0 <= metrics["heldout"]["mtp_agreement"] <= 1.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
