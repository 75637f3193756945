"""Reads and writes .safetensors files with torch alone (the `safetensors` package is not on every machine).

The format: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}} (plus an
optional "__metadata__" of strings), then the tensors' raw little-endian bytes back to back. We pad the header with
spaces so the data starts 8-byte aligned, and write F32 tensors before BF16 ones with no gaps, so every tensor sits
at a multiple of its element size (duet's loader refuses misaligned data; the safetensors package refuses gaps).
"""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32",
          torch.int64: "I64"}
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "I64": 8}
VIEWS = {"BF16": torch.int16, "F16": torch.int16}  # numpy has no bfloat16: move those bytes as int16


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    name = DTYPES[t.dtype]
    if name in VIEWS:
        t = t.view(VIEWS[name])
    return t.numpy().tobytes()


def write(path, tensors, metadata=None):
    """tensors: {name: torch.Tensor} of the dtypes in DTYPES. Larger elements first, then by name."""
    order = sorted(tensors, key=lambda n: (-SIZES[DTYPES[tensors[n].dtype]], n))
    header, blobs, offset = {}, [], 0
    for name in order:
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read(path):
    """{name: torch.Tensor} (BF16 as torch.bfloat16) and the metadata dict."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    metadata = header.pop("__metadata__", {})
    base = 8 + length
    by_name = {v: k for k, v in DTYPES.items()}
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = by_name[entry["dtype"]]
        storage = VIEWS.get(entry["dtype"], dtype)
        t = torch.frombuffer(bytearray(raw[base + begin:base + end]), dtype=storage)
        out[name] = t.view(dtype).reshape(entry["shape"]) if entry["shape"] else t.view(dtype).reshape(())
    return out, metadata
