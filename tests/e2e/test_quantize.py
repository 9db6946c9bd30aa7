"""End-to-end: quantized and rotated weights, on load and through `sampan quantize`.

For every tiny model with HF goldens (tests/data/golden):
  - `sampan logits --quantization fp8` and `--quantization int4` (group 32, the only group size
    dividing every tiny model's hidden width; int4 also g128 asymmetric bf16 where it divides)
    against the float32 HF golden: per-row cosine and top-1 agreement with stated bounds;
  - `sampan quantize --scheme ...` round trip: the written directory loads without quantizing
    again and gives exactly the logits of on-load quantization;
  - rotation: `--hadamard` on load and `sampan quantize --scheme none --hadamard` give the logits
    of the original float model (to ~1e-4 relative: a rotation is exact up to f32 rounding).
Then: on a larger random model (written here) a quantized directory holds fewer bytes than the
f32 source and loads without quantizing anything, where on-load quantization quantizes every
linear (load times are printed, not asserted), and the CLI's bad flags and paths give one
"error:" line.
"""

import glob
import json
import os
import re
import shutil
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

# Quantization error against the float32 HF golden, on 40-token sequences. These random-weight
# tiny models are a harsh case (no redundancy, logits with small margins, widths of 64-128 so
# few products average out the rounding), so the bounds sit below what was measured (fp8: min
# cosine 0.991, top-1 92.5 %; int4 g32: 0.862, 62.5 %; int4 g128 asymmetric bf16: 0.961, 75 %)
# and serve as a regression guard: a broken format gives cosine near 0. Correctness proper is
# the check against numpy over the dequantized weights below; accuracy on realistic models is
# measured by `sampan eval` (issue 5 targets: fp8 top-1 >= 97 %, int4 g128 >= 94 %).
BOUNDS = {
    "fp8": (0.98, 0.85),
    "int4_g32": (0.80, 0.50),
    "int4_g128_asym_bf16": (0.90, 0.60),
}
# The quantized model against numpy (float64) over the same dequantized weights: only the
# engine's f32 arithmetic differs, plus the bf16 tiles the quantized prefill GEMM may use
# (~2^-9 relative per weight, measured ~6e-4 of sum |x||w| per output in test_quantized_model).
# Measured: cosine >= 0.99998, max |diff| <= 7.5e-3 of the largest logit. A wrong scale, zero
# point or nibble order moves logits by 10 % or more.
DEQUANT_MIN_COSINE = 0.9999
DEQUANT_MAX_REL = 2e-2
# A rotated float model computes the same function in another basis: only f32 rounding differs,
# relative to the size of the logits.
ROTATION_MAX_REL = 1e-4


def logits(args, res, case, model, ids, vocab, extra=()):
    out = os.path.join(args.work_dir, f"{case}.npy")
    if os.path.exists(out):
        os.remove(out)
    run = eu.run_sampan(args, ["logits", "--model", model, "--ids", ",".join(map(str, ids)),
                               "--out", out, "--threads", "2"] + list(extra))
    if run.returncode != 0:
        res.check(case, False, run.describe())
        return None
    arr, problem = eu.load_logits(out, len(ids), vocab)
    if arr is None:
        res.check(case, False, problem)
    return arr


def quantize(args, res, case, model, out, flags):
    shutil.rmtree(out, ignore_errors=True)
    run = eu.run_sampan(args, ["quantize", "--model", model, "--out", out] + flags)
    ok = run.returncode == 0 and os.path.exists(os.path.join(out, "config.json"))
    summary = run.stdout.strip().splitlines()
    res.check(f"{case}.quantize", ok and len(summary) == 1,
              summary[0] if ok and summary else run.describe())
    return ok


def check_close(res, case, got, want, bounds, stats):
    cos = eu.cosine_per_row(got, want)
    top1 = eu.top1_agreement(got, want)
    stats.setdefault(case.split(".", 1)[1], []).append((float(cos.min()), top1))
    res.check(case, cos.min() >= bounds[0] and top1 >= bounds[1],
              f"min cosine {cos.min():.5f} (>= {bounds[0]}), top-1 {top1 * 100:.1f} % "
              f"(>= {bounds[1] * 100:.0f} %)")


FP8_TABLE = None


def fp8_values():
    """E4M3 code -> value, decoded from the bit fields (NaN codes never occur in weights)."""
    global FP8_TABLE
    if FP8_TABLE is None:
        c = np.arange(256)
        sign = np.where(c & 0x80, -1.0, 1.0)
        exp, man = (c >> 3) & 0xF, c & 7
        mag = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
        FP8_TABLE = sign * mag
    return FP8_TABLE


STORAGE = {"F32": np.float32, "F16": np.uint16, "BF16": np.uint16, "F8_E4M3": np.uint8,
           "I8": np.int8, "I32": np.int32, "I64": np.int64}


def read_tensors(model_dir):
    """Every tensor of the directory's safetensors files as raw numpy arrays (16-bit floats as
    their bits), plus the merged headers."""
    arrays, headers = {}, {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
        header.pop("__metadata__", None)
        for name, info in header.items():
            b, e = info["data_offsets"]
            arrays[name] = np.frombuffer(blob[8 + n + b:8 + n + e], STORAGE[info["dtype"]]).reshape(
                info["shape"])
        headers.update(header)
    return arrays, headers


def dequantized_copy(qdir, out):
    """The stored quantized model with every weight dequantized (in float64, written as f32)
    by the format's definition (quant/quantize.h): an independent reading of the files."""
    import safetensors_io
    with open(os.path.join(qdir, "config.json")) as f:
        cfg = json.load(f)
    q = cfg.pop("quantization_config")
    raw, header = read_tensors(qdir)
    t = {}
    for name, arr in raw.items():
        if name.endswith((".weight_scale", ".weight_zero")):
            continue
        dtype = header[name]["dtype"]
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if dtype == "F8_E4M3":
            s = raw[base + ".weight_scale"].astype(np.float64)
            t[name] = fp8_values()[arr.view(np.uint8)] * s[:, None]
        elif dtype == "I8" and base is not None and base + ".weight_scale" in raw:
            b = arr.view(np.uint8).astype(np.int64)
            nib = np.stack([b & 0xF, b >> 4], axis=-1).reshape(arr.shape[0], -1)
            qv = np.where(nib >= 8, nib - 16, nib)
            g = q["group_size"]
            sbits = raw[base + ".weight_scale"]
            s = (sbits.view(np.float16).astype(np.float64) if q["scale_dtype"] == "f16"
                 else safetensors_io.bf16_bits_to_float(sbits).astype(np.float64))
            z = raw.get(base + ".weight_zero", np.zeros(s.shape, np.int8)).astype(np.int64)
            t[name] = (qv - np.repeat(z, g, axis=1)) * np.repeat(s, g, axis=1)
        elif dtype == "BF16":
            t[name] = safetensors_io.bf16_bits_to_float(arr).reshape(arr.shape)
        elif dtype == "F16":
            t[name] = arr.view(np.float16)
        else:
            t[name] = arr
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    safetensors_io.save_file({k: np.asarray(v, np.float32) for k, v in t.items()},
                             os.path.join(out, "model.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    return out


def check_same(res, case, got, want, max_rel):
    scale = float(np.abs(want).max())
    rel = float(np.abs(got - want).max()) / max(scale, 1e-30)
    res.check(case, rel <= max_rel, f"max |diff| / max |logit| = {rel:.2e} (<= {max_rel:.0e})")


def model_case(args, res, stats, model, ids, golden):
    src = os.path.join(eu.models_dir(args), model)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    vocab, hidden = cfg["vocab_size"], cfg["hidden_size"]
    schemes = [("fp8", ["--scheme", "fp8"], ["--quantization", "fp8"]),
               ("int4_g32", ["--scheme", "int4", "--group-size", "32"],
                ["--quantization", "int4", "--group-size", "32"])]
    if hidden % 128 == 0:
        schemes.append(("int4_g128_asym_bf16",
                        ["--scheme", "int4", "--asymmetric", "--scale-dtype", "bf16"],
                        ["--quantization", "int4", "--asymmetric", "--scale-dtype", "bf16"]))
    for name, q_flags, load_flags in schemes:
        case = f"{model}.{name}"
        on_load = logits(args, res, case + ".on_load", src, ids, vocab, load_flags)
        if on_load is None:
            continue
        check_close(res, case + ".vs_golden", on_load, golden, BOUNDS[name], stats)
        out = os.path.join(args.work_dir, f"{model}_{name}")
        if not quantize(args, res, case, src, out, q_flags):
            continue
        with open(os.path.join(out, "config.json")) as f:
            section = json.load(f).get("quantization_config", {})
        res.check(case + ".config", section.get("quant_method") == "sampan" and
                  section.get("format") == name.split("_")[0], json.dumps(section))
        stored = logits(args, res, case + ".stored", out, ids, vocab)
        if stored is not None:
            res.check(case + ".stored_equals_on_load", np.array_equal(stored, on_load),
                      f"max |diff| {float(np.abs(stored - on_load).max()):.3g} (must be 0)")
            # The engine computes with exactly the weights the files define.
            import numpy_llama
            ref = numpy_llama.logits(dequantized_copy(out, out + "_dequantized"), ids)
            cos = float(eu.cosine_per_row(stored, ref).min())
            rel = float(np.abs(stored - ref).max()) / float(np.abs(ref).max())
            res.check(case + ".stored.vs_numpy_dequantized",
                      cos >= DEQUANT_MIN_COSINE and rel <= DEQUANT_MAX_REL,
                      f"min cosine {cos:.7f} (>= {DEQUANT_MIN_COSINE}), max |diff| / max |logit| "
                      f"{rel:.2e} (<= {DEQUANT_MAX_REL})")

    # Rotation: the same function, in another basis. The reference is numpy (float64) over the
    # original weights: the rotated weights are f32 and take the f32 GEMM path, while the
    # original f16/bf16 weights may go through bf16 tiles in prefill (~1e-3 of the logits).
    import numpy_llama
    base = numpy_llama.logits(src, ids)
    rot = logits(args, res, f"{model}.hadamard_on_load", src, ids, vocab,
                 ["--hadamard", "--hadamard-seed", "7"])
    if base is not None and rot is not None:
        check_same(res, f"{model}.hadamard_on_load.vs_float", rot, base, ROTATION_MAX_REL)
    out = os.path.join(args.work_dir, f"{model}_rotated")
    if quantize(args, res, f"{model}.rotated", src, out,
                ["--scheme", "none", "--hadamard", "--hadamard-seed", "7"]):
        stored = logits(args, res, f"{model}.rotated.stored", out, ids, vocab)
        if stored is not None and base is not None:
            check_same(res, f"{model}.rotated.stored.vs_float", stored, base, ROTATION_MAX_REL)
        # Quantizing the rotated float model on load is allowed; rotating it again is not.
        run = eu.run_sampan(args, ["logits", "--model", out, "--ids", "1,2", "--out",
                                   os.path.join(args.work_dir, "x.npy"), "--hadamard"])
        res.check(f"{model}.rotated.no_double_rotation",
                  run.returncode == 1 and "already rotated" in run.last_stderr_line(),
                  run.last_stderr_line())


def write_random_model(path, seed=0):
    """A Llama of ~25 M parameters, f32: big enough that quantizing on load is measurable."""
    import safetensors_io
    rng = np.random.default_rng(seed)
    h, f, layers, vocab, heads = 512, 1536, 4, 8000, 8
    cfg = {"architectures": ["LlamaForCausalLM"], "vocab_size": vocab, "hidden_size": h,
           "intermediate_size": f, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": heads, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False}
    t = {"model.embed_tokens.weight": rng.standard_normal((vocab, h), np.float32) * 0.02,
         "model.norm.weight": np.ones(h, np.float32),
         "lm_head.weight": rng.standard_normal((vocab, h), np.float32) * 0.02}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n, shape in (("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (h, h)),
                         ("self_attn.v_proj", (h, h)), ("self_attn.o_proj", (h, h)),
                         ("mlp.gate_proj", (f, h)), ("mlp.up_proj", (f, h)),
                         ("mlp.down_proj", (h, f))):
            t[p + n + ".weight"] = rng.standard_normal(shape, np.float32) * 0.02
        t[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    safetensors_io.save_file(t, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    return vocab


def timed_logits(args, model, extra, repeats=3):
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        run = eu.run_sampan(args, ["logits", "--model", model, "--ids", "1,2,3", "--out",
                                   os.path.join(args.work_dir, "timed.npy")] + extra)
        dt = time.perf_counter() - t0
        if run.returncode != 0:
            return None, run
        best = dt if best is None else min(best, dt)
    return best, None


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if os.path.isfile(os.path.join(path, f)))


def debug_logits_log(args, model, extra):
    """stderr of one `sampan logits` run at log level debug ("" if it failed)."""
    saved = os.environ.get("SAMPAN_LOG_LEVEL")
    os.environ["SAMPAN_LOG_LEVEL"] = "debug"
    try:
        run = eu.run_sampan(args, ["logits", "--model", model, "--ids", "1,2,3", "--out",
                                   os.path.join(args.work_dir, "debug.npy")] + extra)
    finally:
        if saved is None:
            del os.environ["SAMPAN_LOG_LEVEL"]
        else:
            os.environ["SAMPAN_LOG_LEVEL"] = saved
    return run.stderr if run.returncode == 0 else ""


def load_speed(args, res):
    src = os.path.join(args.work_dir, "random_25m")
    write_random_model(src)
    for name, q_flags, load_flags in (
            ("fp8", ["--scheme", "fp8"], ["--quantization", "fp8"]),
            ("int4", ["--scheme", "int4"], ["--quantization", "int4"])):
        out = os.path.join(args.work_dir, f"random_25m_{name}")
        if not quantize(args, res, f"random_25m.{name}", src, out, q_flags):
            continue
        t_load, bad = timed_logits(args, src, load_flags)
        t_stored, bad2 = timed_logits(args, out, [])
        if bad or bad2:
            res.check(f"random_25m.{name}.load_speed", False, (bad or bad2).describe())
            continue
        # The times are reported, not asserted (speed belongs to benchmarks: a timed check
        # failed here once on a tie, 0.132 s both). What makes the stored model load faster is
        # checked instead: it reads fewer bytes than the f32 source and quantizes nothing on
        # load, while the on-load run quantizes every linear (the loader's debug log says so).
        print(f"measured random_25m.{name}.load: logits on the stored model {t_stored:.3f} s, "
              f"with on-load quantization {t_load:.3f} s (best of 3)")
        src_bytes, out_bytes = dir_bytes(src), dir_bytes(out)
        res.check(f"random_25m.{name}.stored_reads_less", out_bytes < src_bytes,
                  f"stored model {out_bytes} bytes, f32 source {src_bytes} bytes")
        log_load = debug_logits_log(args, src, load_flags)
        log_stored = debug_logits_log(args, out, [])
        quantized = re.search(r"quantized (\d+) linears to " + name, log_load)
        res.check(f"random_25m.{name}.only_on_load_quantizes",
                  quantized is not None and int(quantized.group(1)) > 0 and
                  "quantized" not in log_stored,
                  f"on-load run: {quantized.group(0) if quantized else 'no quantize line'}; "
                  f"stored run: {'a quantize line' if 'quantized' in log_stored else 'none'}")


def bad_cli(args, res):
    src = os.path.join(eu.models_dir(args), "tiny_qwen2")
    out = os.path.join(args.work_dir, "cli_out")
    shutil.rmtree(out, ignore_errors=True)
    nonempty = os.path.join(args.work_dir, "cli_nonempty")
    os.makedirs(nonempty, exist_ok=True)
    with open(os.path.join(nonempty, "keep.txt"), "w") as f:
        f.write("x")
    cases = [
        ("unknown_scheme", ["--model", src, "--out", out, "--scheme", "int3"], 2, "--scheme"),
        ("bad_group", ["--model", src, "--out", out, "--scheme", "int4", "--group-size", "48"], 2,
         "--group-size"),
        ("group_with_fp8", ["--model", src, "--out", out, "--scheme", "fp8", "--group-size", "64"],
         1, "int4 only"),
        ("missing_model", ["--model", os.path.join(args.work_dir, "nope"), "--out", out,
                           "--scheme", "fp8"], 1, "nope"),
        ("out_is_input", ["--model", src, "--out", src + "/", "--scheme", "fp8"], 1,
         "refusing to overwrite"),
        ("out_not_empty", ["--model", src, "--out", nonempty, "--scheme", "fp8"], 1,
         "not an empty directory"),
        ("search_with_fp8", ["--model", src, "--out", out, "--scheme", "fp8", "--scale-search",
                             "on"], 1, "int4 only"),
        ("bad_search", ["--model", src, "--out", out, "--scheme", "int4", "--scale-search",
                        "maybe"], 2, "--scale-search"),
        ("seed_without_hadamard", ["--model", src, "--out", out, "--scheme", "fp8",
                                   "--hadamard-seed", "3"], 1, "--hadamard"),
    ]
    for name, argv, code, needle in cases:
        run = eu.run_sampan(args, ["quantize"] + argv)
        last = run.last_stderr_line()
        res.check(f"cli.{name}", run.returncode == code and last.startswith("error:") and
                  needle in last, f"exit {run.returncode}: {last}")
    res.check("cli.input_untouched", sorted(os.listdir(src)) ==
              sorted(os.listdir(os.path.join(eu.models_dir(args), "tiny_qwen2"))))
    res.check("cli.nothing_written", not os.path.exists(out) and
              os.listdir(nonempty) == ["keep.txt"])


def main():
    args = eu.parse_args(__doc__.splitlines()[0])
    res = eu.Results()
    eu.require_binary(args, res)
    stats = {}
    done = set()
    for gpath in sorted(glob.glob(os.path.join(eu.golden_dir(args), "*.json"))):
        with open(gpath) as f:
            meta = json.load(f)
        if meta["model"] in done or len(meta["ids"]) < 20:  # one 40-token sequence per model
            continue
        done.add(meta["model"])
        golden = np.load(os.path.splitext(gpath)[0] + ".npy")
        model_case(args, res, stats, meta["model"], meta["ids"], golden)
    load_speed(args, res)
    bad_cli(args, res)
    for name, vals in sorted(stats.items()):
        print(f"measured {name}: min cosine {min(v[0] for v in vals):.5f}, "
              f"min top-1 {min(v[1] for v in vals) * 100:.1f} % over {len(vals)} models")
    res.finish()


if __name__ == "__main__":
    main()
