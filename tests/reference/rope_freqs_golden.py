#!/usr/bin/env python3
"""Prints Hugging Face transformers' RoPE inverse frequencies for a few configs, as JSON.

The output is checked in as tests/data/rope_freqs_golden.json and read by
tests/unit/test_rope_freqs.cc, which parses each case's config with Sampan's config parser and
compares Sampan's inv_freq with these values. Regenerate with the reference venv:

    /work/refenv/bin/python tests/reference/rope_freqs_golden.py > tests/data/rope_freqs_golden.json

Each config goes through the same path a real checkpoint does: written as config.json, loaded
with AutoConfig.from_pretrained, then the model's own rotary-embedding module builds inv_freq
(on the CPU, float32).
"""
import json
import struct
import sys
import tempfile

import torch
import transformers
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.mistral.modeling_mistral import MistralRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

ROTARY = {
    "llama": LlamaRotaryEmbedding,
    "mistral": MistralRotaryEmbedding,
    "qwen2": Qwen2RotaryEmbedding,
}


def base_config(arch, model_type, hidden, heads, kv_heads, **extra):
    cfg = {
        "architectures": [arch],
        "model_type": model_type,
        "vocab_size": 1000,
        "hidden_size": hidden,
        "intermediate_size": 4 * hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
    }
    cfg.update(extra)
    return cfg


CASES = [
    # Llama 3.1 8B: llama3 scaling in the legacy rope_scaling key.
    ("llama3_llama31_8b", base_config(
        "LlamaForCausalLM", "llama", 4096, 32, 8, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})),
    # Llama 3.2 1B-like: head_dim 64, factor 32, in the newer rope_parameters key that also
    # carries rope_theta.
    ("llama3_rope_parameters_hd64", base_config(
        "LlamaForCausalLM", "llama", 2048, 32, 8,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})),
    # Linear scaling with the legacy "type" key, head_dim 80 (not a power of two).
    ("linear_hd80", base_config(
        "LlamaForCausalLM", "llama", 2560, 32, 32, rope_theta=10000.0,
        rope_scaling={"type": "linear", "factor": 4.0})),
    # Mistral Nemo: explicit head_dim 128 although hidden / heads = 160; default rope.
    ("default_mistral_nemo", base_config(
        "MistralForCausalLM", "mistral", 5120, 32, 8, head_dim=128, rope_theta=1000000.0,
        sliding_window=None)),
    # Qwen2.5 7B: default rope, theta 1e6, head_dim 128 from 3584 / 28.
    ("default_qwen25_7b", base_config(
        "Qwen2ForCausalLM", "qwen2", 3584, 28, 4, rope_theta=1000000.0)),
]


def main():
    cases = []
    for name, cfg in CASES:
        with tempfile.TemporaryDirectory() as d:
            with open(f"{d}/config.json", "w") as f:
                json.dump(cfg, f)
            config = AutoConfig.from_pretrained(d)
        rotary = ROTARY[cfg["model_type"]](config=config)
        inv = rotary.inv_freq.detach().cpu()
        assert inv.dtype == torch.float32
        values = [float(x) for x in inv.tolist()]  # exact: float32 -> Python float
        bits = [struct.unpack("<I", struct.pack("<f", v))[0] for v in values]
        cases.append({
            "name": name,
            "config": cfg,
            "attention_factor": float(rotary.attention_scaling),
            "inv_freq": values,
            "inv_freq_bits": [f"0x{b:08x}" for b in bits],
        })
    json.dump({
        "generator": "tests/reference/rope_freqs_golden.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "cases": cases,
    }, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
