#!/usr/bin/env python3
"""Which linears carry the INT4 g128 weight error of a Llama model, with and without the residual
Hadamard rotation: a numpy cross-check of `sampan eval --quantization int4 [--hadamard]`, written
from the quantizer's definition (round-to-nearest, scale = group absmax / 7 rounded to f16), not
from Sampan's code (run by hand; docs/QUANTIZATION.md quotes its figures).

    python3 tests/reference/int4_family_error.py MODEL_DIR TEXT_FILE

Quantizes one family of linears at a time (q/k/v, o, gate/up, down, lm_head, then all of them)
of the model as stored and of its rotated copy (norms folded, residual rotated by random signs
times a block-diagonal Walsh-Hadamard, down_proj input rotated online), runs the numpy forward on
BOS + the first 511 tokens of the text, and prints mean KL(ref || quantized) and top-1 agreement
over the second half of the window against the float model. Also prints the KL of the rotated
float model (~1e-17: the rotation is exact).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_llama as nl, safetensors_io as sio
from tokenizers import Tokenizer
M = sys.argv[1]
cfg = nl.load_config(M); s = nl.Spec(cfg)
T0 = {k: v.astype(np.float64) for k, v in sio.load_model_tensors(M).items()}
tok = Tokenizer.from_file(os.path.join(M, "tokenizer.json"))
text = open(sys.argv[2]).read()
ids = tok.encode(text).ids
bos = cfg.get("bos_token_id")
if ids[0] != bos and bos is not None: ids = [bos] + ids
ids = ids[:512]
def hadamard(n):
    H = np.array([[1.0]])
    while H.shape[0] < n: H = np.block([[H, H], [H, -H]])
    return H / np.sqrt(n)
def blockdiag_h(n):
    b = 1
    while n % (b*2) == 0 and b*2 <= n: b *= 2
    return np.kron(np.eye(n//b), hadamard(b))
def rtn(w, g=128):
    o, i = w.shape
    if i % g: return w
    wg = w.reshape(o, i//g, g)
    sc = np.abs(wg).max(-1, keepdims=True)/7; sc[sc==0]=1
    sc = sc.astype(np.float16).astype(np.float64)
    q = np.clip(np.round(wg/sc), -8, 7)
    return (q*sc).reshape(o, i)
def forward(T, ids):
    d, hd = s.hidden, s.head_dim; n=len(ids)
    x = T["model.embed_tokens.weight"][ids]
    ang = np.arange(n)[:,None]*s.inv_freq[None,:]; ang=np.concatenate([ang,ang],-1)
    cos, sin = np.cos(ang), np.sin(ang)
    for l in range(s.n_layer):
        p=f"model.layers.{l}."
        h = nl.rms_norm(x, T[p+"input_layernorm.weight"], s.eps)
        q=(h@T[p+"self_attn.q_proj.weight"].T).reshape(n,s.n_head,hd)
        k=(h@T[p+"self_attn.k_proj.weight"].T).reshape(n,s.n_head_kv,hd)
        v=(h@T[p+"self_attn.v_proj.weight"].T).reshape(n,s.n_head_kv,hd)
        a=nl.attention(nl.apply_rope(q,cos,sin), nl.apply_rope(k,cos,sin), v, None)
        x = x + a@T[p+"self_attn.o_proj.weight"].T
        h = nl.rms_norm(x, T[p+"post_attention_layernorm.weight"], s.eps)
        g=h@T[p+"mlp.gate_proj.weight"].T; u=h@T[p+"mlp.up_proj.weight"].T
        m = nl.silu(g)*u
        if "HD" in T: m = m @ T["HD"].T
        x = x + m@T[p+"mlp.down_proj.weight"].T
    x = nl.rms_norm(x, T["model.norm.weight"], s.eps)
    return x@T["lm_head.weight"].T
def rotate(T, seed=0, down=True):
    R = dict(T); d=s.hidden
    rng=np.random.default_rng(seed)
    Q = np.diag(rng.choice([-1.,1.], d)) @ blockdiag_h(d)
    # fold norms
    for l in range(s.n_layer):
        p=f"model.layers.{l}."
        for nm, rd in (("input_layernorm", ["self_attn.q_proj","self_attn.k_proj","self_attn.v_proj"]),
                       ("post_attention_layernorm", ["mlp.gate_proj","mlp.up_proj"])):
            g = T[p+nm+".weight"]
            for r in rd: R[p+r+".weight"] = T[p+r+".weight"]*g[None,:]
            R[p+nm+".weight"] = np.ones(d)
    R["lm_head.weight"] = T["lm_head.weight"]*T["model.norm.weight"][None,:]; R["model.norm.weight"]=np.ones(d)
    R["model.embed_tokens.weight"] = T["model.embed_tokens.weight"]@Q
    R["lm_head.weight"] = R["lm_head.weight"]@Q
    HF = blockdiag_h(s.ffn)
    if down: R["HD"] = HF
    for l in range(s.n_layer):
        p=f"model.layers.{l}."
        for r in ("self_attn.q_proj","self_attn.k_proj","self_attn.v_proj","mlp.gate_proj","mlp.up_proj"):
            R[p+r+".weight"] = R[p+r+".weight"]@Q
        R[p+"self_attn.o_proj.weight"] = Q.T@T[p+"self_attn.o_proj.weight"]
        dn = Q.T@T[p+"mlp.down_proj.weight"]
        R[p+"mlp.down_proj.weight"] = dn@HF.T if down else dn
    return R
def kld(ref, lg):
    def lsm(z): z=z-z.max(-1,keepdims=True); return z-np.log(np.exp(z).sum(-1,keepdims=True))
    a, b = lsm(ref), lsm(lg); pa=np.exp(a)
    h=len(ref)//2
    return (pa*(a-b)).sum(-1)[h:].mean(), (ref.argmax(-1)==lg.argmax(-1))[h:].mean()
ref = forward(T0, ids)
R0 = rotate(T0)
print("rot float kld", kld(ref, forward(R0, ids)))
fam = {"qkv":["self_attn.q_proj","self_attn.k_proj","self_attn.v_proj"],"o":["self_attn.o_proj"],
       "gu":["mlp.gate_proj","mlp.up_proj"],"down":["mlp.down_proj"],"head":["lm_head"],
       "all":["self_attn.q_proj","self_attn.k_proj","self_attn.v_proj","self_attn.o_proj","mlp.gate_proj","mlp.up_proj","mlp.down_proj","lm_head"]}
for f, names in fam.items():
    out=[]
    for T in (T0, R0):
        Q=dict(T)
        for k in T:
            if k=="HD": continue
            if any(k.endswith(nm+".weight") for nm in names) and T[k].ndim==2 and "embed" not in k:
                Q[k]=rtn(T[k])
        out.append(kld(ref, forward(Q, ids)))
    print(f"{f:5s} plain kld {out[0][0]:.5f} top1 {out[0][1]:.3f} | rot kld {out[1][0]:.5f} top1 {out[1][1]:.3f}")
