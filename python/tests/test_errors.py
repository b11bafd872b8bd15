"""Every bad input raises retnet.Error (a ValueError) naming it; nothing crashes."""
import numpy as np
import pytest

import retnet
from conftest import SMALL


def raises(fn, match=None):
    with pytest.raises(retnet.Error, match=match):
        fn()


def test_error_is_a_value_error():
    assert issubclass(retnet.Error, ValueError)


def test_model_errors(model, tmp_path):
    raises(lambda: retnet.load(str(tmp_path / "missing.safetensors")), "missing")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a model")
    raises(lambda: retnet.load(str(bad)))
    raises(lambda: retnet.load(str(bad), dtype="int3"), "dtype")
    raises(lambda: retnet.init({"decoder_embed_dim": 63}), "")
    raises(lambda: retnet.init({"no_such_field_xyz": 1, "moe_freq": 2}))
    raises(lambda: retnet.init(42))
    raises(lambda: model.logits([1, 2], form="sideways"), "sideways")
    raises(lambda: model.logits([1, 256]), "256")
    raises(lambda: model.logits([-1]), "-1")
    raises(lambda: model.logits([1.5, 2.0]), "integers")
    raises(lambda: model.logits(np.zeros((1, 1, 1), dtype=np.int64)), "dimensions")
    raises(lambda: model.logits([]), "empty")
    raises(lambda: model.logits([1, 2], form="chunkwise", chunk=0), "chunk")
    raises(lambda: model.loss([1]), "at least 2")
    raises(lambda: model.grad([1, 2], form="scan"))
    raises(lambda: model.save(str(tmp_path / "no_dir" / "m.safetensors")))


def test_from_arrays_errors(model):
    weights = model.state_dict()
    missing = dict(weights)
    missing.pop("embed_tokens.weight")
    raises(lambda: retnet.from_arrays(SMALL, missing), "embed_tokens.weight")
    extra = dict(weights, **{"layers.9.x": np.zeros(1)})
    raises(lambda: retnet.from_arrays(SMALL, extra), "layers.9.x")
    shaped = dict(weights, **{"embed_tokens.weight": np.zeros((3, 3))})
    raises(lambda: retnet.from_arrays(SMALL, shaped), "shape")
    nan = dict(weights)
    nan["output_projection.weight"] = weights["output_projection.weight"].copy()
    nan["output_projection.weight"][0, 0] = np.nan
    raises(lambda: retnet.from_arrays(SMALL, nan), "non-finite")


def test_session_errors(model, tmp_path):
    raises(lambda: retnet.Session(model, capacity=0), "capacity")
    s = retnet.Session(model, capacity=1)
    raises(lambda: s.prefill(0, [1]), "sequence 0")
    s.add_sequence()
    raises(lambda: s.add_sequence())  # over capacity
    raises(lambda: s.logits(0), "no token")
    raises(lambda: s.sample(0), "no token")
    raises(lambda: s.step([1, 2]), "one token per sequence")
    raises(lambda: s.logits(3), "sequence 3")
    raises(lambda: s.state(-1), "sequence -1")
    raises(lambda: s.set_state(0, np.zeros(3)), "values")
    raises(lambda: s.fork(0, 1), "sequence 1")
    s.prefill(0, [1, 2, 3])
    raises(lambda: s.sample(0, temperature=-1), "temperature")
    raises(lambda: s.sample(0, top_p=2), "top")
    raises(lambda: s.load(str(tmp_path / "missing.state"), 0))
    other = retnet.init(dict(SMALL, decoder_layers=1), seed=1)
    path = str(tmp_path / "other.state")
    o = retnet.Session(other)
    o.add_sequence()
    o.prefill(0, [1, 2])
    o.save(path, 0)
    raises(lambda: s.load(path, 0))  # another model's state


def test_generation_and_tokenizer_errors(model, tmp_path):
    raises(lambda: model.generate(""), "empty")
    raises(lambda: model.generate("x", max_tokens=-1), "max_tokens")
    raises(lambda: model.generate("x", temperature=-2), "temperature")
    raises(lambda: model.generate("x", stop=[""]), "stop")
    raises(lambda: model.generate_batch([]), "prompts")
    raises(lambda: retnet.init(dict(SMALL, vocab_size=100)).generate("x"), "tokenizer")
    t = model.tokenizer
    raises(lambda: t.decode([256]), "256")
    raises(lambda: t.token_bytes(-1), "-1")
    raises(lambda: retnet.Tokenizer.load(str(tmp_path / "missing.model")))


def test_train_errors(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("hello world " * 200)
    raises(lambda: retnet.train(str(data), out=str(tmp_path / "run"), steps=1, no_such=1),
           "no_such")
    raises(lambda: retnet.train(str(data), out=str(tmp_path / "run")), "steps")
    raises(lambda: retnet.train(str(tmp_path / "missing.txt"), out=str(tmp_path / "r2"), steps=1))
