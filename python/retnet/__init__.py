"""retnet: the RetNet / linear-attention engine from Python.

A thin binding over the C++ engine (the same code as the `retnet` command): load or initialise
models, compute logits in every form, losses and gradients, decode with sessions whose states are
NumPy views, generate text (streaming, batched) and train.

    import retnet
    model = retnet.load("model.safetensors")
    with retnet.load("model.safetensors") as model:
        result = model.generate("Once upon a time", max_tokens=64, seed=1)
        print(result)  # the text; result.tokens, result.finish_reason, result.usage
        reply = model.chat([{"role": "user", "content": "Hi"}])  # the model's chat template
        out = model.create_chat_completion(messages=[...])     # llama-cpp-python's dicts

Every engine failure raises retnet.Error (a ValueError) with the engine's message.
"""
import json as _json
import os as _os
import tempfile as _tempfile

from . import _thread_policy

_thread_policy.before_load()
from ._retnet import (Error, Model, Session, TextStream, Tokenizer, __version__, from_arrays,
                      from_hf_arrays, init, kernels, load, num_threads, set_num_threads,
                      thread_policy)
_thread_policy.after_load()
from . import _closing, chat as _chat, openai_api as _openai_api  # noqa: F401
from .generation import Completion

__all__ = ["Completion", "Error", "Model", "Session", "TextStream", "Tokenizer", "__version__",
           "from_arrays", "from_hf_arrays", "init", "kernels", "load", "num_threads",
           "set_num_threads",
           "thread_policy", "train"]

# Tracebacks print the exception as the package names it, not its extension module.
Error.__module__ = "retnet"


def train(data, config=None, out="runs/retnet", steps=None, time_budget=None, callback=None,
          **options):
    """Trains a language model on a text file with the trainer of `retnet train`.

    data: the training text file (its last 10% is the validation split).
    config: a dict (torchscale names), a JSON file's path, or None (the default small model).
    out: the run directory (model.safetensors, checkpoints, metrics.jsonl).
    steps / time_budget: optimizer steps and/or seconds (at least one).
    callback(metrics: dict): called with each metrics line's figures (a step's: step, loss, lr,
        grad_norm, ms, tokens_per_s; a validation's: step, val_loss, val_bits_per_byte,
        val_tokens); returning False stops the run after that step with a checkpoint written
        (resume=True continues it).
    options: the CLI's options with underscores: tokenizer, init_from, batch, seq, grad_accum,
        lr, warmup, weight_decay, clip, form, chunk, seed, resume, overwrite, log_interval,
        eval_interval, checkpoint_interval, eval_tokens, keep, quiet, token_cache_dir.

    Returns a dict: steps, train_loss, val_loss, val_bits_per_byte, tokens_per_s, interrupted,
    stopped_by_callback, and model (the saved model's path, None when the run was stopped).
    """
    config_path = ""
    temporary = None
    if isinstance(config, dict):
        temporary = _tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        with temporary:
            _json.dump(config, temporary)
        config_path = temporary.name
    elif config is not None:
        config_path = _os.fspath(config)
    try:
        result = _retnet_train(_os.fspath(data), config_path, _os.fspath(out), steps, time_budget,
                               callback, options)
    finally:
        if temporary is not None:
            _os.unlink(temporary.name)
    result["model"] = (None if result["interrupted"]
                       else _os.path.join(_os.fspath(out), "model.safetensors"))
    return result


from ._retnet import _train as _retnet_train  # noqa: E402

_closing.install()
