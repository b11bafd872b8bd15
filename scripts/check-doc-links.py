#!/usr/bin/env python3
"""Checks the relative links and images of README.md and docs/*.md: every target file exists and
every #anchor names a heading of its file (GitHub's anchor rules). Exit status 1 on a broken one."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        title = line.lstrip("#").strip().lower()
        title = re.sub(r"[^\w\- ]", "", title)
        out.add(title.replace(" ", "-"))
    return out


bad = 0
files = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
for f in files:
    for target in LINK.findall(f.read_text()):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        dest = (f.parent / path).resolve() if path else f
        if not dest.exists():
            print(f"{f.relative_to(ROOT)}: missing {target}")
            bad += 1
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            print(f"{f.relative_to(ROOT)}: no heading for #{anchor} in {path or f.name}")
            bad += 1
print(f"checked {len(files)} files: {'all links resolve' if not bad else f'{bad} broken'}")
sys.exit(1 if bad else 0)
