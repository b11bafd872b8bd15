"""retnet.torch.from_state_dict with Hugging Face names (flash-linear-attention's and syncdoth's),
without files: logits against the repository's PyTorch references of those layouts
(tests/python/fla_reference.py, retnet_ref.py through hf_dirs.py), and the errors it raises."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import retnet
import retnet.torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))
import fla_reference as FR  # noqa: E402
import hf_dirs  # noqa: E402

TOKENS = torch.tensor([[5, 17, 3, 200, 42, 42, 7, 99, 1, 0, 255, 13]])


@pytest.mark.parametrize("overrides", [{}, {"num_kv_heads": 2, "tie_word_embeddings": True},
                                       {"attn": {"layers": [1], "num_heads": 4}}])
def test_fla_state_dict_matches_the_reference(overrides):
    cfg = hf_dirs.fla_config(hidden=64, layers=2, heads=4, vocab=300, **overrides)
    weights = hf_dirs.init_fla_weights(cfg, seed=7)
    model = retnet.torch.from_state_dict({k: v.float() for k, v in weights.items()}, cfg)
    ref = FR.forward(weights, cfg, TOKENS[0], mode="parallel").float()
    ours = retnet.torch.logits(model, TOKENS)[0]
    assert torch.isfinite(ours).all()
    assert (ours - ref).abs().max().item() <= 1e-4 * max(1.0, ref.abs().max().item())


def test_syncdoth_state_dict_loads_as_its_directory_would(tmp_path):
    cfg = hf_dirs.syncdoth_config(vocab=256)  # a directory without tokenizer files: bytes
    weights = hf_dirs.init_syncdoth_weights(cfg, seed=3)
    from_dict = retnet.torch.from_state_dict({k: v.float() for k, v in weights.items()}, cfg)
    hf_dirs.write_model_dir(str(tmp_path / "m"), cfg, weights)
    from_dir = retnet.load(str(tmp_path / "m"))
    np.testing.assert_array_equal(from_dict.logits(TOKENS.numpy()), from_dir.logits(TOKENS.numpy()))


def test_hf_state_dict_errors():
    cfg = hf_dirs.fla_config(hidden=64, layers=1, heads=4, vocab=300)
    weights = {k: v.float() for k, v in hf_dirs.init_fla_weights(cfg, seed=1).items()}
    missing = dict(weights)
    del missing["model.layers.0.attn.q_proj.weight"]
    with pytest.raises(retnet.Error, match="q_proj"):
        retnet.torch.from_state_dict(missing, cfg)
    extra = dict(weights, **{"model.layers.9.attn.q_proj.weight": torch.zeros(2, 2)})
    with pytest.raises(retnet.Error, match="layers.9"):
        retnet.torch.from_state_dict(extra, cfg)
    with pytest.raises(retnet.Error, match="use_short_conv"):
        retnet.torch.from_state_dict(weights, dict(cfg, use_short_conv=True))
