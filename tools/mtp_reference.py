"""Qwen3.5's multi-token-prediction (MTP) layer in plain PyTorch: the reference for duet's MTP forward (issue 20).

Written from the published architecture (see ../shared/spec/qwen35.md, "MTP layer", for the math and the sources);
it does not import transformers, which loads a Qwen3.5 checkpoint without its `mtp.*` tensors and never runs them.
tools/train_demo.py trains this module jointly with the main model and checks its decoder layer against
transformers' own full-attention layer on the GPU machine.

One MTP row j takes the main model's hidden state at position j AFTER the final norm (the same rows the LM head
reads) and the embedding of token j+1, and predicts token j+2 through the main model's LM head:

    e = pre_fc_norm_embedding(embed_tokens[x_{j+1}])          (1+w) RMSNorm
    g = pre_fc_norm_hidden(h_j)                                (1+w) RMSNorm
    u = fc([e ; g])                                            [h, 2h] matrix, embedding half first, no bias
    u = full-attention decoder layer(u) at position j          causal over the MTP rows 0..j, its own KV cache
    logits_{j+2} = lm_head(norm(u))                            (1+w) RMSNorm, the main model's lm_head

Parameter names are the checkpoint's without the `mtp.` prefix (fc.weight, layers.0.self_attn.q_proj.weight, ...).
"""
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """Qwen3.5's RMSNorm: fp32 statistics, times (1 + w) in fp32, rounded to the input dtype once."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


def rope_cos_sin(positions, rotary_dim, theta, dtype):
    """cos/sin [T, rotary_dim] for text positions (M-RoPE with equal t/h/w positions is plain 1-D RoPE)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=positions.device)
                                / rotary_dim))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Half-split rotation of the first rotary_dim dims of x [..., T, d]; the other dims pass through."""
    r = cos.shape[-1]
    rot, rest = x[..., :r], x[..., r:]
    half = r // 2
    rotated = torch.cat([-rot[..., half:], rot[..., :half]], dim=-1)
    return torch.cat([rot * cos + rotated * sin, rest], dim=-1)


class FullAttention(nn.Module):
    """Qwen3.5 gated full attention: q_proj gives per head [query d | gate d]; q/k (1+w) norms; partial RoPE; GQA."""

    def __init__(self, hidden, heads, kv_heads, head_dim, rotary_dim, theta, eps):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.rotary_dim, self.theta = rotary_dim, theta
        self.q_proj = nn.Linear(hidden, heads * head_dim * 2, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)
        self.q_norm = RMSNorm(head_dim, eps)
        self.k_norm = RMSNorm(head_dim, eps)

    def forward(self, x, positions, fast=False):
        b, t, _ = x.shape
        d = self.head_dim
        qg = self.q_proj(x).view(b, t, self.heads, 2 * d)
        q, gate = qg[..., :d], qg[..., d:].reshape(b, t, self.heads * d)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, d)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, d).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.rotary_dim, self.theta, q.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)  # query head i reads KV head i // group
        v = v.repeat_interleave(group, dim=1)
        if fast and hasattr(F, "scaled_dot_product_attention"):  # training (torch >= 2): same math, fused
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # reference: scores in the working dtype, softmax in fp32, as transformers' eager path
            scores = torch.matmul(q, k.transpose(2, 3)) * d ** -0.5
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
            out = torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
        out = out.transpose(1, 2).reshape(b, t, self.heads * d)
        return self.o_proj(out * torch.sigmoid(gate))


class Mlp(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """A Qwen3.5 full_attention decoder layer: x + attn(norm(x)), then + mlp(norm(x))."""

    def __init__(self, hidden, heads, kv_heads, head_dim, rotary_dim, theta, eps, ffn):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = FullAttention(hidden, heads, kv_heads, head_dim, rotary_dim, theta, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = Mlp(hidden, ffn)

    def forward(self, x, positions, fast=False):
        x = x + self.self_attn(self.input_layernorm(x), positions, fast)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen35Mtp(nn.Module):
    """The `mtp.*` block. forward() returns the rows after mtp.norm; the caller applies the shared lm_head."""

    def __init__(self, hidden, heads, kv_heads, head_dim, rotary_dim, theta, eps, ffn, layers=1):
        super().__init__()
        self.pre_fc_norm_embedding = RMSNorm(hidden, eps)
        self.pre_fc_norm_hidden = RMSNorm(hidden, eps)
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, kv_heads, head_dim, rotary_dim, theta, eps, ffn)
                                    for _ in range(layers))
        self.norm = RMSNorm(hidden, eps)

    @classmethod
    def from_config(cls, c):
        """From a Qwen3.5 text config dict (config.json's text part)."""
        rope = c.get("rope_parameters") or {}
        factor = rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
        theta = rope.get("rope_theta", c.get("rope_theta", 10000.0))
        return cls(c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                   int(c["head_dim"] * factor), theta, c["rms_norm_eps"], c["intermediate_size"],
                   c.get("mtp_num_hidden_layers", 1))

    def forward(self, hidden, next_embeds, positions, step=0, fast=False):
        """hidden [B, T, h]: main-model rows after its final norm (or the previous MTP step's output);
        next_embeds [B, T, h]: embeddings of the tokens one position later; positions [T]: the hidden rows'
        positions. Returns [B, T, h]; row j's logits predict the token two positions after j."""
        x = torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], dim=-1)
        x = self.fc(x)
        x = self.layers[step % len(self.layers)](x, positions, fast)
        return self.norm(x)
