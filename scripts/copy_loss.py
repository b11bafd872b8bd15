#!/usr/bin/env python3
"""Does a byte-level model copy from its context? Prints its loss (nats per byte) on the first
and on the second copy of text written twice, in five settings:

  sameline  a random word of 20 letters and the same word after a space (21 bytes back);
  invented  a line of random words (~60 bytes) written again on the next line;
  skipped   such a line, another such line, then the first again (~120 bytes back): only its
            content says where the copy is, where "invented" can also be learnt as "repeat the
            line above";
  corpus    120 bytes of the validation split written again on the next line;
  prompt    the shape of `retnet bench speculative --benefit`'s copy-heavy prompts: ~480 bytes
            of the validation split, the lead-in "Once more, the same words as before:" and the
            passage's first quarter restated (its first comma a semicolon); scored over the rest
            of the passage, ~520 bytes back.

Each of the first three follows ~300 bytes of the validation split (the last 10% of --data, which
`retnet train` holds out). A model that copies at that distance predicts the second copy far
better than the first (near 0 for random letters); one that does not scores both alike. Beside
the losses it prints the share of the second copy's bytes that are the model's most likely next
byte: what greedy prompt lookup needs to keep its drafts. The model is run with `retnet logits`
(chunkwise); the positions and texts come from --seed, so two models can be compared on the same
ones. Needs numpy (Debian: python3-numpy, with /usr/bin/python3).
"""
import argparse
import random
import sys
import tempfile

import numpy as np

from byte_logits import next_byte_scores

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

    def words(size, rng=rng):
        line = ""
        while len(line) < size:
            line += (" " if line else "") + "".join(
                rng.choice(LETTERS) for _ in range(rng.randint(2, 9)))
        return line

    # The later kinds draw from generators of their own, so the first three kinds' texts stay put.
    skip_rng, prompt_rng = random.Random(args.seed + 2), random.Random(args.seed + 1)

    def prompt_shape():
        """A passage from a line start, the lead-in, its first quarter restated; the rest."""
        start = val.find("\n", prompt_rng.randint(0, len(val) - 1500)) + 1
        passage = val[start:val.find("\n", start + 480) + 1]
        cut = passage.rfind(" ", 0, len(passage) // 4) + 1
        head = passage[:cut].replace(",", ";", 1)
        lead = passage + "\nOnce more, the same words as before:\n\n" + head
        return passage[:cut], passage[cut:], lead

    losses = {"sameline": [], "invented": [], "skipped": [], "corpus": [], "prompt": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.trials):
            for kind in losses:
                if kind == "prompt":
                    # Scored as a copy of the passage's rest: first reading, then after lead.
                    before, item, lead = prompt_shape()
                    seq = lead + item
                    first, second = len(before.encode()) - 1, len(lead.encode()) - 1
                    n = len(item.encode()) + 1
                    ids = list(seq.encode())
                    assert ids[first + 1:first + n] == ids[second + 1:second + n]
                elif kind == "skipped":
                    start = val.find("\n", skip_rng.randint(0, len(val) - 2000)) + 1
                    lead = val[start:val.find("\n", start + 300) + 1]
                    item, other = words(60, skip_rng), words(60, skip_rng)
                    seq = lead + item + "\n" + other + "\n" + item + "\n"
                    ids = list(seq.encode())
                    n = len(item.encode())
                    first = len(lead.encode())
                    second = len(ids) - n - 1
                else:
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
                try:
                    logits, logp = next_byte_scores(args.retnet, args.model, ids, tmp)
                except RuntimeError as e:
                    print(e, file=sys.stderr)
                    return 1

                def loss(at):  # the copy's bytes after its first, each predicted from before it
                    return -np.mean([logp[i - 1, ids[i]] for i in range(at + 1, at + n)])

                hits = np.mean([logits[i - 1].argmax() == ids[i]
                                for i in range(second + 1, second + n)])
                losses[kind].append((loss(first), loss(second), hits))
    for kind, rows in losses.items():
        a, b, hit = np.mean(rows, axis=0)
        print(f"{kind:9s} first copy {a:.2f}  second copy {b:.2f} nats/byte  "
              f"(second copy's bytes the model's first choice: {100 * hit:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
