"""Checks tools/train_demo.py runs on the GPU machine, where transformers is installed. Each prints one line
(CHECK ok / CHECK FAILED / CHECK skipped) and never stops the training run: a failed check is read in the log.

before_training: the hidden rows the MTP layer reads are the final-norm rows (lm_head of them gives the model's
logits); mtp_reference.DecoderLayer computes what transformers' Qwen3_5DecoderLayer (full attention) computes.
after_saving: transformers loads the written folder (ignoring mtp.*) and gives the same logits as the trained model.
"""
import contextlib
import copy

import torch

from mtp_reference import DecoderLayer


@contextlib.contextmanager
def exact_fp32():
    """TF32 matmuls (on for training) would differ from fp32 by ~1e-3: compare in real fp32."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def report(name, diff, tolerance):
    verdict = "ok" if diff <= tolerance else "FAILED"
    print(f"CHECK {verdict}: {name}: max |diff| {diff:.3g} (tolerance {tolerance:g})", flush=True)


def hf_layer_output(layer, x, positions, rotary, attn_implementation):
    position_ids = positions.view(1, 1, -1).expand(3, x.shape[0], -1)
    cos_sin = rotary(x, position_ids)
    mask = None
    if attn_implementation != "sdpa":  # eager adds the mask as given: make it causal
        t = x.shape[1]
        mask = torch.full((t, t), torch.finfo(x.dtype).min, device=x.device).triu(1)[None, None]
    out = layer(x, position_embeddings=cos_sin, attention_mask=mask, position_ids=positions[None])
    return out[0] if isinstance(out, tuple) else out


def before_training(model, mtp, c, device):
    with exact_fp32():
        _before_training(model, mtp, c, device)


def after_saving(model, folder, device, windows):
    with exact_fp32():
        _after_saving(model, folder, device, windows)


def _before_training(model, mtp, c, device):
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(0, c["vocab_size"], (2, 37), generator=generator).to(device)
    try:
        with torch.no_grad():
            hidden = model.model(input_ids=ids, use_cache=False).last_hidden_state
            logits = model(input_ids=ids, use_cache=False).logits
        report("lm_head(last_hidden_state) == logits (the MTP input is the final-norm row)",
               (model.lm_head(hidden) - logits).abs().max().item(), 1e-5)
    except Exception as e:  # noqa: BLE001 - a check must not end the run
        print(f"CHECK skipped: final-norm rows: {type(e).__name__}: {e}", flush=True)
    try:
        index = c["layer_types"].index("full_attention")
        hf = copy.deepcopy(model.model.layers[index]).float().eval()
        with torch.no_grad():
            for name, p in hf.named_parameters():
                if p.dim() == 1:  # zero-initialised (1+w) norms would hide a mix-up of the norms
                    p.copy_(torch.randn(p.shape, generator=generator).to(device) * 0.3)
        ours = DecoderLayer(c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"],
                            mtp.layers[0].self_attn.rotary_dim, mtp.layers[0].self_attn.theta, c["rms_norm_eps"],
                            c["intermediate_size"]).to(device).float().eval()
        ours.load_state_dict(hf.state_dict(), strict=True)  # the same tensor names, or this raises
        x = torch.randn(2, 45, c["hidden_size"], generator=generator).to(device)
        attn = getattr(model.config, "_attn_implementation", "sdpa")
        with torch.no_grad():
            for start in (0, 1000):
                positions = torch.arange(start, start + x.shape[1], device=device)
                theirs = hf_layer_output(hf, x, positions, model.model.rotary_emb, attn)
                for fast in (False, True):
                    mine = ours(x, positions, fast=fast)
                    report(f"mtp_reference.DecoderLayer == transformers full-attention layer "
                           f"(positions from {start}, {'sdpa' if fast else 'eager'} path)",
                           (mine - theirs).abs().max().item(), 1e-4)
    except Exception as e:  # noqa: BLE001
        print(f"CHECK skipped: decoder layer vs transformers: {type(e).__name__}: {e}", flush=True)


def _after_saving(model, folder, device, windows):
    try:
        from safetensors.torch import load_file
        import safetensors_file
        ours, _ = safetensors_file.read(f"{folder}/model.safetensors")
        theirs = load_file(f"{folder}/model.safetensors")
        same = sorted(ours) == sorted(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
        print(f"CHECK {'ok' if same else 'FAILED'}: the safetensors package reads model.safetensors "
              f"({len(theirs)} tensors, {sum(k.startswith('mtp.') for k in theirs)} mtp.*)", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"CHECK skipped: safetensors package: {type(e).__name__}: {e}", flush=True)
    try:
        from transformers import Qwen3_5ForCausalLM
        loaded, info = Qwen3_5ForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
        loaded = loaded.to(device).eval()
        missing = info.get("missing_keys", [])
        if missing:
            print(f"CHECK FAILED: transformers finds tensors missing from the file: {sorted(missing)[:8]}", flush=True)
        model.eval()
        with torch.no_grad():
            a = model(input_ids=windows[:, :-1], use_cache=False).logits.float()
            b = loaded(input_ids=windows[:, :-1], use_cache=False).logits.float()
        report("transformers from_pretrained(folder) logits == the trained model's", (a - b).abs().max().item(), 1e-3)
    except Exception as e:  # noqa: BLE001
        print(f"CHECK skipped: reload with transformers: {type(e).__name__}: {e}", flush=True)
