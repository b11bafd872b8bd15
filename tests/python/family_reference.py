"""An independent PyTorch reference of the whole mixer family (the config's "mixer" field):
retention, attention, linear, performer, aft, aft-simple, rwkv. Written from the mixers'
definitions (src/include/retnet/mixers/*.h, seeds' equations), not from the engine's kernels.
Dtype-generic: run it in float64 to get numbers to compare float32 engines against.

Every mixer sits in the same block as retention (retnet_ref.decoder; retention itself is
retnet_ref.forward):
  x = embed_tokens[tokens] (times sqrt(d) unless no_scale_embedding)
  per layer: xn = RMSNorm(x) * {scope}_layer_norm.weight; q, k, v (, g) = projections of xn;
             x = x + mixer(q, k, v) @ out_proj^T;  then the FFN sub-layer
  logits = RMSNorm(x) * layer_norm.weight @ output_projection^T

Each mixer has a parallel definition (pairwise over all tokens; what `forward` uses by default) and
a recurrent one written independently (token by token through a state or a growing cache), so the
reference can check itself: forward(..., mode="recurrent") == forward(..., mode="parallel").
Retention also has its chunkwise form.

Mixers (H heads, dk = d / H, dv = vd / H; q, k width d and v width vd unless said):
  retention:  retnet_ref.py.
  attention:  rotated q, k (retention's theta grid, absolute positions, no key scaling); causal
              softmax of q.k / sqrt(dk) per head; output the concatenated heads.
  linear:     phi = elu + 1 on q and k per head (no rotation);
              o_n = sum_{m<=n} (phi(q_n).phi(k_m)) v_m / sum_{m<=n} phi(q_n).phi(k_m).
  performer:  phi_j(x) = exp(w_j.x' - |x'|^2 / 2) / sqrt(m), x' = x / dk^(1/4), w = the layer's
              feature_matrix [m, dk] (shared by the heads); then as linear.
  aft:        q, k, v of width vd, channel-wise; b = pos_bias [L];
              y_n = sigmoid(q_n) * sum_{m<=n} e^{b[min(n-m, L-1)] + k_m} v_m
                                 / sum_{m<=n} e^{b[min(n-m, L-1)] + k_m}.
  aft-simple: aft with b = 0.
  rwkv:       r, k, v of width vd; w = exp(time_decay), u = time_first;
              wkv_n = (sum_{m<n} e^{k_m - (n-1-m) w} v_m + e^{u + k_n} v_n)
                    / (sum_{m<n} e^{k_m - (n-1-m) w}     + e^{u + k_n});  out = sigmoid(r) * wkv.
"""
import math

import torch
import torch.nn.functional as F

import retnet_ref as R

MIXERS = ("retention", "attention", "linear", "performer", "aft", "aft-simple", "rwkv")
SCOPES = {"retention": "retention", "attention": "attention", "linear": "linear",
          "performer": "performer", "aft": "aft", "aft-simple": "aft_simple", "rwkv": "rwkv"}
# The forms the engine runs per mixer (chunkwise: a constant-size state, or attention's chunks
# against its cache).
FORMS = {"retention": ("parallel", "recurrent", "chunkwise", "scan"),
         "attention": ("parallel", "recurrent", "chunkwise"),
         "linear": ("parallel", "recurrent", "chunkwise"),
         "performer": ("parallel", "recurrent", "chunkwise"),
         "aft": ("parallel", "recurrent"),
         "aft-simple": ("parallel", "recurrent", "chunkwise"),
         "rwkv": ("parallel", "recurrent", "chunkwise")}
CHANNELWISE = ("aft", "aft-simple", "rwkv")


def small_config(mixer, variant=0):
    """The small configs of the checks (check_reference.py, check_family.py); variant picks eps,
    activation and embedding scale; aft_max_distance < T so the clamp of the bias index matters."""
    return R.make_config(16, 24, 2, 20, 2, 50, 1e-6 if variant % 2 == 0 else 0.0,
                         "swish" if variant % 2 == 0 else "gelu", no_scale=variant % 3 != 1,
                         recurrent_chunk_size=16, mixer=mixer, performer_features=12, aft_max_distance=7)


def mixer_of(cfg):
    return cfg.get("mixer", "retention")


def layer_names(cfg, l):
    p, s = f"layers.{l}.", SCOPES[mixer_of(cfg)]
    return {"q": p + s + ".q_proj.weight", "k": p + s + ".k_proj.weight",
            "v": p + s + ".v_proj.weight", "g": p + s + ".g_proj.weight",
            "out": p + s + ".out_proj.weight", "norm1": p + s + "_layer_norm.weight",
            "feature_matrix": p + s + ".feature_matrix", "pos_bias": p + s + ".pos_bias",
            "time_decay": p + s + ".time_decay", "time_first": p + s + ".time_first",
            "fc1": p + "ffn.fc1.weight", "gate": p + "ffn.gate.weight", "fc2": p + "ffn.fc2.weight",
            "norm2": p + "final_layer_norm.weight"}


def param_shapes(cfg):
    """{name: shape} in the engine's layout order (src/model/model.cpp make_param_layout)."""
    m = mixer_of(cfg)
    d, vd, H = cfg["decoder_embed_dim"], cfg["decoder_value_embed_dim"], cfg["decoder_retention_heads"]
    f, V = cfg["decoder_ffn_embed_dim"], cfg["vocab_size"]
    qk = vd if m in CHANNELWISE else d
    out = {"embed_tokens.weight": (V, d)}
    for l in range(cfg["decoder_layers"]):
        n = layer_names(cfg, l)
        out[n["q"]], out[n["k"]], out[n["v"]] = (qk, d), (qk, d), (vd, d)
        if m == "retention":
            out[n["g"]] = (vd, d)
        out[n["out"]] = (d, vd)
        if m == "performer":
            out[n["feature_matrix"]] = (cfg.get("performer_features", 64), d // H)
        if m == "aft":
            out[n["pos_bias"]] = (cfg.get("aft_max_distance", 1024),)
        if m == "rwkv":
            out[n["time_decay"]], out[n["time_first"]] = (vd,), (vd,)
        out[n["norm1"]] = (d,)
        out[n["fc1"]], out[n["gate"]], out[n["fc2"]] = (f, d), (f, d), (d, f)
        out[n["norm2"]] = (d,)
    out["layer_norm.weight"] = (d,)
    out["output_projection.weight"] = (V, d)
    return out


def init_weights(cfg, seed, dtype=torch.float64, qk_gain=1.0):
    """Random weights for the reference's own checks (the engine's tests start from `retnet init`)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith("feature_matrix"):
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("pos_bias") or name.endswith("time_first"):
            t = 0.5 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.endswith("time_decay"):
            t = torch.linspace(-5.0, 1.0, shape[0], dtype=torch.float64) + \
                0.2 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif len(shape) == 1:  # norm weights
            t = 1 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float64)
        elif name.startswith("embed") or name.startswith("output"):
            t = torch.randn(shape, generator=g, dtype=torch.float64) * shape[1] ** -0.5
        else:
            gain = qk_gain if (name.endswith("q_proj.weight") or name.endswith("k_proj.weight")) else 1.0
            bound = gain * math.sqrt(6.0 / (shape[0] + shape[1]))
            t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1) * bound
        out[name] = t.to(dtype)
    return out


# ---- attention -----------------------------------------------------------------------------------
def attention_parallel(q, k, v):
    """q, k: [B, H, T, dk] (rotated), v: [B, H, T, dv]."""
    T, dk = q.shape[2], q.shape[3]
    s = q @ k.transpose(-1, -2) / math.sqrt(dk)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~causal, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def attention_recurrent(q, k, v):
    """One query at a time over a growing key/value cache."""
    B, H, T, dk = q.shape
    keys, values, outs = [], [], []
    for t in range(T):
        keys.append(k[:, :, t])
        values.append(v[:, :, t])
        K, Vv = torch.stack(keys, 2), torch.stack(values, 2)           # [B, H, t+1, .]
        s = torch.einsum("bhk,bhmk->bhm", q[:, :, t], K) / math.sqrt(dk)
        p = torch.exp(s - s.max(-1, keepdim=True).values)
        outs.append(torch.einsum("bhm,bhmv->bhv", p, Vv) / p.sum(-1, keepdim=True))
    return torch.stack(outs, 2)


# ---- linear attention (elu+1, FAVOR+) ----------------------------------------------------------------
def elu_features(x):
    return F.elu(x) + 1


def favor_features(x, w):
    """x: [..., dk], w: [m, dk] -> [..., m]."""
    dk, m = x.shape[-1], w.shape[0]
    xs = x / dk ** 0.25
    return torch.exp(xs @ w.T - 0.5 * (xs * xs).sum(-1, keepdim=True)) / math.sqrt(m)


def linear_parallel(fq, fk, v):
    """fq, fk: [B, H, T, F] features, v: [B, H, T, dv]."""
    T = fq.shape[2]
    a = (fq @ fk.transpose(-1, -2)) * torch.ones(T, T, dtype=fq.dtype).tril()
    return (a @ v) / a.sum(-1, keepdim=True)


def linear_recurrent(fq, fk, v):
    B, H, T, Fn = fq.shape
    S = torch.zeros(B, H, Fn, v.shape[-1], dtype=fq.dtype)
    z = torch.zeros(B, H, Fn, dtype=fq.dtype)
    outs = []
    for t in range(T):
        S = S + fk[:, :, t, :, None] * v[:, :, t, None, :]
        z = z + fk[:, :, t]
        num = torch.einsum("bhf,bhfv->bhv", fq[:, :, t], S)
        den = torch.einsum("bhf,bhf->bh", fq[:, :, t], z)
        outs.append(num / den[..., None])
    return torch.stack(outs, 2)


# ---- channel-wise: AFT, AFT-simple, RWKV ----------------------------------------------------------
def aft_parallel(q, k, v, bias):
    """q, k, v: [B, T, C]; bias: [L] or None (AFT-simple)."""
    T = q.shape[1]
    n = torch.arange(T)
    dist = n[:, None] - n[None, :]                                     # n - m
    if bias is None:
        b = torch.zeros(T, T, dtype=q.dtype)
    else:
        b = bias[dist.clamp(0, bias.shape[0] - 1)]                     # [T(n), T(m)]
    logw = b[None, :, :, None] + k[:, None, :, :]                     # [B, n, m, C]
    logw = logw.masked_fill((dist < 0)[None, :, :, None], float("-inf"))
    p = torch.softmax(logw, dim=2)
    return torch.sigmoid(q) * (p * v[:, None, :, :]).sum(2)


def aft_recurrent(q, k, v, bias):
    """AFT-full: a growing cache of (k, v), each step weighting it by the biases of its distances;
    AFT-simple: running sums num = sum e^{k_m} v_m, den = sum e^{k_m} (shifted by a running max)."""
    B, T, C = q.shape
    outs = []
    if bias is None:
        num = torch.zeros(B, C, dtype=q.dtype)
        den = torch.zeros(B, C, dtype=q.dtype)
        mx = torch.full((B, C), float("-inf"), dtype=q.dtype)
        for t in range(T):
            new = torch.maximum(mx, k[:, t])
            scale_old = torch.exp(mx - new)
            e = torch.exp(k[:, t] - new)
            num = num * scale_old + e * v[:, t]
            den = den * scale_old + e
            mx = new
            outs.append(torch.sigmoid(q[:, t]) * num / den)
        return torch.stack(outs, 1)
    L = bias.shape[0]
    for t in range(T):
        num = torch.zeros(B, C, dtype=q.dtype)
        den = torch.zeros(B, C, dtype=q.dtype)
        for m in range(t + 1):
            e = torch.exp(bias[min(t - m, L - 1)] + k[:, m])
            num = num + e * v[:, m]
            den = den + e
        outs.append(torch.sigmoid(q[:, t]) * num / den)
    return torch.stack(outs, 1)


def rwkv_parallel(r, k, v, time_decay, time_first):
    """r, k, v: [B, T, C]; time_decay, time_first: [C]."""
    T = r.shape[1]
    w, u = torch.exp(time_decay), time_first
    n = torch.arange(T, dtype=r.dtype)
    gap = (n[:, None] - 1 - n[None, :])                                # n - 1 - m: [n, m]
    logw = k[:, None, :, :] - gap[None, :, :, None] * w                # m < n
    diag = (u + k)                                                     # m = n: [B, T, C]
    eye = torch.eye(T, dtype=torch.bool)[None, :, :, None]
    logw = torch.where(eye, diag[:, :, None, :].expand_as(logw), logw)
    logw = logw.masked_fill((gap < -1)[None, :, :, None], float("-inf"))
    p = torch.softmax(logw, dim=2)
    return torch.sigmoid(r) * (p * v[:, None, :, :]).sum(2)


def rwkv_recurrent(r, k, v, time_decay, time_first):
    """RWKV-4's state (a, b): sums over the tokens before n, decayed once per step."""
    B, T, C = r.shape
    w, u = torch.exp(time_decay), time_first
    a = torch.zeros(B, C, dtype=r.dtype)
    b = torch.zeros(B, C, dtype=r.dtype)
    outs = []
    for t in range(T):
        e_now = torch.exp(u + k[:, t])
        outs.append(torch.sigmoid(r[:, t]) * (a + e_now * v[:, t]) / (b + e_now))
        e = torch.exp(k[:, t])
        a = torch.exp(-w) * a + e * v[:, t]
        b = torch.exp(-w) * b + e
    return torch.stack(outs, 1)


# ---- the model ---------------------------------------------------------------------------------
def mixer_forward(cfg, weights, l, h, mode, chunk):
    """h: [B, T, d] normalised input of layer l -> the mixer's output before out_proj, [B, T, vd]."""
    m = mixer_of(cfg)
    n = layer_names(cfg, l)
    d, vd, H = cfg["decoder_embed_dim"], cfg["decoder_value_embed_dim"], cfg["decoder_retention_heads"]
    dk, dv = d // H, vd // H
    B, T, _ = h.shape
    pos = torch.arange(T)
    rec = mode == "recurrent"
    if mode not in ("parallel", "recurrent"):
        raise ValueError(f"the reference's {m} runs parallel or recurrent, not {mode}")
    q, k, v = h @ weights[n["q"]].T, h @ weights[n["k"]].T, h @ weights[n["v"]].T
    if m in ("attention", "linear", "performer"):
        q, k = q.view(B, T, H, dk).transpose(1, 2), k.view(B, T, H, dk).transpose(1, 2)
        v = v.view(B, T, H, dv).transpose(1, 2)
        if m == "attention":
            q, k = R.rotate(q, pos), R.rotate(k, pos)
            o = attention_recurrent(q, k, v) if rec else attention_parallel(q, k, v)
        else:
            if m == "linear":
                fq, fk = elu_features(q), elu_features(k)
            else:
                w = weights[n["feature_matrix"]]
                fq, fk = favor_features(q, w), favor_features(k, w)
            o = linear_recurrent(fq, fk, v) if rec else linear_parallel(fq, fk, v)
        return o.transpose(1, 2).reshape(B, T, vd)
    if m in ("aft", "aft-simple"):
        bias = weights[n["pos_bias"]] if m == "aft" else None
        return aft_recurrent(q, k, v, bias) if rec else aft_parallel(q, k, v, bias)
    if m == "rwkv":
        td, tf = weights[n["time_decay"]], weights[n["time_first"]]
        return rwkv_recurrent(q, k, v, td, tf) if rec else rwkv_parallel(q, k, v, td, tf)
    raise ValueError(f"unknown mixer {m}")


def forward(weights, cfg, tokens, mode="parallel", chunk=64):
    """tokens: LongTensor [B, T] -> logits [B, T, vocab] in the weights' dtype."""
    if mixer_of(cfg) == "retention":
        return R.forward(weights, cfg, tokens, mode, chunk)
    return R.decoder(weights, R.check_config(cfg), tokens,
                     lambda h, l: mixer_forward(cfg, weights, l, h, mode, chunk) @ weights[layer_names(cfg, l)["out"]].T,
                     lambda l: layer_names(cfg, l)["norm1"])


def loss(weights, cfg, seq, mode="parallel"):
    """Mean next-token cross-entropy of one sequence (what `retnet grad` reports)."""
    logits = forward(weights, cfg, torch.tensor([seq[:-1]]), mode)[0]
    return F.cross_entropy(logits, torch.tensor(seq[1:]))
