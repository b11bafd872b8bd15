#!/usr/bin/python3
"""Plots of `retnet bench paper`: one PNG per figure next to results.json.

Usage: /usr/bin/python3 scripts/plot_paper.py bench-paper/results.json [--out DIR]
Needs Debian's matplotlib (apt-get install python3-matplotlib). Skipped points are left out of
the lines and listed under each plot.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIB = 1 << 20


def ok(point):
    return isinstance(point, dict) and "status" not in point


def series(points, keys, value):
    """(xs, medians, lower errors, upper errors) of the points that ran; value(point) -> dict or float."""
    xs, med, lo, hi = [], [], [], []
    for k in keys:
        p = points.get(str(k))
        if not ok(p):
            continue
        v = value(p)
        if isinstance(v, dict):
            xs.append(k), med.append(v["median"])
            lo.append(v["median"] - v["min"]), hi.append(v["max"] - v["median"])
        else:
            xs.append(k), med.append(v), lo.append(0), hi.append(0)
    return xs, med, [lo, hi]


def skipped_notes(name, points, keys):
    return [f"{name} @ {k}: skipped ({points[str(k)]['reason']})"
            for k in keys if str(k) in points and not ok(points[str(k)])]


def finish(fig, path, notes, subtitle):
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes)[:600], fontsize=6, va="bottom")
    fig.suptitle(subtitle, fontsize=8, y=0.995)
    fig.tight_layout(rect=(0, 0.05 + 0.02 * min(len(notes), 6), 1, 0.96))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")


def scale(values, f):
    return [v * f for v in values]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", default=None, help="directory for the PNGs (default: beside results)")
    a = ap.parse_args()
    with open(a.results) as f:
        r = json.load(f)
    out = a.out or os.path.dirname(os.path.abspath(a.results))
    os.makedirs(out, exist_ok=True)
    m = r["machine"]
    sub = (f"{m['cpu']}, {r['threads']} threads, commit {r['git_commit'][:12]}, mode {r['mode']}; "
           f"RetNet {r['configs']['retnet']['parameters']:,} params vs transformer "
           f"{r['configs']['transformer']['parameters']:,}")
    figs = r["figures"]

    # 1. inference memory by length
    f1 = figs["inference_memory"]
    L = f1["lengths"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    notes = []
    for name, style in (("retnet", "o-"), ("transformer", "s--")):
        pts = f1.get(name, {})
        x, y, _ = series(pts, L, lambda p: p["weights_plus_state_bytes"])
        axes[0].plot(x, scale(y, 1 / MIB), style, label=name)
        x, y, e = series(pts, L, lambda p: p["peak_rss_bytes"])
        axes[1].errorbar(x, scale(y, 1 / MIB), yerr=[scale(e[0], 1 / MIB), scale(e[1], 1 / MIB)],
                         fmt=style, capsize=3, label=name)
        notes += skipped_notes(name, pts, L)
    for ax, title in zip(axes, ("weights + state / KV cache (MiB)", "peak RSS of the process (MiB)")):
        ax.set_xscale("log", base=2), ax.set_xlabel("sequence length"), ax.set_title(title)
        ax.set_xticks(L, [f"{x // 1024}k" for x in L]), ax.grid(alpha=0.3), ax.legend()
    notes.append("transformer KV cache filled synthetically (a step's memory does not depend on the values)")
    finish(fig, os.path.join(out, "inference_memory.png"), notes, sub)

    # 2 and 3. decode latency and throughput by batch
    f2 = figs["decode"]
    B = f2["batches"]
    for key, fname, title, ylabel in (
            ("latency_ms", "decode_latency.png", "decode latency per step", "ms per step (whole batch)"),
            ("tokens_per_s", "decode_throughput.png", "decode throughput", "tokens/s")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        notes = []
        for name, pts in f2["series"].items():
            x, y, e = series(pts, B, lambda p: p[key])
            ax.errorbar(x, y, yerr=e, fmt="o-" if name.startswith("retnet") else "s--", capsize=3,
                        label=name)
            notes += skipped_notes(name, pts, B)
        ax.set_xscale("log", base=2), ax.set_yscale("log"), ax.set_xticks(B, [str(b) for b in B])
        ax.set_xlabel("batch size"), ax.set_ylabel(ylabel), ax.set_title(title + " (context @ tokens)")
        ax.grid(alpha=0.3, which="both"), ax.legend()
        finish(fig, os.path.join(out, fname), notes, sub)

    # 4. training throughput and memory by length
    f4 = figs["training"]
    L = f4["lengths"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    notes = []
    for name, pts in f4["series"].items():
        style = "s--" if name.startswith("attention") else "o-"
        x, y, e = series(pts, L, lambda p: p["tokens_per_s"])
        axes[0].errorbar(x, y, yerr=e, fmt=style, capsize=3, label=name)
        x, y, _ = series(pts, L, lambda p: p["peak_rss_bytes"])
        axes[1].plot(x, scale(y, 1 / MIB), style, label=name)
        notes += skipped_notes(name, pts, L)
    for ax, title in zip(axes, ("training tokens/s (batch 1)", "peak RSS of the process (MiB)")):
        ax.set_xscale("log", base=2), ax.set_xlabel("sequence length"), ax.set_title(title)
        ax.set_xticks(L, [str(x) if x < 1024 else f"{x // 1024}k" for x in L])
        ax.grid(alpha=0.3), ax.legend()
    axes[1].set_yscale("log")
    finish(fig, os.path.join(out, "training.png"), notes, sub)

    # 5. heads sweep
    f5 = figs["heads_sweep"]
    H = f5["heads"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in f5["forms"].items():
        x, y, e = series(pts, H, lambda p: p)
        ax.errorbar(x, y, yerr=e, fmt="o-", capsize=3, label=name)
    ax.set_xscale("log", base=2), ax.set_yscale("log"), ax.set_xticks(H, [str(h) for h in H])
    ax.set_xlabel("heads (512 channels in total)"), ax.set_ylabel("ms per call")
    ax.set_title(f"one retention kernel call, T = {f5['T']}")
    ax.grid(alpha=0.3, which="both"), ax.legend()
    finish(fig, os.path.join(out, "heads_sweep.png"), [], sub)


if __name__ == "__main__":
    main()
