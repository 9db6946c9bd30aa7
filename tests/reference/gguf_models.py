"""Small GGUF models for the tests and benchmarks, made from Hugging Face-style directories.

    make_llama_dir(dir, arch="llama", ...)   random Llama/Qwen2 weights: config.json +
                                             model.safetensors (f32), sizes that every GGUF
                                             block type divides (K-quants need rows of 256)
    hf_to_gguf(dir, out, outtype="f16")      a GGUF file of the directory, written with the `gguf`
                                             package the way llama.cpp's converter lays models
                                             out: tensor names, q/k rows permuted for llama.cpp's
                                             interleaved RoPE (llama architecture only), llama3
                                             RoPE as rope_freqs.weight factors, norms in F32, a
                                             SentencePiece-style vocabulary of the model's size
    quantize(src, out, ftype, pure=True)     llama.cpp's own quantizer (llama-cpp-python)

Written for Sampan from the public descriptions of the formats (GGUF spec, the `gguf` package's
API); no converter code is copied. Command line, for benchmarks:

    python3 tests/reference/gguf_models.py HF_DIR OUT.gguf [--outtype f16|f32|bf16]
                                           [--quantize Q4_K_M ...]
"""

import argparse
import contextlib
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# llama.cpp's tensor names for the Hugging Face ones (per layer after "blk.N.").
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}

# llama.cpp's llama_ftype values (llama.h) by the names its quantize tool prints.
FTYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
    "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32, "TQ1_0": 36, "TQ2_0": 37,
    "MXFP4_MOE": 38,  # with pure=True every matrix is MXFP4 (not only MoE experts)
}


def gguf_tensor_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{_LAYER_NAMES[rest]}"


def make_llama_dir(out_dir, arch="llama", hidden=256, ffn=512, layers=2, heads=4, kv_heads=2,
                   vocab=384, seed=0, tied=False, llama3_rope=False, context=512, qk_scale=1.0,
                   head_scale=1.0, head_spread=0.7, head_peak=0.0, out_scale=0.5, tied_scale=None):
    """Random weights. qk_scale sharpens attention, head_scale spreads the logits (and so how
    much any rounding of activations moves the softmax)."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    arch_name = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "mistral": "MistralForCausalLM"}[arch]
    cfg = {
        "architectures": [arch_name], "model_type": arch, "hidden_size": hidden,
        "intermediate_size": ffn, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": context,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0 if arch != "qwen2" else 1000000.0,
        "tie_word_embeddings": tied, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    if arch == "mistral":
        cfg["sliding_window"] = None
    if llama3_rope:
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    t = {}

    def mat(name, rows, cols, scale=1.0):
        t[name] = (rng.standard_normal((rows, cols)) * scale / math.sqrt(cols)).astype(np.float32)

    # Tied: the table is also the head, so it gets the head's scale (rms_norm makes the input
    # side scale-free).
    embd_scale = (tied_scale or head_scale / math.sqrt(hidden)) if tied else 1.0
    t["model.embed_tokens.weight"] = (embd_scale * rng.standard_normal((vocab, hidden))).astype(np.float32)
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
        mat(p + "self_attn.q_proj.weight", heads * hd, hidden, qk_scale)
        mat(p + "self_attn.k_proj.weight", kv_heads * hd, hidden, qk_scale)
        mat(p + "self_attn.v_proj.weight", kv_heads * hd, hidden)
        mat(p + "self_attn.o_proj.weight", hidden, heads * hd, out_scale)
        mat(p + "mlp.gate_proj.weight", ffn, hidden)
        mat(p + "mlp.up_proj.weight", ffn, hidden)
        mat(p + "mlp.down_proj.weight", hidden, ffn, out_scale)
        if arch == "qwen2":
            for n, rows in (("q", heads * hd), ("k", kv_heads * hd), ("v", kv_heads * hd)):
                t[p + f"self_attn.{n}_proj.bias"] = (0.1 * rng.standard_normal(rows)).astype(np.float32)
    t["model.norm.weight"] = (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    if not tied:
        # Row norms spread log-normally, as trained heads' are: a few likely tokens lead by clear
        # margins at most positions instead of near-ties between random logits.
        mat("lm_head.weight", vocab, hidden, head_scale)
        t["lm_head.weight"] *= np.exp(head_spread * rng.standard_normal((vocab, 1))).astype(np.float32)
        # head_peak > 0: the hidden state's own token (the residual stream carries its embedding)
        # votes for a fixed successor, so most positions have one clearly likely next token, as
        # a trained model's do.
        if head_peak:
            succ = rng.permutation(vocab)
            e = t["model.embed_tokens.weight"]
            t["lm_head.weight"][succ] += (head_peak / math.sqrt(hidden)) * e
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    safetensors_io.save_file(t, os.path.join(out_dir, "model.safetensors"))
    return cfg


def _permute_qk(w, n_heads):
    """HF rows (head, half, j) -> llama.cpp rows (head, j, half): interleaved rotary pairs."""
    rows = w.shape[0]
    rest = w.shape[1:]
    return (w.reshape(n_heads, 2, rows // n_heads // 2, *rest).swapaxes(1, 2).reshape(w.shape))


def _llama3_rope_factors(cfg):
    """Per channel pair, the divisor llama3 RoPE applies to the default inverse frequency."""
    rs = cfg["rope_scaling"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = cfg.get("rope_theta", 10000.0)
    factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old_ctx = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_ctx / lo, old_ctx / hi
    out = []
    for i in range(0, hd, 2):
        freq = 1.0 / base ** (i / hd)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


# The chat template written into every file (tokenizer.chat_template): a few of the corners real
# templates reach (loop.first, a missing key tested with `is defined`, filters on strings).
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m.role != 'system' %}{{ bos_token }}{% endif %}"
    "<|{{ m.role }}|>{{ m.content | trim }}"
    "{% if m.tool_calls is defined %}{{ m.tool_calls | map(attribute='name') | join(',') }}{% endif %}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


def _add_vocab(w, gguf, n_vocab, bos, eos):
    """A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = ["\u2581" + c for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    tokens += words[:max(0, n_vocab - len(tokens))]
    tokens += [f"\u2581w{i}" for i in range(n_vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (n_vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens[:n_vocab])
    w.add_token_scores([-float(i) for i in range(n_vocab)])
    w.add_token_types(types[:n_vocab])
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE)


def hf_to_gguf(model_dir, out_path, outtype="f16", split_max_tensors=0, arch_name=None):
    """Writes the directory's model as GGUF; returns the path(s) written."""
    import gguf
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = arch_name or {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}[cfg["model_type"]]
    tensors = safetensors_io.load_model_tensors(model_dir)
    kwargs = {"split_max_tensors": split_max_tensors} if split_max_tensors else {}
    w = gguf.GGUFWriter(out_path, arch, **kwargs)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w.add_name(os.path.basename(os.path.normpath(model_dir)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(cfg["vocab_size"])
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "bf16": gguf.LlamaFileType.MOSTLY_BF16}[outtype]
    w.add_file_type(ftype)
    rs = cfg.get("rope_scaling") or {}
    rope_type = rs.get("rope_type", rs.get("type"))
    if rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    _add_vocab(w, gguf, cfg["vocab_size"], cfg.get("bos_token_id", 1), cfg.get("eos_token_id", 2))

    out = {}
    if rope_type == "llama3":
        out["rope_freqs.weight"] = _llama3_rope_factors(cfg)
    for name, x in tensors.items():
        x = np.asarray(x, dtype=np.float32)
        if arch == "llama" and name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
            x = _permute_qk(x, heads)
        elif arch == "llama" and name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
            x = _permute_qk(x, kv_heads)
        if name == "lm_head.weight" and cfg.get("tie_word_embeddings"):
            continue
        out[gguf_tensor_name(name)] = x
    for name, x in out.items():
        if x.ndim == 1 or outtype == "f32":
            w.add_tensor(name, x.astype(np.float32))
        elif outtype == "f16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            bits = safetensors_io.float_to_bf16_bits(x)
            w.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out_path


@contextlib.contextmanager
def llama_cpp_without_extra_bufts():
    """Inside the block, llama-cpp-python's Llama(...) loads without llama.cpp's extra buffer
    types (its AMX repacking, built in when pip compiles it on a CPU with AMX-INT8), which
    segfaults in ggml_backend_amx_mul_mat on Q8_0/Q4_0 models (llama-cpp-python 0.3.36 on a
    Sapphire Rapids VM). Its plain CPU kernels give llama.cpp's same quantized arithmetic. A
    build without the field is left as it is."""
    import llama_cpp.llama_cpp as lowlevel
    default_params = lowlevel.llama_model_default_params
    if any(f[0] == "use_extra_bufts" for f in lowlevel.llama_model_params._fields_):
        def no_extra_bufts():
            p = default_params()
            p.use_extra_bufts = False
            return p
        lowlevel.llama_model_default_params = no_extra_bufts
    try:
        yield
    finally:
        lowlevel.llama_model_default_params = default_params


def quantize(src, out_path, ftype, pure=True, threads=2):
    """llama.cpp's quantizer (llama-cpp-python): src GGUF -> out_path of `ftype` (a FTYPES key).
    pure=True stores every matrix in that type (no mixed Q6_K outputs etc.)."""
    import ctypes
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.nthread = threads
    params.pure = pure
    rc = llama_cpp.llama_model_quantize(src.encode(), out_path.encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {src} -> {ftype} failed ({rc})")
    return out_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", default="f16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--quantize", nargs="*", default=[], help="also write OUT-<TYPE>.gguf")
    ap.add_argument("--mixed", action="store_true", help="llama.cpp's mixed recipes (not --pure)")
    args = ap.parse_args()
    hf_to_gguf(args.model_dir, args.out, args.outtype)
    print(args.out)
    for t in args.quantize:
        dst = args.out[:-5] + f"-{t}.gguf"
        quantize(args.out, dst, t, pure=not args.mixed)
        print(dst)


if __name__ == "__main__":
    main()


def _unpermute_qk(w, n_heads):
    rows = w.shape[0]
    rest = w.shape[1:]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def gguf_to_hf_dir(gguf_path, hf_source_dir, out_dir):
    """The GGUF file's weights dequantized by the `gguf` package (float32), back in a Hugging Face
    directory with the source's config.json: the float model the quantized file stands for, for
    the numpy reference."""
    import gguf
    with open(os.path.join(hf_source_dir, "config.json")) as f:
        cfg = json.load(f)
    reader = gguf.GGUFReader(gguf_path)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    back = {v: k for k, v in _LAYER_NAMES.items()}
    out = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        x = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        x = x.reshape([int(d) for d in reversed(t.shape.tolist())])
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        else:
            _, layer, rest = t.name.split(".", 2)
            name = f"model.layers.{layer}.{back[rest]}"
        if arch == "llama" and ".q_proj." in name:
            x = _unpermute_qk(x, cfg["num_attention_heads"])
        elif arch == "llama" and ".k_proj." in name:
            x = _unpermute_qk(x, cfg["num_key_value_heads"])
        out[name] = x
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    safetensors_io.save_file(out, os.path.join(out_dir, "model.safetensors"))
    return out_dir
