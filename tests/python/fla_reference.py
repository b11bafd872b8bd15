"""Independent PyTorch reference of flash-linear-attention's (fla) RetNet, written from the definitions
in fla's modules (fla/layers/multiscale_retention.py, fla/models/retnet/*, fla/modules/rotary.py,
fla/modules/mlp.py GatedMLP, fla/modules/fused_norm_gate.py, fla/ops/retention/naive.py,
fla/layers/attn.py, fla/models/hybrid.py); fla's own modules need Triton and a GPU and are not used.

The model, for a config dict with fla's RetNetConfig keys and a weight dict under fla's
state_dict names (see weight_shapes):

    x = embeddings[tokens]
    per layer i:  x += mixer(RMSNorm(x) * attn_norm)            mixer: retention, or softmax attention
                  x += down(swish(gate(n)) * up(n)),  n = RMSNorm(x) * mlp_norm
    logits = (RMSNorm(x) * norm) @ lm_head^T                     lm_head = embeddings when tied

Retention (MultiScaleRetention), H heads, dk = key_dim/H, dv = value_dim/H, key_dim = int(hidden *
expand_k), value_dim = int(hidden * expand_v):
    q = q_proj(x), k = k_proj(x) (num_kv_heads heads), v = v_proj(x) (num_kv_heads heads)
    q, k = feature_map(q), feature_map(k)           (transformers' ACT2FN[feature_map]; none by default)
    q, k = rotary(q), rotary(k)                     GPT-NeoX half split, inv_freq = 10000^(-2i/dk), t = 0..T-1
    k, v repeated per group: query head h reads kv head h // (H / num_kv_heads)
    o_n = sum_{m<=n} gamma_h^(n-m) (q_n . k_m) dk^-1/2 v_m,   gamma_h = 1 - 2^(-5-h)   (no normalisation)
    o = RMSNorm_dv(o) [* w, shared by heads, absent if elementwise_affine false] [* swish(g_proj(x))]
    out = o_proj(o)
Attention layers (config "attn": {"layers": [...], "num_heads", "num_kv_heads", "qkv_bias",
"rope_theta", "window_size"}, or a list of such dicts): q, k, v projections (+ bias if qkv_bias), head
dim hidden/num_heads, rotary with base rope_theta, causal softmax(q.k / sqrt(d)), a window of W keys
(n-W+1..n) when window_size = W, o_proj.

Computes in the dtype of the weights (float64 for references). Forms: "parallel" (whole sequence at
once) and "recurrent" (one token at a time with a state: the retention state S = gamma S + k^T v per
head, a key/value cache for attention layers); they compute the same function.

Run with Debian's /usr/bin/python3 (torch 1.13).
"""
import math

import torch
import torch.nn.functional as F

FORMS = ("parallel", "recurrent")


# ------------------------------------------------------------------------------------ activations
# transformers' ACT2FN names (fla looks feature_map up there). "elu" is not one of them: fla raises
# KeyError for feature_map "elu", and so does this reference (as a ValueError).
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


ACT2FN = {
    "relu": F.relu,
    "relu2": lambda x: F.relu(x).pow(2),
    "relu6": lambda x: x.clamp(0.0, 6.0),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "swish": F.silu,
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_python": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "gelu_fast": _gelu_tanh,
    "gelu_accurate": _gelu_tanh,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "mish": lambda x: x * torch.tanh(F.softplus(x)),
    "linear": lambda x: x,
}

# Keys of fla's RetNetConfig (and of transformers' PretrainedConfig) that do not change the function.
IGNORED_KEYS = {
    "attn_mode", "fuse_norm", "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_cache",
    "initializer_range", "max_position_embeddings", "use_l2warp", "conv_size", "bos_token_id",
    "eos_token_id", "pad_token_id", "model_type", "architectures", "torch_dtype", "dtype",
    "transformers_version", "auto_map", "_name_or_path", "return_dict", "output_hidden_states",
    "output_attentions", "tokenizer_class",
}


# ------------------------------------------------------------------------------------------ config
def _get(cfg, key, default, kind):
    v = cfg.get(key, default)
    if v is None:
        return None
    if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise ValueError(f"config: {key} = {v!r}, expected an integer")
    if kind is float and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise ValueError(f"config: {key} = {v!r}, expected a number")
    if kind is bool and not isinstance(v, bool):
        raise ValueError(f"config: {key} = {v!r}, expected true or false")
    if kind is str and not isinstance(v, str):
        raise ValueError(f"config: {key} = {v!r}, expected a string")
    return v


def attention_specs(cfg, layers):
    """fla's hybrid spec (None, a dict or a list of dicts) -> {layer: normalised spec}."""
    attn = cfg.get("attn")
    if attn is None:
        return {}
    specs = [attn] if isinstance(attn, dict) else attn
    if not isinstance(specs, list):
        raise ValueError(f"config: attn = {attn!r}, expected null, an object or a list of objects")
    out = {}
    for s in specs:
        if not isinstance(s, dict) or "layers" not in s or "num_heads" not in s:
            raise ValueError(f"config: attn spec {s!r} needs 'layers' and 'num_heads'")
        if s.get("qk_norm"):
            raise ValueError("config: attn.qk_norm is not supported (fla's RetNet does not pass it)")
        heads = _get(s, "num_heads", None, int)
        spec = dict(num_heads=heads, num_kv_heads=_get(s, "num_kv_heads", heads, int) or heads,
                    qkv_bias=_get(s, "qkv_bias", False, bool), window_size=_get(s, "window_size", None, int),
                    rope_theta=float(_get(s, "rope_theta", 10000.0, float)))
        if spec["window_size"] is not None and spec["window_size"] <= 0:
            raise ValueError(f"config: attn.window_size {spec['window_size']}, expected > 0")
        for l in s["layers"]:
            if isinstance(l, bool) or not isinstance(l, int) or not 0 <= l < layers or l in out:
                raise ValueError(f"config: attn.layers entry {l!r} is out of range [0, {layers}) or repeated")
            out[l] = spec
    return out


def parse_config(cfg):
    """fla's RetNetConfig dict -> a plain dict of derived sizes and options; ValueError naming the key
    for a malformed or unsupported setting."""
    if not isinstance(cfg, dict):
        raise ValueError("config: not a JSON object")
    mt = cfg.get("model_type", "retnet")
    if mt != "retnet":
        raise ValueError(f"config: model_type {mt!r}, expected 'retnet'")
    if _get(cfg, "use_short_conv", False, bool):
        raise ValueError("config: use_short_conv true is not supported")
    if cfg.get("attnres_block_size") is not None:
        raise ValueError("config: attnres_block_size is set; attention residuals are not supported")
    for key in ("hidden_size", "num_hidden_layers", "num_heads", "vocab_size"):
        if key not in cfg:
            raise ValueError(f"config: missing {key}")
    d = _get(cfg, "hidden_size", None, int)
    H = _get(cfg, "num_heads", None, int)
    L = _get(cfg, "num_hidden_layers", None, int)
    V = _get(cfg, "vocab_size", None, int)
    Hkv = _get(cfg, "num_kv_heads", None, int) or H
    expand_k = _get(cfg, "expand_k", 1.0, float)
    expand_v = _get(cfg, "expand_v", 2.0, float)
    ratio = _get(cfg, "hidden_ratio", 2, float)
    inter = _get(cfg, "intermediate_size", None, int)
    if inter is None:
        r = 4 if ratio is None else ratio
        inter = int(d * r * 2 / 3)
        inter = 256 * ((inter + 255) // 256)
    act = _get(cfg, "hidden_act", "swish", str)
    if act != "swish":
        raise ValueError(f"config: hidden_act {act!r}; fla's GatedMLP takes 'swish' (or 'powlu', not supported)")
    fmap = _get(cfg, "feature_map", None, str)
    if fmap is not None and fmap not in ACT2FN:
        raise ValueError(f"config: feature_map {fmap!r} is not one of transformers' ACT2FN names {sorted(ACT2FN)}")
    for k, v in (("hidden_size", d), ("num_heads", H), ("num_hidden_layers", L), ("vocab_size", V),
                 ("num_kv_heads", Hkv), ("intermediate_size", inter)):
        if v <= 0:
            raise ValueError(f"config: {k} = {v}, expected > 0")
    key_dim, value_dim = int(d * expand_k), int(d * expand_v)
    if key_dim % H or value_dim % H:
        raise ValueError(f"config: key dim {key_dim} / value dim {value_dim} not divisible by num_heads {H}")
    if H % Hkv:
        raise ValueError(f"config: num_heads {H} not divisible by num_kv_heads {Hkv}")
    dk, dv = key_dim // H, value_dim // H
    if dk % 2:
        raise ValueError(f"config: head key dim {dk} is odd; the rotary embedding needs pairs")
    gate = _get(cfg, "use_output_gate", True, bool)
    affine = cfg.get("elementwise_affine", True)
    affine = True if affine is None else _get(cfg, "elementwise_affine", True, bool)
    eps = _get(cfg, "norm_eps", 1e-6, float)
    if eps < 0:
        raise ValueError(f"config: norm_eps {eps} < 0")
    fused = gate and _get(cfg, "fuse_norm", True, bool)  # hidden_act is swish: fla's g_norm_swish_gate
    specs = attention_specs(cfg, L)
    for l, s in specs.items():
        if d % s["num_heads"] or s["num_heads"] % s["num_kv_heads"] or (d // s["num_heads"]) % 2:
            raise ValueError(f"config: attn num_heads {s['num_heads']} / num_kv_heads {s['num_kv_heads']} "
                             f"do not divide hidden_size {d} into even head dims")
    return dict(d=d, H=H, Hkv=Hkv, layers=L, vocab=V, key_dim=key_dim, value_dim=value_dim, dk=dk, dv=dv,
                inter=inter, feature_map=fmap, gate=gate, affine=affine, eps=float(eps),
                g_norm="g_norm_swish_gate" if fused else "g_norm", attn=specs,
                tied=_get(cfg, "tie_word_embeddings", False, bool))


def weight_shapes(cfg):
    """{fla state_dict name: shape} of every tensor a checkpoint holds (lm_head absent when tied)."""
    c = parse_config(cfg)
    d, V = c["d"], c["vocab"]
    shapes = {"model.embeddings.weight": (V, d)}
    for l in range(c["layers"]):
        p = f"model.layers.{l}."
        shapes[p + "attn_norm.weight"] = (d,)
        spec = c["attn"].get(l)
        if spec is not None:
            hd = d // spec["num_heads"]
            kv = spec["num_kv_heads"] * hd
            shapes.update({p + "attn.q_proj.weight": (d, d), p + "attn.k_proj.weight": (kv, d),
                           p + "attn.v_proj.weight": (kv, d)})
            if spec["qkv_bias"]:
                shapes.update({p + "attn.q_proj.bias": (d,), p + "attn.k_proj.bias": (kv,),
                               p + "attn.v_proj.bias": (kv,)})
            shapes[p + "attn.o_proj.weight"] = (d, d)
        else:
            g = c["H"] // c["Hkv"]
            shapes.update({p + "attn.q_proj.weight": (c["key_dim"], d),
                           p + "attn.k_proj.weight": (c["key_dim"] // g, d),
                           p + "attn.v_proj.weight": (c["value_dim"] // g, d)})
            if c["gate"]:
                shapes[p + "attn.g_proj.weight"] = (c["value_dim"], d)
            shapes[p + "attn.o_proj.weight"] = (d, c["value_dim"])
            if c["affine"]:
                shapes[p + f"attn.{c['g_norm']}.weight"] = (c["dv"],)
        shapes.update({p + "mlp_norm.weight": (d,), p + "mlp.gate_proj.weight": (c["inter"], d),
                       p + "mlp.up_proj.weight": (c["inter"], d), p + "mlp.down_proj.weight": (d, c["inter"])})
    shapes["model.norm.weight"] = (d,)
    if not c["tied"]:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def check_weights(weights, cfg):
    """ValueError naming the first missing or mis-shaped tensor; extra names are ignored."""
    for name, shape in weight_shapes(cfg).items():
        if name not in weights:
            raise ValueError(f"weights: missing tensor {name}")
        if tuple(weights[name].shape) != tuple(shape):
            raise ValueError(f"weights: {name} has shape {list(weights[name].shape)}, expected {list(shape)}")


# ------------------------------------------------------------------------------------------ pieces
def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) over the last dim, times weight (if any)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def rotary(x, positions, base=10000.0):
    """GPT-NeoX rotary embedding (rotate_half, not interleaved): x [T, heads, D], positions [T].
    Dim i < D/2 pairs with i + D/2, rotated by positions * base^(-2i/D)."""
    D = x.shape[-1]
    inv_freq = 1.0 / base ** (torch.arange(0, D, 2, dtype=torch.float64) / D)          # [D/2]
    phase = positions.to(torch.float64)[:, None] * inv_freq[None, :]                    # [T, D/2]
    cos, sin = phase.cos().to(x.dtype)[:, None, :], phase.sin().to(x.dtype)[:, None, :]  # [T, 1, D/2]
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def decays(H):
    """gamma_h = 1 - 2^(-5-h), float64 [H]."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64))


def repeat_kv(x, groups):
    """[T, Hkv, D] -> [T, Hkv * groups, D]: query head h reads kv head h // groups ('... h d -> ... (h g) d')."""
    return x.repeat_interleave(groups, dim=1)


def retention_parallel(q, k, v, gamma):
    """q, k [T, H, dk] (rotated; q not yet scaled), v [T, H, dv], gamma float64 [H] -> o [T, H, dv]:
    o_n = sum_{m<=n} gamma^(n-m) (q_n . k_m) / sqrt(dk) v_m."""
    T, dk = q.shape[0], q.shape[-1]
    n = torch.arange(T, dtype=torch.float64)
    diff = n[:, None] - n[None, :]
    D = torch.where(diff >= 0, gamma[:, None, None] ** diff.clamp(min=0), torch.zeros((), dtype=torch.float64))
    scores = torch.einsum("nhd,mhd->hnm", q * dk ** -0.5, k) * D.to(q.dtype)
    return torch.einsum("hnm,mhd->nhd", scores, v)


def retention_step(state, q, k, v, gamma):
    """One token: state [H, dk, dv] <- gamma state + k^T v; o = (q / sqrt(dk)) state. q, k [H, dk], v [H, dv]."""
    state = gamma.to(q.dtype)[:, None, None] * state + k[:, :, None] * v[:, None, :]
    o = torch.einsum("hd,hde->he", q * q.shape[-1] ** -0.5, state)
    return state, o


def gated_norm(o, g, weight, eps):
    """Per-head RMSNorm over dv (weight [dv] shared by heads, or None) times swish(g) (g None: no gate).
    o [T, H, dv], g [T, H*dv] or None -> [T, H*dv]."""
    y = rms_norm(o, weight, eps).flatten(-2)
    return y if g is None else y * F.silu(g)


def gated_mlp(x, W, p):
    """fla's GatedMLP (swiglu): down(swish(gate(x)) * up(x))."""
    return (F.silu(x @ W[p + "gate_proj.weight"].T) * (x @ W[p + "up_proj.weight"].T)) @ W[p + "down_proj.weight"].T


def _linear(x, W, name):
    y = x @ W[name + ".weight"].T
    b = W.get(name + ".bias")
    return y if b is None else y + b


# ----------------------------------------------------------------------------------------- mixers
def _retention_qkv(x, W, p, c, positions):
    """Projections, feature map, rotary, group repeat: -> q, k [T, H, dk], v [T, H, dv]."""
    T = x.shape[0]
    q = (x @ W[p + "q_proj.weight"].T).view(T, c["H"], c["dk"])
    k = (x @ W[p + "k_proj.weight"].T).view(T, c["Hkv"], c["dk"])
    v = (x @ W[p + "v_proj.weight"].T).view(T, c["Hkv"], c["dv"])
    if c["feature_map"] is not None:
        q, k = ACT2FN[c["feature_map"]](q), ACT2FN[c["feature_map"]](k)
    q, k = rotary(q, positions), rotary(k, positions)
    g = c["H"] // c["Hkv"]
    return q, repeat_kv(k, g), repeat_kv(v, g)


def _retention_out(o, x, W, p, c):
    g = x @ W[p + "g_proj.weight"].T if c["gate"] else None
    w = W[p + f"{c['g_norm']}.weight"] if c["affine"] else None
    return gated_norm(o, g, w, c["eps"]) @ W[p + "o_proj.weight"].T


def retention_layer(x, W, p, c):
    """Parallel form over the whole sequence. x [T, d] (normed) -> [T, d]."""
    q, k, v = _retention_qkv(x, W, p, c, torch.arange(x.shape[0]))
    return _retention_out(retention_parallel(q, k, v, decays(c["H"])), x, W, p, c)


def retention_layer_step(state, x, W, p, c, position):
    """Recurrent form, one token. x [1, d] -> (state, [1, d]); state None at the start."""
    q, k, v = _retention_qkv(x, W, p, c, torch.tensor([position]))
    if state is None:
        state = x.new_zeros(c["H"], c["dk"], c["dv"])
    state, o = retention_step(state, q[0], k[0], v[0], decays(c["H"]))
    return state, _retention_out(o[None], x, W, p, c)


def _attention_qkv(x, W, p, spec, positions):
    T, d = x.shape
    H, Hkv = spec["num_heads"], spec["num_kv_heads"]
    hd = d // H
    q = _linear(x, W, p + "q_proj").view(T, H, hd)
    k = _linear(x, W, p + "k_proj").view(T, Hkv, hd)
    v = _linear(x, W, p + "v_proj").view(T, Hkv, hd)
    q, k = rotary(q, positions, spec["rope_theta"]), rotary(k, positions, spec["rope_theta"])
    return q, repeat_kv(k, H // Hkv), repeat_kv(v, H // Hkv)


def attention(q, k, v, q_positions, k_positions, window):
    """Causal softmax attention, q [Tq, H, D], k, v [Tk, H, D]: query at position n sees keys at m with
    m <= n and (window None or n - m < window)."""
    diff = q_positions[:, None] - k_positions[None, :]
    allowed = diff >= 0
    if window is not None:
        allowed = allowed & (diff < window)
    scores = torch.einsum("nhd,mhd->hnm", q, k) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnm,mhd->nhd", torch.softmax(scores, dim=-1), v)


def attention_layer(x, W, p, spec):
    """fla/layers/attn.py's Attention, parallel form. x [T, d] -> [T, d]."""
    pos = torch.arange(x.shape[0])
    q, k, v = _attention_qkv(x, W, p, spec, pos)
    o = attention(q, k, v, pos, pos, spec["window_size"])
    return o.flatten(-2) @ W[p + "o_proj.weight"].T


def attention_layer_step(cache, x, W, p, spec, position):
    """One token with a key/value cache (all past keys; the window is applied by the mask)."""
    q, k, v = _attention_qkv(x, W, p, spec, torch.tensor([position]))
    ks, vs = (k, v) if cache is None else (torch.cat((cache[0], k)), torch.cat((cache[1], v)))
    o = attention(q, ks, vs, torch.tensor([position]), torch.arange(position + 1), spec["window_size"])
    return (ks, vs), o.flatten(-2) @ W[p + "o_proj.weight"].T


# ------------------------------------------------------------------------------------------ model
def block(x, W, l, c, mixer):
    """One RetNetBlock: x += mixer(RMSNorm(x) attn_norm); x += mlp(RMSNorm(x) mlp_norm)."""
    p = f"model.layers.{l}."
    x = x + mixer(rms_norm(x, W[p + "attn_norm.weight"], c["eps"]))
    return x + gated_mlp(rms_norm(x, W[p + "mlp_norm.weight"], c["eps"]), W, p + "mlp.")


def _head(x, W, c):
    out = W["model.embeddings.weight"] if c["tied"] else W["lm_head.weight"]
    return rms_norm(x, W["model.norm.weight"], c["eps"]) @ out.T


def _check_tokens(tokens, c):
    tokens = torch.as_tensor(tokens, dtype=torch.long).flatten()
    if tokens.numel() == 0:
        raise ValueError("tokens: empty")
    if tokens.min() < 0 or tokens.max() >= c["vocab"]:
        raise ValueError(f"tokens: id out of range [0, {c['vocab']})")
    return tokens


def forward(weights, cfg, tokens, mode="parallel"):
    """tokens [T] -> logits [T, vocab] in the weights' dtype. mode: parallel | recurrent."""
    c = parse_config(cfg)
    check_weights(weights, cfg)
    tokens = _check_tokens(tokens, c)
    if mode == "recurrent":
        dec = Decoder(weights, cfg)
        return torch.stack([dec.step(int(t)) for t in tokens])
    if mode != "parallel":
        raise ValueError(f"mode {mode!r}, expected one of {FORMS}")
    W = weights
    x = W["model.embeddings.weight"][tokens]
    for l in range(c["layers"]):
        p = f"model.layers.{l}.attn."
        spec = c["attn"].get(l)
        if spec is not None:
            x = block(x, W, l, c, lambda h: attention_layer(h, W, p, spec))
        else:
            x = block(x, W, l, c, lambda h: retention_layer(h, W, p, c))
    return _head(x, W, c)


class Decoder:
    """The recurrent form: feeds one token at a time, keeping each layer's state."""

    def __init__(self, weights, cfg):
        self.W, self.c = weights, parse_config(cfg)
        check_weights(weights, cfg)
        self.states = [None] * self.c["layers"]
        self.position = 0

    def step(self, token):
        """-> logits [vocab] after `token`."""
        W, c, t = self.W, self.c, self.position
        x = W["model.embeddings.weight"][_check_tokens([token], c)]
        for l in range(c["layers"]):
            p = f"model.layers.{l}.attn."
            spec = c["attn"].get(l)

            def mixer(h):
                if spec is not None:
                    self.states[l], out = attention_layer_step(self.states[l], h, W, p, spec, t)
                else:
                    self.states[l], out = retention_layer_step(self.states[l], h, W, p, c, t)
                return out
            x = block(x, W, l, c, mixer)
        self.position += 1
        return _head(x, W, c)[0]


def greedy(weights, cfg, prompt, n):
    """Greedy continuation: n token ids (argmax, lowest id on ties) after the prompt, recurrent form."""
    dec = Decoder(weights, cfg)
    for t in prompt:
        logits = dec.step(int(t))
    out = []
    for _ in range(n):
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        logits = dec.step(nxt)
    return out


def loss(weights, cfg, seq, mode="parallel"):
    """Mean next-token cross-entropy of one sequence."""
    logits = forward(weights, cfg, seq[:-1], mode)
    return F.cross_entropy(logits, torch.as_tensor(seq[1:], dtype=torch.long))


# ------------------------------------------------------------------------------------- syncdoth
# syncdoth/RetNet (a Hugging Face port of torchscale): torchscale's math (retnet_ref.py) under
# "model." + torchscale's names, lm_head.weight for output_projection, persistent buffers
# model.retnet_rel_pos.{angle,decay}, and torchscale's config keys.
SYNCDOTH_UNSUPPORTED = {"use_lm_decay": True, "deepnorm": True, "layernorm_embedding": True,
                        "use_glu": False, "decoder_normalize_before": False, "tie_word_embeddings": True,
                        "use_ffn_rms_norm": True}


def syncdoth_to_torchscale(weights):
    """syncdoth's names -> torchscale's (what retnet_ref.py reads)."""
    out = {}
    for k, v in weights.items():
        if k == "lm_head.weight":
            out["output_projection.weight"] = v
        elif k.startswith("model."):
            out[k[len("model."):]] = v
    return out


def torchscale_to_syncdoth(weights):
    out = {"model." + k: v for k, v in weights.items() if k != "output_projection.weight"}
    out["lm_head.weight"] = weights["output_projection.weight"]
    return out


def syncdoth_check_weights(weights, cfg):
    """ValueError naming (in syncdoth's names) the first missing or mis-shaped tensor."""
    import retnet_ref as R
    R.check_config(cfg)
    for name, shape in torchscale_to_syncdoth(R.weight_shapes(cfg)).items():
        if name not in weights:
            raise ValueError(f"weights: missing tensor {name}")
        if tuple(weights[name].shape) != tuple(shape):
            raise ValueError(f"weights: {name} has shape {list(weights[name].shape)}, expected {list(shape)}")


def syncdoth_forward(weights, cfg, tokens, mode="parallel"):
    import retnet_ref as R
    for k, bad in SYNCDOTH_UNSUPPORTED.items():
        if k in cfg and cfg[k] == bad:
            raise ValueError(f"config: {k} = {bad!r} is not supported")
    tokens = torch.as_tensor(tokens, dtype=torch.long).flatten()
    return R.forward(syncdoth_to_torchscale(weights), cfg, tokens[None], mode)[0]


def is_syncdoth(cfg):
    """syncdoth's configs carry torchscale's keys; fla's carry hidden_size."""
    return "decoder_embed_dim" in cfg


def any_forward(weights, cfg, tokens, mode="parallel"):
    return (syncdoth_forward if is_syncdoth(cfg) else forward)(weights, cfg, tokens, mode)
