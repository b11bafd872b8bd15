"""Independent PyTorch reference of the RetNet language model (torchscale "v2" RetNetDecoder semantics).

Written from the definitions in docs/numerics.md#the-definition, not from torchscale's code or the engine's. Three forms of
retention (parallel, recurrent, chunkwise) compute the same function, including the score normalisation
c_n = max(|r_n| / sqrt(S_n), 1), so they agree to rounding at any layernorm_eps. Works in float32 and
float64: the computation runs in the dtype of the weights.

Weights are a dict of tensors under torchscale's RetNetDecoder.state_dict() names; the config is a
dict with torchscale's RetNetConfig names (plus "decay": "torchscale" | "paper"). `decoder` is the
block structure every token mixer shares; family_reference.py puts the other mixers into it.

Run with Debian's /usr/bin/python3 (torch 1.13).
"""
import math

import torch
import torch.nn.functional as F

FORMS = ("parallel", "recurrent", "chunkwise")


# ----------------------------------------------------------------------------------------------- config
def make_config(d, value_dim, H, ffn, layers, vocab, eps, act, no_scale=True, **extra):
    """A config dict under torchscale's names; extra keys (decay, mixer, ...) are passed through."""
    return dict(decoder_embed_dim=d, decoder_value_embed_dim=value_dim, decoder_retention_heads=H,
                decoder_ffn_embed_dim=ffn, decoder_layers=layers, vocab_size=vocab, layernorm_eps=eps,
                activation_fn=act, no_scale_embedding=no_scale, **extra)


def check_config(config):
    """Reads a config dict with torchscale names; returns a plain dict of the derived sizes."""
    def get(name, default=None):
        if name in config:
            return config[name]
        if default is None:
            raise ValueError(f"config: missing {name}")
        return default

    d = int(get("decoder_embed_dim"))
    H = int(get("decoder_retention_heads"))
    value_dim = int(get("decoder_value_embed_dim", d))
    c = dict(d=d, H=H, value_dim=value_dim, ffn=int(get("decoder_ffn_embed_dim")),
             layers=int(get("decoder_layers")), vocab=int(get("vocab_size")),
             eps=float(get("layernorm_eps", 1e-6)), act=str(get("activation_fn", "gelu")),
             embed_scale=1.0 if get("no_scale_embedding", True) else math.sqrt(d),
             decay=str(get("decay", "torchscale")))
    for k in ("d", "H", "value_dim", "ffn", "layers", "vocab"):
        if c[k] <= 0:
            raise ValueError(f"config: {k} = {c[k]}, expected > 0")
    if d % H:
        raise ValueError(f"config: decoder_embed_dim {d} is not divisible by {H} heads")
    if value_dim % H:
        raise ValueError(f"config: decoder_value_embed_dim {value_dim} is not divisible by {H} heads")
    if (d // H) % 2:
        raise ValueError(f"config: key head dim {d // H} is odd; rotation needs pairs")
    if c["act"] not in ("gelu", "swish"):
        raise ValueError(f"config: activation_fn {c['act']!r}, expected 'gelu' or 'swish'")
    if c["decay"] not in ("torchscale", "paper"):
        raise ValueError(f"config: decay {c['decay']!r}, expected 'torchscale' or 'paper'")
    if c["eps"] < 0:
        raise ValueError(f"config: layernorm_eps {c['eps']} < 0")
    c["dk"], c["dv"] = d // H, value_dim // H
    return c


def weight_shapes(config):
    """{torchscale name: shape} of every parameter (buffers retnet_rel_pos.* excluded)."""
    c = check_config(config)
    d, vd, f, V = c["d"], c["value_dim"], c["ffn"], c["vocab"]
    shapes = {"embed_tokens.weight": (V, d), "output_projection.weight": (V, d), "layer_norm.weight": (d,)}
    for l in range(c["layers"]):
        p = f"layers.{l}."
        shapes.update({
            p + "retention.q_proj.weight": (d, d), p + "retention.k_proj.weight": (d, d),
            p + "retention.v_proj.weight": (vd, d), p + "retention.g_proj.weight": (vd, d),
            p + "retention.out_proj.weight": (d, vd), p + "retention_layer_norm.weight": (d,),
            p + "ffn.fc1.weight": (f, d), p + "ffn.gate.weight": (f, d), p + "ffn.fc2.weight": (d, f),
            p + "final_layer_norm.weight": (d,)})
    return shapes


def check_weights(weights, config):
    """Raises ValueError naming the first missing or mis-shaped tensor; extra names are ignored."""
    for name, shape in weight_shapes(config).items():
        if name not in weights:
            raise ValueError(f"weights: missing tensor {name}")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"weights: {name} has shape {list(weights[name].shape)}, expected {list(shape)}")


# ------------------------------------------------------------------------------------- position tables
# Position-only constants are computed in float64 and cast, so float32 runs differ from float64 runs
# only by rounding on the data path.
def angles(dk):
    """theta_i = 10000^(-i/(dk/2-1)), i = 0..dk/2-1 (linspace grid, endpoint included); theta_0 = 1 if dk = 2."""
    half = dk // 2
    if half == 1:
        return torch.ones(1, dtype=torch.float64)
    i = torch.arange(half, dtype=torch.float64)
    return 10000.0 ** (-i / (half - 1))


def decays(H, schedule="torchscale"):
    """gamma_h = 1 - 2^(-5-h) as a float64 tensor [H]; the paper's schedule (decay: paper) is
    gamma = 1 - exp(linspace(log 1/32, log 1/512, H))."""
    if schedule == "paper":
        return 1.0 - torch.exp(torch.linspace(math.log(1 / 32), math.log(1 / 512), H, dtype=torch.float64))
    return 1.0 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64))


def rotate(x, positions):
    """x: [..., T, dk]; rotates interleaved pairs (x_2i, x_2i+1) by positions[t] * theta_i."""
    phase = positions.to(torch.float64)[:, None] * angles(x.shape[-1])[None, :]  # [T, dk/2]
    cos, sin = phase.cos().to(x.dtype), phase.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)


def _powers(gamma, exponents):
    """gamma^e for gamma [H] and non-negative float64 exponents [...] -> [H, ...] (float64)."""
    return torch.exp(torch.log(gamma).view(-1, *([1] * exponents.dim())) * exponents)


def _causal_decay(gamma, L):
    """D[h, n, m] = gamma_h^(n-m) for n >= m, else 0; float64 [H, L, L]. Masked before exp: no gamma^(-n)."""
    n = torch.arange(L, dtype=torch.float64)
    diff = n[:, None] - n[None, :]
    return torch.where(diff >= 0, _powers(gamma, diff.clamp(min=0)), torch.zeros(()).double())


# ---------------------------------------------------------------------------------------- retention
def _normalise(A, r, S):
    """O_n = (A_n / sqrt(S_n)) / max(|r_n| / sqrt(S_n), 1). A: [B,H,T,dv], r: [B,H,T], S: float64 [H,T].
    Also returns ratio = |r_n| / sqrt(S_n), so tests can check both sides of the max are exercised."""
    root = S.sqrt().to(A.dtype)
    ratio = r.abs() / root
    return (A / root[..., None]) / ratio.clamp(min=1.0)[..., None], ratio


def retention_parallel(q, k, v, gamma):
    """q, k: [B,H,T,dk] (rotated, k scaled), v: [B,H,T,dv], gamma: float64 [H]. Builds the T x T mask."""
    T = q.shape[-2]
    D = _causal_decay(gamma, T)
    scores = (q @ k.transpose(-1, -2)) * D.to(q.dtype)
    S = torch.cumsum(_powers(gamma, torch.arange(T, dtype=torch.float64)), dim=-1)
    return _normalise(scores @ v, scores.sum(-1), S)


def retention_recurrent(q, k, v, gamma):
    """Token by token: state s = gamma s + k'^T v (dk x dv), z = gamma z + k', S = gamma S + 1."""
    B, H, T, dk = q.shape
    g = gamma.to(q.dtype)
    s = q.new_zeros(B, H, dk, v.shape[-1])
    z = q.new_zeros(B, H, dk)
    S_run = torch.zeros(H, dtype=torch.float64)
    A, r, S = [], [], []
    for n in range(T):
        s = g[:, None, None] * s + k[:, :, n, :, None] * v[:, :, n, None, :]
        z = g[:, None] * z + k[:, :, n]
        S_run = gamma * S_run + 1.0
        A.append((q[:, :, n, None, :] @ s)[:, :, 0])
        r.append((q[:, :, n] * z).sum(-1))
        S.append(S_run)
    return _normalise(torch.stack(A, 2), torch.stack(r, 2), torch.stack(S, 1))


def retention_chunkwise(q, k, v, gamma, chunk):
    """Chunks of `chunk` positions (the last may be shorter; no padding). Inside a chunk: parallel with
    relative powers gamma^(j-i); across chunks: the carried (s, z, S) decayed by gamma^(j+1)."""
    B, H, T, dk = q.shape
    if chunk < 1:
        raise ValueError(f"chunk {chunk}, expected >= 1")
    s = q.new_zeros(B, H, dk, v.shape[-1])
    z = q.new_zeros(B, H, dk)
    S_prev = torch.zeros(H, dtype=torch.float64)
    A, r, S = [], [], []
    for t0 in range(0, T, chunk):
        L = min(chunk, T - t0)
        qc, kc, vc = q[:, :, t0:t0 + L], k[:, :, t0:t0 + L], v[:, :, t0:t0 + L]
        j = torch.arange(L, dtype=torch.float64)
        into = _powers(gamma, j + 1)            # [H, L]: decay of the carried state seen at local j
        out_of = _powers(gamma, L - 1 - j)      # [H, L]: decay of key i until the chunk's end
        scores = (qc @ kc.transpose(-1, -2)) * _causal_decay(gamma, L).to(q.dtype)
        into_c = into.to(q.dtype)[..., None]
        A.append(scores @ vc + (qc * into_c) @ s)
        r.append(scores.sum(-1) + (qc * z[:, :, None, :]).sum(-1) * into_c[..., 0])
        S_c = into * S_prev[:, None] + torch.cumsum(_powers(gamma, j), dim=-1)
        S.append(S_c)
        kd = kc * out_of.to(q.dtype)[..., None]
        gL = _powers(gamma, torch.tensor(float(L))).to(q.dtype)  # [H]
        s = gL[:, None, None] * s + kd.transpose(-1, -2) @ vc
        z = gL[:, None] * z + kd.sum(-2)
        S_prev = S_c[:, -1]
    return _normalise(torch.cat(A, 2), torch.cat(r, 2), torch.cat(S, 1))


# -------------------------------------------------------------------------------------------- model
def rms_norm(x, weight, eps):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def _retention_layer(x, W, p, c, mode, chunk, stats):
    B, T, _ = x.shape
    H, dk, dv = c["H"], c["dk"], c["dv"]

    def heads(t, size):
        return t.view(B, T, H, size).transpose(1, 2)  # heads are contiguous slices of the features

    pos = torch.arange(T)
    q = rotate(heads(x @ W[p + "q_proj.weight"].T, dk), pos)
    k = rotate(heads((x @ W[p + "k_proj.weight"].T) * dk ** -0.5, dk), pos)
    v = heads(x @ W[p + "v_proj.weight"].T, dv)
    g = x @ W[p + "g_proj.weight"].T
    gamma = decays(H, c["decay"])
    if mode == "parallel":
        O, ratio = retention_parallel(q, k, v, gamma)
    elif mode == "recurrent":
        O, ratio = retention_recurrent(q, k, v, gamma)
    elif mode == "chunkwise":
        O, ratio = retention_chunkwise(q, k, v, gamma, chunk)
    else:
        raise ValueError(f"mode {mode!r}, expected one of {FORMS}")
    if stats is not None:
        stats.append(ratio.detach())
    O = rms_norm(O, None, c["eps"])  # per-head norm over dv, no weight
    O = O.transpose(1, 2).reshape(B, T, H * dv)
    return (F.silu(g) * O) @ W[p + "out_proj.weight"].T


def decoder(W, c, tokens, mixer_layer, mixer_norm):
    """The block structure of every mixer: x = embedding * scale; per layer l
    x += mixer_layer(RMSNorm(x) * W[mixer_norm(l)], l) (the mixer's output after its out_proj), then
    x += FFN(RMSNorm(x) * final_layer_norm); logits = RMSNorm(x) * layer_norm @ output_projection^T.
    c: check_config's dict; tokens [B, T] -> logits [B, T, vocab] in the weights' dtype."""
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    if tokens.dim() != 2:
        raise ValueError(f"tokens: shape {list(tokens.shape)}, expected [B, T]")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= c["vocab"]):
        bad = tokens[(tokens < 0) | (tokens >= c["vocab"])][0].item()
        raise ValueError(f"token id {bad} out of range [0, {c['vocab']})")
    act = F.gelu if c["act"] == "gelu" else F.silu  # F.gelu defaults to the exact erf form
    eps = c["eps"]
    x = W["embed_tokens.weight"][tokens] * c["embed_scale"]
    for l in range(c["layers"]):
        p = f"layers.{l}."
        x = x + mixer_layer(rms_norm(x, W[mixer_norm(l)], eps), l)
        h = rms_norm(x, W[p + "final_layer_norm.weight"], eps)
        x = x + (act(h @ W[p + "ffn.fc1.weight"].T) * (h @ W[p + "ffn.gate.weight"].T)) @ W[p + "ffn.fc2.weight"].T
    x = rms_norm(x, W["layer_norm.weight"], eps)
    return x @ W["output_projection.weight"].T


def forward(weights, config, tokens, mode="parallel", chunk=None, stats=None):
    """tokens: LongTensor [B, T] -> logits [B, T, vocab] in the weights' dtype.
    chunk: chunk size of the chunkwise form (default: config recurrent_chunk_size, else 64).
    stats: optional list; receives each layer's |r_n|/sqrt(S_n) as [B, H, T]."""
    c = check_config(config)
    check_weights(weights, config)
    if chunk is None:
        chunk = int(config.get("recurrent_chunk_size", 64))
    return decoder(weights, c, tokens,
                   lambda h, l: _retention_layer(h, weights, f"layers.{l}.retention.", c, mode, chunk, stats),
                   lambda l: f"layers.{l}.retention_layer_norm.weight")


def loss(weights, config, seq, mode="parallel", chunk=None):
    """Mean next-token cross-entropy of one sequence (what `retnet grad` reports)."""
    logits = forward(weights, config, torch.tensor([seq[:-1]]), mode, chunk)[0]
    return F.cross_entropy(logits, torch.tensor(seq[1:]))


# --------------------------------------------------------------------------------------------- init
def init_weights(config, seed, dtype=torch.float64, qk_gain=1.0, v_gain=1.0, norm_noise=0.0):
    """torchscale's initialisation, drawn in float64 from `seed` and then cast, so one seed gives the
    same model in every dtype.
    qk_gain multiplies q_proj and k_proj: scores grow by qk_gain^2, which pushes |r_n|/sqrt(S_n) above 1
    on some rows so the c_n normalisation is exercised (about a third of the rows at qk_gain 6). v_gain
    multiplies v_proj: small values make the head norm's eps matter, and with it c_n (the head norm is
    scale invariant at eps = 0, where c_n has no effect on the output). norm_noise > 0 draws RMSNorm weights as
    1 + norm_noise * N(0,1), so a test notices a norm weight that is ignored or misplaced."""
    c = check_config(config)
    gen = torch.Generator().manual_seed(seed)
    d = c["d"]

    def uniform(shape, bound):
        return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    W = {}
    for name, shape in weight_shapes(config).items():
        kind = name.rsplit(".", 2)[-2]
        if kind in ("q_proj", "k_proj", "v_proj", "g_proj", "out_proj"):
            gain = 2 ** -1 if kind == "out_proj" else 2 ** -2.5
            t = uniform(shape, gain * math.sqrt(6.0 / (shape[0] + shape[1])))  # xavier_uniform
            t = t * {"q_proj": qk_gain, "k_proj": qk_gain, "v_proj": v_gain}.get(kind, 1.0)
        elif kind in ("fc1", "gate", "fc2"):
            t = uniform(shape, 1.0 / math.sqrt(shape[1]))
        elif kind in ("embed_tokens", "output_projection"):
            t = normal(shape, d ** -0.5)
        else:  # RMSNorm weights
            t = 1.0 + normal(shape, norm_noise) if norm_noise else torch.ones(shape, dtype=torch.float64)
        W[name] = t.to(dtype)
    return W


def cast(weights, dtype):
    return {k: v.to(dtype) for k, v in weights.items()}
