"""Hugging Face model directories for the checks: random small models in fla's RetNet layout and in
syncdoth's (torchscale names under "model.", lm_head.weight), written as

    DIR/config.json
    DIR/generation_config.json
    DIR/model.safetensors                                    (shards = 1), or
    DIR/model-0000i-of-0000N.safetensors + DIR/model.safetensors.index.json
        {"metadata": {"total_size": bytes of tensor data}, "weight_map": {name: file}}

in F32 or BF16 (torch casts to bfloat16, the raw bits are written with dtype "BF16"). And a loader
(load_model_dir) that validates a directory the way an engine should, with messages naming the file
or key: fake_fla_engine.py runs on it, and the references read the values back from the files.

Weights are drawn in float64 from a seed, with scales that keep every layer's contribution and the
logits of order one (neither saturated nor vanishing)."""
import json
import math
import os

import numpy as np
import torch

import fla_reference as FR
import harness
import retnet_ref as R

SHARD_INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
SUPPORTED_DTYPES = ("F32", "BF16")


# ------------------------------------------------------------------------------------------ configs
def fla_config(hidden=64, layers=2, heads=4, vocab=300, **overrides):
    """A config.json like fla-hub/retnet-1.3B-100B's, shrunk; overrides replace or add keys."""
    cfg = {
        "architectures": ["RetNetForCausalLM"], "attn": None, "attn_mode": "chunk", "bos_token_id": 1,
        "conv_size": 4, "elementwise_affine": True, "eos_token_id": 2, "expand_k": 1, "expand_v": 2,
        "feature_map": None, "fuse_cross_entropy": True, "fuse_norm": True, "fuse_swiglu": True,
        "hidden_act": "swish", "hidden_ratio": 2, "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": None, "max_position_embeddings": 2048, "model_type": "retnet",
        "norm_eps": 1e-6, "num_heads": heads, "num_hidden_layers": layers, "num_kv_heads": None,
        "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.45.0",
        "use_cache": True, "use_output_gate": True, "use_short_conv": False, "vocab_size": vocab,
    }
    cfg.update(overrides)
    return cfg


def syncdoth_config(d=64, value_dim=128, heads=4, ffn=96, layers=2, vocab=300, **overrides):
    """A config.json of syncdoth/RetNet's RetNetConfig (torchscale's keys plus HF ones)."""
    cfg = {
        "architectures": ["RetNetForCausalLM"], "model_type": "retnet", "vocab_size": vocab,
        "initializer_range": 0.02, "is_decoder": True, "pad_token_id": 0, "eos_token_id": 0,
        "output_retentions": False, "use_cache": True, "forward_impl": "parallel", "activation_fn": "swish",
        "dropout": 0.0, "activation_dropout": 0.0, "drop_path_rate": 0.0, "decoder_embed_dim": d,
        "decoder_value_embed_dim": value_dim, "decoder_ffn_embed_dim": ffn, "decoder_layers": layers,
        "decoder_retention_heads": heads, "decoder_normalize_before": True, "layernorm_embedding": False,
        "no_scale_embedding": True, "recurrent_chunk_size": 16, "use_glu": True, "z_loss_coeff": 0.0,
        "use_lm_decay": False, "deepnorm": False, "subln": True, "use_ffn_rms_norm": False,
        "layernorm_eps": 1e-6, "tie_word_embeddings": False, "torch_dtype": "float32",
        "transformers_version": "4.45.0",
    }
    cfg.update(overrides)
    return cfg


def generation_config(cfg):
    return {"_from_model_config": True, "bos_token_id": cfg.get("bos_token_id", 1),
            "eos_token_id": cfg.get("eos_token_id", 2), "transformers_version": "4.45.0"}


# ------------------------------------------------------------------------------------------ weights
def init_fla_weights(cfg, seed, norm_noise=0.2):
    """float64 weights under fla's names: projections N(0, 1/fan_in) (outputs o_proj, down_proj half
    that), embeddings N(0, 1) (N(0, 4/hidden) when tied), lm_head N(0, 1/hidden) (logits of order one), norm weights
    1 + norm_noise N(0, 1), biases N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    W = {}
    for name, shape in FR.weight_shapes(cfg).items():
        def normal(std):
            return torch.randn(shape, generator=gen, dtype=torch.float64) * std
        if name.endswith(".bias"):
            W[name] = normal(0.1)
        elif len(shape) == 1:  # RMSNorm weights
            W[name] = 1.0 + normal(norm_noise)
        elif name == "model.embeddings.weight":  # tied: it is the output head too
            W[name] = normal(2.0 * shape[1] ** -0.5 if cfg.get("tie_word_embeddings") else 1.0)
        elif name == "lm_head.weight":
            W[name] = normal(shape[1] ** -0.5)
        else:
            out = name.endswith("o_proj.weight") or name.endswith("down_proj.weight")
            W[name] = normal((0.5 if out else 1.0) / math.sqrt(shape[1]))
    return W


def init_syncdoth_weights(cfg, seed, rel_pos=True):
    """torchscale's initialisation (retnet_ref.init_weights) under syncdoth's names, plus the
    persistent buffers model.retnet_rel_pos.{angle,decay} a syncdoth checkpoint holds."""
    W = FR.torchscale_to_syncdoth(R.init_weights(cfg, seed, norm_noise=0.2))
    if rel_pos:
        c = R.check_config(cfg)
        W["model.retnet_rel_pos.angle"] = R.angles(c["dk"]).repeat_interleave(2)
        W["model.retnet_rel_pos.decay"] = R.decays(c["H"]).log()
    return W


def stored(t, dtype):
    """The values a tensor has once written in dtype ("F32" or "BF16"), as float64."""
    return t.to({"F32": torch.float32, "BF16": torch.bfloat16}[dtype]).to(torch.float64)


# ------------------------------------------------------------------------------------------ writing
def _file_tensors(tensors, dtype):
    tdt = {"F32": torch.float32, "BF16": torch.bfloat16}[dtype]
    return {k: v.to(tdt) for k, v in tensors.items()}


def shard_names(n):
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def split(names, sizes, n):
    """names (in order) into n consecutive groups of about equal byte size, none empty."""
    total = max(sum(sizes[k] for k in names), 1)
    groups, g, acc = [[] for _ in range(n)], 0, 0
    for i, k in enumerate(names):
        if groups[g] and (min(n - 1, acc * n // total) > g or len(names) - i == n - 1 - g):
            g += 1
        groups[g].append(k)
        acc += sizes[k]
    return groups


def write_model_dir(path, cfg, weights, dtype="F32", shards=1):
    """Writes the directory; weights: {name: float tensor}. -> {name: float64 values as stored}."""
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype {dtype}, expected one of {SUPPORTED_DTYPES}")
    os.makedirs(path, exist_ok=True)
    for f in os.listdir(path):
        if f.endswith(".safetensors") or f.endswith(".json"):
            os.remove(os.path.join(path, f))
    cfg = dict(cfg, torch_dtype={"F32": "float32", "BF16": "bfloat16"}[dtype])
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(generation_config(cfg), f, indent=2)
    tensors = _file_tensors(weights, dtype)
    meta = {"format": "pt"}
    if shards == 1:
        harness.write_safetensors(os.path.join(path, SINGLE), tensors, meta)
    else:
        sizes = {k: v.numel() * v.element_size() for k, v in tensors.items()}
        files = shard_names(shards)
        weight_map = {}
        for fname, group in zip(files, split(list(tensors), sizes, shards)):
            harness.write_safetensors(os.path.join(path, fname), {k: tensors[k] for k in group}, meta)
            weight_map.update({k: fname for k in group})
        with open(os.path.join(path, SHARD_INDEX), "w") as f:
            json.dump({"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}, f, indent=2)
    return {k: stored(v, dtype) for k, v in weights.items()}


# ------------------------------------------------------------------------------------------ loading
def _read_json(path, what):
    if not os.path.isfile(path):
        raise ValueError(f"{path}: {what} does not exist")
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: malformed JSON: {e}") from None


def _read_checked(path):
    """A safetensors file whose tensors are all F32 or BF16 -> {name: float64 tensor}."""
    if not os.path.isfile(path):
        raise ValueError(f"{path}: file does not exist")
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else None
        header = json.loads(f.read(n)) if n is not None and n < 1 << 30 else {}
    for name, info in header.items():
        if name != "__metadata__" and isinstance(info, dict) and info.get("dtype") not in SUPPORTED_DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {info.get('dtype')}, expected F32 or BF16")
    tensors, _ = harness.read_safetensors(path)
    return {k: torch.from_numpy(v.astype(np.float64)) for k, v in tensors.items()}


def load_model_dir(path):
    """-> (config dict, {name: float64 tensor}) of a directory written by write_model_dir (or by
    save_pretrained): validated like an engine must, ValueError naming the file or key."""
    cfg = _read_json(os.path.join(path, "config.json"), "config.json")
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}/config.json: not a JSON object")
    index = os.path.join(path, SHARD_INDEX)
    weights = {}
    if os.path.exists(index):
        idx = _read_json(index, "shard index")
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wm, dict):
            raise ValueError(f"{index}: no weight_map object")
        for fname in sorted(set(wm.values())):
            if not isinstance(fname, str) or os.path.basename(fname) != fname:
                raise ValueError(f"{index}: weight_map names file {fname!r}")
            got = _read_checked(os.path.join(path, fname))
            for name, f in wm.items():
                if f == fname and name not in got:
                    raise ValueError(f"{index}: weight_map puts tensor {name} in {fname}, which does not hold it")
            weights.update({k: v for k, v in got.items() if wm.get(k) == fname})
    else:
        weights = _read_checked(os.path.join(path, SINGLE))
    if FR.is_syncdoth(cfg):
        for k, bad in FR.SYNCDOTH_UNSUPPORTED.items():
            if cfg.get(k) == bad:
                raise ValueError(f"{path}/config.json: {k} = {bad!r} is not supported")
        try:
            FR.syncdoth_check_weights(weights, cfg)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    else:
        try:
            FR.check_weights(weights, cfg)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return cfg, weights
