"""Text to token ids and packed training windows for tools/train_demo.py.

The corpus files (tools/prepare_demo_text.py) hold documents separated by <|endoftext|>; each document is encoded
with the demo tokenizer (added tokens such as <|im_start|> matched inside the text, as duet's encoder does) and the
documents are joined into one id stream with the <|endoftext|> id between them. Training windows are random slices
of that stream: a window of T + 1 ids gives T input ids, T next-token targets and T - 1 next-next-token targets.
"""
import json
import os

import torch

SEP = "<|endoftext|>"


class HfTokenizer:
    """The demo's tokenizer.json through Hugging Face `tokenizers` (on the GPU machine)."""

    def __init__(self, folder):
        from tokenizers import Tokenizer  # not on the build machine: the toy test uses ByteTokenizer
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.sep_id = self.tok.token_to_id(SEP)
        assert self.sep_id is not None, f"{folder}: tokenizer has no {SEP}"

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)

    def token_id(self, text):
        return self.tok.token_to_id(text)


class ByteTokenizer:
    """Stand-in for the toy test: one id per UTF-8 byte, the special tokens at the demo's ids."""

    def __init__(self, folder=None):
        self.special = {SEP: 6000, "<|im_start|>": 6001, "<|im_end|>": 6002}
        if folder and os.path.exists(os.path.join(folder, "tokenizer.json")):
            added = json.load(open(os.path.join(folder, "tokenizer.json")))["added_tokens"]
            self.special = {t["content"]: t["id"] for t in added}
        self.sep_id = self.special[SEP]

    def encode_batch(self, texts):
        out = []
        for text in texts:
            ids, i = [], 0
            while i < len(text):
                hit = next((s for s in self.special if text.startswith(s, i)), None)
                if hit:
                    ids.append(self.special[hit])
                    i += len(hit)
                else:
                    ids += list(text[i].encode("utf-8"))
                    i += 1
            out.append(ids)
        return out

    def decode(self, ids):
        names = {v: k for k, v in self.special.items()}
        raw, text = bytearray(), ""
        for i in ids:
            if i in names:
                text += raw.decode("utf-8", "replace") + names[i]
                raw = bytearray()
            elif i < 256:
                raw.append(i)
        return text + raw.decode("utf-8", "replace")

    def token_id(self, text):
        return self.special.get(text)


def encode_corpus(tokenizer, path, limit_bytes=None):
    """One int32 stream: every document's ids followed by the <|endoftext|> id."""
    text = open(path, encoding="utf-8").read()
    if limit_bytes:
        text = text[:limit_bytes]
    docs = [d for d in text.split(SEP) if d.strip()]
    stream = []
    for ids in tokenizer.encode_batch(docs):
        stream += ids
        stream.append(tokenizer.sep_id)
    return torch.tensor(stream, dtype=torch.int32)


def random_windows(stream, batch, length, generator):
    """[batch, length + 1] int64: slices starting at uniform random offsets (so every epoch is cut anew)."""
    starts = torch.randint(0, len(stream) - length - 1, (batch,), generator=generator)
    index = starts[:, None] + torch.arange(length + 1)[None, :]
    return stream[index].long()


def fixed_windows(stream, count, length):
    """[count, length + 1]: evenly spaced slices, the same on every call (held-out evaluation)."""
    count = max(1, min(count, (len(stream) - 1) // (length + 1)))
    step = (len(stream) - length - 1) // count
    index = (torch.arange(count) * step)[:, None] + torch.arange(length + 1)[None, :]
    return stream[index].long()
