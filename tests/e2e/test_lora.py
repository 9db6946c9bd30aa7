"""End-to-end: LoRA adapters on the command line (`--lora DIR`, `merge-lora`).

The adapters in tests/data/lora were made by peft itself (tests/reference/make_lora_goldens.py),
with golden logits through PeftModel in float32. Checks:
  * `sampan logits --lora` on each fixture (f32, bf16 and f16 tensors; Llama GQA and Qwen2 with
    biases) against peft's logits, fed at once and token by token (--chunk 1, the KV-cache path);
    the base without --lora is far from them (the adapter is really applied).
  * `sampan merge-lora`: the merged directory keeps every tensor but the targeted projections
    byte for byte, holds W + s·B·A rounded once to the base's dtype (recomputed here in numpy),
    runs in `sampan logits` as the numpy reference (numpy_llama.py) computes it from the merged
    files, and equals the unmerged adapter: exactly up to f32 rounding on an f32 copy of the
    base, within the rounding of the merged weights to the base's bf16/f16 otherwise.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

ADAPTERS = ("llama3_all", "llama3_qv", "qwen2_all")
# Against peft: transformers' f32 and ours differ only in summation order (measured cosine
# 0.9999998, max |diff| 2e-5 on logits of magnitude ~10); a wrong scale, a projection left out or
# a misplaced delta moves logits by whole units (the base alone is > 10 away, cosine < 0.99).
MIN_COSINE = 0.9999
# The merged model against the unmerged adapter on an f32 base: the same products in another
# order, f32 rounding only (measured 2.5e-5); 1e-3 on logits of magnitude ~10 catches any error in
# the merge itself (a delta left out or transposed moves logits by > 1).
F32_MERGE_MAX_ABS = 1e-3
# On the bf16 (f16) base the merged weight is rounded once to bf16 (f16): a relative 2^-9
# (2^-12) of every weight, which moves these logits by up to 0.14 (measured cosine 0.99996 on
# the bf16 base, 0.9999999 on the f16 one). Top-1 must still agree.
HALF_MERGE_MIN_COSINE = 0.9995
# Merged model vs the numpy reference reading the merged files (float64): the engine's f32 error
# only, as in test_llama_logits.py.
NUMPY_MIN_COSINE = 0.9999


def golden(args, name):
    base = os.path.join(args.source_dir, "tests", "data", "lora", name)
    with open(base + ".json") as f:
        meta = json.load(f)
    return meta, np.load(base + ".npy")


def logits(args, res, case, model, ids, vocab, extra=()):
    out = os.path.join(args.work_dir, case + ".npy")
    if os.path.exists(out):
        os.remove(out)
    r = eu.run_sampan(args, ["logits", "--model", model, "--ids", ",".join(map(str, ids)),
                             "--out", out, "--threads", "2", *extra])
    if not res.check(f"{case}.runs", r.returncode == 0, "" if r.returncode == 0 else r.describe()):
        return None
    arr, problem = eu.load_logits(out, len(ids), vocab)
    res.check(f"{case}.output", arr is not None, problem)
    return arr


def compare(res, case, got, want, min_cos, max_abs=None):
    if got is None:
        return
    cos = eu.cosine_per_row(got, want)
    diff = float(np.abs(got.astype(np.float64) - want).max())
    top1 = eu.top1_agreement(got, want)
    ok = cos.min() >= min_cos and top1 == 1.0 and (max_abs is None or diff <= max_abs)
    res.check(case, ok, f"min cosine {cos.min():.7f} (>= {min_cos}), max |diff| {diff:.2e}"
                        + (f" (<= {max_abs})" if max_abs is not None else "")
                        + f", top-1 agreement {top1:.3f}")


def f32_copy(args, src, dst):
    """The base model with every tensor stored as f32 (exact: bf16/f16 widen without rounding)."""
    import safetensors_io
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    tensors = safetensors_io.load_model_tensors(src)
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
                             os.path.join(dst, "model.safetensors"))
    with open(os.path.join(dst, "config.json")) as f:
        cfg = json.load(f)
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            cfg[key] = "float32"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def merge(args, res, case, model, adapter):
    out = os.path.join(args.work_dir, case)
    shutil.rmtree(out, ignore_errors=True)
    r = eu.run_sampan(args, ["merge-lora", "--model", model, "--lora", adapter, "--out", out])
    ok = res.check(f"{case}.runs", r.returncode == 0, "" if r.returncode == 0 else r.describe())
    return out if ok else None


def check_merged_tensors(args, res, case, base, adapter, merged):
    """Untargeted tensors byte-identical; targeted ones = round(W + s·B·A) in the base dtype."""
    import safetensors_io
    b = safetensors_io.load_model_tensors(base, raw=True)
    m = safetensors_io.load_model_tensors(merged, raw=True)
    bf = safetensors_io.load_model_tensors(base)
    mf = safetensors_io.load_model_tensors(merged)
    lora = safetensors_io.load_file(os.path.join(adapter, "adapter_model.safetensors"))
    with open(os.path.join(adapter, "adapter_config.json")) as f:
        cfg = json.load(f)
    scale = cfg["lora_alpha"] / cfg["r"]
    prefix = "base_model.model."
    targeted = {k[len(prefix):].replace(".lora_A.weight", ".weight")
                for k in lora if k.endswith(".lora_A.weight")}
    res.check(f"{case}.same_tensor_names", sorted(b) == sorted(m),
              f"{len(m)} tensors, {len(targeted)} merged")
    same_bytes = all(b[k].dtype == m[k].dtype and np.array_equal(b[k], m[k])
                     for k in b if k not in targeted)
    res.check(f"{case}.untargeted_unchanged", same_bytes)
    worst = 0.0  # |merged - exact| / allowed
    for k in sorted(targeted):
        la = lora[prefix + k.replace(".weight", ".lora_A.weight")].astype(np.float64)
        lb = lora[prefix + k.replace(".weight", ".lora_B.weight")].astype(np.float64)
        w = bf[k].astype(np.float64)
        exact = w + scale * lb @ la
        mag = np.abs(w) + scale * np.abs(lb) @ np.abs(la)
        # (mantissa bits, spacing of the smallest subnormals) of the stored format
        bits, tiny = {np.dtype("<u2"): (8, 2.0 ** -133), np.dtype("<f2"): (11, 2.0 ** -24),
                      np.dtype("<f4"): (24, 2.0 ** -149)}[b[k].dtype]
        # The f32 sum (r + 1 roundings of terms at most `mag`), then one rounding to the stored
        # format: half its spacing at |exact|.
        allowed = 8 * 2.0 ** -24 * mag + 0.5 * np.maximum(np.abs(exact) * 2.0 ** (1 - bits), tiny)
        worst = max(worst, float((np.abs(mf[k].astype(np.float64) - exact) / allowed).max()))
        if m[k].dtype != b[k].dtype:
            worst = float("inf")
    res.check(f"{case}.merged_weights", worst <= 1.0,
              f"worst error {worst:.3f} of the bound (one rounding to the base's dtype)")


def check_generation_commands(args, res):
    import serve_util
    base = os.path.join(args.work_dir, "serve_model_f32")
    f32_copy(args, serve_util.make_serve_model(args), base)
    adapter = os.path.join(args.work_dir, "serve_adapter")
    shutil.rmtree(adapter, ignore_errors=True)
    eu.write_peft_adapter(base, adapter, rank=4, seed=3)
    merged = merge(args, res, "merge_serve", base, adapter)
    if not merged:
        return
    prompt = ["--prompt", "The quick brown fox", "--max-tokens", "24", "--temperature", "0",
              "--ignore-eos", "--threads", "2"]
    texts = {}
    for case, model, extra in (("lora", base, ["--lora", adapter]), ("merged", merged, []),
                               ("base", base, [])):
        r = eu.run_sampan(args, ["run", "--model", model, *prompt, *extra])
        if res.check(f"run.{case}", r.returncode == 0, "" if r.returncode == 0 else r.describe()):
            texts[case] = r.stdout
    if len(texts) == 3:
        res.check("run.lora_equals_merged", texts["lora"] == texts["merged"],
                  f"{texts['lora']!r} vs {texts['merged']!r}")
        res.check("run.adapter_changes_text", texts["lora"] != texts["base"],
                  f"{texts['lora']!r} vs base {texts['base']!r}")

    chats = {}
    for case, model, extra in (("lora", base, ["--lora", adapter]), ("merged", merged, [])):
        cmd = [args.sampan, "chat", "--model", model, "--max-tokens", "16", "--temperature", "0",
               "--ignore-eos", "--threads", "2", *extra]
        p = subprocess.run(cmd, input="Hello there\n", capture_output=True, text=True,
                           timeout=eu.RUN_TIMEOUT_S, errors="replace")
        if res.check(f"chat.{case}", p.returncode == 0, p.stderr[-300:]):
            chats[case] = p.stdout
    if len(chats) == 2:
        res.check("chat.lora_equals_merged", chats["lora"] == chats["merged"] and chats["lora"],
                  f"{chats['lora']!r} vs {chats['merged']!r}")

    text = os.path.join(args.source_dir, "tests", "data", "eval", "apache-2.0.txt")
    figures = {}
    for case, model, extra in (("lora", base, ["--lora", adapter]), ("merged", merged, [])):
        out = os.path.join(args.work_dir, f"eval_{case}.json")
        r = eu.run_sampan(args, ["eval", "--model", model, "--text", text, "--ctx", "64",
                                 "--max-tokens", "256", "--threads", "2", "--json", out, *extra])
        if res.check(f"eval.{case}", r.returncode == 0, "" if r.returncode == 0 else r.describe()):
            with open(out) as f:
                figures[case] = json.load(f)
    if len(figures) == 2:
        lo, me = figures["lora"], figures["merged"]
        # Same model two ways (f32 base: merge error ~1e-6 relative), so the same perplexity to
        # 1e-4; the reference of the --lora run is the base alone, whose perplexity differs.
        res.check("eval.lora_equals_merged", abs(lo["ppl"] / me["ppl"] - 1) < 1e-4,
                  f"ppl {lo['ppl']:.6f} vs merged {me['ppl']:.6f}")
        res.check("eval.reference_is_base", lo["build"]["lora"] == adapter and
                  abs(lo["ref_ppl"] / lo["ppl"] - 1) > 1e-3 and lo["mean_kl"] > 0,
                  f"reference ppl {lo['ref_ppl']:.4f}, mean KL {lo['mean_kl']:.4f}")


def main():
    args = eu.parse_args(__doc__)
    res = eu.Results()
    eu.require_binary(args, res)
    import numpy_llama

    models = eu.models_dir(args)
    lora_dir = os.path.join(args.source_dir, "tests", "data", "lora")
    for name in ADAPTERS:
        meta, want = golden(args, name)
        model = os.path.join(args.source_dir, meta["model"])
        adapter = os.path.join(args.source_dir, meta["adapter"])
        ids, vocab = meta["ids"], want.shape[1]
        compare(res, f"{name}.vs_peft",
                logits(args, res, f"{name}_lora", model, ids, vocab, ["--lora", adapter]),
                want, MIN_COSINE)
        compare(res, f"{name}.chunk1.vs_peft",
                logits(args, res, f"{name}_lora_chunk1", model, ids, vocab,
                       ["--lora", adapter, "--chunk", "1"]),
                want, MIN_COSINE)
        base = logits(args, res, f"{name}_base", model, ids, vocab)
        if base is not None:
            moved = float(np.abs(base - want).max())
            res.check(f"{name}.adapter_matters", moved > 1.0,
                      f"the base alone is {moved:.2f} away from peft's adapter logits")

    # A GGUF base (f32, converted by the reference script; q/k rows permuted to llama.cpp's
    # order and back on load) takes the same adapter.
    meta, want = golden(args, "llama3_all")
    try:
        import gguf_models
        # The converter writes one eos id; tiny_llama3 lists three (irrelevant to logits).
        src = os.path.join(args.work_dir, "tiny_llama3_one_eos")
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(os.path.join(models, "tiny_llama3"), src)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        cfg["eos_token_id"] = cfg["eos_token_id"][0]
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump(cfg, f)
        gguf_file = gguf_models.hf_to_gguf(src, os.path.join(args.work_dir, "tiny_llama3.gguf"),
                                           "f32")
    except ImportError as e:
        res.check("gguf.reference_package", False, str(e))
        gguf_file = None
    if gguf_file:
        compare(res, "llama3_all.gguf_base.vs_peft",
                logits(args, res, "gguf_lora", gguf_file, meta["ids"], want.shape[1],
                       ["--lora", os.path.join(lora_dir, "llama3_all")]),
                want, MIN_COSINE)

    # merge-lora on an f32 copy of the base: the merged model is the unmerged adapter.
    meta, want = golden(args, "llama3_all")
    ids, vocab = meta["ids"], want.shape[1]
    adapter = os.path.join(lora_dir, "llama3_all")
    base32 = os.path.join(args.work_dir, "tiny_llama3_f32")
    f32_copy(args, os.path.join(models, "tiny_llama3"), base32)
    merged32 = merge(args, res, "merge_f32", base32, adapter)
    if merged32:
        check_merged_tensors(args, res, "merge_f32", base32, adapter, merged32)
        unmerged = logits(args, res, "f32_unmerged", base32, ids, vocab, ["--lora", adapter])
        got = logits(args, res, "f32_merged", merged32, ids, vocab)
        if unmerged is not None:
            compare(res, "merge_f32.vs_unmerged", got, unmerged, MIN_COSINE, F32_MERGE_MAX_ABS)

    # merge-lora on the committed bf16 (Llama) and f16 (Qwen2, biases, untied head) bases.
    for name, model_name in (("llama3_all", "tiny_llama3"), ("qwen2_all", "tiny_qwen2")):
        meta, want = golden(args, name)
        ids, vocab = meta["ids"], want.shape[1]
        base = os.path.join(models, model_name)
        adapter = os.path.join(lora_dir, name)
        merged = merge(args, res, f"merge_{name}", base, adapter)
        if not merged:
            continue
        check_merged_tensors(args, res, f"merge_{name}", base, adapter, merged)
        copied = all(os.path.exists(os.path.join(merged, f)) for f in os.listdir(base)
                     if not f.endswith(".safetensors"))
        res.check(f"merge_{name}.files_copied", copied, ", ".join(sorted(os.listdir(merged))))
        got = logits(args, res, f"{name}_merged", merged, ids, vocab)
        compare(res, f"merge_{name}.vs_peft", got, want, HALF_MERGE_MIN_COSINE)
        compare(res, f"merge_{name}.vs_numpy", got, numpy_llama.logits(merged, ids),
                NUMPY_MIN_COSINE)

    check_generation_commands(args, res)
    res.finish()


if __name__ == "__main__":
    main()
