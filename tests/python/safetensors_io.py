"""Minimal safetensors reading and writing for the tests (the safetensors package is not in Debian)."""
import json
import struct

import numpy as np
import torch

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16}


def save(path, tensors, metadata=None):
    """tensors: {name: torch.Tensor}; written as float32 in the given order."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        data = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load(path):
    """-> ({name: torch.Tensor (float64)}, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        arr = np.frombuffer(raw[base + b:base + end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(arr.astype(np.float64))
    return out, meta
