#!/usr/bin/env python3
"""Alternates the items of several `make_copy_corpus.py` files into one training text, so that a
lesson learnt on one (say blocks of six-letter words) is kept while another (26 letters, corpus
lines) is learnt.

An item is a blank-line-separated piece, or a shuffled form's listing and its copy together. Each
file's training part (its text before the last 10%, which `retnet train` holds out) is alternated
with the others' (one item from each in turn, until the shortest runs out), then their validation
parts likewise, so the output's last ~10% holds only items its inputs held out. Written
atomically. Standard library only.
"""
import argparse
import sys

from make_copy_corpus import is_shuffled_copy, training_part, write_atomically


def items(text: str) -> list:
    """Blank-line-separated pieces of text, a listing and its shuffled copy kept together."""
    pieces = [p for p in text.split("\n\n") if p.strip()]
    out, i = [], 0
    while i < len(pieces):
        a = pieces[i]
        b = pieces[i + 1] if i + 1 < len(pieces) else None
        if b is not None and is_shuffled_copy(a, b):
            out.append(a + "\n\n" + b)
            i += 2
        else:
            out.append(a)
            i += 1
    return out


def split(text: str) -> tuple:
    """(training part, validation part): cut at the line start `retnet train` holds out from."""
    train = training_part(text)
    return train, text[len(train):]


def alternate(lists: list) -> list:
    n = min(len(item_list) for item_list in lists)
    return [item_list[k] for k in range(n) for item_list in lists]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="make_copy_corpus.py files (at least two)")
    ap.add_argument("--out", required=True, help="where the alternated text is written")
    args = ap.parse_args()
    if len(args.inputs) < 2:
        ap.error("give at least two input files")
    parts = []
    for path in args.inputs:
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(split(f.read()))
        except (OSError, UnicodeDecodeError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
    train = alternate([items(t) for t, _ in parts])
    val = alternate([items(v) for _, v in parts])
    if not train or not val:
        print("an input has no items in its training or validation part", file=sys.stderr)
        return 1
    out = "\n\n".join(train) + "\n\n" + "\n\n".join(val) + "\n\n"
    write_atomically(args.out, out)
    print(f"{args.out}: {len(out)} bytes, {len(train)} + {len(val)} items")
    return 0


if __name__ == "__main__":
    sys.exit(main())
