#!/usr/bin/env python3
"""Which linears carry the INT4 g128 weight error of a Llama model, with and without the residual
Hadamard rotation: a numpy cross-check of `sampan eval --quantization int4 [--hadamard]`, written
from the quantizer's definition (round-to-nearest, scale = group absmax / 7 rounded to f16), not
from Sampan's code (run by hand; docs/QUANTIZATION.md quotes its figures).

    python3 tests/reference/int4_family_error.py MODEL_DIR TEXT_FILE

e.g. MODEL_DIR a Llama checkpoint directory (config.json, *.safetensors, tokenizer.json) and
TEXT_FILE tests/data/eval/apache-2.0.txt. Needs numpy and the `tokenizers` package; a model of a
few tens of MB takes under a minute (float64 throughout).

Quantizes one family of linears at a time (q/k/v, o, gate/up, down, lm_head, then all of them)
of the model as stored and of its rotated copy (norms folded, residual rotated by random signs
times a block-diagonal Walsh-Hadamard, down_proj input rotated online), runs the numpy forward on
BOS + the first 511 tokens of the text, and prints mean KL(ref || quantized) and top-1 agreement
over the second half of the window against the float model. Also prints the KL of the rotated
float model (~1e-17: the rotation is exact).
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama as nl  # noqa: E402
import safetensors_io as sio  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

WINDOW = 512  # tokens in the evaluated window, BOS included
GROUP = 128  # INT4 group size along the input dimension

QKV = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]
GATE_UP = ["mlp.gate_proj", "mlp.up_proj"]
# The families quantized one at a time, in print order; "all" quantizes every linear at once.
FAMILIES = {
    "qkv": QKV,
    "o": ["self_attn.o_proj"],
    "gu": GATE_UP,
    "down": ["mlp.down_proj"],
    "head": ["lm_head"],
    "all": QKV + ["self_attn.o_proj"] + GATE_UP + ["mlp.down_proj", "lm_head"],
}


def read_window(model_dir, text_path, cfg):
    """The token ids evaluated: BOS (when the model has one) + the text's tokens, WINDOW in all."""
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(text_path) as f:
        ids = tok.encode(f.read()).ids
    bos = cfg.get("bos_token_id")
    if ids[0] != bos and bos is not None:
        ids = [bos] + ids
    return ids[:WINDOW]


def hadamard(n):
    """The orthonormal n x n Walsh-Hadamard matrix (Sylvester's construction; n a power of 2)."""
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def block_diag_hadamard(n):
    """n x n block-diagonal Walsh-Hadamard, blocks of the largest power of 2 dividing n."""
    b = 1
    while n % (b * 2) == 0 and b * 2 <= n:
        b *= 2
    return np.kron(np.eye(n // b), hadamard(b))


def quantize_rtn(w, group=GROUP):
    """w [out, in] through INT4 round-to-nearest and back, per group of `group` inputs: scale =
    group absmax / 7 rounded to f16, codes in [-8, 7]. A width that is not a whole number of
    groups stays unquantized."""
    out_dim, in_dim = w.shape
    if in_dim % group:
        return w
    wg = w.reshape(out_dim, in_dim // group, group)
    scale = np.abs(wg).max(-1, keepdims=True) / 7
    scale[scale == 0] = 1
    scale = scale.astype(np.float16).astype(np.float64)
    q = np.clip(np.round(wg / scale), -8, 7)
    return (q * scale).reshape(out_dim, in_dim)


def forward(spec, w, ids, down_rotation=None):
    """Logits [n, vocab] of `ids` in one causal pass over weights `w` (name -> float64 array).
    `down_rotation` [ffn, ffn], when given, rotates the down_proj input online (the rotated
    model's down_proj weights carry its transpose)."""
    n, hd = len(ids), spec.head_dim
    x = w["model.embed_tokens.weight"][ids]
    angles = np.arange(n)[:, None] * spec.inv_freq[None, :]
    angles = np.concatenate([angles, angles], -1)
    cos, sin = np.cos(angles), np.sin(angles)
    for layer in range(spec.n_layer):
        p = f"model.layers.{layer}."
        h = nl.rms_norm(x, w[p + "input_layernorm.weight"], spec.eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, spec.n_head, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, spec.n_head_kv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, spec.n_head_kv, hd)
        a = nl.attention(nl.apply_rope(q, cos, sin), nl.apply_rope(k, cos, sin), v, None)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = nl.rms_norm(x, w[p + "post_attention_layernorm.weight"], spec.eps)
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        m = nl.silu(gate) * up
        if down_rotation is not None:
            m = m @ down_rotation.T
        x = x + m @ w[p + "mlp.down_proj.weight"].T
    x = nl.rms_norm(x, w["model.norm.weight"], spec.eps)
    return x @ w["lm_head.weight"].T


def rotate(spec, w, seed=0, rotate_down=True):
    """The same model with its residual stream rotated by Q = diag(random signs) x block-diagonal
    Hadamard: RMSNorm weights folded into the linears that read them (norms become ones), then
    every matrix that reads the residual multiplied by Q on the right and every one writing it by
    Q^T on the left. With `rotate_down`, down_proj also reads its input rotated by a block-diagonal
    Hadamard applied online. Returns (weights, down_rotation or None)."""
    r = dict(w)
    d = spec.hidden
    rng = np.random.default_rng(seed)
    q_rot = np.diag(rng.choice([-1.0, 1.0], d)) @ block_diag_hadamard(d)
    for layer in range(spec.n_layer):
        p = f"model.layers.{layer}."
        for norm, readers in (("input_layernorm", QKV), ("post_attention_layernorm", GATE_UP)):
            g = w[p + norm + ".weight"]
            for name in readers:
                r[p + name + ".weight"] = w[p + name + ".weight"] * g[None, :]
            r[p + norm + ".weight"] = np.ones(d)
    r["lm_head.weight"] = w["lm_head.weight"] * w["model.norm.weight"][None, :]
    r["model.norm.weight"] = np.ones(d)

    r["model.embed_tokens.weight"] = w["model.embed_tokens.weight"] @ q_rot
    r["lm_head.weight"] = r["lm_head.weight"] @ q_rot
    down_rotation = block_diag_hadamard(spec.ffn)
    for layer in range(spec.n_layer):
        p = f"model.layers.{layer}."
        for name in QKV + GATE_UP:
            r[p + name + ".weight"] = r[p + name + ".weight"] @ q_rot
        r[p + "self_attn.o_proj.weight"] = q_rot.T @ w[p + "self_attn.o_proj.weight"]
        down = q_rot.T @ w[p + "mlp.down_proj.weight"]
        r[p + "mlp.down_proj.weight"] = down @ down_rotation.T if rotate_down else down
    return r, (down_rotation if rotate_down else None)


def quantize_family(w, names):
    """A copy of `w` with the 2-D weights of the linears `names` (in every layer) through
    quantize_rtn; embeddings never."""
    out = dict(w)
    for key, value in w.items():
        if (any(key.endswith(name + ".weight") for name in names) and value.ndim == 2
                and "embed" not in key):
            out[key] = quantize_rtn(value)
    return out


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def kl_and_top1(ref, logits):
    """(mean KL(softmax(ref) || softmax(logits)), fraction of rows with the same argmax) over the
    second half of the rows: the positions with at least half a window of context."""
    a, b = log_softmax(ref), log_softmax(logits)
    half = len(ref) // 2
    kl = (np.exp(a) * (a - b)).sum(-1)[half:].mean()
    top1 = (ref.argmax(-1) == logits.argmax(-1))[half:].mean()
    return kl, top1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", help="Llama checkpoint directory (HF layout)")
    parser.add_argument("text_file", help="text whose first tokens are evaluated")
    args = parser.parse_args()

    cfg = nl.load_config(args.model_dir)
    spec = nl.Spec(cfg)
    plain = {k: v.astype(np.float64) for k, v in sio.load_model_tensors(args.model_dir).items()}
    ids = read_window(args.model_dir, args.text_file, cfg)

    ref = forward(spec, plain, ids)
    rotated, down_rotation = rotate(spec, plain)
    print("rot float kld", kl_and_top1(ref, forward(spec, rotated, ids, down_rotation)))
    for family, names in FAMILIES.items():
        plain_kl, plain_top1 = kl_and_top1(ref, forward(spec, quantize_family(plain, names), ids))
        rot_kl, rot_top1 = kl_and_top1(
            ref, forward(spec, quantize_family(rotated, names), ids, down_rotation))
        print(f"{family:5s} plain kld {plain_kl:.5f} top1 {plain_top1:.3f} | "
              f"rot kld {rot_kl:.5f} top1 {rot_top1:.3f}")


if __name__ == "__main__":
    main()
