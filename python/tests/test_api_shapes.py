"""The API in the ecosystem's shapes: __version__, the Error's name, Model as a context manager,
generate's result object, token-id prompts, TypeErrors naming the argument, seeds."""
import copy
import pickle
import re
import subprocess

import numpy as np
import pytest

import retnet


def test_version_matches_the_command(cli):
    out = subprocess.run([cli, "--version"], check=True, capture_output=True, text=True).stdout
    assert re.search(r"\d+\.\d+\.\d+", out).group(0) == retnet.__version__


def test_error_prints_as_retnet_error():
    assert f"{retnet.Error.__module__}.{retnet.Error.__qualname__}" == "retnet.Error"


def test_model_is_a_context_manager(model_path):
    with retnet.load(str(model_path)) as m:
        assert not m.closed
        text = m.generate("Hi", max_tokens=4, seed=1)
    assert m.closed
    for use in [lambda: m.generate("Hi"), lambda: m.logits([1, 2]), lambda: m.config,
                lambda: retnet.Session(m), lambda: m._generate(["Hi"], 4, 0.8, 40, 0.95, None, 1,
                                                                False, 1.0, 64, None, False, 0.0,
                                                                0.0, 0.0)]:
        with pytest.raises(retnet.Error, match="closed"):
            use()
    m.close()  # closing twice is harmless
    assert isinstance(text, str)


def test_close_leaves_running_sessions_working(model_path):
    m = retnet.load(str(model_path))
    s = retnet.Session(m)
    s.add_sequence()
    s.prefill(0, [1, 2, 3])
    m.close()
    assert 0 <= s.sample(0, temperature=0) < s.logits(0).shape[0]


def test_generate_returns_a_result(model):
    r = model.generate("Hello", max_tokens=12, seed=2, ignore_eos=True)
    assert isinstance(r, retnet.Completion) and isinstance(r, str)
    assert str(r) == r.text and r.text == r
    assert r.finish_reason == "length"
    assert len(r.tokens) == 12 and r.usage["completion_tokens"] == 12
    assert r.usage["prompt_tokens"] == (len(model.tokenizer.encode("Hello"))
                                        + (1 if model.tokenizer.adds_bos else 0))
    assert r.usage["total_tokens"] == r.usage["prompt_tokens"] + 12
    # The tokens decode to the text (byte-level tokenizer: no merges across tokens).
    assert model.tokenizer.decode(r.tokens) == r.text
    for copied in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r)):
        assert (copied, copied.tokens, copied.finish_reason, copied.usage) == (
            r, r.tokens, r.finish_reason, r.usage)


def test_stop_finish_reason(model):
    text = model.generate("Hello", max_tokens=40, seed=5, temperature=0)
    stop = next(ch for ch in text[3:] if ch.isascii() and ch.isprintable())
    r = model.generate("Hello", max_tokens=40, seed=5, temperature=0, stop=stop)
    assert r.finish_reason == "stop" and r.text == text[:text.index(stop)]


def test_token_id_prompts(model):
    ids = model.tokenizer.encode("Hello")
    by_text = model.generate("Hello", max_tokens=10, seed=3, add_bos=False)
    by_ids = model.generate(ids, max_tokens=10, seed=3)
    assert by_ids == by_text and by_ids.tokens == by_text.tokens
    assert by_ids.usage["prompt_tokens"] == len(ids)
    assert model.generate(tuple(ids), max_tokens=10, seed=3) == by_text
    with pytest.raises(retnet.Error, match="outside"):
        model.generate([1, model.vocab_size], max_tokens=2)
    with pytest.raises(retnet.Error, match="prompt"):
        model.generate([], max_tokens=2)


def test_max_new_tokens_alias(model):
    assert (model.generate("Hi", max_new_tokens=7, seed=1, ignore_eos=True).usage
            == model.generate("Hi", max_tokens=7, seed=1, ignore_eos=True).usage)


@pytest.mark.parametrize("call, name", [
    (lambda m: m.generate(42), "prompt"),
    (lambda m: m.generate([1, "a"]), "prompt"),
    (lambda m: m.generate("x", max_tokens="5"), "max_tokens"),
    (lambda m: m.generate("x", max_tokens=5.0), "max_tokens"),
    (lambda m: m.generate("x", temperature="hot"), "temperature"),
    (lambda m: m.generate("x", stop=3), "stop"),
    (lambda m: m.generate("x", seed="1"), "seed"),
    (lambda m: m.generate("x", add_bos=1), "add_bos"),
    (lambda m: m.generate("x", stream="yes"), "stream"),
    (lambda m: m.generate_batch("x"), "prompts"),
    (lambda m: m.generate_batch(["x", 2]), r"prompts\[1\]"),
])
def test_wrong_types_name_the_argument(model, call, name):
    with pytest.raises(TypeError, match=name) as info:
        call(model)
    assert "incompatible function arguments" not in str(info.value)


def test_stream_carries_the_result(model):
    it = model.generate("Hello", max_tokens=20, seed=3, stream=True)
    pieces = list(it)  # (generation runs ahead of the reader: .result may be set before this)
    whole = model.generate("Hello", max_tokens=20, seed=3)
    assert "".join(pieces) == whole == it.result
    assert it.result.tokens == whole.tokens and it.result.usage == whole.usage


def test_session_sample_draws_a_random_seed(model):
    s = retnet.Session(model)
    s.add_sequence()
    s.prefill(0, model.tokenizer.encode("Hello"))
    seeded = {s.sample(0, seed=5, temperature=1.5, top_k=0, top_p=1.0) for _ in range(3)}
    assert len(seeded) == 1
    drawn = {s.sample(0, temperature=1.5, top_k=0, top_p=1.0) for _ in range(40)}
    assert len(drawn) > 1


def test_batched_text_equals_its_solo_run(model):
    prompts = ["Hello", "Good", "Once upon"]
    batch = model.generate_batch(prompts, max_tokens=20, seed=4, ignore_eos=True)
    for prompt, result in zip(prompts, batch):
        solo = model.generate(prompt, max_tokens=20, seed=4, ignore_eos=True)
        assert result == solo and result.tokens == solo.tokens
