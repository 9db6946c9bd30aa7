"""Runs Hugging Face transformers on the tiny models and writes golden logits (run once, commit).

    /work/refenv/bin/python tests/reference/make_hf_goldens.py

Needs torch + transformers (see requirements-golden.txt); nothing in CI runs this script: CI reads
the committed files. For every model in tests/data/models and three id sequences (lengths 5, 40,
100, each containing ids at both ends of the vocabulary) it writes

    tests/data/golden/<model>_<k>.npy   float32 logits [n_ids, vocab] from HF in float32, eager
    tests/data/golden/<model>_<k>.json  {"model", "ids", "hf_vs_numpy_max_abs"}

and checks the independent numpy reference (numpy_llama.py) against HF, on those models and on
the config variants of make_tiny_models.VARIANTS (attention/MLP biases, Qwen2 sliding window,
transformers-5 `rope_parameters`, explicit head_dim), which are built in a scratch directory. The two were written
separately, so their agreement is what lets the e2e test trust either one.
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_models  # noqa: E402
import numpy_llama  # noqa: E402

MODELS = ("tiny_llama3", "tiny_qwen2", "tiny_mistral")
LENGTHS = (5, 40, 100)
# HF float32 vs numpy float64 differ only by float32 rounding (~1e-6 relative per op); logits are
# O(10), so 1e-3 absolute leaves a wide margin while still catching any semantic mismatch (a
# wrong RoPE band or mask moves logits by whole units).
MAX_ABS_TOL = 1e-3


def make_ids(vocab, n, seed):
    """Deterministic ids with the vocabulary's first and last entries present."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, n).tolist()
    ends = [vocab - 1, 0, vocab - 2, 1, vocab - 3]
    for i, t in enumerate(ends[:n]):
        ids[(i * 7 + 1) % n] = t
    if n >= 40:
        # A repeated stretch gives attention exact duplicate keys at different positions, where
        # only RoPE tells them apart.
        ids[n - 12:n - 2] = ids[5:15]
    return ids


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float().numpy()


def main():
    ap = argparse.ArgumentParser(description="write HF golden logits for the tiny models")
    ap.add_argument("--models-dir", default=os.path.normpath(os.path.join(HERE, "..", "data", "models")))
    ap.add_argument("--out-dir", default=os.path.normpath(os.path.join(HERE, "..", "data", "golden")))
    args = ap.parse_args()

    import torch
    import transformers
    torch.manual_seed(0)
    os.makedirs(args.out_dir, exist_ok=True)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    worst = 0.0
    failed = []
    for m_index, name in enumerate(MODELS):
        path = os.path.join(args.models_dir, name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        vocab = model.config.vocab_size
        for k, n in enumerate(LENGTHS):
            ids = make_ids(vocab, n, seed=100 * m_index + k)
            golden = hf_logits(model, ids)
            ref = numpy_llama.logits(path, ids)
            diff = float(np.abs(golden.astype(np.float64) - ref).max())
            worst = max(worst, diff)
            stem = os.path.join(args.out_dir, f"{name}_{k}")
            np.save(stem + ".npy", golden.astype(np.float32))
            with open(stem + ".json", "w") as f:
                json.dump({"model": name, "ids": ids, "hf_vs_numpy_max_abs": diff}, f)
                f.write("\n")
            top1 = float((golden.argmax(-1) == ref.argmax(-1)).mean())
            status = "ok" if diff <= MAX_ABS_TOL else "MISMATCH"
            if diff > MAX_ABS_TOL:
                failed.append(f"{name}_{k}")
            print(f"{name}_{k}: n={n} logits {golden.shape} |HF - numpy|max = {diff:.2e} "
                  f"top-1 agreement {top1:.3f} range [{golden.min():.1f}, {golden.max():.1f}] {status}")
    # Config variants (built in a scratch dir, not committed): the numpy reference must agree
    # with HF on every path it implements, not only the three committed models.
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for v_index, name in enumerate(make_tiny_models.VARIANTS):
            path = make_tiny_models.write_model(tmp, name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path, dtype=torch.float32, attn_implementation="eager")
            model.eval()
            ids = make_ids(model.config.vocab_size, 60, seed=1000 + v_index)
            diff = float(np.abs(hf_logits(model, ids) - numpy_llama.logits(path, ids)).max())
            worst = max(worst, diff)
            status = "ok" if diff <= MAX_ABS_TOL else "MISMATCH"
            if diff > MAX_ABS_TOL:
                failed.append(name)
            print(f"{name}: n=60 |HF - numpy|max = {diff:.2e} {status}")
    print(f"worst |HF - numpy| = {worst:.2e} (tolerance {MAX_ABS_TOL:g})")
    if failed:
        print("numpy reference disagrees with HF on: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
