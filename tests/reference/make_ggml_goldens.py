#!/usr/bin/env python3
"""Goldens for tests/kernels/test_ggml_dequant.cc: GGUF block rows and their dequantization by
the `gguf` package (llama.cpp's own Python reference), an implementation independent of ours.

For every block type Sampan supports, writes into tests/data/ggml/:
  <TYPE>.blocks.npy  uint8 [rows, row_bytes]  deterministic random blocks
  <TYPE>.f32.npy     float32 [rows, k]         gguf.quants.dequantize of them

The blocks are random bytes except the f16 scale fields (d, m, dmin), which are set to finite
values of either sign between 2^-14 and 2^-2, with a few f16 subnormals and zeros mixed in, so
the outputs are finite and every code path of the formulas is exercised (MXFP4's E8M0 byte:
exponents 100..149 and the subnormal codes 0 and 1).

    pip install gguf numpy     # (gguf 0.19 was used)
    python3 tests/reference/make_ggml_goldens.py
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

# type -> (elements per block, bytes per block, byte offsets of the f16 scale fields)
TYPES = {
    "Q4_0": (T.Q4_0, 32, 18, [0]),
    "Q4_1": (T.Q4_1, 32, 20, [0, 2]),
    "Q5_0": (T.Q5_0, 32, 22, [0]),
    "Q5_1": (T.Q5_1, 32, 24, [0, 2]),
    "Q8_0": (T.Q8_0, 32, 34, [0]),
    "Q2_K": (T.Q2_K, 256, 84, [80, 82]),
    "Q3_K": (T.Q3_K, 256, 110, [108]),
    "Q4_K": (T.Q4_K, 256, 144, [0, 2]),
    "Q5_K": (T.Q5_K, 256, 176, [0, 2]),
    "Q6_K": (T.Q6_K, 256, 210, [208]),
    "IQ4_NL": (T.IQ4_NL, 32, 18, [0]),
    "IQ4_XS": (T.IQ4_XS, 256, 136, [0]),
    "MXFP4": (T.MXFP4, 32, 17, []),   # its E8M0 scale byte: set below
    "TQ2_0": (T.TQ2_0, 256, 66, [64]),
    "TQ1_0": (T.TQ1_0, 256, 54, [52]),
}

ROWS = 3
K = 512


def scale_values(rng, n):
    mag = np.exp2(rng.uniform(-14, -2, n))
    sign = np.where(rng.integers(0, 2, n) == 1, -1.0, 1.0)
    v = (mag * sign).astype(np.float16)
    special = rng.integers(0, 16, n)
    v[special == 0] = np.float16(3e-6)   # f16 subnormal
    v[special == 1] = np.float16(-0.0)
    return v


def main():
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ggml")
    os.makedirs(out_dir, exist_ok=True)
    for i, (name, (qtype, bs, nbytes, scale_offsets)) in enumerate(TYPES.items()):
        rng = np.random.default_rng(1000 + i)
        n_blocks = ROWS * K // bs
        blocks = rng.integers(0, 256, size=(n_blocks, nbytes), dtype=np.uint8)
        for off in scale_offsets:
            blocks[:, off:off + 2] = scale_values(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        if name == "MXFP4":
            # E8M0 exponents around 1 (2^(e - 128)), and 0 and 1: the subnormal scales.
            e = rng.integers(100, 150, n_blocks)
            e[::7] = 0
            e[3::7] = 1
            blocks[:, 0] = e.astype(np.uint8)
        rows = blocks.reshape(ROWS, K // bs * nbytes)
        ref = dequantize(rows, qtype).astype(np.float32)
        assert ref.shape == (ROWS, K), (name, ref.shape)
        assert np.all(np.isfinite(ref)), name
        np.save(os.path.join(out_dir, f"{name}.blocks.npy"), np.ascontiguousarray(rows))
        np.save(os.path.join(out_dir, f"{name}.f32.npy"), np.ascontiguousarray(ref))
    total = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"wrote {len(TYPES)} types to {out_dir} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
