"""A byte-level model's next-byte scores at every position of a text, from `retnet logits`
(chunkwise): what copy_loss.py and block_copy.py read. Needs numpy."""
import os
import subprocess

import numpy as np


def next_byte_scores(retnet: str, model: str, ids: list, tmp: str):
    """(logits, log-probabilities), float64, one row per position of ids: row i scores ids[i + 1].
    Raises RuntimeError with retnet's message when it fails."""
    out = os.path.join(tmp, "logits.npy")
    run = subprocess.run([retnet, "logits", "-m", model, "--tokens", ",".join(map(str, ids)),
                          "-o", out, "-t", "2", "--mode", "chunkwise"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"retnet logits failed: {run.stderr.strip()}")
    logits = np.load(out).astype(np.float64)
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    return logits, logp
