"""The model side of tools/train_demo.py: its config, transformers' Qwen3_5ForCausalLM (or the toy stand-in), the
joint forward with the MTP layer and its losses, and the stock-layout tensors written to model.safetensors."""
import json
import os

import torch
import torch.nn.functional as F

F32_SUFFIXES = ("linear_attn.A_log", "linear_attn.norm.weight")  # stored F32 in stock Qwen3.5 checkpoints


def model_config(args):
    """The demo's config.json with the new sizes and the MTP fields Qwen3.5 configs carry: a text-only
    (Qwen3_5ForCausalLM) config. models/demo's is multimodal since it carries a vision tower
    (tools/add_demo_vision_tower.py): its text_config is taken, with the top level's class and version."""
    c = json.load(open(os.path.join(args.tokenizer, "config.json")))
    if "text_config" in c:
        c = dict(c["text_config"], architectures=["Qwen3_5ForCausalLM"],
                 transformers_version=c.get("transformers_version", "5.17.0"))
    assert args.layers % 4 == 0, "--layers must be a multiple of 4"
    c["hidden_size"] = args.hidden
    c["intermediate_size"] = args.ffn
    c["num_hidden_layers"] = args.layers
    c["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * (args.layers // 4)
    c["mtp_num_hidden_layers"] = 1
    c["mtp_use_dedicated_embeddings"] = False
    return c


def build_model(c, toy):
    if toy:
        from train_demo_standin import StandInForCausalLM
        return StandInForCausalLM(c)
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    # from_dict: the path from_pretrained takes for a config.json, which the demo's format is known to pass.
    # Without "dtype": the weights are created and trained in fp32 (autocast computes in bf16).
    config = Qwen3_5TextConfig.from_dict({k: v for k, v in c.items() if k != "dtype"})
    assert config.num_hidden_layers == c["num_hidden_layers"] and config.hidden_size == c["hidden_size"]
    try:
        return Qwen3_5ForCausalLM._from_config(config, attn_implementation="sdpa")
    except (TypeError, ValueError, AttributeError) as e:
        print(f"sdpa not selectable ({e}); default attention", flush=True)
        return Qwen3_5ForCausalLM(config)


def forward(model, mtp, windows, fast=True):
    """Main and MTP logits for [B, T+1] windows: main row j predicts id j+1, MTP row j predicts id j+2."""
    inputs = windows[:, :-1]
    hidden = model.model(input_ids=inputs, use_cache=False).last_hidden_state  # after the final norm
    logits = model.lm_head(hidden)
    positions = torch.arange(inputs.shape[1] - 1, device=inputs.device)
    next_embeds = model.model.embed_tokens(inputs[:, 1:])
    mtp_logits = model.lm_head(mtp(hidden[:, :-1], next_embeds, positions, fast=fast))
    return logits, mtp_logits


def losses(logits, mtp_logits, windows):
    v = logits.shape[-1]
    main = F.cross_entropy(logits.float().reshape(-1, v), windows[:, 1:].reshape(-1))
    extra = F.cross_entropy(mtp_logits.float().reshape(-1, v), windows[:, 2:].reshape(-1))
    return main, extra


def stock_tensors(model, mtp):
    """{name: tensor} in the stock layout: F32 for the GDN A_log and gated-norm weights, BF16 for the rest."""
    out = {}
    named = list(model.state_dict().items()) + [("mtp." + k, v) for k, v in mtp.state_dict().items()]
    for name, value in named:
        if "rotary_emb" in name or not value.is_floating_point():
            continue
        value = value.detach().float().cpu()
        out[name] = value.contiguous() if name.endswith(F32_SUFFIXES) else value.to(torch.bfloat16).contiguous()
    return out


def round_to_stored(model, mtp):
    """Rounds the live weights to what the file stores, so every number reported is the saved model's."""
    with torch.no_grad():
        for module, prefix in ((model, ""), (mtp, "mtp.")):
            for name, p in module.named_parameters():
                if not (prefix + name).endswith(F32_SUFFIXES):
                    p.copy_(p.to(torch.bfloat16).float())
