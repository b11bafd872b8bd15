"""Minimal safetensors writer/reader and .npy reader, independent of the engine's own I/O.

safetensors layout: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the raw little-endian data; offsets are relative to the end of the header.
"""
import json
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def _to_numpy(t):
    # Accept torch tensors without importing torch here (keeps this module usable on its own).
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.ascontiguousarray(t)


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: numpy array or torch tensor}; dtype is kept as given (cast before calling)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = _to_numpy(t)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        raw = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header so the data is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict). Raises ValueError on a malformed file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(data)} bytes)")
    try:
        header = json.loads(data[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        try:
            dtype = np.dtype(_DTYPES[info["dtype"]])
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name}: bad header entry {info!r}") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(body)) or end - begin != count * dtype.itemsize:
            raise ValueError(f"{path}: tensor {name}: data_offsets {[begin, end]} do not hold "
                             f"shape {shape} of {info['dtype']} within {len(body)} data bytes")
        tensors[name] = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape).copy()
    return tensors, metadata


def read_npy(path):
    return np.load(path, allow_pickle=False)
