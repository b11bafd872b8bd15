"""Model: config, save/load, logits of every form, loss and gradients, against the CLI."""
import json

import numpy as np
import pytest
import torch

import retnet
from conftest import SMALL, read_safetensors, run_cli

TOKENS = [5, 17, 3, 200, 42, 42, 7, 99, 1, 0, 255, 13, 64, 31, 8, 120, 77, 6, 250, 9]


def test_config_and_sizes(model):
    c = model.config
    assert c["decoder_embed_dim"] == 64 and c["decoder_layers"] == 2
    assert model.num_parameters == sum(a.size for a in model.state_dict().values())
    assert model.state_bytes == 4 * 2 * 2 * 32 * (64 + 1)  # layers, heads, d_k x (d_v + 1)
    assert model.tokenizer.kind == "bytes" and model.tokenizer.vocab_size == 256


def test_save_load_round_trip(model, tmp_path):
    path = tmp_path / "copy.safetensors"
    model.save(str(path))
    again = retnet.load(str(path))
    assert again.config == model.config
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[name], value)


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunkwise", "scan"])
def test_logits_match_cli(fresh_model, model_path, cli, tmp_path, form):
    out = tmp_path / "logits.npy"
    run_cli(cli, "logits", "-m", model_path, "--tokens", ",".join(map(str, TOKENS)), "--mode", form,
            "-o", out)
    ours = fresh_model.logits(TOKENS, form=form)
    assert ours.shape == (1, len(TOKENS), 256) and ours.dtype == np.float32
    np.testing.assert_array_equal(ours[0], np.load(out))


def test_forms_agree_and_batches(model):
    tokens = np.array([TOKENS, TOKENS[::-1]], dtype=np.int64)
    parallel = model.logits(tokens)
    assert parallel.shape == (2, len(TOKENS), 256)
    assert np.isfinite(parallel).all()
    for form, chunk in [("recurrent", None), ("chunkwise", 3), ("chunkwise", None), ("scan", None)]:
        np.testing.assert_allclose(model.logits(tokens, form=form, chunk=chunk), parallel,
                                   atol=2e-4, rtol=1e-4)
    np.testing.assert_array_equal(model.logits(tokens[1])[0], parallel[1])
    # A PyTorch tensor goes in through the array interface.
    np.testing.assert_array_equal(model.logits(torch.tensor(tokens)), parallel)


def test_loss_and_grad_match_cli(fresh_model, model_path, cli, tmp_path):
    model = fresh_model
    out = tmp_path / "grad.safetensors"
    run_cli(cli, "grad", "-m", model_path, "--tokens", ",".join(map(str, TOKENS)), "-o", out)
    theirs, meta = read_safetensors(out)
    loss, grads = model.grad(TOKENS)
    assert loss == pytest.approx(float(meta["loss"]), abs=1e-12)
    assert model.loss(TOKENS) == pytest.approx(loss, abs=1e-12)
    assert set(grads) == set(theirs)
    for name, g in grads.items():
        # Threads split the backward's weight-gradient sums differently run to run (~1e-7).
        np.testing.assert_allclose(g, theirs[name], rtol=1e-4, atol=1e-6)
    assert any(np.abs(g).max() > 0 for g in grads.values())


def test_grad_matches_finite_difference(model):
    """The gradient of one embedding row against a central difference of the loss."""
    loss, grads = model.grad(TOKENS)
    weights = model.state_dict()
    row = TOKENS[0]
    g = grads["embed_tokens.weight"][row]
    i = int(np.argmax(np.abs(g)))
    eps = 1e-2
    def loss_at(delta):
        w = {k: v.copy() for k, v in weights.items()}
        w["embed_tokens.weight"][row, i] += delta
        return retnet.from_arrays(model.config, w).loss(TOKENS)
    numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
    assert numeric == pytest.approx(float(g[i]), rel=2e-2, abs=1e-4)


def test_init_is_seeded_and_config_json(tmp_path):
    a = retnet.init(SMALL, seed=3).state_dict()
    b = retnet.init(SMALL, seed=3).state_dict()
    c = retnet.init(SMALL, seed=4).state_dict()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["embed_tokens.weight"], c["embed_tokens.weight"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    assert retnet.init(str(path), seed=3).config == retnet.init(SMALL, seed=3).config


def test_from_arrays_is_the_same_model(fresh_model):
    model = fresh_model
    rebuilt = retnet.from_arrays(model.config, model.state_dict())
    np.testing.assert_array_equal(rebuilt.logits(TOKENS), model.logits(TOKENS))



@pytest.mark.parametrize("dtype,bound", [("f32", 1e-5), ("bf16", 1.5e-2), ("float16", 2e-3)])
def test_load_with_an_inference_dtype(model_path, fresh_model, dtype, bound):
    """dtype keeps one inference copy: logits within the engine's stated bound of float32's,
    relative to the largest logit; what needs the float32 originals raises retnet.Error."""
    exact = fresh_model.logits(TOKENS)
    half = retnet.load(str(model_path), dtype=dtype)
    got = half.logits(TOKENS)
    assert np.isfinite(got).all()
    assert np.abs(got - exact).max() <= bound * np.abs(exact).max()
    with pytest.raises(retnet.Error):
        half.grad(TOKENS)


def test_reference_backend_gives_the_cpu_logits(model_path, fresh_model):
    reference = retnet.load(str(model_path), backend="reference")
    want = np.asarray(fresh_model.logits(TOKENS), dtype=np.float64)
    got = np.asarray(reference.logits(TOKENS), dtype=np.float64)
    assert np.isfinite(got).all() and np.isfinite(want).all()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    with pytest.raises(retnet.Error, match="backend 'cuda'.*cpu, reference"):
        retnet.load(str(model_path), backend="cuda")
