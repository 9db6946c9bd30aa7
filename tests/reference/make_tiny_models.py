"""Writes the committed tiny test models into tests/data/models/ (deterministic; numpy only).

    python3 tests/reference/make_tiny_models.py [--out-dir tests/data/models]

Each model is a few hundred kB, shaped awkwardly on purpose (odd vocab and FFN sizes, GQA/MQA),
and covers one loader/config path of the Llama family:

  tiny_llama3   LlamaForCausalLM, bf16, tied embeddings (no lm_head tensor), llama3 RoPE scaling
                written in the classic `rope_theta` + `rope_scaling` form, eos_token_id a list.
  tiny_qwen2    Qwen2ForCausalLM, f16, q/k/v biases, untied lm_head, config in the transformers 5
                form (`rope_parameters`, `dtype`); sliding_window is set but use_sliding_window is
                false, so an engine that applies the window anyway gets wrong logits.
  tiny_mistral  MistralForCausalLM, f32, MQA (1 kv head), sliding_window 8 (shorter than the test
                sequences), legacy rope_scaling {"type": "linear"}, two shards + index.json.

Weight scales are chosen so logits spread widely (std of several units): random tiny models
otherwise give near-ties that make top-1 agreement meaningless.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

TINY_LLAMA3 = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": [2, 395, 396],
    "head_dim": 16,
    "hidden_act": "silu",
    "hidden_size": 96,
    "initializer_range": 0.02,
    "intermediate_size": 172,
    "max_position_embeddings": 512,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 6,
    "num_hidden_layers": 3,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    # head_dim 16 and theta 5e5 give wavelengths 6.3, 32.5, 167, ... : with an original context of
    # 64 (bands at 64/4 = 16 and 64/1 = 64) there is one pair in each of the three llama3 bands,
    # none near a band edge.
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 64,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0",
    "use_cache": True,
    "vocab_size": 397,
}

TINY_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "dtype": "float16",
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 128,
    "initializer_range": 0.02,
    "intermediate_size": 212,
    "layer_types": ["full_attention", "full_attention"],
    "max_position_embeddings": 1024,
    "max_window_layers": 1,
    "model_type": "qwen2",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pad_token_id": None,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
    "sliding_window": 16,
    "tie_word_embeddings": False,
    "transformers_version": "5.0.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 509,
}

TINY_MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 64,
    "initializer_range": 0.02,
    "intermediate_size": 136,
    "max_position_embeddings": 2048,
    "model_type": "mistral",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 2.0, "type": "linear"},
    "rope_theta": 10000.0,
    "sliding_window": 8,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "transformers_version": "4.36.0",
    "use_cache": True,
    "vocab_size": 300,
}

# name -> (config, safetensors dtype, seed, number of shards)
MODELS = {
    "tiny_llama3": (TINY_LLAMA3, "BF16", 1001, 1),
    "tiny_qwen2": (TINY_QWEN2, "F16", 1002, 1),
    "tiny_mistral": (TINY_MISTRAL, "F32", 1003, 2),
}


def _llama3_v5_form(c):
    rp = dict(c.pop("rope_scaling"), rope_theta=c.pop("rope_theta"))
    c.update(rope_parameters=rp, dtype=c.pop("torch_dtype"), transformers_version="5.0.0")


def _llama_biases(c):
    c.update(attention_bias=True, tie_word_embeddings=False, rope_scaling=None)


def _qwen2_sliding(c):
    del c["layer_types"]  # derived from max_window_layers: layer 0 full, layer 1 windowed
    c.update(use_sliding_window=True, max_window_layers=1)


def _mistral_head_dim(c):
    c.update(head_dim=24, sliding_window=None)
    del c["rope_scaling"]


# Config variants built at test time (not committed): name -> (base model, edit, dtype, seed,
# used by the e2e test). Their numpy logits are checked against HF by make_hf_goldens.py, so the
# e2e test may compare sampan with numpy alone on them. llama_mlp_bias stays out of the e2e
# test: HF supports mlp_bias but Sampan's contract does not name it.
VARIANTS = {
    "var_llama3_rope_parameters": ("tiny_llama3", _llama3_v5_form, "BF16", 1001, True),
    "var_llama_attention_bias": ("tiny_llama3", _llama_biases, "F16", 1004, True),
    "var_llama_mlp_bias": ("tiny_llama3", lambda c: c.update(mlp_bias=True), "F32", 1005, False),
    "var_qwen2_sliding_window": ("tiny_qwen2", _qwen2_sliding, "F16", 1002, True),
    "var_mistral_head_dim": ("tiny_mistral", _mistral_head_dim, "BF16", 1006, True),
}


def variant_config(name):
    import copy
    base, edit, _, _, _ = VARIANTS[name]
    cfg = copy.deepcopy(MODELS[base][0])
    edit(cfg)
    return cfg


def make_weights(cfg, seed):
    """name -> float32 array, in the order HF's state dict lists them."""
    rng = np.random.default_rng(seed)
    arch = cfg["architectures"][0]
    d = cfg["hidden_size"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    q_dim = cfg["num_attention_heads"] * hd
    kv_dim = cfg["num_key_value_heads"] * hd
    ffn = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]

    def proj(out_dim, in_dim, gain=1.0):
        # gain/sqrt(fan_in) keeps each projection's output near unit scale whatever the width.
        return (rng.standard_normal((out_dim, in_dim)) * gain / np.sqrt(in_dim)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": (rng.standard_normal((vocab, d)) * 0.5).astype(np.float32)}
    qkv_bias = arch == "Qwen2ForCausalLM" or cfg.get("attention_bias", False)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        # Unit gain on q and k already makes attention uneven enough that a RoPE or mask mistake
        # drops the cosine to < 0.95, while a bf16-activation engine stays above 0.9999; larger
        # gains make the tiny model chaotic (bf16 rounding alone then costs 1e-3 of cosine).
        w[p + "self_attn.q_proj.weight"] = proj(q_dim, d)
        w[p + "self_attn.k_proj.weight"] = proj(kv_dim, d)
        w[p + "self_attn.v_proj.weight"] = proj(kv_dim, d)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = (0.5 * rng.standard_normal(q_dim)).astype(np.float32)
            w[p + "self_attn.k_proj.bias"] = (0.5 * rng.standard_normal(kv_dim)).astype(np.float32)
            w[p + "self_attn.v_proj.bias"] = (0.5 * rng.standard_normal(kv_dim)).astype(np.float32)
        w[p + "self_attn.o_proj.weight"] = proj(d, q_dim)
        if cfg.get("attention_bias", False):
            w[p + "self_attn.o_proj.bias"] = (0.5 * rng.standard_normal(d)).astype(np.float32)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "mlp.gate_proj.weight"] = proj(ffn, d)
        w[p + "mlp.up_proj.weight"] = proj(ffn, d)
        w[p + "mlp.down_proj.weight"] = proj(d, ffn)
        if cfg.get("mlp_bias", False):
            for name, n in (("gate", ffn), ("up", ffn), ("down", d)):
                w[p + f"mlp.{name}_proj.bias"] = (0.5 * rng.standard_normal(n)).astype(np.float32)
    w["model.norm.weight"] = norm(d)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = proj(vocab, d, 4.0)
    return w


def write_model(out_dir, name):
    if name in VARIANTS:
        _, _, dtype, seed, _ = VARIANTS[name]
        cfg, n_shards = variant_config(name), 1
    else:
        cfg, dtype, seed, n_shards = MODELS[name]
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        # The form transformers' save_pretrained writes: indent 2, sorted keys, trailing newline.
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    weights = make_weights(cfg, seed)
    dtypes = {k: dtype for k in weights}
    for old in os.listdir(path):
        if old.endswith(".safetensors") or old.endswith(".index.json"):
            os.remove(os.path.join(path, old))
    if n_shards == 1:
        safetensors_io.save_file(weights, os.path.join(path, "model.safetensors"), dtypes)
        return path
    # Split by bytes in state-dict order, so a layer may straddle two shards as in real exports.
    names = list(weights)
    sizes = [weights[k].nbytes for k in names]
    total = sum(sizes)
    weight_map, shard, acc = {}, 0, 0
    shards = [dict() for _ in range(n_shards)]
    for k, sz in zip(names, sizes):
        if acc >= total * (shard + 1) / n_shards and shard + 1 < n_shards:
            shard += 1
        shards[shard][k] = weights[k]
        acc += sz
    total_bytes = 0
    for s, tensors in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        safetensors_io.save_file(tensors, os.path.join(path, fname), dtypes)
        for k in tensors:
            weight_map[k] = fname
            total_bytes += safetensors_io.tensor_nbytes(dtype, tensors[k].shape)
    index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return path


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="write the tiny test models")
    ap.add_argument("--out-dir", default=os.path.normpath(os.path.join(here, "..", "data", "models")))
    args = ap.parse_args()
    for name in MODELS:
        path = write_model(args.out_dir, name)
        size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
        print(f"{name}: {path} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
