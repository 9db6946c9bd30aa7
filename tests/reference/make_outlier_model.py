#!/usr/bin/env python3
"""Makes the *outlier model*: a small LlamaForCausalLM whose residual stream, weights and keys
carry the outliers that make quantization of real LLMs hard, so that the benefit of the Hadamard
rotation (weights) and of the K-head Walsh-Hadamard (KV cache) can be measured and asserted.

Shape: vocab 32000 (tests/data/tokenizers/llama-spm), hidden 256, 4 layers, 4 query heads over
2 KV heads (GQA, head_dim 64), intermediate 768 (= 3 x 256: not a power of two, so the
rotation's block-diagonal path runs, and a multiple of 128, so INT4 g128 quantizes down_proj
too), untied lm_head, bf16. An eval of a few thousand tokens takes seconds.

What it computes (all numpy, deterministic for a --seed):
  * A real next-token distribution: the embedding / lm_head carry a bigram fit of English text
    (the fit of scripts/make_demo_model.py, on its corpus, at rank 250), so the model's
    predictions are peaked and top-1 agreement means something. The fit lives in a random
    orthonormal basis (an SVD would align its strongest directions with the first channels,
    which no trained model does), and the lm_head rows of tokens outside the fit are dense.
  * Context: random attention and MLP blocks with non-zero o_proj / down_proj, so every layer's
    K/V and weights change the logits (a quantized KV cache or weight has an effect).
  * Residual-stream outliers ("massive activations"): 4 channels 20x, 40x, 70x and 100x larger
    than the others on the attention-sink token (BOS), as in trained LLMs, where massive
    activations sit on the first token and a few others; on every other token those channels
    are ordinary. o_proj / down_proj rows that write them are sqrt(scale) larger, and the
    lm_head reads them through columns that are the same in every vocabulary row (a
    softmax-invariant logit shift, HEAD_SHIFT x the head's std). Norm weights are all ones.
  * Input-channel weight outliers: in q/k/v/gate/up, 4 input columns are 8-20x larger than the
    rest (in the quantization group of the largest massive channel). A group that holds such a
    column rounds all its other weights coarsely: what the rotation spreads out.
  * K outlier channels: per KV head, one rotary pair of k_proj rows (dims i and i + head_dim/2,
    which RoPE rotates together) is scaled by a = 16 and the matching q_proj rows of every query
    head of the group by 1/a, so every attention score is unchanged, but the cached K has two
    dims 16x larger than the rest: per-token INT4/INT8 K groups lose their other dims unless
    the head is rotated first (--kv-hadamard).

Usage: make_outlier_model.py --out DIR [--seed 0] [--tokenizer-dir DIR]
"""
import argparse
import json
import os
import shutil
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))
import safetensors_io  # noqa: E402
import make_demo_model  # noqa: E402  (its corpus and bigram fit, reused as a library)

HIDDEN, N_LAYER, N_HEAD, N_KV, HEAD_DIM, FFN = 256, 4, 4, 2, 64, 768
OUTLIER_SCALES = (20.0, 40.0, 70.0, 100.0)
# Input-channel outliers of q/k/v/gate/up (channels other than the massive ones).
READ_OUTLIER = (8.0, 12.0, 16.0, 20.0)
K_OUTLIER = 16.0
TOP_TOKENS = 2000
# Each block adds about this fraction of sigma (the rms of a normal residual channel).
WRITE = 0.05
# The lm_head's outlier columns, in units of the fitted head's standard deviation.
HEAD_SHIFT = 3.0
# Tokens whose embedding carries the massive values (BOS: the attention-sink token).
SINK_TOKENS = (1,)
# The embedding's constant coordinate that carries the unigram log-prior into the lm_head. Large
# (about 9x the other channels, itself a massive activation) so the lm_head's prior column is
# small: a prior column of log-probabilities (-5 .. -16) would be a 10x input-column outlier of
# every lm_head row, and rare-token rows that are exact in INT4 only while unrotated.
BIAS_CHANNEL = 8.0
# lm_head rows of tokens outside the bigram fit: dense noise of this fraction of the fitted
# rows' standard deviation.
RARE_ROW = 0.5


def bigram_head(tok, vocab, bos, eos, n_free, rng):
    """Embedding [vocab, n_free] and lm_head [vocab, n_free] over the non-outlier channels, and
    the constant the final RMSNorm divides rows by (see make_demo_model.py for the fit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        texts = make_demo_model.corpus_texts()
    ids_list = [np.array(tok.encode(t, add_special_tokens=False).ids, dtype=np.int64) for t in texts]
    ids_list = [x for x in ids_list if len(x) > 1]
    top, log_uni, a_mat, b_mat = make_demo_model.fit(ids_list, vocab, eos, TOP_TOKENS, n_free - 2)
    # The SVD puts the fit's strongest directions on the first coordinates (columns scaled by the
    # singular values); a trained model's directions are not axis-aligned. A random orthogonal
    # change of basis (a_mat R)(b_mat R)^T = a_mat b_mat^T keeps every logit and leaves the
    # channels' sizes even, so the only axis-aligned structure is the injected outliers.
    basis, _ = np.linalg.qr(rng.standard_normal((n_free - 2, n_free - 2)))
    a_mat, b_mat = a_mat @ basis, b_mat @ basis
    norms2 = (a_mat ** 2).sum(axis=1)
    r2 = norms2.max() * 1.01 + 1e-3
    emb = np.zeros((vocab, n_free))
    emb[:, n_free - 2] = np.sqrt(r2)
    emb[:, n_free - 1] = BIAS_CHANNEL
    emb[top, : n_free - 2] = a_mat
    emb[top, n_free - 2] = np.sqrt(r2 - norms2)
    head = np.zeros((vocab, n_free))
    # Tokens outside the fit get a small floor probability (not the demo's e^-30), so that the
    # perplexity of text with rare words stays a readable number.
    head[:, n_free - 1] = (log_uni.min() - 3.0) / BIAS_CHANNEL
    head[top, : n_free - 2] = b_mat
    # Tokens outside the fit get dense rows of RARE_ROW x the fitted rows' spread, as every row
    # of a trained lm_head is dense: rows that were all zeros but for two constant columns would
    # be exact in INT4 unrotated and dense after the rotation, an advantage no real model gives.
    rest = np.setdiff1d(np.arange(vocab), top)
    head[rest, : n_free - 2] = rng.normal(0.0, RARE_ROW * np.std(b_mat), (len(rest), n_free - 2))
    head[top, n_free - 1] = log_uni / BIAS_CHANNEL
    if bos is not None:
        head[bos, n_free - 1] = -30.0 / BIAS_CHANNEL
    return emb, head, r2 + BIAS_CHANNEL ** 2  # the squared norm of every embedding row


def build(tok, vocab, bos, eos, seed):
    rng = np.random.default_rng(seed)
    d, hd = HIDDEN, HEAD_DIM
    outl = np.sort(rng.choice(d, size=len(OUTLIER_SCALES), replace=False))
    scale = np.ones(d)
    scale[outl] = OUTLIER_SCALES
    free = np.setdiff1d(np.arange(d), outl)

    emb_f, head_f, row2 = bigram_head(tok, vocab, bos, eos, len(free), rng)
    # Normal channels of the embedding have rms sigma; the outlier channels hold +-sigma with a
    # fixed sign and 5 % jitter, scale * that on the sink tokens.
    sigma = np.sqrt(row2 / len(free))
    emb = np.zeros((vocab, d))
    emb[:, free] = emb_f
    signs = rng.choice([-1.0, 1.0], size=len(outl))
    emb[:, outl] = sigma * signs * (1.0 + 0.05 * rng.standard_normal((vocab, len(outl))))
    for t in SINK_TOKENS:
        emb[t, outl] *= scale[outl]

    # Norm weights are all ones. (Norm weights that damp the outlier channels would make the
    # rotated model worse under weight-only INT4: folded into the weights, they leave the
    # massive input energy on every quantized weight.) The head is rescaled by the rows' RMS
    # (as the demo's `s`).
    out_norm = np.ones(d)
    rms = np.sqrt((row2 + sigma ** 2 * len(outl)) / d)
    head = np.zeros((vocab, d))
    head[:, free] = head_f * rms
    # Same value in every row: shifts all logits alike (no effect on the softmax in float).
    head[:, outl] = rng.normal(0.0, 1.0, len(outl)) * HEAD_SHIFT * np.std(head_f[:, :-2]) * rms

    tensors = {"model.embed_tokens.weight": emb, "lm_head.weight": head,
               "model.norm.weight": out_norm}
    # After an input norm every channel is about sigma / rms; projections are sized so that q
    # and k entries have rms ~1.5 (attention scores of rms ~2: attention is not uniform, so the
    # cached K matters) and v / gate / up rms ~1.
    x_norm = np.sqrt(d) * sigma / rms
    w_qk, w_in = 1.5 / x_norm, 1.0 / x_norm
    # Reader columns: READ_OUTLIER on a few channels (input-channel weight outliers), drawn from
    # the 128-wide quantization group of the largest massive channel: per group, INT4 error is
    # about (group absmax)^2 x (input energy of the group), largest where both coincide.
    big = outl[np.argmax(scale[outl])]
    same_group = free[:-2][free[:-2] // 128 == big // 128]
    col = np.ones(d)
    col[rng.choice(same_group, size=len(READ_OUTLIER), replace=False)] = READ_OUTLIER
    wrow = np.sqrt(scale)
    for i in range(N_LAYER):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = np.ones(d)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(d)
        q = rng.normal(0, w_qk, (N_HEAD * hd, d)) * col[None, :]
        k = rng.normal(0, w_qk, (N_KV * hd, d)) * col[None, :]
        v = rng.normal(0, w_in, (N_KV * hd, d)) * col[None, :]
        group = N_HEAD // N_KV
        for h in range(N_KV):
            pair = int(rng.integers(0, hd // 2))
            rows = [h * hd + pair, h * hd + pair + hd // 2]
            k[rows] *= K_OUTLIER
            for qh in range(h * group, (h + 1) * group):
                q[[qh * hd + pair, qh * hd + pair + hd // 2]] /= K_OUTLIER
        # Writers: each block adds a fraction of the residual's size; the rows of the outlier
        # channels are sqrt(scale) larger, so the layers add to those channels too. (Rows scaled
        # by the full 20-100x would be spread into every row by the residual rotation Qᵀ·W and
        # make weight-only INT4 worse: row outliers are harmless to per-row groups unrotated.)
        o = rng.normal(0, WRITE * sigma / np.sqrt(N_HEAD * hd), (d, N_HEAD * hd)) * wrow[:, None]
        gate = rng.normal(0, w_in, (FFN, d)) * col[None, :]
        up = rng.normal(0, w_in, (FFN, d)) * col[None, :]
        down = rng.normal(0, 2 * WRITE * sigma / np.sqrt(FFN), (d, FFN)) * wrow[:, None]
        # The fit's last two channels (norm pad, unigram-bias constant) stay as the embedding set
        # them: noise there would scale the -30 bias of rare tokens.
        o[free[-2:]] = 0.0
        down[free[-2:]] = 0.0
        tensors[p + "self_attn.q_proj.weight"] = q
        tensors[p + "self_attn.k_proj.weight"] = k
        tensors[p + "self_attn.v_proj.weight"] = v
        tensors[p + "self_attn.o_proj.weight"] = o
        tensors[p + "mlp.gate_proj.weight"] = gate
        tensors[p + "mlp.up_proj.weight"] = up
        tensors[p + "mlp.down_proj.weight"] = down
    return tensors, outl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", default=os.path.join(REPO, "tests", "data", "tokenizers",
                                                            "llama-spm"))
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    cfg_path = os.path.join(args.tokenizer_dir, "tokenizer_config.json")
    tcfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    vocab = tok.get_vocab_size()
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tensors, outl = build(tok, vocab, bos, eos, args.seed)

    os.makedirs(args.out, exist_ok=True)
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
                             os.path.join(args.out, "model.safetensors"),
                             dtypes={k: "BF16" for k in tensors})
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": N_LAYER,
        "num_attention_heads": N_HEAD, "num_key_value_heads": N_KV, "head_dim": HEAD_DIM,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "bos_token_id": bos, "eos_token_id": eos,
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    shutil.copy(os.path.join(args.tokenizer_dir, "tokenizer.json"), args.out)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
    print(f"outlier model: {args.out} (hidden {HIDDEN}, {N_LAYER} layers, outlier channels "
          f"{outl.tolist()} x {list(OUTLIER_SCALES)}, K outlier x{K_OUTLIER}, seed {args.seed})")


if __name__ == "__main__":
    main()
