#!/usr/bin/env python3
"""A MODEL, not a measurement: data-parallel step time on 8-64 nodes, compute per step against a
ring all-reduce of the float32 gradients, at 10, 25 and 100 Gb/s.

  step compute  = tokens per node per step * 6 * params / node FLOP/s
  ring all-reduce = 2 (N-1)/N * 4 * params bytes / link bandwidth + 2 (N-1) * latency
  share         = all-reduce / (compute + all-reduce)   (no overlap with the backward pass)

The node's sustained training FLOP/s is an assumption (--node-gflops): by default this 2-core
machine's measured training rate per core (--core-gflops, from `retnet train` logs) times 64 cores,
i.e. perfect scaling inside the node, which flatters compute and so overstates the share of
communication only if the real node is slower.

  python3 scripts/dp_scaling_model.py --core-gflops 30
"""
import argparse

CONFIGS = {
    # name: (d, value dim, ffn dim, layers, vocab): the engine's default and RetNet-1.3B's shape.
    "default (d 256, 4 layers)": (256, 512, 512, 4, 256),
    "RetNet-1.3B shape (d 2048, 24 layers, vocab 32k)": (2048, 4096, 4096, 24, 32000),
}


def params(d, value, ffn, layers, vocab):
    per_layer = 2 * d * d + 2 * d * value + value * d + 3 * d * ffn + 2 * d
    return layers * per_layer + 2 * vocab * d + d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--core-gflops", type=float, default=30.0,
                    help="sustained training GFLOP/s of one core (measured on this machine)")
    ap.add_argument("--cores", type=int, default=64, help="cores per node")
    ap.add_argument("--tokens-per-node", type=int, default=16 * 512,
                    help="tokens per node per step (batch x sequence)")
    ap.add_argument("--latency-us", type=float, default=20.0, help="per-message latency")
    a = ap.parse_args()
    node_flops = a.core_gflops * 1e9 * a.cores
    print(f"MODEL (not measured): node = {a.cores} cores x {a.core_gflops:.0f} GFLOP/s sustained, "
          f"{a.tokens_per_node} tokens per node per step, latency {a.latency_us:.0f} us\n")
    print("| config | params | nodes | compute ms | all-reduce ms at 10 / 25 / 100 Gb/s | "
          "communication share at 10 / 25 / 100 Gb/s |")
    print("| --- | ---: | ---: | ---: | --- | --- |")
    for name, shape in CONFIGS.items():
        p = params(*shape)
        compute = a.tokens_per_node * 6 * p / node_flops
        for n in (8, 16, 32, 64):
            times, shares = [], []
            for gbps in (10, 25, 100):
                t = 2 * (n - 1) / n * 4 * p / (gbps * 1e9 / 8) + 2 * (n - 1) * a.latency_us * 1e-6
                times.append(f"{t * 1e3:.1f}")
                shares.append(f"{100 * t / (compute + t):.0f}%")
            print(f"| {name} | {p / 1e6:.1f} M | {n} | {compute * 1e3:.0f} | {' / '.join(times)} | "
                  f"{' / '.join(shares)} |")


if __name__ == "__main__":
    main()
