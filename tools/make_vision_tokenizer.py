#!/usr/bin/env python3
"""Writes tiny-vl's tokenizer (tokenizer.json, tokenizer_config.json) into tests/fixtures/models/tiny-vl.

tiny-vl (tools/make_vision_fixtures.py) has a 512-token vocabulary with the vision tokens at the ids its config.json
names: <|vision_start|> 500, <|vision_end|> 501, <|image_pad|> 502, <|video_pad|> 503, as added special tokens, as in
the Qwen3.5 releases. No published tokenizer carries those ids, so this one is made for the end-to-end test of images
over HTTP (tests/server/vision_e2e_test.cc), which compares duet's answer with transformers' greedy tokens.

transformers' `decode` prompt (vision.fp32.safetensors, decode.ids) is 3 random text ids, the image's markup, then 4
random text ids. duet renders the published Qwen3.5 chat template (src/tokenizer/chat_template.cc); for one user
message holding only an image, with thinking off, that is
    <|im_start|>user\\n  <|vision_start|><|image_pad|>...<|vision_end|>  <|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n
So the framing strings are added tokens at exactly those text ids (matched leftmost-longest, as tokenizers does):
<|im_start|> 339, "user" 160, "\\n" 252 before the image, and <|im_end|> 375, "\\n<|im_start|>assistant\\n" 90,
"<think>\\n\\n" 234, "</think>\\n\\n" 203 after it. The HTTP request then reaches the model as the very ids
transformers generated from. Everything else is byte-level BPE without merges: 256 byte tokens, and the remaining ids
(among them the six greedy tokens of decode.fed) are words " t<id>" that only decoding produces, so a reply's text
names its ids. Runs anywhere (only the standard library): python3 tools/make_vision_tokenizer.py
"""

import argparse
import json
import os

VOCAB = 512
SPECIAL = {339: "<|im_start|>", 375: "<|im_end|>", 500: "<|vision_start|>", 501: "<|vision_end|>",
           502: "<|image_pad|>", 503: "<|video_pad|>", 504: "<|endoftext|>"}
FRAMING = {160: "user", 252: "\n", 90: "\n<|im_start|>assistant\n", 234: "<think>\n\n", 203: "</think>\n\n"}
GREEDY = [505, 354, 92, 475, 440, 290]  # decode.fed: kept out of the byte tokens so the reply reads as words
# Qwen3.5's pre-tokenizer split (tokenizer.json of the releases).
SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
         "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def bytes_to_unicode():
    """GPT-2's byte alphabet: printable bytes stand for themselves, the rest for code points from 256 on."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json():
    alphabet = bytes_to_unicode()
    taken = set(SPECIAL) | set(FRAMING) | set(GREEDY)
    free = [i for i in range(VOCAB) if i not in taken]
    vocab = {}
    for b, token_id in zip(range(256), free):
        vocab[alphabet[b]] = token_id
    for token_id in free[256:] + GREEDY:
        vocab[alphabet[ord(" ")] + f"t{token_id}"] = token_id
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in SPECIAL.items()]
    added += [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
               "special": False} for i, c in FRAMING.items()]
    # The added tokens stay out of model.vocab, as in the Qwen3.5 releases: they take their ids from added_tokens.
    assert sorted([*vocab.values(), *(t["id"] for t in added)]) == list(range(VOCAB)), "every id once"
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": sorted(added, key=lambda t: t["id"]),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])), "merges": []},
    }


def tokenizer_config():
    return {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
            "bos_token": None, "unk_token": None, "add_bos_token": False, "model_max_length": 4096,
            "split_special_tokens": False, "clean_up_tokenization_spaces": False}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "models", "tiny-vl"))
    args = parser.parse_args()
    for name, content in (("tokenizer.json", tokenizer_json()), ("tokenizer_config.json", tokenizer_config())):
        path = os.path.join(args.out, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{path}: {os.path.getsize(path):,} bytes")


if __name__ == "__main__":
    main()
