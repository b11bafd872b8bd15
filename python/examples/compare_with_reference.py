"""The engine next to the repository's independent PyTorch reference (tests/python/retnet_ref.py):
one set of weights, drawn by the reference in float64, is handed to the engine as a state_dict (no
file); logits of every form and the gradient of the loss are compared.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/compare_with_reference.py
"""
import sys
from pathlib import Path

import torch

import retnet
import retnet.torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "python"))
import retnet_ref  # noqa: E402

config = retnet_ref.make_config(d=64, value_dim=128, H=4, ffn=128, layers=2, vocab=300, eps=1e-6,
                                act="gelu", recurrent_chunk_size=5)
weights = retnet_ref.init_weights(config, seed=3, qk_gain=4.0)  # float64, scores exercise c_n
model = retnet.torch.from_state_dict(retnet_ref.cast(weights, torch.float32), config)

tokens = torch.randint(0, 300, (2, 23), generator=torch.Generator().manual_seed(0))
worst = 0.0
for form in ("parallel", "recurrent", "chunkwise"):
    ref = retnet_ref.forward(weights, config, tokens, mode=form).float()
    ours = retnet.torch.logits(model, tokens, form=form)
    diff = (ours - ref).abs().max().item()
    worst = max(worst, diff)
    print(f"logits {form:9s}: max |engine - reference| = {diff:.2e}")

seq = tokens[0].tolist()
leaf = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
ref_loss = retnet_ref.loss(leaf, config, seq)
ref_loss.backward()
loss, grads = retnet.torch.grad(model, seq)
print(f"loss: engine {loss:.9f}, reference {ref_loss.item():.9f}")
gdiff = max(((grads[k].double() - leaf[k].grad).abs().max() /
             leaf[k].grad.abs().max().clamp_min(1e-12)).item() for k in grads)
print(f"gradients: worst relative difference over {len(grads)} tensors = {gdiff:.2e}")
ok = worst < 1e-3 and abs(loss - ref_loss.item()) < 1e-4 and gdiff < 1e-3
print("agree" if ok else "DISAGREE")
sys.exit(0 if ok else 1)
