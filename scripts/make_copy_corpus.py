#!/usr/bin/env python3
"""Writes copy-practice text for teaching a model to copy from its context, in one of five forms.

Large language models learn to copy from their context because their data is full of quotation,
revision and repetition: attention heads that find an earlier occurrence of the current text and
continue it ("induction heads"). A small model trained briefly on Tiny Shakespeare sees little
repetition and writes text of its own where the context asks for a copy; 2 M bytes of text whose
passages and lines of invented words were each written twice did not teach a 41M hybrid to copy
either (docs/benchmarks.md). These forms were tried next:

  --form pairs   lines of one random word written twice ("qwxhe qwxhe"), nothing else: only
                 copying predicts the second word, and it is most of the lesson. A 41M hybrid
                 continued on this learnt within ~300 steps to copy the word (21 bytes back),
                 and lost its language model meanwhile;
  --form mixed   stretches of the training text written twice (--twice of the items) or once,
                 and groups of three such word lines (--pairs of the items): meant to carry the
                 copying to natural text at longer distances while the language model is
                 relearnt. That hybrid relearnt its language model on it and kept copying the
                 word, but did not copy from 60 bytes back or more in 500 steps
                 (docs/benchmarks.md; `scripts/copy_loss.py` measures it);
  --form lines   lines of random words, --min-bytes to --max-bytes long (default 8-24), each
                 written twice on consecutive lines. Copying from far back did not form when
                 taught at once (lines of 8-160 bytes: a 2-layer model, ours or PyTorch's, stayed
                 at the letters' entropy for 900-3,000 steps), but it forms at short distance, and
                 then carries over as the distance doubles: 8-24, 8-48, 8-96, 8-192 bytes, each
                 stage started from the one before; but what carries over is "repeat the line
                 above", not copying by content (see shuffled; docs/benchmarks.md);
  --form stage   one stage of such a curriculum that keeps the language model: lines of invented
                 words written twice (--lines of the items), stretches of the training text
                 written twice (--twice; with --lead-in the second time after the copy-heavy
                 prompts' lead-in, restated with a comma made a semicolon and one word left out)
                 and stretches of 64-512 bytes once (the rest); lines and stretches twice are
                 --min-bytes to --max-bytes long. A 41M hybrid taken through 16-48, 32-96 and
                 64-192 bytes so kept its language model and copied the invented line above,
                 but not the training text (docs/benchmarks.md);
  --form shuffled  blocks of --min-lines to --max-lines lines of invented words (--min-bytes to
                 --max-bytes each, default 8-24), a blank line, then the same lines in another
                 order. Lines written twice on consecutive lines can be learnt as "repeat the
                 line above", which is of no use elsewhere; here only a line's content says
                 where its copy is, which is what copying a quoted passage needs. A 2-layer
                 model that had learnt the line above learnt this in 3,000 + 3,000 steps
                 (lines of 8-24, then 8-64 bytes), and then copied the copy-heavy prompts'
                 passages, text it had never been trained on (docs/benchmarks.md). A small
                 hybrid (retention, attention every fourth layer) learnt it with six-letter
                 words first (--letters abcdef), then those blocks alternated with 26-letter
                 and corpus ones (scripts/interleave_corpus.py): ~3,000 steps in all.
                 --text-blocks makes that share of the blocks from consecutive lines of the
                 training text, and --once that share of the items a stretch of it written
                 once: copying by content on natural text while the language model is kept.

Only the text before the validation split `retnet train` holds out (the last 10%, from a line
start) is used, so prompts taken from that split stay unseen. The output is a plain text file for
`retnet train --data`, written atomically; the same options give the same file. Standard library
only.
"""
import argparse
import os
import random
import sys

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Per form: default seed, shortest and longest stretch or line (bytes).
# A stage's default seed is derived from its lengths (min * 1000 + max), so stages differ.
FORM_DEFAULTS = {"pairs": (6, 64, 512), "mixed": (7, 64, 512), "lines": (8, 8, 24),
                 "stage": (None, 16, 48), "shuffled": (17, 8, 24)}
LEAD_IN = "\nOnce more, the same words as before:\n\n"


def training_part(text: str) -> str:
    """The text before the last 10% (the validation split), ended at the last line end in it."""
    cut = len(text) - len(text) // 10
    return text[: text.rfind("\n", 0, cut) + 1]


def write_atomically(path: str, text: str) -> None:
    """Writes text to path through a temporary file, so a reader never sees half of it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def word_pair(rng: random.Random) -> str:
    """A line of one random word of 6-24 letters, written twice."""
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(6, 24)))
    return word + " " + word + "\n"


def fill(size: int, make_item) -> str:
    """Items from make_item() until they hold at least size bytes."""
    out, n = [], 0
    while n < size:
        out.append(make_item())
        n += len(out[-1])
    return "".join(out)


def alphabet(rng: random.Random, args) -> str:
    """One of --letters' alphabets, at random (no draw when there is one, so a file made with one
    alphabet is the same as before there could be several)."""
    return args.alphabets[0] if len(args.alphabets) == 1 else rng.choice(args.alphabets)


def invented_line(rng: random.Random, min_bytes: int, max_bytes: int,
                  letters: str = LETTERS) -> str:
    """A line of random words of 2-9 of letters, min_bytes to max_bytes long (a word may
    overrun)."""
    want, line = rng.randint(min_bytes, max_bytes), ""
    while len(line) < want:
        line += (" " if line else "") + "".join(
            rng.choice(letters) for _ in range(rng.randint(2, 9)))
    return line + "\n"


def invented_line_twice(rng: random.Random, args) -> str:
    """An invented line of one of --letters' alphabets, written twice on consecutive lines."""
    line = invented_line(rng, args.min_bytes, args.max_bytes, alphabet(rng, args))
    return line + line


def mixed(rng: random.Random, text: str, args) -> str:
    out, at = [], 0
    while at < len(text):
        r = rng.random()
        if r < args.pairs:
            out.extend(word_pair(rng) for _ in range(3))
        else:
            n = rng.randint(args.min_bytes, args.max_bytes)
            item, at = text[at:at + n], at + n
            out.append(item + "\n" + item + "\n" if r < args.pairs + args.twice else item)
    return "".join(out)


def stretch(rng: random.Random, text: str, min_bytes: int, max_bytes: int) -> str:
    """About min_bytes to max_bytes of text from a random word start to a word end, then a
    newline."""
    size = rng.randint(min_bytes, max_bytes)
    start = text.find(" ", rng.randrange(0, len(text) - max_bytes - 200)) + 1
    return text[start:text.find(" ", start + size)].strip() + "\n"


def restated(rng: random.Random, passage: str) -> str:
    """passage as quoted from memory: half the time its first comma a semicolon, and one
    letters-only word of its first half left out."""
    if rng.random() < 0.5 and "," in passage:
        passage = passage.replace(",", ";", 1)
    words = passage.split(" ")
    plain = [i for i in range(1, len(words) // 2) if words[i].isalpha()]
    if plain:
        del words[rng.choice(plain)]
    return " ".join(words)


def stage(rng: random.Random, text: str, args) -> str:
    def item() -> str:
        r = rng.random()
        if r < args.lines:
            return invented_line_twice(rng, args)
        if r < args.lines + args.twice:
            passage = stretch(rng, text, args.min_bytes, args.max_bytes)
            return passage + LEAD_IN + restated(rng, passage) if args.lead_in else passage * 2
        return stretch(rng, text, 64, 512)
    return fill(args.bytes, item)


def text_lines(rng: random.Random, text_line_list: list, count: int) -> list:
    """count consecutive non-empty lines of the training text from a random place."""
    for _ in range(100_000):
        at = rng.randrange(0, len(text_line_list) - count)
        lines = text_line_list[at:at + count]
        if all(line.strip() for line in lines):
            return lines
    sys.exit(f"the training text has no run of {count} non-empty lines to make a block of")


def is_shuffled_copy(listing: str, copy: str) -> bool:
    """Whether copy is listing's lines in another order (a shuffled block's two halves)."""
    return listing != copy and sorted(listing.split("\n")) == sorted(copy.split("\n"))


def listed_then_shuffled(rng: random.Random, lines: list) -> str:
    """lines, a blank line, the same lines in another order, a blank line."""
    order = lines[:]
    while len(lines) > 1 and order == lines:
        rng.shuffle(order)
    return "".join(lines) + "\n" + "".join(order) + "\n"


def shuffled_block(rng: random.Random, args, text: str = "", text_line_list: list = None) -> str:
    """Invented lines listed then shuffled; or, --text-blocks of the time, lines of the training
    text so; or, --once of the time, a stretch of it written once."""
    if args.text_blocks or args.once:
        r = rng.random()
        if r < args.once:
            return stretch(rng, text, 64, 512) + "\n"
        if r < args.once + args.text_blocks:
            count = rng.randint(args.min_lines, args.max_lines)
            return listed_then_shuffled(rng, text_lines(rng, text_line_list, count))
    letters = alphabet(rng, args)
    return listed_then_shuffled(rng, [invented_line(rng, args.min_bytes, args.max_bytes, letters)
                                      for _ in range(rng.randint(args.min_lines, args.max_lines))])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--form", choices=sorted(FORM_DEFAULTS), required=True)
    ap.add_argument("--data", default="data/tinyshakespeare.txt",
                    help="the training text (default data/tinyshakespeare.txt)")
    ap.add_argument("--out", required=True, help="where the copy-practice text is written")
    ap.add_argument("--bytes", type=int, default=1_500_000,
                    help="pairs, lines, stage, shuffled: bytes to write (default 1500000)")
    ap.add_argument("--pairs", type=float, default=0.25,
                    help="mixed: share of the items that are three word lines (default 0.25)")
    ap.add_argument("--twice", type=float, default=0.4,
                    help="mixed, stage: share of the items that are stretches written twice "
                         "(default 0.4; the rest are written once)")
    ap.add_argument("--lines", type=float, default=0.4,
                    help="stage: share of the items that are invented lines written twice "
                         "(default 0.4)")
    ap.add_argument("--min-lines", type=int, default=3,
                    help="shuffled: fewest lines in a block (default 3)")
    ap.add_argument("--max-lines", type=int, default=6,
                    help="shuffled: most lines in a block (default 6)")
    ap.add_argument("--text-blocks", type=float, default=0.0,
                    help="shuffled: share of the blocks made of consecutive lines of the "
                         "training text instead of invented ones (default 0)")
    ap.add_argument("--once", type=float, default=0.0,
                    help="shuffled: share of the items that are a stretch of 64-512 bytes of "
                         "the training text written once, to keep the language model (default 0)")
    ap.add_argument("--letters", default=LETTERS,
                    help="lines, stage, shuffled: the letters invented words are made of "
                         "(default a-z; a few, e.g. abcdef, make a letter's successor no clue to "
                         "where a copy is); several alphabets split by commas (abcdef,"
                         "abcdefghijklmnopqrstuvwxyz): each line, or each shuffled block, takes "
                         "one at random")
    ap.add_argument("--lead-in", action="store_true",
                    help="stage: write each stretch's second time after the copy-heavy prompts' "
                         "lead-in, restated with small changes")
    ap.add_argument("--min-bytes", type=int, default=None,
                    help="mixed: shortest stretch (default 64); lines, shuffled: shortest line "
                         "(default 8); stage: shortest line and stretch written twice (default 16)")
    ap.add_argument("--max-bytes", type=int, default=None,
                    help="mixed: longest stretch (default 512); lines, shuffled: longest line "
                         "(default 24); stage: longest line and stretch written twice (default 48)")
    ap.add_argument("--seed", type=int, default=None,
                    help="random seed (default 6 for pairs, 7 for mixed, 8 for lines, 17 for "
                         "shuffled; for stage min-bytes * 1000 + max-bytes)")
    args = ap.parse_args()
    default_seed, default_min, default_max = FORM_DEFAULTS[args.form]
    if args.min_bytes is None:
        args.min_bytes = default_min
    if args.max_bytes is None:
        args.max_bytes = default_max
    if not 8 <= args.min_bytes <= args.max_bytes:
        ap.error("need 8 <= --min-bytes <= --max-bytes")
    if not (0 <= args.pairs and 0 <= args.twice and args.pairs + args.twice <= 1):
        ap.error("--pairs and --twice must be shares in [0, 1] summing to at most 1")
    if not (0 <= args.lines and args.lines + args.twice <= 1):
        ap.error("--lines and --twice must be shares in [0, 1] summing to at most 1")
    if not (0 <= args.text_blocks and 0 <= args.once and args.text_blocks + args.once <= 1):
        ap.error("--text-blocks and --once must be shares in [0, 1] summing to at most 1")
    if not 1 <= args.min_lines <= args.max_lines:
        ap.error("need 1 <= --min-lines <= --max-lines")
    args.alphabets = args.letters.split(",")
    if not all(a and " " not in a and a.isascii() and a.isprintable() for a in args.alphabets):
        ap.error("--letters must be alphabets of printable ASCII without spaces, split by commas")
    if args.bytes < 1:
        ap.error("--bytes must be positive")
    if default_seed is None:
        default_seed = args.min_bytes * 1000 + args.max_bytes
    rng = random.Random(args.seed if args.seed is not None else default_seed)
    if args.form == "pairs":
        out = fill(args.bytes, lambda: word_pair(rng))
    elif args.form == "lines":
        out = fill(args.bytes, lambda: invented_line_twice(rng, args))
    elif args.form == "shuffled" and not (args.text_blocks or args.once):
        out = fill(args.bytes, lambda: shuffled_block(rng, args))
    else:
        try:
            with open(args.data, encoding="utf-8") as f:
                text = training_part(f.read())
        except (OSError, UnicodeDecodeError) as e:
            print(f"--data {args.data}: {e}", file=sys.stderr)
            return 1
        if args.form == "stage" and len(text) < max(args.max_bytes, 512) + 1000:
            print(f"--data {args.data}: its training part ({len(text)} bytes) is too short for "
                  f"stretches of {args.max_bytes} bytes", file=sys.stderr)
            return 1
        if args.form == "shuffled":
            text_line_list = text.splitlines(keepends=True)
            if len(text_line_list) < args.max_lines + 1000:
                print(f"--data {args.data}: its training part has too few lines", file=sys.stderr)
                return 1
            out = fill(args.bytes, lambda: shuffled_block(rng, args, text, text_line_list))
        elif args.form == "mixed":
            out = mixed(rng, text, args)
        else:
            out = stage(rng, text, args)
    write_atomically(args.out, out)
    print(f"{args.out}: {len(out)} bytes ({args.form})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
