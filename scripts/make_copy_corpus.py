#!/usr/bin/env python3
"""Writes a copy-practice corpus from a training text: its passages, each one (or each --every-th)
followed by a line that announces a repeat and the passage again with one or two small changes.

Large language models learn to copy from context because their data is full of quotation,
revision and repetition; a small model trained briefly on Tiny Shakespeare sees little of it and
writes text of its own where the context asks for a copy. Speculative decoding's benchmark trains
its targets last on this corpus so that they copy as deployed models do.

Only the text before the validation split `retnet train` holds out (the last 10%, from a line
start) is used, so prompts taken from that split stay unseen. The output is a plain text file for
`retnet train --data`; the same seed gives the same file. Standard library only.
"""
import argparse
import os
import random
import sys

# Announcements of a repeat, varied so that the model learns to copy rather than one phrase.
MARKERS = [
    "Again:",
    "Once more:",
    "The same, again:",
    "Repeat it:",
    "As it was said before:",
    "Say it once again:",
    "Now the same lines:",
    "",  # no announcement: the passage simply comes again
]


def training_part(text: str) -> str:
    """The text before the last 10% (the validation split), ended at the last line end in it."""
    cut = len(text) - len(text) // 10
    return text[: text.rfind("\n", 0, cut) + 1]


def passages(text: str, rng: random.Random, lo: int, hi: int):
    """Line-aligned stretches of lo..hi bytes, in order."""
    at = 0
    while at < len(text):
        want = rng.randint(lo, hi)
        end = text.find("\n", min(at + want, len(text)))
        end = len(text) if end < 0 else end + 1
        yield text[at:end]
        at = end


def restated(passage: str, rng: random.Random) -> str:
    """The passage with one or two small changes: a word left out, a comma made a semicolon."""
    words = passage.split(" ")
    if len(words) > 6 and rng.random() < 0.7:
        i = rng.randrange(1, len(words) - 1)
        if words[i].isalpha():
            del words[i]
    out = " ".join(words)
    if rng.random() < 0.5 and "," in out:
        i = out.index(",")
        out = out[:i] + ";" + out[i + 1:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the training text (e.g. data/tinyshakespeare.txt)")
    ap.add_argument("--out", required=True, help="where the copy-practice corpus is written")
    ap.add_argument("--min-bytes", type=int, default=64, help="shortest passage (default 64)")
    ap.add_argument("--max-bytes", type=int, default=256, help="longest passage (default 256)")
    ap.add_argument("--every", type=int, default=1,
                    help="repeat each N-th passage (default 1: every passage)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if not 16 <= args.min_bytes <= args.max_bytes:
        ap.error("need 16 <= --min-bytes <= --max-bytes")
    if args.every < 1:
        ap.error("--every must be >= 1")
    try:
        with open(args.data, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"--data {args.data}: {e}", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    out = []
    for i, p in enumerate(passages(training_part(text), rng, args.min_bytes, args.max_bytes)):
        out.append(p)
        if i % args.every == args.every - 1:
            marker = rng.choice(MARKERS)
            out.append("\n" + (marker + "\n\n" if marker else "") + restated(p.lstrip("\n"), rng) + "\n")
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(out))
    os.replace(tmp, args.out)
    print(f"{args.out}: {sum(map(len, out))} bytes from {args.data}'s training part")
    return 0


if __name__ == "__main__":
    sys.exit(main())
