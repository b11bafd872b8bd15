#!/usr/bin/env python3
"""Turns Google Benchmark JSON files into markdown tables: medians (with the min-max spread of the
repetitions) and ratios against the baseline measured in the same run."""
import json
import re
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = defaultdict(dict)
    for b in data["benchmarks"]:
        if b.get("run_type") != "aggregate":
            continue
        name = b["run_name"]
        rows[name][b["aggregate_name"]] = b
    return data["context"], rows


def args_of(name):
    return dict(re.findall(r"(\w+):(\d+)", name))


def context_line(ctx):
    return (f"host {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, "
            f"{ctx.get('date')}")


def gemm_table(path):
    ctx, rows = load(path)
    print(f"### GEMM ({context_line(ctx)})\n")
    print("| M x N x K | threads | median GFLOP/s | core |")
    print("|---|---|---|---|")
    for name, agg in rows.items():
        a = args_of(name)
        med = agg["median"]
        print(f"| {a['M']} x {a['N']} x {a['K']} | {a['threads']} | {med['GFLOPS'] / 1e9:.1f} | "
              f"{med.get('label', '').split()[0]} |")
    print()


def model_table(path):
    ctx, rows = load(path)
    print(f"### Whole model forward, T = 2048, batch 1 ({context_line(ctx)})\n")
    print("| form | chunk | median ms (min-max of the reps) | tokens/s | vs parallel | arena MiB |")
    print("|---|---|---|---|---|---|")
    base = None
    for name, agg in rows.items():
        a = args_of(name)
        med = agg["median"]["real_time"]
        if a["form"] == "0":
            base = med
    for name, agg in rows.items():
        a = args_of(name)
        med = agg["median"]
        spread = f"{agg['min']['real_time']:.1f}-{agg['max']['real_time']:.1f}" if "min" in agg else ""
        print(f"| {med.get('label', '')} | {a['chunk'] if a['form'] == '1' else '-'} | "
              f"{med['real_time']:.1f} ({spread}) | {med['tokens_per_s']:.0f} | "
              f"{base / med['real_time']:.2f}x | {med['arena_MiB']:.1f} |")
    print()


def retention_table(path):
    ctx, rows = load(path)
    print(f"### One retention layer, T = 2048, 512 channels ({context_line(ctx)})\n")
    table = defaultdict(dict)
    labels = {}
    for name, agg in rows.items():
        a = args_of(name)
        table[int(a["heads"])][int(a["form"])] = agg["median"]["real_time"]
        labels[int(a["form"])] = agg["median"].get("label", a["form"])
    forms = sorted(labels)
    print("| heads | " + " | ".join(f"{labels[f]} ms" for f in forms) + " | fastest |")
    print("|---|" + "---|" * (len(forms) + 1))
    for h in sorted(table):
        row = table[h]
        best = min(row, key=row.get)
        cells = [f"{row[f]:.2f} ({row[f] / row[0]:.2f}x)" if f in row else "-" for f in forms]
        print(f"| {h} | " + " | ".join(cells) + f" | {labels[best]} |")
    print("\n(ratio in parentheses: time relative to the parallel form at the same head count)\n")


for path in sys.argv[1:]:
    if "gemm" in path:
        gemm_table(path)
    elif "model" in path:
        model_table(path)
    elif "retention" in path:
        retention_table(path)
