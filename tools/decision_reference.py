"""An independent fp32 PyTorch reference for System One decisions, written from ../shared/spec/systemone.md.

Three parts, each a plain function so that other tools (the 9B fidelity benchmark) can reuse them:
  render / encode   the exact prompt (decision_prompt.py, which needs no torch, re-exported here)
  head_forward      the Clef joint schema head, spelled out op by op (LayerNorm, attention, GELU by hand)
  ModuleHead        the same head assembled from torch.nn building blocks; loading it with strict=True proves the
                    tensor names are those of torch modules, and its output cross-checks head_forward
  answers           the response's answers: rounding, request order, first maximum
"""
import json
import math

import torch

from decision_prompt import (NOUL_DEFAULTS, PREFIX, REFERENCE_MAX_LENGTH, SCHEMA_HEADER,  # noqa: F401
                             SUFFIX, TYPE_IDS, Refused, encode, option_text, options_of, render)

LN_EPS = 1e-5
LOG_100 = math.log(100.0)


# ---- the joint schema head ----------------------------------------------------------------------------------------

def head_shapes(cfg):
    """Every tensor of joint_head.safetensors with its shape, as the spec lists them."""
    h, w, f = cfg["hidden_size"], cfg["width"], cfg["feedforward"]
    shapes = {"hidden_norm.weight": [h], "hidden_norm.bias": [h], "type_embedding.weight": [3, w]}
    for name in ("memory", "question", "option_question", "global", "option_context", "option_lexical"):
        shapes[f"{name}_projection.weight"] = [w, h]

    def attention(prefix):
        shapes.update({f"{prefix}.in_proj_weight": [3 * w, w], f"{prefix}.in_proj_bias": [3 * w],
                       f"{prefix}.out_proj.weight": [w, w], f"{prefix}.out_proj.bias": [w]})

    def norm(prefix):
        shapes.update({f"{prefix}.weight": [w], f"{prefix}.bias": [w]})

    for i in range(cfg["routing_layers"]):
        p = f"evidence_layers.{i}"
        for n in ("query_norm", "memory_norm", "feedforward_norm"):
            norm(f"{p}.{n}")
        attention(f"{p}.attention")
        shapes.update({f"{p}.feedforward.0.weight": [f, w], f"{p}.feedforward.0.bias": [f],
                       f"{p}.feedforward.3.weight": [w, f], f"{p}.feedforward.3.bias": [w]})
    norm("option_summary_norm")
    for j in range(cfg["layers"]):
        p = f"layers.{j}"
        attention(f"{p}.self_attn")
        attention(f"{p}.multihead_attn")
        shapes.update({f"{p}.linear1.weight": [f, w], f"{p}.linear1.bias": [f],
                       f"{p}.linear2.weight": [w, f], f"{p}.linear2.bias": [w]})
        for n in ("norm1", "norm2", "norm3"):
            norm(f"{p}.{n}")
    norm("field_norm")
    norm("option_norm")
    shapes.update({"residual_scorer.0.weight": [w, 4 * w], "residual_scorer.0.bias": [w],
                   "residual_scorer.3.weight": [1, w], "residual_scorer.3.bias": [1],
                   "prior_logit_scale": [], "joint_logit_scale": [], "residual_gate": []})
    return shapes


def _layer_norm(x, weights, prefix):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as LayerNorm
    return (x - mean) / torch.sqrt(var + LN_EPS) * weights[f"{prefix}.weight"] + weights[f"{prefix}.bias"]


def _gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))  # exact (erf) GELU


def _linear(x, weights, prefix, bias=True):
    y = x @ weights[f"{prefix}.weight"].T
    return y + weights[f"{prefix}.bias"] if bias else y


def _attention(query, memory, weights, prefix, heads):
    """Multi-head attention, no mask: packed q,k,v in-projection rows with biases, scale 1/sqrt(head dim)."""
    width = query.shape[-1]
    d = width // heads
    w_in, b_in = weights[f"{prefix}.in_proj_weight"], weights[f"{prefix}.in_proj_bias"]
    q = query @ w_in[:width].T + b_in[:width]
    k = memory @ w_in[width:2 * width].T + b_in[width:2 * width]
    v = memory @ w_in[2 * width:].T + b_in[2 * width:]
    q = q.view(-1, heads, d).transpose(0, 1)  # [heads, n, d]
    k = k.view(-1, heads, d).transpose(0, 1)
    v = v.view(-1, heads, d).transpose(0, 1)
    scores = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)
    out = (scores @ v).transpose(0, 1).reshape(-1, width)
    return out @ weights[f"{prefix}.out_proj.weight"].T + weights[f"{prefix}.out_proj.bias"]


def _unit(x):
    return x / torch.clamp(torch.linalg.vector_norm(x, dim=-1, keepdim=True), min=1e-12)


def _cosine(a, b):
    eps = 1e-8
    na = torch.clamp(torch.linalg.vector_norm(a, dim=-1, keepdim=True), min=eps)
    nb = torch.clamp(torch.linalg.vector_norm(b, dim=-1, keepdim=True), min=eps)
    return ((a / na) * (b / nb)).sum(-1)


def span_inputs(encoding):
    """Flattened question/option spans: (question spans, option spans, owner question of each option, type ids)."""
    q_spans, o_spans, owners, types = [], [], [], []
    for i, question in enumerate(encoding["questions"]):
        q_spans.append(question["span"])
        types.append(question["type_id"])
        for option in question["options"]:
            o_spans.append(option["span"])
            owners.append(i)
    return q_spans, o_spans, owners, types


def head_forward(weights, cfg, rows, lm_head, ids, encoding, dtype=torch.float32):
    """The head for one request. rows [L, h]: final-norm rows; lm_head [V, h]: the untied LM head (rows gathered).

    Returns per question (encoding order) a dict of tensors: logits, probabilities, prior, joint, and the joint term's
    two parts: cosine (cos(F_i, o_r), before its scale) and scored (the residual scorer's output).
    """
    wt = {k: v.to(dtype) for k, v in weights.items()}
    heads, width = cfg["heads"], cfg["width"]
    q_spans, o_spans, owners, types = span_inputs(encoding)
    ids = torch.as_tensor(ids, dtype=torch.long)
    hn = _layer_norm(rows.to(dtype), wt, "hidden_norm")  # [L, h]
    memory = hn @ wt["memory_projection.weight"].T  # [L, w]
    last = hn[-1]  # g: the last real token
    q = torch.stack([hn[s:e].mean(0) for s, e in q_spans])  # [Q, h]
    c = torch.stack([hn[s:e].mean(0) for s, e in o_spans])  # [N, h]
    lex = torch.stack([lm_head[ids[s:e]].to(dtype).mean(0) for s, e in o_spans])  # [N, h]
    owner = torch.as_tensor(owners, dtype=torch.long)
    r = (c @ wt["option_context_projection.weight"].T + lex @ wt["option_lexical_projection.weight"].T
         + q[owner] @ wt["option_question_projection.weight"].T)  # [N, w]
    for i in range(cfg["routing_layers"]):
        p = f"evidence_layers.{i}"
        mem = _layer_norm(memory, wt, f"{p}.memory_norm")
        r = r + _attention(_layer_norm(r, wt, f"{p}.query_norm"), mem, wt, f"{p}.attention", heads)
        hidden = _gelu(_linear(_layer_norm(r, wt, f"{p}.feedforward_norm"), wt, f"{p}.feedforward.0"))
        r = r + _linear(hidden, wt, f"{p}.feedforward.3")
    b = q @ wt["question_projection.weight"].T  # [Q, w]
    summaries = []
    for i in range(len(q_spans)):
        mine = r[owner == i]  # options of question i, encoding order
        attn = torch.softmax(mine @ b[i] / math.sqrt(width), dim=0)
        summaries.append(attn @ mine)
    s = torch.stack(summaries)
    f = (b + _layer_norm(s, wt, "option_summary_norm") + last @ wt["global_projection.weight"].T
         + wt["type_embedding.weight"][torch.as_tensor(types, dtype=torch.long)])  # [Q, w]
    for j in range(cfg["layers"]):
        p = f"layers.{j}"
        x = _layer_norm(f, wt, f"{p}.norm1")
        f = f + _attention(x, x, wt, f"{p}.self_attn", heads)
        f = f + _attention(_layer_norm(f, wt, f"{p}.norm2"), memory, wt, f"{p}.multihead_attn", heads)  # M raw
        f = f + _linear(_gelu(_linear(_layer_norm(f, wt, f"{p}.norm3"), wt, f"{p}.linear1")), wt, f"{p}.linear2")
    f = _layer_norm(f, wt, "field_norm")
    o = _layer_norm(r, wt, "option_norm")
    fo = f[owner]
    prior = torch.exp(torch.clamp(wt["prior_logit_scale"], max=LOG_100)) * (_unit(lex) * _unit(q[owner] + last)).sum(-1)
    features = torch.cat([fo, o, fo * o, (fo - o).abs()], dim=-1)
    scored = _linear(_gelu(_linear(features, wt, "residual_scorer.0")), wt, "residual_scorer.3")[:, 0]
    cosine = _cosine(fo, o)
    joint = torch.exp(torch.clamp(wt["joint_logit_scale"], max=LOG_100)) * cosine + scored
    logits = prior + torch.sigmoid(wt["residual_gate"]) * joint
    out = []
    for i in range(len(q_spans)):
        mask = owner == i
        out.append(dict(logits=logits[mask], probabilities=torch.softmax(logits[mask], dim=0), prior=prior[mask],
                        joint=joint[mask], cosine=cosine[mask], scored=scored[mask]))
    return out


class ModuleHead(torch.nn.Module):
    """The head from torch.nn modules whose parameter names are the release's tensor names (a second opinion)."""

    def __init__(self, cfg):
        super().__init__()
        nn = torch.nn
        h, w, f, heads = cfg["hidden_size"], cfg["width"], cfg["feedforward"], cfg["heads"]
        self.cfg = cfg
        self.hidden_norm = nn.LayerNorm(h, eps=LN_EPS)
        for name in ("memory", "question", "option_question", "global", "option_context", "option_lexical"):
            setattr(self, f"{name}_projection", nn.Linear(h, w, bias=False))
        self.type_embedding = nn.Embedding(3, w)
        self.evidence_layers = nn.ModuleList()
        for _ in range(cfg["routing_layers"]):
            layer = nn.Module()
            layer.query_norm, layer.memory_norm, layer.feedforward_norm = (nn.LayerNorm(w, eps=LN_EPS)
                                                                           for _ in range(3))
            layer.attention = nn.MultiheadAttention(w, heads, dropout=0.0, bias=True, batch_first=True)
            layer.feedforward = nn.Sequential(nn.Linear(w, f), nn.GELU(), nn.Dropout(0.0), nn.Linear(f, w))
            self.evidence_layers.append(layer)
        self.option_summary_norm = nn.LayerNorm(w, eps=LN_EPS)
        self.layers = nn.ModuleList(
            nn.TransformerDecoderLayer(w, heads, dim_feedforward=f, dropout=0.0, activation="gelu",
                                       layer_norm_eps=LN_EPS, batch_first=True, norm_first=True)
            for _ in range(cfg["layers"]))
        self.field_norm = nn.LayerNorm(w, eps=LN_EPS)
        self.option_norm = nn.LayerNorm(w, eps=LN_EPS)
        self.residual_scorer = nn.Sequential(nn.Linear(4 * w, w), nn.GELU(), nn.Dropout(0.0), nn.Linear(w, 1))
        self.prior_logit_scale = nn.Parameter(torch.zeros(()))
        self.joint_logit_scale = nn.Parameter(torch.zeros(()))
        self.residual_gate = nn.Parameter(torch.zeros(()))

    def forward(self, rows, lm_head, ids, encoding):
        q_spans, o_spans, owners, types = span_inputs(encoding)
        ids = torch.as_tensor(ids, dtype=torch.long)
        owner = torch.as_tensor(owners, dtype=torch.long)
        hn = self.hidden_norm(rows)
        memory = self.memory_projection(hn)
        last = hn[-1]
        q = torch.stack([hn[s:e].mean(0) for s, e in q_spans])
        c = torch.stack([hn[s:e].mean(0) for s, e in o_spans])
        lex = torch.stack([lm_head[ids[s:e]].mean(0) for s, e in o_spans])
        r = self.option_context_projection(c) + self.option_lexical_projection(lex) + self.option_question_projection(
            q[owner])
        for layer in self.evidence_layers:
            mem = layer.memory_norm(memory)[None]
            r = r + layer.attention(layer.query_norm(r)[None], mem, mem, need_weights=False)[0][0]
            r = r + layer.feedforward(layer.feedforward_norm(r))
        b = self.question_projection(q)
        s = torch.stack([torch.softmax(r[owner == i] @ b[i] / math.sqrt(self.cfg["width"]), 0) @ r[owner == i]
                         for i in range(len(q_spans))])
        f = b + self.option_summary_norm(s) + self.global_projection(last) + self.type_embedding(
            torch.as_tensor(types, dtype=torch.long))
        for layer in self.layers:
            f = layer(f[None], memory[None])[0]
        f = self.field_norm(f)
        o = self.option_norm(r)
        fo = f[owner]
        nf = torch.nn.functional
        prior = torch.exp(self.prior_logit_scale.clamp(max=LOG_100)) * (
            nf.normalize(lex, dim=-1) * nf.normalize(q[owner] + last, dim=-1)).sum(-1)
        joint = torch.exp(self.joint_logit_scale.clamp(max=LOG_100)) * nf.cosine_similarity(fo, o, dim=-1, eps=1e-8)
        joint = joint + self.residual_scorer(torch.cat([fo, o, fo * o, (fo - o).abs()], -1))[:, 0]
        logits = prior + torch.sigmoid(self.residual_gate) * joint
        return [logits[owner == i] for i in range(len(q_spans))]


# ---- answers --------------------------------------------------------------------------------------------------------

def confidences(p):
    """The three confidence formulas over one question's probabilities (a list of floats)."""
    k, top = len(p), max(p)
    return {"max_p": top,
            "typesafe": min(1.0, max(0.0, (top - 1.0 / k) / (1.0 - 1.0 / k))),
            "cloudflare": (sum(x * x for x in p) - 1.0 / k) / (1.0 - 1.0 / k)}


def answer(question, request_question, probabilities, digits=4):
    """One question's answer as the spec writes it; probabilities in ENCODING order (floats). digits None: raw."""
    rnd = (lambda x: x) if digits is None else (lambda x: round(x, digits))
    kind = question["type"]
    by_id = {option["id"]: p for option, p in zip(question["options"], probabilities)}
    if kind == "noul":
        return {"type": "noul", "noul": rnd(by_id["true"])}
    if kind == "choice":
        order = list(request_question["criteria"].keys())  # request order
        top = max(by_id.values())
        choice = next(oid for oid in order if by_id[oid] == top)  # the first maximum in request order
        return {"type": "choice", "choice": choice, "confidence": rnd(top),
                "probabilities": {oid: rnd(by_id[oid]) for oid in order}}
    levels = request_question["criteria"]
    ps = [by_id[str(k)] for k in range(len(levels))]
    return {"type": "score", "score": rnd(sum(k * p for k, p in enumerate(ps))), "confidence": rnd(max(ps)),
            "legend": {str(k): level for k, level in enumerate(levels)},
            "probabilities": {str(k): rnd(p) for k, p in enumerate(ps)}}
