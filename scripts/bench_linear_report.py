#!/usr/bin/env python3
"""Markdown table for bench_linear_attention's JSON: per T and mixer, the median forward time of each
form (coefficient of variation of the repetitions in brackets) and the ratio against retention's
chunkwise form measured at the same T in the same run. Usage: bench_linear_report.py FILE.json"""
import json
import re
import sys
from collections import defaultdict

FORMS = ["parallel", "recurrent", "chunkwise"]


def main(path):
    with open(path) as f:
        data = json.load(f)
    cell = defaultdict(dict)  # (T, mixer) -> form -> (median ms, cv)
    for b in data["benchmarks"]:
        if b.get("run_type") != "aggregate" or b["aggregate_name"] not in ("median", "cv"):
            continue
        T = int(re.search(r"T:(\d+)", b["run_name"]).group(1))
        mixer, form = b["label"].split("/")
        entry = cell[(T, mixer)].setdefault(form, [None, None])
        entry[0 if b["aggregate_name"] == "median" else 1] = b["real_time"]
    ctx = data["context"]
    print(f"host {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs, {ctx.get('date')}, "
          f"load average {ctx.get('load_avg')}\n")
    print("| T | mixer | parallel ms | recurrent ms | chunkwise ms | chunkwise / retention chunkwise |")
    print("|---|---|---|---|---|---|")
    for (T, mixer) in sorted(cell, key=lambda k: (k[0], k[1] != "retention", k[1])):
        forms = cell[(T, mixer)]
        base = cell[(T, "retention")]["chunkwise"][0]
        cols = []
        for f in FORMS:
            med, cv = forms.get(f, (None, None))
            cols.append("-" if med is None else f"{med:.2f} ({100 * cv:.0f}%)")
        ratio = forms["chunkwise"][0] / base
        print(f"| {T} | {mixer} | " + " | ".join(cols) + f" | {ratio:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
