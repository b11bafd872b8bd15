"""An independent PyTorch reference of the RetNet language model, written from the definitions in
ENGINEERING.md section 2 (not from torchscale, not from the engine). Dtype-generic: run it in
float64 to get numbers to compare float32 engines against.

Weights are a dict of tensors under torchscale's RetNetDecoder.state_dict() names; the config is a
dict with torchscale's RetNetConfig names."""
import math

import torch
import torch.nn.functional as F


def layer_names(l):
    p = f"layers.{l}."
    return {
        "q": p + "retention.q_proj.weight", "k": p + "retention.k_proj.weight",
        "v": p + "retention.v_proj.weight", "g": p + "retention.g_proj.weight",
        "out": p + "retention.out_proj.weight", "norm1": p + "retention_layer_norm.weight",
        "fc1": p + "ffn.fc1.weight", "gate": p + "ffn.gate.weight", "fc2": p + "ffn.fc2.weight",
        "norm2": p + "final_layer_norm.weight",
    }


def dims(cfg):
    d, vd, h = cfg["decoder_embed_dim"], cfg["decoder_value_embed_dim"], cfg["decoder_retention_heads"]
    return d, vd, h, d // h, vd // h


def init_weights(cfg, seed, dtype=torch.float64, qk_gain=1.0):
    """Random weights at torchscale-like scales; qk_gain > 1 makes the score normalisation clamp."""
    g = torch.Generator().manual_seed(seed)
    d, vd, _, _, _ = dims(cfg)
    f, V = cfg["decoder_ffn_embed_dim"], cfg["vocab_size"]

    def u(shape, gain=1.0):
        bound = gain * math.sqrt(6.0 / (shape[0] + shape[1]))
        return ((torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * bound).to(dtype)

    w = {"embed_tokens.weight": torch.randn(V, d, generator=g, dtype=torch.float64).to(dtype) * d ** -0.5,
         "output_projection.weight": torch.randn(V, d, generator=g, dtype=torch.float64).to(dtype) * d ** -0.5,
         "layer_norm.weight": (1 + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)}
    for l in range(cfg["decoder_layers"]):
        n = layer_names(l)
        w[n["q"]] = u((d, d), 2 ** -2.5 * qk_gain)
        w[n["k"]] = u((d, d), 2 ** -2.5 * qk_gain)
        w[n["v"]] = u((vd, d), 2 ** -2.5)
        w[n["g"]] = u((vd, d), 2 ** -2.5)
        w[n["out"]] = u((d, vd), 0.5)
        w[n["fc1"]] = u((f, d))
        w[n["gate"]] = u((f, d))
        w[n["fc2"]] = u((d, f))
        w[n["norm1"]] = (1 + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
        w[n["norm2"]] = (1 + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)
    return w


def rms_norm(x, weight, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def rotate(x, positions):
    """x: [B, T, H, dk]; rotates interleaved pairs (x[2i], x[2i+1]) by pos * theta_i."""
    dk = x.shape[-1]
    half = dk // 2
    i = torch.arange(half, dtype=torch.float64)
    theta = torch.ones(1, dtype=torch.float64) if half == 1 else 10000.0 ** (-i / (half - 1))
    ang = positions.to(torch.float64)[:, None] * theta[None, :]  # [T, half]
    cos, sin = ang.cos().to(x.dtype)[None, :, None, :], ang.sin().to(x.dtype)[None, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, b * cos + a * sin), dim=-1).flatten(-2)


def gammas(cfg):
    h = cfg["decoder_retention_heads"]
    if cfg.get("decay", "torchscale") == "paper":
        return 1 - torch.exp(torch.linspace(math.log(1 / 32), math.log(1 / 512), h, dtype=torch.float64))
    return 1 - 2.0 ** (-5 - torch.arange(h, dtype=torch.float64))


def decay_sum(gamma, n):
    """S_n = sum_{i<=n} gamma^i, per head: [H, T]."""
    return (1 - gamma[:, None] ** (n[None, :] + 1)) / (1 - gamma[:, None])


# [rows where max(|r_n| / sqrt(S_n), 1) clamps, rows]: lets tests prove both branches were taken.
clamp_stats = [0, 0]


def normalise(aug, S):
    """aug: [B, H, T, dv+1], S: [H, T] -> the paper's normalisations."""
    s = S.sqrt()[None, :, :, None].to(aug.dtype)
    ratio = aug[..., -1:].abs() / s
    clamp_stats[0] += int((ratio > 1).sum())
    clamp_stats[1] += ratio.numel()
    c = ratio.clamp(min=1)
    return aug[..., :-1] / s / c


def with_ones(v):
    return torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)


def retention_parallel(q, k, v, gamma):
    """q, k: [B, H, T, dk]; v: [B, H, T, dv]."""
    T = q.shape[2]
    n = torch.arange(T, dtype=torch.float64)
    dist = n[:, None] - n[None, :]
    mask = torch.where(dist >= 0, torch.exp(dist.clamp(min=0)[None] * gamma.log()[:, None, None]),
                       torch.zeros(()))
    aug = (q @ k.transpose(-1, -2) * mask.to(q.dtype)[None]) @ with_ones(v)
    return normalise(aug, decay_sum(gamma, n))


def retention_recurrent(q, k, v, gamma):
    B, H, T, dk = q.shape
    state = torch.zeros(B, H, dk, v.shape[-1] + 1, dtype=q.dtype)
    g = gamma.to(q.dtype)[None, :, None, None]
    outs = []
    for t in range(T):
        state = g * state + k[:, :, t, :, None] * with_ones(v[:, :, t])[:, :, None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], state))
    aug = torch.stack(outs, dim=2)
    return normalise(aug, decay_sum(gamma, torch.arange(T, dtype=torch.float64)))


def retention_chunkwise(q, k, v, gamma, chunk):
    B, H, T, dk = q.shape
    state = torch.zeros(B, H, dk, v.shape[-1] + 1, dtype=q.dtype)
    lg = gamma.log()
    outs = []
    for t0 in range(0, T, chunk):
        L = min(chunk, T - t0)
        qc, kc, vc = q[:, :, t0:t0 + L], k[:, :, t0:t0 + L], with_ones(v[:, :, t0:t0 + L])
        j = torch.arange(L, dtype=torch.float64)
        dist = j[:, None] - j[None, :]
        inner = torch.where(dist >= 0, torch.exp(dist.clamp(min=0)[None] * lg[:, None, None]),
                            torch.zeros(())).to(q.dtype)
        into = torch.exp((j[None, :] + 1) * lg[:, None]).to(q.dtype)        # gamma^(j+1): [H, L]
        out_of = torch.exp((L - 1 - j)[None, :] * lg[:, None]).to(q.dtype)  # gamma^(L-1-i)
        aug = (qc @ kc.transpose(-1, -2) * inner[None]) @ vc + (qc * into[None, :, :, None]) @ state
        state = torch.exp(L * lg).to(q.dtype)[None, :, None, None] * state + \
            (kc * out_of[None, :, :, None]).transpose(-1, -2) @ vc
        outs.append(aug)
    aug = torch.cat(outs, dim=2)
    return normalise(aug, decay_sum(gamma, torch.arange(T, dtype=torch.float64)))


def forward(weights, cfg, tokens, mode="parallel", chunk=64):
    """tokens: LongTensor [B, T] -> logits [B, T, vocab] in the weights' dtype."""
    d, vd, H, dk, dv = dims(cfg)
    eps = cfg.get("layernorm_eps", 1e-6)
    act = F.silu if cfg.get("activation_fn", "gelu") in ("swish", "silu") else F.gelu
    scale = 1.0 if cfg.get("no_scale_embedding", True) else math.sqrt(d)
    B, T = tokens.shape
    pos = torch.arange(T)
    gamma = gammas(cfg)
    x = weights["embed_tokens.weight"][tokens] * scale
    for l in range(cfg["decoder_layers"]):
        n = layer_names(l)
        h = rms_norm(x, weights[n["norm1"]], eps)
        q = (h @ weights[n["q"]].T).view(B, T, H, dk)
        k = (h @ weights[n["k"]].T * dk ** -0.5).view(B, T, H, dk)
        v = (h @ weights[n["v"]].T).view(B, T, H, dv).transpose(1, 2)
        g = h @ weights[n["g"]].T
        q, k = rotate(q, pos).transpose(1, 2), rotate(k, pos).transpose(1, 2)
        if mode == "parallel":
            o = retention_parallel(q, k, v, gamma)
        elif mode == "recurrent":
            o = retention_recurrent(q, k, v, gamma)
        elif mode == "chunkwise":
            o = retention_chunkwise(q, k, v, gamma, chunk)
        else:
            raise ValueError(mode)
        o = rms_norm(o.transpose(1, 2), None, eps).reshape(B, T, vd)
        x = x + (F.silu(g) * o) @ weights[n["out"]].T
        h = rms_norm(x, weights[n["norm2"]], eps)
        x = x + (act(h @ weights[n["fc1"]].T) * (h @ weights[n["gate"]].T)) @ weights[n["fc2"]].T
    return rms_norm(x, weights["layer_norm.weight"], eps) @ weights["output_projection.weight"].T
