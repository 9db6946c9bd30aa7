"""Independent numpy forward pass of HF LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM.

Written from the Hugging Face model semantics (config.json + safetensors), not from Sampan's code,
so Sampan's logits can be checked against it. Computes in float64 by default: the reference should
carry no rounding of its own worth talking about.

    logits(model_dir, ids) -> np.ndarray [len(ids), vocab_size]

Command line (debugging aid): python3 numpy_llama.py MODEL_DIR --ids 1,2,3 [--out FILE.npy]
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

SUPPORTED_ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")


class Spec:
    """The hyper-parameters the forward pass needs, resolved with each architecture's HF defaults."""

    def __init__(self, cfg):
        archs = cfg.get("architectures") or []
        if not archs or archs[0] not in SUPPORTED_ARCHS:
            raise ValueError(f"unsupported architectures {archs}")
        self.arch = archs[0]
        self.vocab = int(cfg["vocab_size"])
        self.hidden = int(cfg["hidden_size"])
        self.n_layer = int(cfg["num_hidden_layers"])
        self.n_head = int(cfg["num_attention_heads"])
        self.n_head_kv = int(cfg.get("num_key_value_heads") or self.n_head)
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.n_head)
        self.ffn = int(cfg["intermediate_size"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r} not supported by the reference")
        if self.n_head % self.n_head_kv:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

        # Which projections carry a bias differs per architecture, not per config alone.
        if self.arch == "LlamaForCausalLM":
            ab = bool(cfg.get("attention_bias", False))
            self.bias = {"q": ab, "k": ab, "v": ab, "o": ab}
            self.mlp_bias = bool(cfg.get("mlp_bias", False))
        elif self.arch == "Qwen2ForCausalLM":
            self.bias = {"q": True, "k": True, "v": True, "o": False}
            self.mlp_bias = False
        else:
            self.bias = {"q": False, "k": False, "v": False, "o": False}
            self.mlp_bias = False

        self.window = [None] * self.n_layer  # per layer: attend to the last `window` keys or all
        if self.arch == "MistralForCausalLM":
            # MistralConfig defaults sliding_window to 4096 when the key is absent; null disables.
            w = cfg["sliding_window"] if "sliding_window" in cfg else 4096
            self.window = [w] * self.n_layer
        elif self.arch == "Qwen2ForCausalLM" and cfg.get("use_sliding_window", False):
            w = cfg.get("sliding_window", 4096)
            types = cfg.get("layer_types")
            if types is None:
                first = int(cfg.get("max_window_layers", 28))
                types = ["sliding_attention" if i >= first else "full_attention"
                         for i in range(self.n_layer)]
            self.window = [w if t == "sliding_attention" else None for t in types]

        self.inv_freq, self.attention_factor = rope_frequencies(cfg, self.head_dim)


def rope_parameters(cfg):
    """The RoPE dict, from `rope_parameters` (transformers >= 5) or `rope_scaling` + `rope_theta`."""
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rp.setdefault("rope_type", rp.get("type", "default"))
    rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    return rp


def rope_frequencies(cfg, head_dim):
    """-> (inv_freq [head_dim/2] float64, attention scaling factor applied to cos/sin)."""
    rp = rope_parameters(cfg)
    if float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))) != 1.0:
        raise ValueError("partial_rotary_factor is not part of these architectures")
    base = float(rp["rope_theta"])
    inv_freq = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    kind = rp["rope_type"]
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        # Position interpolation: positions divided by factor == frequencies divided by factor.
        return inv_freq / float(rp["factor"]), 1.0
    if kind == "llama3":
        factor = float(rp["factor"])
        low = float(rp["low_freq_factor"])
        high = float(rp["high_freq_factor"])
        old_ctx = float(rp.get("original_max_position_embeddings",
                               cfg.get("max_position_embeddings")))
        wavelen = 2.0 * math.pi / inv_freq
        # Long wavelengths (beyond old_ctx/low) are slowed by `factor`, short ones (below
        # old_ctx/high) kept; the band between blends the two linearly in old_ctx/wavelen.
        smooth = (old_ctx / wavelen - low) / (high - low)
        blended = (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
        out = np.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        return np.where(medium, blended, out), 1.0
    raise ValueError(f"rope_type {kind!r} not supported by the reference")


def rms_norm(x, w, eps):
    # x: [n, d]; w: [d]
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def apply_rope(x, cos, sin):
    # x: [n, heads, head_dim]; cos, sin: [n, head_dim]. HF's rotate_half pairs dim i with
    # i + head_dim/2 (not adjacent dims): rotate_half(x) = cat(-x2, x1).
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def silu(x):
    return x / (1.0 + np.exp(-x))


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


class Weights:
    """Tensor lookup with shape checks, converted to the compute dtype on first use."""

    def __init__(self, model_dir, dtype):
        self.raw = safetensors_io.load_model_tensors(model_dir)
        self.dtype = dtype

    def has(self, name):
        return name in self.raw

    def get(self, name, shape):
        if name not in self.raw:
            raise KeyError(f"missing tensor {name}")
        t = self.raw[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"tensor {name}: shape {t.shape}, expected {tuple(shape)}")
        return t.astype(self.dtype)


def attention(q, k, v, window):
    # q: [n, n_head, hd]; k, v: [n, n_head_kv, hd] -> [n, n_head * hd]
    n, n_head, hd = q.shape
    group = n_head // k.shape[1]
    kk = np.repeat(k, group, axis=1)  # query head h reads kv head h // group
    vv = np.repeat(v, group, axis=1)
    scores = np.einsum("ihd,jhd->hij", q, kk) / math.sqrt(hd)
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if window is not None:
        allowed &= j > i - window  # the last `window` positions, the query's own included
    scores = np.where(allowed[None], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", p, vv).reshape(n, n_head * hd)


def logits(model_dir, ids, dtype=np.float64):
    """Logits of every position for one sequence of token ids -> [len(ids), vocab]."""
    s = Spec(load_config(model_dir))
    w = Weights(model_dir, dtype)
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim != 1 or len(ids) == 0 or ids.min() < 0 or ids.max() >= s.vocab:
        raise ValueError("ids must be a non-empty list within [0, vocab_size)")
    n, d, hd = len(ids), s.hidden, s.head_dim
    q_dim, kv_dim = s.n_head * hd, s.n_head_kv * hd

    emb = w.get("model.embed_tokens.weight", (s.vocab, d))
    x = emb[ids]  # [n, hidden]

    angles = np.arange(n, dtype=np.float64)[:, None] * s.inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)  # [n, head_dim]
    cos = np.cos(angles).astype(dtype) * s.attention_factor
    sin = np.sin(angles).astype(dtype) * s.attention_factor

    def linear(h, prefix, out_dim, in_dim, bias):
        y = h @ w.get(prefix + ".weight", (out_dim, in_dim)).T
        if bias:
            y = y + w.get(prefix + ".bias", (out_dim,))
        return y

    for layer in range(s.n_layer):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w.get(p + "input_layernorm.weight", (d,)), s.eps)
        q = linear(h, p + "self_attn.q_proj", q_dim, d, s.bias["q"]).reshape(n, s.n_head, hd)
        k = linear(h, p + "self_attn.k_proj", kv_dim, d, s.bias["k"]).reshape(n, s.n_head_kv, hd)
        v = linear(h, p + "self_attn.v_proj", kv_dim, d, s.bias["v"]).reshape(n, s.n_head_kv, hd)
        a = attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v, s.window[layer])
        x = x + linear(a, p + "self_attn.o_proj", d, q_dim, s.bias["o"])

        h = rms_norm(x, w.get(p + "post_attention_layernorm.weight", (d,)), s.eps)
        gate = linear(h, p + "mlp.gate_proj", s.ffn, d, s.mlp_bias)
        up = linear(h, p + "mlp.up_proj", s.ffn, d, s.mlp_bias)
        x = x + linear(silu(gate) * up, p + "mlp.down_proj", d, s.ffn, s.mlp_bias)

    x = rms_norm(x, w.get("model.norm.weight", (d,)), s.eps)
    # Tied models reuse the embedding matrix; HF ignores a stray lm_head tensor in that case.
    head = emb if s.tied else w.get("lm_head.weight", (s.vocab, d))
    return x @ head.T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", help="write float32 logits [n, vocab] to this .npy")
    args = ap.parse_args()
    ids = [int(t) for t in args.ids.split(",")]
    out = logits(args.model_dir, ids)
    if args.out:
        np.save(args.out, out.astype(np.float32))
    print(f"logits shape {out.shape}; top-1 per position: {out.argmax(axis=-1).tolist()}")


if __name__ == "__main__":
    main()
