#!/usr/bin/env python3
"""Checks the bundled demo model (models/demo, with its vision tower since issue 21 item 5) against transformers,
the independent reference, on a machine that has it (the GPU machine; no GPU is needed):

  1. Qwen3_5ForConditionalGeneration.from_pretrained loads it with no missing key and no unexpected key (the MTP
     layer's mtp.* tensors are not part of transformers' classes and are the only ones allowed to be left over);
  2. its text logits and final-norm rows, recomputed by tools/make_model_fixtures.py --demo-goldens-only, equal the
     committed goldens (tests/fixtures/goldens/demo.fp32.safetensors, made from the text-only layout before the
     tower was added) within --tolerance: moving the tensors under model.language_model.* changed nothing;
  3. with --url (a `duet serve models/demo` running): an image chat's prompt ids from transformers' processor and
     chat template equal duet's /tokenize ids, and duet's first-token top logprobs (greedy) match transformers'
     FP32 log-softmax of the same prompt's last row within --logprob-tolerance (the tower, the image rows and
     the 3-D positions end to end).

    python3 tools/check_demo_with_transformers.py [--model models/demo] [--url http://127.0.0.1:18080]

Exit status 0 when every check passes; each check prints its numbers.
"""
import argparse
import base64
import io
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import torch
from safetensors.torch import load_file
from transformers import AutoImageProcessor, AutoTokenizer, Qwen3_5ForConditionalGeneration

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def check_load(model_dir):
    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, output_loading_info=True)
    missing = list(info.get("missing_keys", []))
    unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith("mtp.")]
    mismatched = list(info.get("mismatched_keys", []))
    print(f"load: missing {len(missing)}, unexpected (not mtp.*) {len(unexpected)}, mismatched {len(mismatched)}, "
          f"visual tensors {sum(1 for n, _ in model.named_parameters() if 'visual' in n)}")
    for k in (missing + unexpected + mismatched)[:10]:
        print(f"  {k}")
    return model.eval(), not (missing or unexpected or mismatched)


def check_goldens(model_dir, tolerance):
    committed = load_file(os.path.join(REPO, "tests", "fixtures", "goldens", "demo.fp32.safetensors"))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(HERE, "make_model_fixtures.py"), "--out", out,
                        "--demo-goldens-only", model_dir], check=True)
        fresh = load_file(os.path.join(out, "goldens", "demo.fp32.safetensors"))
    ok = set(fresh) == set(committed)
    worst = 0.0
    for name in sorted(committed):
        if name not in fresh or fresh[name].shape != committed[name].shape:
            print(f"goldens: {name} missing or of another shape")
            ok = False
            continue
        a, b = fresh[name].double(), committed[name].double()
        diff = (a - b).abs().max().item() if a.numel() else 0.0
        worst = max(worst, diff)
    print(f"goldens: {len(committed)} tensors, max |fresh - committed| {worst:.3g} (tolerance {tolerance})")
    return ok and worst <= tolerance


def test_image():
    from PIL import Image
    image = Image.new("RGB", (96, 64))
    image.putdata([((x * 5) % 256, (y * 7) % 256, ((x + y) * 3) % 256) for y in range(64) for x in range(96)])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return image, buffer.getvalue()


def post(url, path, body):
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        return json.load(answer)


def check_served(model, model_dir, url, tolerance):
    image, png = test_image()
    question = "What is in the picture?"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    processor = AutoImageProcessor.from_pretrained(model_dir)
    pixels = processor(images=[image], return_tensors="pt")
    grid = pixels["image_grid_thw"]
    merge = processor.merge_size
    pads = int(grid.prod().item()) // (merge * merge)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # The template writes one <|image_pad|> per image; the processor expands it to the grid's merged patches.
    assert text.count("<|image_pad|>") == 1, text
    text = text.replace("<|image_pad|>", "<|image_pad|>" * pads)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    data_url = "data:image/png;base64," + base64.b64encode(png).decode()
    duet_messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url}},
                                                  {"type": "text", "text": question}]}]
    duet_ids = post(url, "/tokenize", {"messages": duet_messages, "add_generation_prompt": True})["tokens"]
    same_ids = duet_ids == ids
    print(f"image prompt: grid {grid.tolist()}, {pads} image tokens, {len(ids)} ids; duet /tokenize "
          f"{len(duet_ids)} ids, equal: {same_ids}")
    if not same_ids:
        for i, (a, b) in enumerate(zip(ids, duet_ids)):
            if a != b:
                print(f"  first difference at {i}: transformers {a}, duet {b}")
                break
    ids_t = torch.tensor([ids])
    # mm_token_type_ids: 1 on image tokens (what the processor returns beside input_ids), for the 3-D positions.
    extra = {"mm_token_type_ids": (ids_t == model.config.image_token_id).to(torch.int32)}
    with torch.no_grad():
        out = model(input_ids=ids_t, attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                    pixel_values=pixels["pixel_values"].float(), image_grid_thw=grid, **extra)
    reference = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
    answer = post(url, "/v1/chat/completions", {"messages": duet_messages, "max_tokens": 1, "temperature": 0,
                                                 "logprobs": True, "top_logprobs": 5})
    top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    served = {entry["token"]: entry["logprob"] for entry in top}
    # Tokens are matched by their text (what OpenAI's logprobs carry); transformers' own top 5 must all be there.
    ranked = torch.argsort(reference, descending=True)[:5].tolist()
    worst, matched = 0.0, 0
    for token_id in ranked:
        text = tokenizer.decode([token_id])
        if text in served:
            matched += 1
            worst = max(worst, abs(reference[token_id].item() - served[text]))
    best = ranked[0]
    same_first = tokenizer.decode([best]) == top[0]["token"]
    print(f"first token: transformers {best} {tokenizer.decode([best])!r} (logprob {reference[best].item():.5f}), "
          f"duet {top[0]['token']!r} ({top[0]['logprob']:.5f}); {matched} of transformers' top 5 in duet's, max "
          f"|logprob difference| {worst:.3g} (tolerance {tolerance})")
    # A planted control: the same prompt with the image's rows left out (text only with the pad tokens) must move
    # the reference, or the comparison could not see the tower at all.
    with torch.no_grad():
        blind = model(input_ids=ids_t, attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                      pixel_values=torch.zeros_like(pixels["pixel_values"]).float(), image_grid_thw=grid, **extra)
    moved = (torch.log_softmax(blind.logits[0, -1].double(), dim=-1) - reference).abs().max().item()
    print(f"control: a black image moves the reference's last row by {moved:.3g} (must exceed the tolerance)")
    return same_ids and same_first and matched >= 4 and worst <= tolerance and moved > tolerance


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=os.path.join(REPO, "models", "demo"))
    parser.add_argument("--url", help="a duet serving the same model: adds the image check")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--logprob-tolerance", type=float, default=2e-3)
    args = parser.parse_args()
    torch.set_num_threads(4)
    model, loaded = check_load(args.model)
    same = check_goldens(args.model, args.tolerance)
    served = check_served(model, args.model, args.url, args.logprob_tolerance) if args.url else True
    print(f"demo against transformers: load {'ok' if loaded else 'FAILED'}, goldens {'ok' if same else 'FAILED'}, "
          f"image {'ok' if served else 'FAILED'}{'' if args.url else ' (not run: no --url)'}")
    return 0 if loaded and same and served else 1


if __name__ == "__main__":
    sys.exit(main())
