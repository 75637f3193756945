"""The MTP golden: tools/mtp_reference.py run in fp32 on models/demo, the trained demo (issue 20 item 2).

    build/src/cli/duet rows ... is run by this tool; from the repository root:
    /usr/bin/python3 tools/make_mtp_fixtures.py --duet build/src/cli/duet
    (cd tests/fixtures && sha256sum ./goldens/demo.mtp.safetensors)   # the line in tools/fixtures.sha256

The MTP layer reads the main model's final-norm rows. There is no transformers on the CPU machines that make this
golden, so those rows come from duet's own CPU forward (`duet rows`, gated against transformers by the model
goldens) and are stored in the golden as the MTP layer's input: the golden then checks the MTP layer alone, given
the same input bits. Everything after that is the reference: the `mtp.*` weights read with our own safetensors
reader (BF16, widened to fp32), the embedding and lm_head from the same file, all arithmetic in fp32.

Stored (F32 unless said):
  ids [T] I32                   a fixed sentence of the demo's vocabulary
  hidden [T, h]                 duet's final-norm rows of ids (the MTP input)
  mtp.out [T-1, h]              MTP rows j = 0..T-2 (h_j with token j+1) after mtp.norm: what lm_head reads
  mtp.pre_norm [T-1, h]         the same rows before mtp.norm (the decoder layer's residual stream)
  mtp.top_ids [T-1, 16] I32     each row's 16 largest logits (predicting token j+2), descending
  mtp.top_logits [T-1, 16]
  chain.ids [3] I32             drafting 3 tokens from position T-1: the token fed at each step (the main model's
                                greedy token after ids, then each step's own argmax)
  chain.out, chain.pre_norm [3, h], chain.top_ids [3, 16] I32, chain.top_logits [3, 16]: the draft steps, step k
                                at position T-2+k reading step k-1's row after mtp.norm (qwen35_mtp_spec.md)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_file  # noqa: E402
from mtp_reference import Qwen35Mtp  # noqa: E402

SENTENCE = "the file is read by the program and the data is written to the"
TOP = 16
CHAIN = 3


def sentence_ids(tokenizer_json):
    """Whole-word ids (byte-level BPE: a leading space is 'Ġ'); words the vocabulary lacks are skipped."""
    vocab = json.load(open(tokenizer_json))["model"]["vocab"]
    ids = []
    for i, word in enumerate(SENTENCE.split()):
        piece = word if i == 0 else "\u0120" + word
        if piece in vocab:
            ids.append(vocab[piece])
    return ids


def final_norm_rows(duet, model_dir, ids, hidden):
    with tempfile.TemporaryDirectory() as tmp:
        prompts = os.path.join(tmp, "prompts.json")
        json.dump({"prompts": [ids]}, open(prompts, "w"))
        subprocess.run([duet, "rows", model_dir, "--prompts", prompts, "--out", tmp, "--backend", "cpu"], check=True)
        raw = open(os.path.join(tmp, "0.f32"), "rb").read()
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).view(len(ids), hidden).clone()


def load_mtp(tensors, config):
    mtp = Qwen35Mtp.from_config(config)
    state = {k[len("mtp."):]: v.float() for k, v in tensors.items() if k.startswith("mtp.")}
    mtp.load_state_dict(state, strict=True)
    return mtp.float().eval()


def run_mtp(mtp, embed, hidden, next_ids):
    """Rows after and before mtp.norm for hidden [T, h] at positions 0..T-1 with next_ids [T]."""
    captured = {}
    hook = mtp.norm.register_forward_hook(lambda module, inputs, output: captured.update(pre=inputs[0]))
    out = mtp(hidden[None], embed[next_ids][None], torch.arange(hidden.shape[0]))[0]
    hook.remove()
    return out, captured["pre"][0]


def top(logits):
    values, ids = logits.topk(TOP, dim=-1)
    return ids.to(torch.int32).contiguous(), values.contiguous()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duet", required=True, help="the duet binary (for `duet rows`)")
    parser.add_argument("--model", default="models/demo")
    parser.add_argument("--out", default="tests/fixtures/goldens/demo.mtp.safetensors")
    args = parser.parse_args()

    config = json.load(open(os.path.join(args.model, "config.json")))
    config = config.get("text_config", config)
    tensors, _ = safetensors_file.read(os.path.join(args.model, "model.safetensors"))
    # The demo's stock multimodal layout (tools/add_demo_vision_tower.py), or a text-only one (tools/train_demo.py).
    prefix = "model.language_model." if "model.language_model.embed_tokens.weight" in tensors else "model."
    embed = tensors[prefix + "embed_tokens.weight"].float()
    head = tensors["lm_head.weight"].float() if "lm_head.weight" in tensors else embed
    mtp = load_mtp(tensors, config)

    ids = sentence_ids(os.path.join(args.model, "tokenizer.json"))
    hidden = final_norm_rows(args.duet, args.model, ids, config["hidden_size"])
    ids_t = torch.tensor(ids, dtype=torch.long)
    golden = {"ids": ids_t.to(torch.int32), "hidden": hidden}
    with torch.no_grad():
        out, pre = run_mtp(mtp, embed, hidden[:-1], ids_t[1:])
        golden["mtp.out"], golden["mtp.pre_norm"] = out, pre
        golden["mtp.top_ids"], golden["mtp.top_logits"] = top(out @ head.T)

        # Drafting from the last position: the MTP sequence so far (rows 0..T-2 with their real next tokens) grows
        # by one row per step; the causal attention of the whole-sequence forward is exactly the KV cache's.
        rows, fed = hidden[:-1], ids_t[1:]
        h, x = hidden[-1], int((head @ hidden[-1]).argmax())
        chain_ids, chain_out, chain_pre = [], [], []
        for _ in range(CHAIN):
            rows, fed = torch.cat([rows, h[None]]), torch.cat([fed, torch.tensor([x])])
            out, pre = run_mtp(mtp, embed, rows, fed)
            chain_ids.append(x)
            chain_out.append(out[-1])
            chain_pre.append(pre[-1])
            h, x = out[-1], int((head @ out[-1]).argmax())
        golden["chain.ids"] = torch.tensor(chain_ids, dtype=torch.int32)
        golden["chain.out"], golden["chain.pre_norm"] = torch.stack(chain_out), torch.stack(chain_pre)
        golden["chain.top_ids"], golden["chain.top_logits"] = top(golden["chain.out"] @ head.T)

        # The acceptance proxy on this sentence: the MTP row j's argmax against the token actually at j+2.
        agree = (golden["mtp.top_ids"][:-1, 0].long() == ids_t[2:]).float().mean().item()
    safetensors_file.write(args.out, golden, {"made_by": "tools/make_mtp_fixtures.py", "model": args.model})
    print(f"{args.out}: {len(ids)} ids, MTP top-1 equals token j+2 on {agree:.2f} of rows, chain {chain_ids}")


if __name__ == "__main__":
    main()
