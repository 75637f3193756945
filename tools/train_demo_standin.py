"""A stand-in for transformers' Qwen3_5ForCausalLM, for the toy test of tools/train_demo.py on a machine without
transformers (tools/test_train_demo.py). It has the same parameter names and the same calling surface the
training script uses (model.model(input_ids=..).last_hidden_state after the final norm, model.model.embed_tokens,
model.lm_head), including the F32-stored GDN tensors, but its "GDN" mixer is a simple causal running mean: it
tests the plumbing (packing, losses, MTP wiring, the stock-layout file), not the model.
"""
from types import SimpleNamespace

import torch
from torch import nn

from mtp_reference import DecoderLayer, Mlp, RMSNorm


class GatedNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class StandInGdn(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hv, dv = c["hidden_size"], c["linear_num_value_heads"], c["linear_value_head_dim"]
        conv = 2 * c["linear_num_key_heads"] * c["linear_key_head_dim"] + hv * dv
        self.hv, self.dv = hv, dv
        self.in_proj_qkv = nn.Linear(h, conv, bias=False)
        self.in_proj_z = nn.Linear(h, hv * dv, bias=False)
        self.in_proj_b = nn.Linear(h, hv, bias=False)
        self.in_proj_a = nn.Linear(h, hv, bias=False)
        self.conv1d = nn.Conv1d(conv, conv, c["linear_conv_kernel_dim"], groups=conv, bias=False)
        self.A_log = nn.Parameter(torch.zeros(hv))
        self.dt_bias = nn.Parameter(torch.ones(hv))
        self.norm = GatedNorm(dv)
        self.out_proj = nn.Linear(hv * dv, h, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        v = self.in_proj_qkv(x)[..., -self.hv * self.dv:].view(b, t, self.hv, self.dv)
        decay = torch.sigmoid(self.in_proj_a(x) + self.dt_bias) * self.A_log.exp()
        v = v * decay[..., None]
        mean = v.cumsum(1) / torch.arange(1, t + 1, device=x.device)[None, :, None, None]
        out = mean * self.norm.weight * torch.sigmoid(self.in_proj_z(x).view(b, t, self.hv, self.dv))
        return self.out_proj(out.reshape(b, t, -1))


class StandInLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        h, eps = c["hidden_size"], c["rms_norm_eps"]
        self.kind = kind
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        if kind == "linear_attention":
            self.linear_attn = StandInGdn(c)
        else:
            layer = DecoderLayer(h, c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                                 int(c["head_dim"] * c["rope_parameters"]["partial_rotary_factor"]),
                                 c["rope_parameters"]["rope_theta"], eps, c["intermediate_size"])
            self.self_attn = layer.self_attn
        self.mlp = Mlp(h, c["intermediate_size"])

    def forward(self, x, positions):
        y = self.input_layernorm(x)
        y = self.linear_attn(y) if self.kind == "linear_attention" else self.self_attn(y, positions, fast=True)
        x = x + y
        return x + self.mlp(self.post_attention_layernorm(x))


class StandInModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(StandInLayer(c, kind) for kind in c["layer_types"])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, input_ids, use_cache=False):
        x = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        for layer in self.layers:
            x = layer(x, positions)
        return SimpleNamespace(last_hidden_state=self.norm(x))


class StandInForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = StandInModel(c)
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() >= 2:
                    p.normal_(0.0, 0.02)

    def forward(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=self.lm_head(self.model(input_ids).last_hidden_state))
