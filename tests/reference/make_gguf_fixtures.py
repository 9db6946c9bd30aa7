"""Small GGUF files committed under tests/data/gguf for tests that cannot make them (the CUDA
end-to-end test runs on GPU machines without llama-cpp-python or the `gguf` package).

    python3 tests/reference/make_gguf_fixtures.py [OUT_DIR]   (default tests/data/gguf)

One random Llama-architecture model (gguf_models.make_llama_dir: hidden 256, 2 layers, vocab
384, llama3 RoPE as rope_freqs factors, untied lm_head), converted to GGUF F32 by gguf_models.py
and quantized by llama.cpp's own quantizer (llama-cpp-python):

    llama-Q8_0.gguf     every matrix Q8_0 (token embedding and output included)
    llama-Q4_0.gguf     every matrix Q4_0
    llama-Q4_K_M.gguf   llama.cpp's Q4_K_M recipe: Q4_K matrices with Q6_K for the output and
                        some attn_v / ffn_down, as a real Q4_K_M file mixes them

The CPU's decoding of these blocks is checked against llama.cpp and the gguf package in
tests/e2e/test_gguf_models.py; the CUDA test compares the GPU with the CPU on these files.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_models as G  # noqa: E402

FILES = [("Q8_0", True), ("Q4_0", True), ("Q4_K_M", False)]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "data", "gguf")
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "llama_hf")
        G.make_llama_dir(d, arch="llama", llama3_rope=True, seed=1, head_peak=1.0, out_scale=0.3)
        f32 = G.hf_to_gguf(d, os.path.join(tmp, "llama-F32.gguf"), "f32")
        for ftype, pure in FILES:
            path = os.path.join(out, f"llama-{ftype}.gguf")
            G.quantize(f32, path, ftype, pure=pure)
            print(path, os.path.getsize(path))


if __name__ == "__main__":
    main()
