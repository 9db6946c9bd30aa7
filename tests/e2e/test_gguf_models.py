"""GGUF model files: `sampan logits --model F.gguf` against llama.cpp and numpy on the same files.

Small models are made here (tests/reference/gguf_models.py: random weights with clear top-1
winners, sizes every block type divides) and written as GGUF with the `gguf` package; llama.cpp's
own quantizer (llama-cpp-python) makes the quantized files, so the block bytes are llama.cpp's.
  - F32 GGUF (llama with llama3 RoPE and GQA; qwen2 with biases and tied embeddings) against the
    numpy float64 reference on the source safetensors: the loader's name map, q/k row order,
    rope_freqs factors and metadata are checked by an independent implementation.
  - F16 and BF16 against llama.cpp (llama-cpp-python, logits of every position): cosine >= 0.9999.
  - Every quantized type (pure files, one type for every matrix; MXFP4 through llama.cpp's
    MXFP4_MOE recipe), and llama.cpp's mixed Q4_K_M recipe, run twice: exact
    (SAMPAN_GEMM_PRECISION=f32) and at the default precision (on AMX CPUs prefill multiplies
    weights and x rounded to bf16, kernels/cpu/gemm_ggml.h). Both: top-1 agreement >= 0.99 and
    mean KL <= 1e-3 against llama.cpp on the same file. Exact run: cosine >= 0.99999 against
    numpy on the gguf package's dequantization (the decoders' exactness); default run: cosine
    >= 0.9999 and at most half llama.cpp's mean KL against that same exact result. For
    TQ1_0/TQ2_0, whose 2-bit weights make llama.cpp's 8-bit activations flip its own top-1
    against the exact result at ~1.5 % of positions: mean KL <= 1e-3; exact run: every top-1
    difference from llama.cpp is a position where llama.cpp differs from the exact numpy
    result and Sampan does not; default run: top-1 agreement with the exact result at least
    llama.cpp's. A third run feeds one token per forward (`logits --chunk 1`), the decode path
    (x rounded to 16 bits per 256 elements for the types gemm_ggml.h lists): the default run's
    bounds against both references. Q8_0, Q4_0, Q4_K_M, Q5_K_M and Q6_K also run (prefill and
    decode) with SAMPAN_GEMM_PRECISION=bf16, where x is rounded to int8 as llama.cpp rounds it
    (the integer prefill, the x8 decode kernels of AVX512-VNNI and of AVX2 for the K-quants and
    IQ4_XS); so do Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_M, IQ4_NL and IQ4_XS: top-1 >= 0.99 and mean KL
    <= 1e-3 against llama.cpp.
  - A split set (NAME-0000i-of-0000N.gguf) gives the single file's logits.
  - `sampan info` and `sampan run` on a GGUF file (tokenizer and chat template from metadata).
Bad files are tests/e2e/test_bad_gguf.py (which also runs under the sanitizers).
llama-cpp-python, gguf and numpy are required (a missing one fails the test).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as U  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

F16_MIN_COSINE = 0.9999
# Against numpy float64 on the source weights: Sampan's f32 arithmetic only.
F32_MIN_COSINE = 0.99999
QUANT_MIN_TOP1 = 0.99
QUANT_MAX_KL = 1e-3
# Against numpy float64 on the same file's weights dequantized by the `gguf` package: Sampan keeps
# activations in f32 and dequantizes exactly, so only f32 arithmetic separates them (measured
# KL ~4e-12). llama.cpp rounds activations to 8 bits per block (Q8_0/Q8_K) for its integer dots,
# which is most of the distance between the two engines.
EXACT_MIN_COSINE = 0.99999
# Every block type, stored for every matrix (pure), and the recipe names llama.cpp uses for them.
PURE_TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
              "IQ4_NL", "IQ4_XS", "MXFP4_MOE", "TQ2_0", "TQ1_0"]
# Types whose x8 kernels (int8 activations, as llama.cpp's) are also checked against llama.cpp:
# every type with an integer prefill or an x8 decode kernel at some ISA level (gemm_ggml.h).
X8_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K",
            "IQ4_NL", "IQ4_XS")
# Ternary types, checked position by position against llama.cpp and the exact reference (below).
TERNARY_TYPES = ("TQ2_0", "TQ1_0")
# Two sequences of 128 tokens: top-1 agreement over 256 positions.
N_TOKENS = 128
N_SEQS = 2


def softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=1, keepdims=True)


def mean_kl(ref, got):
    p, q = softmax(ref), softmax(got)
    return float((p * (np.log(np.maximum(p, 1e-300)) - np.log(np.maximum(q, 1e-300)))).sum(axis=1).mean())


def sampan_logits(args, res, name, path, seqs, vocab, precision=None, chunk=None):
    """Logits of every position of every sequence, stacked -> [sum len, vocab] (None on failure).
    precision: SAMPAN_GEMM_PRECISION for the run (None: the default). chunk: --chunk (1: one
    token per forward, the decode path; None: the whole sequence as one prefill)."""
    rows = []
    saved = os.environ.get("SAMPAN_GEMM_PRECISION")
    for i, ids in enumerate(seqs):
        out = os.path.join(args.work_dir, f"{name}.{i}.npy".replace(" ", "_"))
        if precision is not None:
            os.environ["SAMPAN_GEMM_PRECISION"] = precision
        try:
            r = U.run_sampan(args, ["logits", "--model", path, "--ids", ",".join(map(str, ids)),
                                    "--out", out, "--threads", "2"] +
                             ([] if chunk is None else ["--chunk", str(chunk)]))
        finally:
            if saved is None:
                os.environ.pop("SAMPAN_GEMM_PRECISION", None)
            else:
                os.environ["SAMPAN_GEMM_PRECISION"] = saved
        if not res.check(f"{name}: sampan logits runs (sequence {i})", r.returncode == 0,
                         "" if r.returncode == 0 else r.describe()):
            return None
        arr, problem = U.load_logits(out, len(ids), vocab)
        if arr is None:
            res.check(f"{name}: logits file", False, problem)
            return None
        rows.append(arr)
    return np.concatenate(rows)


def llama_cpp_logits(path, seqs):
    from llama_cpp import Llama
    import gguf_models
    # The reference is taken without llama.cpp's AMX repacking, which crashes on these small
    # Q8_0 models (see gguf_models.llama_cpp_without_extra_bufts).
    with gguf_models.llama_cpp_without_extra_bufts():
        llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True,
                    verbose=False)
    rows = []
    for ids in seqs:
        llm.reset()
        llm.eval(ids)
        rows.append(np.array(llm.scores[:len(ids)], dtype=np.float32))
    if hasattr(llm, "close"):
        llm.close()
    return np.concatenate(rows)


def numpy_logits(numpy_llama, model_dir, seqs):
    return np.concatenate([numpy_llama.logits(model_dir, ids) for ids in seqs])


def main():
    args = U.parse_args(__doc__)
    res = U.Results()
    U.require_binary(args, res)
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
        import gguf_models as G
        import numpy_llama
    except ImportError as e:
        res.check("reference packages (gguf, llama-cpp-python)", False, str(e))
        res.finish()
    os.makedirs(args.work_dir, exist_ok=True)
    rng = np.random.default_rng(7)

    # Two architectures: llama (llama3 RoPE factors, GQA, untied) and qwen2 (biases, tied).
    # Random weights give near-ties between random logits at most positions, where the 8-bit
    # activations of llama.cpp's integer dots flip the top token (measured: 2-5 % of positions,
    # every flip llama.cpp's: Sampan equals the exact reference there). These models are shaped
    # like trained ones instead: the llama head votes for a successor of the current token
    # (mean top probability 0.97), the tied qwen2 keeps its embedding dominant in the residual
    # stream (0.42).
    models = {
        "llama": dict(arch="llama", llama3_rope=True, seed=1, head_peak=1.0, out_scale=0.3),
        "qwen2": dict(arch="qwen2", tied=True, seed=2, out_scale=0.1, tied_scale=0.05),
    }
    files = {}
    for name, kw in models.items():
        d = os.path.join(args.work_dir, name + "_hf")
        cfg = G.make_llama_dir(d, **kw)
        vocab = cfg["vocab_size"]
        seqs = [[int(i) for i in rng.integers(3, vocab, N_TOKENS)] for _ in range(N_SEQS)]
        f32 = G.hf_to_gguf(d, os.path.join(args.work_dir, name + "-F32.gguf"), "f32")
        files[name] = (d, f32, seqs, vocab)

        ref = numpy_logits(numpy_llama, d, seqs)
        got = sampan_logits(args, res, f"{name} F32", f32, seqs, vocab)
        if got is not None:
            cos = U.cosine_per_row(ref, got).min()
            res.check(f"{name} F32 GGUF vs numpy float64", cos >= F32_MIN_COSINE, f"min cosine {cos:.7f}")

    d, f32, seqs, vocab = files["llama"]
    for outtype in ("f16", "bf16"):
        path = G.hf_to_gguf(d, os.path.join(args.work_dir, f"llama-{outtype.upper()}.gguf"), outtype)
        got = sampan_logits(args, res, f"llama {outtype.upper()}", path, seqs, vocab)
        if got is None:
            continue
        ref = llama_cpp_logits(path, seqs)
        cos = U.cosine_per_row(ref, got).min()
        res.check(f"llama {outtype.upper()} vs llama.cpp", cos >= F16_MIN_COSINE, f"min cosine {cos:.7f}")

    cases = [("llama", t, True) for t in PURE_TYPES]
    cases += [("llama", "Q4_K_M", False), ("qwen2", "Q4_K_M", False), ("qwen2", "Q8_0", True)]
    for model, ftype, pure in cases:
        d, f32, seqs, vocab = files[model]
        tag = f"{model} {ftype}{'' if pure else ' (mixed)'}"
        path = os.path.join(args.work_dir, f"{model}-{ftype}{'' if pure else '-mixed'}.gguf")
        G.quantize(f32, path, ftype, pure=pure)
        # Exact (SAMPAN_GEMM_PRECISION=f32: every block dequantized to f32, x in f32) and the
        # default (prefill on bf16 tiles where the CPU has AMX: weights and x rounded to bf16).
        got_exact = sampan_logits(args, res, tag + " f32", path, seqs, vocab, precision="f32")
        got = sampan_logits(args, res, tag, path, seqs, vocab)
        if got is None or got_exact is None:
            continue
        exact = numpy_logits(numpy_llama, G.gguf_to_hf_dir(path, d, path[:-5] + "_dequantized"), seqs)
        cos = U.cosine_per_row(exact, got_exact).min()
        res.check(f"{tag} f32 vs numpy on the gguf package's dequantization",
                  cos >= EXACT_MIN_COSINE,
                  f"min cosine {cos:.8f}, mean KL {mean_kl(exact, got_exact):.1e}")
        ref = llama_cpp_logits(path, seqs)
        # The default precision's rounding must stay well inside llama.cpp's own distance from
        # the exact result (its 8-bit activations).
        cos = U.cosine_per_row(exact, got).min()
        kl_ours, kl_theirs = mean_kl(exact, got), mean_kl(exact, ref)
        res.check(f"{tag} vs numpy on the gguf package's dequantization",
                  cos >= F16_MIN_COSINE and kl_ours <= 0.5 * kl_theirs,
                  f"min cosine {cos:.8f}, mean KL {kl_ours:.1e} (llama.cpp {kl_theirs:.1e})")
        # Decode: one token per forward through the KV cache (--chunk 1), the path of the decode
        # kernels (x rounded to 16 bits per 256 elements for the types gemm_ggml.h lists), held
        # to the default run's bounds against both references.
        got_dec = sampan_logits(args, res, tag + " decode", path, seqs, vocab, chunk=1)
        if got_dec is not None:
            cos, kl_dec = U.cosine_per_row(exact, got_dec).min(), mean_kl(exact, got_dec)
            res.check(f"{tag} decode vs numpy on the gguf package's dequantization",
                      cos >= F16_MIN_COSINE and kl_dec <= 0.5 * kl_theirs,
                      f"min cosine {cos:.8f}, mean KL {kl_dec:.1e} (llama.cpp {kl_theirs:.1e})")
            top1, kl = U.top1_agreement(ref, got_dec), mean_kl(ref, got_dec)
            if ftype in TERNARY_TYPES:  # as the default run below
                ok = ((got_dec.argmax(1) == exact.argmax(1)).mean() >=
                      (ref.argmax(1) == exact.argmax(1)).mean())
            else:
                ok = top1 >= QUANT_MIN_TOP1
            res.check(f"{tag} decode vs llama.cpp", ok and kl <= QUANT_MAX_KL,
                      f"top-1 {top1:.4f}, mean KL {kl:.2e}")
        # llama.cpp's own activation precision (SAMPAN_GEMM_PRECISION=bf16): x rounded to int8
        # per group for the integer prefill and per 256 elements for the x8 decode kernels
        # (AVX512-VNNI, and AVX2 for the K-quants and IQ4_XS; bf16 elsewhere), both held to the
        # issue's bounds against llama.cpp.
        if ftype in X8_TYPES:
            for run, chunk in ((" x8", None), (" x8 decode", 1)):
                y = sampan_logits(args, res, tag + run, path, seqs, vocab, precision="bf16",
                                  chunk=chunk)
                if y is not None:
                    top1, kl = U.top1_agreement(ref, y), mean_kl(ref, y)
                    res.check(f"{tag}{run} vs llama.cpp",
                              top1 >= QUANT_MIN_TOP1 and kl <= QUANT_MAX_KL,
                              f"top-1 {top1:.4f}, mean KL {kl:.2e} (exact run vs llama.cpp: "
                              f"{mean_kl(ref, got_exact):.2e})")
        for run, y in (("", got), (" f32", got_exact)):
            top1, kl = U.top1_agreement(ref, y), mean_kl(ref, y)
            detail = (f"top-1 {top1:.4f}, mean KL {kl:.2e} (llama.cpp vs numpy: top-1 "
                      f"{U.top1_agreement(exact, ref):.4f}, KL {kl_theirs:.2e}; Sampan vs numpy: "
                      f"top-1 {U.top1_agreement(exact, y):.4f})")
            if ftype in TERNARY_TYPES:
                # llama.cpp's 8-bit activations against 2-bit weights move its own top-1 off
                # the exact result at ~1.5 % of these positions. Exact run: there Sampan must
                # agree with the exact numpy result, and everywhere else with llama.cpp. Default
                # run (bf16 rounding, also near these ties): mean KL as for every type, and at
                # least llama.cpp's top-1 agreement with the exact result.
                ours, theirs, truth = y.argmax(1), ref.argmax(1), exact.argmax(1)
                if run:
                    bad = int(((ours != theirs) & (ours != truth)).sum())
                    res.check(f"{tag}{run} vs llama.cpp (every top-1 difference is llama.cpp's)",
                              bad == 0 and kl <= QUANT_MAX_KL,
                              f"{bad} positions differ from both; " + detail)
                else:
                    res.check(f"{tag} vs llama.cpp (top-1 vs exact at least llama.cpp's)",
                              (ours == truth).mean() >= (theirs == truth).mean() and
                              kl <= QUANT_MAX_KL, detail)
                continue
            res.check(f"{tag}{run} vs llama.cpp", top1 >= QUANT_MIN_TOP1 and kl <= QUANT_MAX_KL,
                      detail)

    # A split set loads from any shard and gives the single file's logits.
    d, f32, seqs, vocab = files["llama"]
    split_base = os.path.join(args.work_dir, "split", "llama-F32.gguf")
    os.makedirs(os.path.dirname(split_base), exist_ok=True)
    G.hf_to_gguf(d, split_base, "f32", split_max_tensors=6)
    shards = sorted(f for f in os.listdir(os.path.dirname(split_base)) if f.endswith(".gguf"))
    res.check("split set written", len(shards) >= 2 and "-00001-of-" in shards[0], str(shards))
    single = sampan_logits(args, res, "llama F32 single", f32, seqs, vocab)
    for shard in (shards[0], shards[-1]):
        got = sampan_logits(args, res, f"split {shard}", os.path.join(os.path.dirname(split_base), shard), seqs, vocab)
        if got is not None and single is not None:
            diff = float(np.abs(got - single).max())
            res.check(f"split set via {shard} == single file", diff <= 1e-5, f"max |diff| {diff:.2e}")

    # info and run on a quantized file.
    q4 = os.path.join(args.work_dir, "llama-Q4_K_M-mixed.gguf")
    r = U.run_sampan(args, ["info", "--model", q4])
    res.check("sampan info on GGUF", r.returncode == 0 and "LlamaForCausalLM" in r.stdout and "Q4_K" in r.stdout,
              r.stdout[-400:] if r.returncode == 0 else r.describe())
    r = U.run_sampan(args, ["run", "--model", q4, "--prompt", "abc", "--max-tokens", "4",
                            "--temperature", "0", "--threads", "2", "--ignore-eos"])
    res.check("sampan run on GGUF", r.returncode == 0, "" if r.returncode == 0 else r.describe())
    r = U.run_sampan(args, ["run", "--model", q4, "--prompt", "abc", "--chat", "--max-tokens", "2",
                            "--temperature", "0", "--threads", "2", "--ignore-eos"])
    res.check("sampan run --chat on GGUF (template from metadata)", r.returncode == 0,
              "" if r.returncode == 0 else r.describe())

    # The chat template from the metadata renders as jinja2 renders it.
    import json
    from test_render_chat import reference_env
    messages = [{"role": "user", "content": "  hi  "},
                {"role": "assistant", "content": "ok", "tool_calls": [{"name": "f"}, {"name": "g"}]},
                {"role": "user", "content": "bye"}]
    mpath = os.path.join(args.work_dir, "messages.json")
    json.dump(messages, open(mpath, "w"))
    want = reference_env().from_string(G.CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    r = U.run_sampan(args, ["render-chat", "--model", q4, "--messages", mpath, "--add-generation-prompt"])
    res.check("render-chat --model F.gguf == jinja2", r.returncode == 0 and r.stdout == want,
              repr(r.stdout[:200]) + " vs " + repr(want[:200]) if r.returncode == 0 else r.describe())

    res.finish()


if __name__ == "__main__":
    main()
