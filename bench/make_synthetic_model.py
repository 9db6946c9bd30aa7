"""Writes a random-weight model of TinyLlama-1.1B's shape for CPU benchmarks (numpy only).

    python3 bench/make_synthetic_model.py DIR [--seed 0] [--layers 22] [--gguf FILE.gguf]

LlamaForCausalLM, hidden 2048, 22 layers, 32 heads / 4 kv heads, FFN 5632, vocab 32000,
rope_theta 10000, untied lm_head, bf16 weights ~ N(0, 0.02^2), norms 1. About 2.2 GB in one
model.safetensors (like the published TinyLlama), streamed in chunks so memory stays ~150 MB.
The output is meaningless text; only the timing of streaming the weights matters.

--gguf also writes the same weights as an F16 GGUF for a side-by-side llama.cpp run (needs the
`gguf` PyPI package; the vocabulary is a placeholder SentencePiece list of the right size).
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import safetensors_io  # noqa: E402
from gguf_models import gguf_tensor_name as gguf_name  # noqa: E402

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5632,
    "max_position_embeddings": 2048,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 22,
    "num_key_value_heads": 4,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0",
    "use_cache": True,
    "vocab_size": 32000,
}

CHUNK = 1 << 24  # elements per generated block: 64 MB of float32 scratch


def tensor_specs(cfg):
    d, ffn, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    specs = [("model.embed_tokens.weight", (vocab, d))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        specs += [
            (p + "input_layernorm.weight", (d,)),
            (p + "self_attn.q_proj.weight", (d, d)),
            (p + "self_attn.k_proj.weight", (kv, d)),
            (p + "self_attn.v_proj.weight", (kv, d)),
            (p + "self_attn.o_proj.weight", (d, d)),
            (p + "post_attention_layernorm.weight", (d,)),
            (p + "mlp.gate_proj.weight", (ffn, d)),
            (p + "mlp.up_proj.weight", (ffn, d)),
            (p + "mlp.down_proj.weight", (d, ffn)),
        ]
    specs += [("model.norm.weight", (d,)), ("lm_head.weight", (vocab, d))]
    return specs


def write_random_bf16(f, rng, count, std):
    left = count
    while left:
        n = min(left, CHUNK)
        x = rng.standard_normal(n, dtype=np.float32)
        x *= np.float32(std)
        # Truncating to the top 16 bits (not rounding) is fine for random data and twice as fast.
        f.write((x.view(np.uint32) >> np.uint32(16)).astype("<u2").tobytes())
        left -= n


def write_gguf(model_dir, cfg, out_path):
    """F16 GGUF of the safetensors model (norms F32, as llama.cpp's converter stores them).

    q/k are not permuted to llama.cpp's rotary layout: the weights are random, so only the
    bytes streamed per token matter, and those are the same.
    """
    import gguf
    st_path = os.path.join(model_dir, "model.safetensors")
    header, _, data_start = safetensors_io.read_header(st_path)
    blob = np.memmap(st_path, dtype=np.uint8, mode="r")
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then filler pieces.
    n_vocab = cfg["vocab_size"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (n_vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(n_vocab)])
    w.add_token_types(types)
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    w.add_unk_token_id(0)

    names = list(header)
    for name in names:
        shape = header[name]["shape"]
        is_norm = len(shape) == 1
        dt = np.dtype(np.float32 if is_norm else np.float16)
        w.add_tensor_info(gguf_name(name), shape, dt, int(np.prod(shape)) * dt.itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name in names:
        info = header[name]
        begin, end = info["data_offsets"]
        bits = blob[data_start + begin:data_start + end].view(np.uint16)
        x = safetensors_io.bf16_bits_to_float(bits).reshape(info["shape"])
        w.write_tensor_data(x if x.ndim == 1 else x.astype(np.float16))
    w.close()
    print(f"wrote {out_path} ({os.path.getsize(out_path) / 1e9:.2f} GB F16 GGUF)")


def copy_tokenizer(out_dir):
    """Model directories need a tokenizer to load (`sampan bench` too): the Llama 2 one of the
    test data, whose 32,000 tokens match the vocabulary."""
    src = os.path.join(HERE, "..", "tests", "data", "tokenizers", "llama-spm")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(out_dir, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"],
                    help="fewer layers for a quick smoke run")
    ap.add_argument("--gguf", help="also write the weights as an F16 GGUF file (needs `gguf`)")
    ap.add_argument("--gguf-only", action="store_true",
                    help="convert the model already in DIR to --gguf, writing nothing else")
    args = ap.parse_args()
    if args.gguf_only:
        if not args.gguf:
            ap.error("--gguf-only needs --gguf FILE")
        with open(os.path.join(args.dir, "config.json")) as f:
            write_gguf(args.dir, json.load(f), args.gguf)
        return
    cfg = dict(CONFIG, num_hidden_layers=args.layers)
    os.makedirs(args.dir, exist_ok=True)
    specs = [(name, "BF16", shape) for name, shape in tensor_specs(cfg)]
    header, data_bytes = safetensors_io.build_header(specs, {"format": "pt"})
    rng = np.random.default_rng(args.seed)
    ones = safetensors_io.float_to_bf16_bits(np.ones(cfg["hidden_size"], np.float32))
    t0 = time.time()
    tmp = os.path.join(args.dir, "model.safetensors.partial")
    with open(tmp, "wb") as f:
        f.write(header)
        for name, _, shape in specs:
            if name.endswith("norm.weight"):
                f.write(ones.astype("<u2").tobytes())
            else:
                write_random_bf16(f, rng, int(np.prod(shape)), 0.02)
    # Renamed only when complete, so an interrupted run never leaves a plausible-looking model.
    os.replace(tmp, os.path.join(args.dir, "model.safetensors"))
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    copy_tokenizer(args.dir)
    n_params = data_bytes // 2
    print(f"wrote {args.dir}: {n_params / 1e9:.3f} B parameters, {data_bytes / 1e9:.2f} GB bf16 "
          f"in {time.time() - t0:.1f} s")
    if args.gguf:
        write_gguf(args.dir, cfg, args.gguf)


if __name__ == "__main__":
    main()
