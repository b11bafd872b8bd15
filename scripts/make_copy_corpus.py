#!/usr/bin/env python3
"""Writes a copy-practice corpus from a training text: short stretches of it, and lines of
invented words, each written twice.

Large language models learn to copy from their context because their data is full of quotation,
revision and repetition: attention heads that find an earlier occurrence of the current text and
continue it ("induction heads"). A small model trained briefly on Tiny Shakespeare sees little
repetition and writes text of its own where the context asks for a copy; on natural text alone
those heads form only after far more tokens than two cores train in hours. Text written twice
makes copying most of the lesson, and the invented words (which nothing but the first copy
predicts) make it the only way to learn it. It is for continuing a target of speculative
decoding's benchmark (`retnet train --init-from`) until it copies, as deployed models do; how far
78 minutes of it got a 41M hybrid is in docs/benchmarks.md.

Only the text before the validation split `retnet train` holds out (the last 10%, from a line
start) is used, so prompts taken from that split stay unseen. The output is a plain text file for
`retnet train --data`, written atomically; the same seed gives the same file. Standard library
only.
"""
import argparse
import os
import random
import sys

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def training_part(text: str) -> str:
    """The text before the last 10% (the validation split), ended at the last line end in it."""
    cut = len(text) - len(text) // 10
    return text[: text.rfind("\n", 0, cut) + 1]


def invented_line(rng: random.Random, lo: int, hi: int) -> str:
    """Words of random letters, lo..hi bytes in all."""
    want, line = rng.randint(lo, hi), ""
    while len(line) < want:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 9)))
        line += (" " if line else "") + word
    return line + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the training text (e.g. data/tinyshakespeare.txt)")
    ap.add_argument("--out", required=True, help="where the copy-practice corpus is written")
    ap.add_argument("--min-bytes", type=int, default=24, help="shortest stretch (default 24)")
    ap.add_argument("--max-bytes", type=int, default=256, help="longest stretch (default 256)")
    ap.add_argument("--invented", type=float, default=0.35,
                    help="share of the items that are lines of invented words (default 0.35)")
    ap.add_argument("--seed", type=int, default=4)
    args = ap.parse_args()
    if not 8 <= args.min_bytes <= args.max_bytes:
        ap.error("need 8 <= --min-bytes <= --max-bytes")
    if not 0 <= args.invented < 1:
        ap.error("--invented must be in [0, 1)")
    try:
        with open(args.data, encoding="utf-8") as f:
            text = training_part(f.read())
    except (OSError, UnicodeDecodeError) as e:
        print(f"--data {args.data}: {e}", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    out, at = [], 0
    while at < len(text):
        if rng.random() < args.invented:
            item = invented_line(rng, 16, 120)
        else:
            n = rng.randint(args.min_bytes, args.max_bytes)
            item, at = text[at:at + n], at + n
        out.append(item + "\n" + item + "\n")
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(out))
    os.replace(tmp, args.out)
    print(f"{args.out}: {sum(map(len, out))} bytes from {args.data}'s training part")
    return 0


if __name__ == "__main__":
    sys.exit(main())
