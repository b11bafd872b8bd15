#!/usr/bin/env python3
"""Writes a model file from a `retnet train` checkpoint, so that a run stopped part way (by a
signal, at a step chosen by watching its loss) can be scored, generated from or used with
--init-from as it stood at that checkpoint.

A checkpoint holds the weights as one flat vector (with the optimizer's moments beside it) and the
model's config and tokenizer in its metadata. The tensors' names, shapes and order come from
`retnet init` with that config; their values from the flat vector, in the order the engine lays
its parameters out (the model file's data order). The output is written atomically. Needs numpy
(Debian: python3-numpy, with /usr/bin/python3).

  /usr/bin/python3 scripts/checkpoint_to_model.py runs/r/checkpoint-00000750.safetensors r-750.safetensors
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np


def read_safetensors(path: str) -> tuple:
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError("too short for a safetensors file")
    size = struct.unpack("<Q", raw[:8])[0]
    if 8 + size > len(raw):
        raise ValueError("its header runs past the end of the file")
    return json.loads(raw[8:8 + size]), raw[8 + size:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="a checkpoint-NNNNNNNN.safetensors of `retnet train`")
    ap.add_argument("out", help="the model file to write (.safetensors)")
    ap.add_argument("--retnet", default="build/retnet", help="the retnet binary (default build/retnet)")
    args = ap.parse_args()
    try:
        header, data = read_safetensors(args.checkpoint)
    except (OSError, ValueError) as e:
        print(f"{args.checkpoint}: {e}", file=sys.stderr)
        return 1
    meta = header.get("__metadata__", {})
    if "params" not in header or "config" not in meta:
        print(f"{args.checkpoint}: not a retnet training checkpoint (no 'params' tensor or no "
              "config in its metadata)", file=sys.stderr)
        return 1
    begin, end = header["params"]["data_offsets"]
    flat = np.frombuffer(data[begin:end], dtype="<f4")
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w", encoding="utf-8") as f:
            f.write(meta["config"])
        shaped = os.path.join(tmp, "init.safetensors")
        run = subprocess.run([args.retnet, "init", "--config", config, "-o", shaped],
                             capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{args.retnet} init: {run.stderr.strip()}", file=sys.stderr)
            return 1
        model_header, model_data = read_safetensors(shaped)
    tensors = sorted((info["data_offsets"][0], name, info) for name, info in model_header.items()
                     if name != "__metadata__")
    body, at = bytearray(model_data), 0
    for _, name, info in tensors:
        if info["dtype"] != "F32":
            print(f"{name}: {info['dtype']} where float32 was expected", file=sys.stderr)
            return 1
        lo, hi = info["data_offsets"]
        count = (hi - lo) // 4
        if at + count > flat.size:
            print(f"{args.checkpoint}: {flat.size} parameters, fewer than its config's model has",
                  file=sys.stderr)
            return 1
        body[lo:hi] = flat[at:at + count].tobytes()
        at += count
    if at != flat.size:
        print(f"{args.checkpoint}: {flat.size} parameters, its config's model has {at}",
              file=sys.stderr)
        return 1
    out_meta = dict(model_header.get("__metadata__", {}))
    for key in ("config", "tokenizer"):
        if key in meta:
            out_meta[key] = meta[key]
    model_header["__metadata__"] = out_meta
    text = json.dumps(model_header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp_out = args.out + ".tmp"
    with open(tmp_out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(body))
    os.replace(tmp_out, args.out)
    print(f"{args.out}: {at} parameters from step {meta.get('step', '?')} of {args.checkpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
