#!/usr/bin/env python3
"""Makes the model the serving tests run on: the demo model (scripts/make_demo_model.py: a real
tokenizer, a chat template, bigram-fitted embeddings) with RANDOM attention-output and MLP-down
projections, so that every generated token depends on the whole context through attention and
the KV cache. (The demo model zeroes them, which would let a broken KV cache go unnoticed.)

Usage: make_serve_model.py --out DIR [--scale S]
Deterministic: the same DIR contents on every machine (fixed seeds).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale", type=float, default=0.5,
                    help="std of the random projections times 1/sqrt(fan_in)")
    args = ap.parse_args()
    # Idempotent and safe under parallel test processes: the model is built in a private
    # directory and renamed into place; an existing complete model is never rewritten (another
    # process may have it memory-mapped).
    if os.path.exists(os.path.join(args.out, "serve_model.ok")):
        print(f"serve model: {args.out} (exists)")
        return
    tmp = f"{args.out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_demo_model.py"),
                    "--tokenizer-dir", os.path.join(REPO, "tests", "data", "tokenizers",
                                                    "llama-spm"),
                    "--out", tmp], check=True, stdout=subprocess.DEVNULL)
    path = os.path.join(tmp, "model.safetensors")
    tensors = safetensors_io.load_file(path)
    rng = np.random.default_rng(1234)
    for name in sorted(tensors):
        if name.endswith("self_attn.o_proj.weight") or name.endswith("mlp.down_proj.weight"):
            out_dim, fan_in = tensors[name].shape
            tensors[name] = rng.normal(0, args.scale / np.sqrt(fan_in), (out_dim, fan_in))
    safetensors_io.save_file({k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
                             path, dtypes={k: "BF16" for k in tensors})
    open(os.path.join(tmp, "serve_model.ok"), "w").close()
    if os.path.isdir(args.out) and not os.path.exists(os.path.join(args.out, "serve_model.ok")):
        shutil.rmtree(args.out)  # a partial model from an older run
    try:
        os.rename(tmp, args.out)
    except OSError:  # another process won the race: its model is identical
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"serve model: {args.out}")


if __name__ == "__main__":
    main()
