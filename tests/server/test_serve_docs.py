"""docs/server.md against the binary: the options it documents are `retnet serve`'s.

    /usr/bin/python3 test_serve_docs.py --retnet build/retnet --docs docs/server.md

Checks: every flag in the Options table exists in `retnet serve --help`, every flag of the help
has a row in the table, and every flag named in the sections about the server itself, before the
benchmarks (in backquotes, or on a command line that runs `retnet serve`), is one of its flags."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import check, finish, parse_args  # noqa: E402

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def help_flags(retnet):
    out = subprocess.run([retnet, "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    flags = set()
    for line in out.stdout.splitlines():
        m = re.match(r"^  (-[^\s]+)", line)  # an option's names, before its type and text
        if m:
            flags.update(name for name in m.group(1).split(",") if name)
    return flags - {"-h", "--help"}


def sections(text):
    """{title: body} of the `## ` sections."""
    out, title = {}, ""
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = []
        elif title:
            out[title].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def main():
    a = parse_args(("--docs", {"required": True}))
    served = help_flags(a.retnet)
    check({"--model", "-m", "--parallel", "--port"} <= served,
          f"the help's option names are read: {sorted(served)}")
    docs = sections(open(a.docs).read())
    table = set()
    for row in docs.get("Options", "").splitlines():
        if row.startswith("| `-"):
            table.update(FLAG.findall(row.split("|")[1]))
    check(table - served == set(),
          f"options documented but not in `retnet serve --help`: {sorted(table - served)}")
    check(served - table == set(),
          f"options of `retnet serve --help` missing from the Options table: "
          f"{sorted(served - table)}")
    named = set()
    for title, body in docs.items():
        if title.startswith("`retnet bench serve`"):
            break  # the benchmarks name the bench commands' own flags
        # Command lines in code blocks that run the server, then inline code in the prose.
        for block in re.findall(r"```[a-z]*\n(.*?)```", body, re.S):
            for line in block.splitlines():
                if re.search(r"retnet serve\b", line):
                    named.update(f for f in FLAG.findall(line) if f.startswith("--"))
        prose = re.sub(r"```.*?```", "", body, flags=re.S)
        for quoted in re.findall(r"`([^`]*)`", prose):
            named.update(f for f in FLAG.findall(quoted) if f.startswith("--"))
    check(named - served == set(),
          f"flags named in docs/server.md's server sections but not served: "
          f"{sorted(named - served)}")
    finish("docs/server.md options")


if __name__ == "__main__":
    main()
