#!/usr/bin/env python3
"""An independent PyTorch baseline for copy practice: trains a small byte-level transformer
(pre-LN, rotary positions on queries and keys, GELU feed-forward, AdamW, clipped gradients) on a
copy-practice text and prints its training loss, so a plateau seen with `retnet train` on the
same text can be told apart from an engine fault.

On lines of random words of 8-160 bytes written twice (scripts/make_copy_corpus.py), a 2-layer
model of d 128 stays at the letters' entropy (about 3.13 nats per byte) as `retnet train` does;
on lines of 8-24 bytes both begin to copy (docs/benchmarks.md). Needs torch (Debian:
python3-torch, with /usr/bin/python3) and numpy.
"""
import argparse
import math
import sys

import numpy as np
import torch
from torch import nn


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary positions on the last dimension of x (batch, heads, time, head_dim), pairwise."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    angle = torch.arange(x.shape[2], dtype=torch.float32)[:, None] * inv_freq[None]
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.ffn_norm = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        scores = rotate(q) @ rotate(k).transpose(-1, -2) / math.sqrt(d // self.heads)
        future = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        mixed = scores.masked_fill(future, float("-inf")).softmax(-1) @ v
        x = x + self.out(mixed.transpose(1, 2).reshape(b, t, d))
        return x + self.ffn(self.ffn_norm(x))


class Model(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int, layers: int):
        super().__init__()
        self.embed = nn.Embedding(256, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 256, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", help="the copy-practice text (bytes are the tokens)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-interval", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if min(args.steps, args.batch, args.seq, args.layers, args.heads) < 1 or args.dim % (2 * args.heads):
        ap.error("--steps, --batch, --seq, --layers, --heads must be positive and --dim a "
                 "multiple of 2 x --heads")
    try:
        with open(args.data, "rb") as f:
            data = np.frombuffer(f.read(), dtype=np.uint8)
    except OSError as e:
        print(f"{args.data}: {e}", file=sys.stderr)
        return 1
    if len(data) <= args.seq + 1:
        print(f"{args.data}: {len(data)} bytes, fewer than --seq + 2", file=sys.stderr)
        return 1
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = Model(args.dim, args.heads, args.ffn, args.layers)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    rng = np.random.default_rng(args.seed)
    for step in range(1, args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, step / max(1, args.warmup))
        starts = rng.integers(0, len(data) - args.seq - 1, args.batch)
        batch = torch.from_numpy(np.stack([data[s:s + args.seq + 1] for s in starts])
                                 .astype(np.int64))
        logits = model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        if not torch.isfinite(loss):
            print(f"step {step}: loss is {loss.item()}", file=sys.stderr)
            return 1
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.log_interval == 0 or step == args.steps:
            print(f"step {step}/{args.steps} | loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
