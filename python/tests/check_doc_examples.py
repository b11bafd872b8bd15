"""Runs every Python example of the README and docs/python.md as written, with the placeholder
paths replaced by real ones. Run by CTest:

    /usr/bin/python3 check_doc_examples.py --retnet build/retnet --workdir DIR  (PYTHONPATH: the
                                                                              built package)

The ```python blocks of a file run in order in one namespace (later blocks use earlier names),
in the work folder (files the examples write land there); a traceback names the document's own
line. The ```bash blocks are installs (python_package_pip_install runs them) and the overhead
benchmark, which are not run here. A placeholder that no example holds any more fails the run, so
this list follows the documents.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

import retnet

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ["README.md", "docs/python.md"]
# A model small enough to generate hundreds of tokens in a moment, with the byte vocabulary the
# examples' token ids assume.
SMALL = {"decoder_embed_dim": 64, "decoder_value_embed_dim": 128, "decoder_retention_heads": 2,
         "decoder_ffn_embed_dim": 128, "decoder_layers": 2, "vocab_size": 256,
         "recurrent_chunk_size": 8}
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def read_safetensors(path):
    """The float32 tensors of a .safetensors file (a JSON header, then the data)."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n:]
    return {name: np.frombuffer(body[info["data_offsets"][0]:info["data_offsets"][1]],
                                dtype=np.float32).reshape(info["shape"])
            for name, info in header.items()}


def torch_names(model_path, hf_dir):
    """What the PyTorch example takes as given: a torchscale decoder and its config, a Hugging
    Face model (state_dict and config) and a batch of tokens."""
    import torch
    model = retnet.load(str(model_path))
    weights = {k: torch.from_numpy(v) for k, v in model.state_dict().items()}
    hf_weights = {k: torch.from_numpy(v.copy()) for k, v in
                  read_safetensors(hf_dir / "model.safetensors").items()}
    hf_config = json.loads((hf_dir / "config.json").read_text())
    return {"decoder": types.SimpleNamespace(state_dict=lambda: weights), "config": SMALL,
            "hf_model": types.SimpleNamespace(
                state_dict=lambda: hf_weights,
                config=types.SimpleNamespace(to_dict=lambda: hf_config)),
            "tokens": torch.tensor([[72, 105, 33, 10]])}


def run_document(name, replacements, given, used):
    text = (ROOT / name).read_text()
    namespace = {"__name__": "__doc_example__"}
    blocks = list(BLOCK.finditer(text))
    assert blocks, f"{name} has no ```python block"
    for match in blocks:
        code = match.group(1)
        for placeholder, real in replacements.items():
            if placeholder in code:
                used.add(placeholder)
                code = code.replace(placeholder, real)
        for needle, names in given.items():
            if needle in code:
                used.add(needle)
                namespace.update(names())
        line = text.count("\n", 0, match.start(1))
        print(f"\n== {name}:{line + 1}", flush=True)
        # Blank lines first, so that a traceback's line numbers are the document's.
        exec(compile("\n" * line + code, str(ROOT / name), "exec"), namespace)
    return len(blocks)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--retnet", required=True, help="the retnet command")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    model_path = work / "model.safetensors"
    retnet.init(SMALL, seed=3).save(str(model_path))
    hf_dir = work / "hf"
    subprocess.run([args.retnet, "export", str(model_path), "--format", "syncdoth", "-o",
                    str(hf_dir)], check=True, capture_output=True)
    replacements = {"runs/main/model.safetensors": str(model_path), '"DIR"': f'"{hf_dir}"',
                    "data/tinyshakespeare.txt": str(ROOT / "data" / "tinyshakespeare.txt")}
    given = {"decoder.state_dict()": lambda: torch_names(model_path, hf_dir)}
    os.chdir(work)
    used = set()
    count = sum(run_document(name, replacements, given, used) for name in DOCUMENTS)
    unused = (set(replacements) | set(given)) - used
    assert not unused, f"placeholders no example holds any more: {sorted(unused)}"
    print(f"doc examples: {count} Python blocks of {', '.join(DOCUMENTS)} ran")


if __name__ == "__main__":
    sys.exit(main())
