"""End-to-end: `sampan eval` computes what it says, and Hadamard helps where it must.

1. Metrics: on the outlier model (tests/reference/make_outlier_model.py) against a perturbed copy
   of it, the perplexities, mean/max KL and top-1 agreement that `sampan eval --json` reports
   equal a numpy computation (f64) from the logits `sampan logits` writes for the same windows
   (windows rebuilt here from `sampan tokenize` ids, by the rule documented in cmd_eval.cc).
2. A model against itself (--ref-model the same dir, or no reference and no build flag): KL 0,
   top-1 100 %, equal perplexities.
3. Issue 5's assertion on the outlier model: the Hadamard rotation lowers the INT4 weight error
   (mean KL of int4 g128 + --hadamard < int4 g128) and the K-head Walsh-Hadamard lowers the KV
   error (KV int4 + --kv-hadamard < KV int4).
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_util as eu  # noqa: E402

CTX = 64
MAX_TOKENS = 300        # metric check: 5 windows, the last one shorter
HAD_CTX, HAD_TOKENS = 128, 1024  # Hadamard assertions: ~500 scored tokens


def outlier_model(args):
    out = os.path.join(args.work_dir, "outlier")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(args.source_dir, "tests", "reference",
                                                 "make_outlier_model.py"), "--out", out],
                   check=True, capture_output=True)
    return out


def perturbed_copy(args, src):
    """The same model with 2 % multiplicative noise on every matrix: a different, nearby model."""
    import safetensors_io

    out = os.path.join(args.work_dir, "outlier_perturbed")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    path = os.path.join(out, "model.safetensors")
    t = safetensors_io.load_file(path)
    rng = np.random.default_rng(11)
    for k in t:
        if t[k].ndim == 2:
            t[k] = t[k] * (1.0 + 0.02 * rng.standard_normal(t[k].shape))
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in t.items()}, path,
                             dtypes={k: "BF16" for k in t})
    return out


def eval_json(args, res, name, argv):
    path = os.path.join(args.work_dir, name.replace(" ", "_") + ".json")
    if os.path.exists(path):
        os.remove(path)
    run = eu.run_sampan(args, ["eval", "--threads", "1", "--json", path] + argv)
    if run.returncode != 0:
        res.check(name, False, run.describe())
        return None
    with open(path) as f:
        return json.load(f)


def windows_of(ids, ctx, bos):
    """cmd_eval.cc's rule: with BOS, each window is BOS + the next ctx-1 text ids; the last
    shorter window is kept if it has >= 2 ids."""
    if bos is not None:
        body, step, head = ids[1:], ctx - 1, [bos]
    else:
        body, step, head = ids, ctx, []
    out = []
    for b in range(0, len(body), step):
        w = head + body[b:b + step]
        if len(w) >= 2:
            out.append(w)
    return out


def dump_logits(args, model, window, tag):
    path = os.path.join(args.work_dir, f"logits_{tag}.npy")
    run = eu.run_sampan(args, ["logits", "--model", model, "--threads", "1", "--ids",
                               ",".join(map(str, window)), "--out", path])
    if run.returncode != 0:
        raise RuntimeError(run.describe())
    return np.load(path).astype(np.float64)


def log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def numpy_metrics(args, model, ref, windows):
    nll_m, nll_r, kls, agree = [], [], [], []
    for wi, w in enumerate(windows):
        n = len(w)
        rows = np.arange(n - n // 2 - 1, n - 1)  # logits rows predicting the window's 2nd half
        targets = np.array(w)[rows + 1]
        lm = log_softmax(dump_logits(args, model, w, f"m{wi}"))[rows]
        lr = log_softmax(dump_logits(args, ref, w, f"r{wi}"))[rows]
        nll_m.extend(-lm[np.arange(len(rows)), targets])
        nll_r.extend(-lr[np.arange(len(rows)), targets])
        kls.extend((np.exp(lr) * (lr - lm)).sum(axis=1))
        agree.extend(lm.argmax(axis=1) == lr.argmax(axis=1))
    return {"tokens_scored": len(kls), "ppl": float(np.exp(np.mean(nll_m))),
            "ref_ppl": float(np.exp(np.mean(nll_r))), "mean_kl": float(np.mean(kls)),
            "max_kl": float(np.max(kls)), "top1_agreement": float(np.mean(agree))}


def check_metrics(args, res, model, ref, text):
    got = eval_json(args, res, "eval vs perturbed", ["--model", model, "--ref-model", ref,
                                                     "--text", text, "--ctx", str(CTX),
                                                     "--max-tokens", str(MAX_TOKENS)])
    if got is None:
        return
    with open(text) as f:
        content = f.read()
    tok = eu.run_sampan(args, ["tokenize", "--model", model, "--add-special", "--text", content])
    if not res.check("tokenize", tok.returncode == 0, tok.describe()):
        return
    ids = [int(x) for x in tok.stdout.split()][:MAX_TOKENS]
    bos = ids[0] if ids and ids[0] == 1 else None  # llama-spm adds <s> (id 1)
    windows = windows_of(ids, CTX, bos)
    want = numpy_metrics(args, model, ref, windows)
    res.check("tokens scored", got["tokens_scored"] == want["tokens_scored"] and
              got["windows"] == len(windows),
              f"eval {got['tokens_scored']} in {got['windows']} windows, numpy "
              f"{want['tokens_scored']} in {len(windows)}")
    # Both sides read the same f32 logits and work in f64: only summation order differs.
    for key in ("ppl", "ref_ppl", "mean_kl", "max_kl"):
        ok = abs(got[key] - want[key]) <= 1e-7 * max(1.0, abs(want[key]))
        res.check(f"{key} equals numpy", ok, f"eval {got[key]!r}, numpy {want[key]!r}")
    # Exact: argmax of the same logits; an exact tie could differ only in pathological logits.
    res.check("top-1 equals numpy", abs(got["top1_agreement"] - want["top1_agreement"]) < 1e-12,
              f"eval {got['top1_agreement']}, numpy {want['top1_agreement']}")
    res.check("perturbation is visible", got["mean_kl"] > 1e-6, f"mean KL {got['mean_kl']}")


def check_self(args, res, model, text):
    base = ["--model", model, "--text", text, "--ctx", str(CTX), "--max-tokens", str(MAX_TOKENS)]
    for name, extra in (("self via --ref-model", ["--ref-model", model]), ("self by default", [])):
        got = eval_json(args, res, name, base + extra)
        if got is None:
            continue
        # Two loads of one model run the same deterministic kernels: identical logits.
        ok = (abs(got["mean_kl"]) < 1e-12 and abs(got["max_kl"]) < 1e-12 and
              got["top1_agreement"] == 1.0 and abs(got["ppl"] - got["ref_ppl"]) < 1e-9 * got["ppl"])
        res.check(name, ok, f"mean KL {got['mean_kl']}, max KL {got['max_kl']}, top-1 "
                            f"{got['top1_pct']} %, ppl {got['ppl']} / {got['ref_ppl']}")


def check_hadamard(args, res, model, text):
    base = ["--model", model, "--text", text, "--ctx", str(HAD_CTX), "--max-tokens",
            str(HAD_TOKENS)]
    # Issue 5: both rotations must lower the error they target on the outlier model. The
    # weight rotation's gain there is large (numpy model of the same quantizer: mean KL of
    # every linear in INT4 g128 about 0.08 -> 0.03, from the input-column outliers of q/k/v,
    # gate/up and lm_head that the rotation spreads); see docs/QUANTIZATION.md.
    pairs = [
        ("int4 g128 weights: --hadamard lowers KL",
         ["--quantization", "int4", "--group-size", "128"],
         ["--quantization", "int4", "--group-size", "128", "--hadamard"]),
        ("int4 KV cache: --kv-hadamard lowers KL",
         ["--kv-cache-dtype", "int4"], ["--kv-cache-dtype", "int4", "--kv-hadamard"]),
    ]
    for name, plain, rotated in pairs:
        a = eval_json(args, res, name + " (plain)", base + plain)
        b = eval_json(args, res, name + " (rotated)", base + rotated)
        if a is None or b is None:
            continue
        res.check(name, b["mean_kl"] < a["mean_kl"],
                  f"mean KL {a['mean_kl']:.5f} -> {b['mean_kl']:.5f}, top-1 "
                  f"{a['top1_pct']:.1f} % -> {b['top1_pct']:.1f} %")


def main():
    args = eu.parse_args(__doc__)
    res = eu.Results()
    eu.require_binary(args, res)
    text = os.path.join(args.source_dir, "tests", "data", "eval", "apache-2.0.txt")
    model = outlier_model(args)
    perturbed = perturbed_copy(args, model)
    run = eu.run_sampan(args, ["eval", "--model", model, "--text", text, "--ctx", str(CTX),
                               "--max-tokens", str(MAX_TOKENS), "--threads", "1"])
    res.check("human summary", run.returncode == 0 and all(
        s in run.stdout for s in ("perplexity", "KL", "top-1", "tokens scored")), run.describe())
    check_metrics(args, res, perturbed, model, text)
    check_self(args, res, model, text)
    check_hadamard(args, res, model, text)
    res.finish()


if __name__ == "__main__":
    main()
