"""Reads and writes .safetensors files as raw bytes with the standard library alone (no torch, no numpy), in the layout
of duet's C++ writer: a compact JSON header (metadata first) padded with spaces to a multiple of 8, each tensor at the
next multiple of 8 in the order given. For tools that must run anywhere (ctest, fixtures made in pure Python);
tools/safetensors_file.py is the torch-based reader and writer (tensors in, and a gap-free layout the safetensors
package also accepts).
"""
import json
import struct

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I64": 8}


def write(path, tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw little-endian bytes)] in file order; metadata values written as strings."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape, raw in tensors:
        count = 1
        for n in shape:
            count *= n
        assert len(raw) == count * SIZES[dtype], f"{name}: {len(raw)} bytes for {dtype} {shape}"
        pad = (-offset) % 8
        blobs.append(b"\0" * pad)
        offset += pad
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read(path, data_order=False):
    """{name: (dtype, shape, raw bytes)} in the header's order (or the data's, data_order) and the metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    entries = list(header.items())
    if data_order:
        entries.sort(key=lambda kv: kv[1]["data_offsets"][0])
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in entries}, metadata
