"""Shared fixtures: a small model file and the `retnet` command (RETNET_CLI, set by CTest) to
compare with."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import retnet

SMALL = {"decoder_embed_dim": 64, "decoder_value_embed_dim": 128, "decoder_retention_heads": 2,
         "decoder_ffn_embed_dim": 128, "decoder_layers": 2, "vocab_size": 256,
         "recurrent_chunk_size": 8}


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("RETNET_CLI") or shutil.which("retnet")
    if not path:
        pytest.skip("no retnet command (set RETNET_CLI)")
    return path


def run_cli(cli, *args):
    return subprocess.run([cli, *map(str, args)], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "small.safetensors"
    retnet.init(SMALL, seed=7).save(str(path))
    return path


@pytest.fixture(scope="session")
def model(model_path):
    return retnet.load(str(model_path))


@pytest.fixture
def fresh_model(model_path):
    """A model no session has used: a session packs the decode weights (as `retnet generate`
    does), which whole-sequence products of few rows then use too (logits within ~1e-6), so
    bit-exact comparisons with `retnet logits` and `retnet grad` take a fresh one."""
    return retnet.load(str(model_path))


def read_safetensors(path):
    """The float32 tensors and metadata of a .safetensors file (the format is a JSON header)."""
    import json
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "F32"
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(body[start:end], dtype=np.float32).reshape(info["shape"])
    return tensors, meta
