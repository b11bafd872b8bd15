#!/usr/bin/env python3
"""Does a byte-level model copy the held-out blocks of a `make_copy_corpus.py --form shuffled` file
by content? Prints its loss (nats per byte) on the blocks' first listing and on their shuffled
copy, the share of the copy's bytes that are the model's first choice, and the copy's loss by byte
offset in its line.

Each line's first byte is left out (which line comes next is a guess). A model that has found the
line it copies gets surer with each byte of it, so its loss falls along the line; one that only
remembers which letters followed which in the block scores about alike at every offset. --zero
PATTERN scores a copy of the model with every tensor whose name holds PATTERN zeroed (e.g.
layers.3.attention.out_proj: the 4th layer's attention adds nothing), to see which layers carry
the copy. Blocks come from the validation split (the last 10% of --data, which `retnet train`
holds out). The model is run with `retnet logits` (chunkwise). Needs numpy (Debian: python3-numpy,
with /usr/bin/python3).
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np

from byte_logits import next_byte_scores
from make_copy_corpus import is_shuffled_copy


def block_pairs(text: str) -> list:
    """(listing, shuffled copy) pairs of the validation split: neighbouring blank-line-separated
    pieces that hold the same lines in another order."""
    pieces = text[len(text) - len(text) // 10:].split("\n\n")[1:-1]
    pairs, i = [], 0
    while i + 1 < len(pieces):
        a, b = pieces[i], pieces[i + 1]
        if is_shuffled_copy(a, b):
            pairs.append((a, b))
            i += 2
        else:
            i += 1
    return pairs


def zeroed_copy(model: str, patterns: list, out: str) -> list:
    """Writes model with the tensors whose names hold any of patterns zeroed; their names."""
    with open(model, "rb") as f:
        data = bytearray(f.read())
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    names = []
    for name, info in header.items():
        if name != "__metadata__" and any(p in name for p in patterns):
            begin, end = info["data_offsets"]
            data[8 + size + begin:8 + size + end] = bytes(end - begin)
            names.append(name)
    with open(out, "wb") as f:
        f.write(data)
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a byte-level model (.safetensors file)")
    ap.add_argument("--data", required=True, help="a shuffled-blocks file")
    ap.add_argument("--retnet", default="build/retnet", help="the retnet binary")
    ap.add_argument("--blocks", type=int, default=12, help="blocks scored (default 12)")
    ap.add_argument("--skip", type=int, default=5,
                    help="blocks of the validation split passed over first (default 5)")
    ap.add_argument("--zero", action="append", default=[], metavar="PATTERN",
                    help="zero the tensors whose names hold PATTERN (repeatable)")
    args = ap.parse_args()
    try:
        with open(args.data, encoding="utf-8") as f:
            pairs = block_pairs(f.read())
    except (OSError, UnicodeDecodeError) as e:
        print(f"--data {args.data}: {e}", file=sys.stderr)
        return 1
    pairs = pairs[args.skip:args.skip + args.blocks]
    if len(pairs) < args.blocks:
        print(f"--data {args.data}: its validation split holds fewer than "
              f"{args.skip + args.blocks} shuffled blocks", file=sys.stderr)
        return 1
    first, copy, by_offset = [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if args.zero:
            model = os.path.join(tmp, "zeroed.safetensors")
            try:
                names = zeroed_copy(args.model, args.zero, model)
            except (OSError, ValueError, KeyError, struct.error) as e:
                print(f"{args.model}: cannot read it as safetensors: {e}", file=sys.stderr)
                return 1
            if not names:
                print(f"--zero: no tensor of {args.model} has {args.zero} in its name",
                      file=sys.stderr)
                return 1
            print("zeroed: " + ", ".join(names))
        for listing, shuffled in pairs:
            ids = list((listing + "\n\n" + shuffled + "\n").encode())
            split = len((listing + "\n\n").encode())
            try:
                logits, logp = next_byte_scores(args.retnet, model, ids, tmp)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                return 1
            offset = 0
            for i in range(1, len(ids)):
                offset = 0 if ids[i - 1] == 10 else offset + 1
                if offset == 0:
                    continue
                row = (-logp[i - 1, ids[i]], logits[i - 1].argmax() == ids[i])
                if i < split:
                    first.append(row)
                else:
                    copy.append(row)
                    by_offset.setdefault(min(offset, 12), []).append(row)
    a, b = np.mean(first, axis=0), np.mean(copy, axis=0)
    print(f"first listing {a[0]:.2f} nats/byte, shuffled copy {b[0]:.2f} "
          f"(copy's bytes the model's first choice: {100 * b[1]:.0f}%; {len(pairs)} blocks)")
    print("copy by byte of its line: " + "  ".join(
        f"{k + 1}{'+' if k == 12 else ''}: {np.mean(v, axis=0)[0]:.2f}"
        for k, v in sorted(by_offset.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
