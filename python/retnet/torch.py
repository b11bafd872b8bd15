"""PyTorch helpers: a Model from a state_dict without files, and the engine's logits and
gradients as torch tensors for side-by-side checks with PyTorch code.

    import retnet.torch
    model = retnet.torch.from_state_dict(decoder.state_dict(), config)
    ours = retnet.torch.logits(model, tokens)          # torch.Tensor [B, T, vocab]
"""
import numpy as _np
import torch as _torch

from . import from_arrays as _from_arrays
from . import from_hf_arrays as _from_hf_arrays

_SKIPPED_SUFFIXES = ("retnet_rel_pos.angle", "retnet_rel_pos.decay")


def _array(value):
    if isinstance(value, _torch.Tensor):
        return value.detach().to("cpu", _torch.float32).contiguous().numpy()
    return _np.asarray(value, dtype=_np.float32)


def _hf_named(state_dict):
    return any(name.startswith("model.") or name == "lm_head.weight" for name in state_dict)


def from_state_dict(state_dict, config, tokenizer=None):
    """A retnet.Model from a state_dict and its config dict, without files: a torchscale
    RetNetDecoder's (names as torchscale's, with or without fairseq's "decoder." prefix; the
    rotation buffers are skipped), or a Hugging Face model's with its config.json dict
    (flash-linear-attention's RetNetForCausalLM: model.layers.0.attn.q_proj.weight, ...; or
    syncdoth's: torchscale's names under "model.", lm_head)."""
    if _hf_named(state_dict):
        return _from_hf_arrays(config, {n: _array(v) for n, v in state_dict.items()}, tokenizer)
    tensors = {}
    for name, value in state_dict.items():
        if name.startswith("decoder."):
            name = name[len("decoder."):]
        if name.endswith(_SKIPPED_SUFFIXES):
            continue
        tensors[name] = _array(value)
    return _from_arrays(config, tensors, tokenizer)


def _tokens(tokens):
    if isinstance(tokens, _torch.Tensor):
        return tokens.detach().cpu().numpy()
    return tokens


def logits(model, tokens, form="parallel", chunk=None):
    """The engine's logits [B, T, vocab] as a float32 torch tensor."""
    return _torch.from_numpy(model.logits(_tokens(tokens), form=form, chunk=chunk))


def grad(model, tokens, form="parallel", chunk=None):
    """(loss, {name: gradient tensor}) of the mean next-token loss, names as torchscale's."""
    loss, grads = model.grad(_tokens(tokens), form=form, chunk=chunk)
    return loss, {name: _torch.from_numpy(g) for name, g in grads.items()}
