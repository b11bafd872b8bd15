#!/usr/bin/env python3
"""Does a byte-level model copy from its context? Prints its loss (nats per byte) on the first
and on the second copy of text written twice, at three distances:

  sameline  a random word of 20 letters and the same word after a space (21 bytes back);
  invented  a line of random words (~60 bytes) written again on the next line;
  corpus    120 bytes of the validation split written again on the next line.

Each follows ~300 bytes of the validation split (the last 10% of --data, which `retnet train`
holds out). A model that copies at that distance predicts the second copy far better than the
first (near 0 for random letters); one that does not scores both alike. The model is run with
`retnet logits` (chunkwise); the positions and texts come from --seed, so two models can be
compared on the same ones. Needs numpy (Debian: python3-numpy, with /usr/bin/python3).
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a byte-level model (.safetensors or a directory)")
    ap.add_argument("--data", default="data/tinyshakespeare.txt")
    ap.add_argument("--retnet", default="build/retnet", help="the retnet binary")
    ap.add_argument("--trials", type=int, default=3, help="texts of each kind (default 3)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    try:
        with open(args.data, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"--data {args.data}: {e}", file=sys.stderr)
        return 1
    val = text[len(text) - len(text) // 10:]
    if len(val) < 2500:
        print(f"--data {args.data}: its validation split is too short", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)

    def words(size):
        line = ""
        while len(line) < size:
            line += (" " if line else "") + "".join(
                rng.choice(LETTERS) for _ in range(rng.randint(2, 9)))
        return line

    losses = {"sameline": [], "invented": [], "corpus": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.trials):
            for kind in losses:
                lead = val[rng.randint(0, len(val) - 2000):][:300] + "\n"
                if kind == "sameline":
                    item = "".join(rng.choice(LETTERS) for _ in range(20))
                    seq = lead + item + " " + item + "\n"
                else:
                    item = words(60) if kind == "invented" else \
                        val[rng.randint(0, len(val) - 400):][:120]
                    seq = lead + item + "\n" + item + "\n"
                ids = list(seq.encode())
                n = len(item.encode())
                first = len(lead.encode())
                second = first + n + 1
                out = os.path.join(tmp, "logits.npy")
                run = subprocess.run([args.retnet, "logits", "-m", args.model, "--tokens",
                                      ",".join(map(str, ids)), "-o", out, "-t", "1",
                                      "--mode", "chunkwise"], capture_output=True, text=True)
                if run.returncode != 0:
                    print(f"retnet logits failed: {run.stderr.strip()}", file=sys.stderr)
                    return 1
                logits = np.load(out).astype(np.float64)
                logp = logits - logits.max(1, keepdims=True)
                logp -= np.log(np.exp(logp).sum(1, keepdims=True))

                def loss(at):  # the copy's bytes after its first, each predicted from before it
                    return -np.mean([logp[i - 1, ids[i]] for i in range(at + 1, at + n)])

                losses[kind].append((loss(first), loss(second)))
    for kind, pairs in losses.items():
        a, b = np.mean(pairs, axis=0)
        print(f"{kind:9s} first copy {a:.2f}  second copy {b:.2f} nats/byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
