#!/usr/bin/env python3
"""Writes a runtime adapter folder as `duet adapter` does and `duet serve --clef` reads it: the standard library alone.

The format is src/checkpoint/adapter_format.h's (spec/systemone.md, "Runtime adapter"); this module follows the C++
writer (src/convert/adapter_extraction.cc) file by file:
  adapter.safetensors     layers.{i}.{module}.lora_A [r, in] and .lora_B [out, r], BF16, in the order of the modules'
                          keys, each tensor at an 8-byte aligned offset, metadata {"format": "pt"}
  joint_head.safetensors, joint_head_config.json    the decision head, copied unchanged
  manifest.json           format "duet-adapter/1", the convention, dtype, base and merged (path, config.json's sha256,
                          revision), rank, every module's shape and rank (and its fit), the tensors not adapted
  SHA256SUMS.json         {file name: sha256} of the four files above (and lm_head_rows.safetensors when there)
The loader (src/model/runtime_adapter.cc) checks the sums, the format and convention, and every factor's name, dtype
and shape against the base and the manifest.

Used by tools/make_9b_merged.py --adapter-out (which writes the factors and the manifest of a planted difference), and
from the command line to finish such a folder once the joint head exists (tools/gpu_adapter_gate.sh, stage planted):

    python3 tools/adapter_folder.py finish PARTIAL --head-from DIR --out ADAPTER
        copies PARTIAL's adapter.safetensors and manifest.json to ADAPTER (a new folder), the joint head files from DIR,
        and signs ADAPTER (SHA256SUMS.json)
    python3 tools/adapter_folder.py sign ADAPTER
        (re)writes ADAPTER/SHA256SUMS.json, e.g. after replacing a factor file on purpose (a test's control)
"""
import argparse
import hashlib
import json
import os
import re
import shutil

import safetensors_raw

FACTORS_FILE = "adapter.safetensors"
HEAD_FILES = ("joint_head.safetensors", "joint_head_config.json")
LM_HEAD_ROWS_FILE = "lm_head_rows.safetensors"
MANIFEST_FILE = "manifest.json"
CHECKSUMS_FILE = "SHA256SUMS.json"
FORMAT = "duet-adapter/1"
CONVENTION = "y = x W^T + (x A^T) B^T"
# The projections an adapter may cover, named as in the checkpoint (adapter_format.h).
GDN_MODULES = ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b", "linear_attn.in_proj_a",
               "linear_attn.out_proj")
ATTENTION_MODULES = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP_MODULES = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def module_key(layer, module):
    return f"layers.{layer}.{module}"


# The factors file's reader and writer (the layout of the C++ writer).
write_safetensors = safetensors_raw.write
read_safetensors = safetensors_raw.read


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def revision_of(folder):
    """As the C++ manifest: the folder, its config.json's sha256, and the commit when it is a Hugging Face snapshot."""
    folder = os.path.normpath(folder)
    name, parent = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
    config = os.path.join(folder, "config.json")
    return {"path": folder, "config_sha256": file_sha256(config) if os.path.exists(config) else None,
            "revision": name if parent == "snapshots" and re.fullmatch("[0-9a-f]{40}", name) else None}


def write_manifest(folder, base_dir, merged_dir, rank, modules, not_adapted, source=None):
    """modules: {key: {"shape": [out, in], "rank": r, ...more fields}}, written in key order (the factors' order);
    not_adapted: [tensor name] (F32 in the base, its BF16 rounding in the merge)."""
    manifest = {"format": FORMAT, "convention": CONVENTION, "dtype": "bfloat16", "base": revision_of(base_dir),
                "merged": revision_of(merged_dir), "rank": rank}
    if source:
        manifest["source"] = source
    manifest["modules"] = {key: modules[key] for key in sorted(modules)}
    manifest["not_adapted"] = {name: "F32 in the base, its BF16 rounding in the merge" for name in not_adapted}
    with open(os.path.join(folder, MANIFEST_FILE), "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")


def signed_files(folder):
    files = [FACTORS_FILE, *HEAD_FILES, MANIFEST_FILE]
    if os.path.exists(os.path.join(folder, LM_HEAD_ROWS_FILE)):
        files.append(LM_HEAD_ROWS_FILE)
    return files


def sign(folder):
    """SHA256SUMS.json over the folder's signed files (sorted by name, as the C++ std::map)."""
    sums = {name: file_sha256(os.path.join(folder, name)) for name in sorted(signed_files(folder))}
    with open(os.path.join(folder, CHECKSUMS_FILE), "w") as f:
        f.write(json.dumps(sums, indent=2) + "\n")


def has_head(folder):
    return all(os.path.isfile(os.path.join(folder, name)) for name in HEAD_FILES)


def require_head(head_dir):
    if not has_head(head_dir):
        raise SystemExit(f"{head_dir}: has no {' and '.join(HEAD_FILES)}: the adapter folder carries the head")


def add_head(folder, head_dir):
    """Copies the joint head files of head_dir (a decision model or an adapter folder) into folder and signs it."""
    require_head(head_dir)
    for name in HEAD_FILES:
        shutil.copyfile(os.path.join(head_dir, name), os.path.join(folder, name))
    sign(folder)


def finish(partial, head_dir, out):
    for name in (FACTORS_FILE, MANIFEST_FILE):
        if not os.path.isfile(os.path.join(partial, name)):
            raise SystemExit(f"{partial}: has no {name}; make it with tools/make_9b_merged.py --adapter-out")
    require_head(head_dir)
    if os.path.exists(out) and os.listdir(out):
        raise SystemExit(f"--out {out}: exists and is not empty; the adapter goes into a new folder")
    os.makedirs(out, exist_ok=True)
    for name in (FACTORS_FILE, MANIFEST_FILE):
        shutil.copyfile(os.path.join(partial, name), os.path.join(out, name))
    add_head(out, head_dir)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    f = commands.add_parser("finish", help="PARTIAL (factors + manifest) + a joint head -> a signed adapter folder")
    f.add_argument("partial")
    f.add_argument("--head-from", required=True, help="a folder with joint_head.safetensors and its config")
    f.add_argument("--out", required=True)
    s = commands.add_parser("sign", help="(re)write SHA256SUMS.json")
    s.add_argument("folder")
    args = parser.parse_args()
    if args.command == "finish":
        finish(args.partial, args.head_from, args.out)
        print(f"{args.out}: adapter folder with the head of {args.head_from}, signed")
    else:
        sign(args.folder)
        print(f"{args.folder}: {CHECKSUMS_FILE} written")


if __name__ == "__main__":
    main()
