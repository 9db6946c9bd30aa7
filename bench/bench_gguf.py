"""Sampan against llama.cpp on the same GGUF files: decode and 512-token prefill, per weight type.

    python3 bench/bench_gguf.py [--sampan build/sampan] [--probe build/bench/bandwidth_probe]
        [--model-dir /tmp/sampan-bench] [--types F16 Q8_0 Q4_0 Q4_K_M] [--threads 2]
        [--prompt-len 512] [--gen 32] [--rounds 2] [--kv-cache-dtype bf16|f32]
        [--llamacpp-python PY [PY ...]]

The TinyLlama-1.1B-shaped synthetic model of bench/make_synthetic_model.py is written once as an
F16 GGUF; llama.cpp's own quantizer (llama-cpp-python) makes the other types with its usual mixed
recipes (Q4_K_M keeps some tensors in Q6_K). Each round runs every type on both engines, one
after the other, so both see the same machine state; the best round of each is reported, and the
bandwidth probe runs in the same session. Decode streams every weight but the embedding table's
(one row is gathered), so decode GB/s = (file tensor bytes - token_embd bytes) x decode tok/s:
the KV cache a decode step also reads is not counted. Sampan's KV cache is bf16 here, as wide as
llama.cpp's default F16 cache (`--kv-cache-dtype f32`, Sampan's own default, reads twice the KV
bytes: at 512 tokens of context ~24 MB a token on this shape, ~4 % of a Q4_K_M step's bytes).
Results print as a markdown table, ratios Sampan / llama.cpp. Sampan's prefill is measured at
the default GemmPrecision and again with SAMPAN_GEMM_PRECISION=bf16 ("fast x"): x rounded to int8
per group of the weights on AVX512-VNNI CPUs without AMX (as llama.cpp rounds its activations to
Q8), to bf16 elsewhere, and at decode to int8 per 256 elements for Q4_K, Q5_K and Q6_K on
AVX512-VNNI (the x8 decode kernels); kernels/cpu/gemm_quant.h and gemm_ggml.h state the error of
each.

llama.cpp on AMX CPUs: pip builds llama-cpp-python with -march=native, so with AMX-INT8 it adds
its AMX buffer type, which crashes (SIGSEGV) on Q8_0 / Q4_0 / Q4_K models in 0.3.36. The fallback
loads without extra buffer types, which also drops REPACK (its AVX2 / AVX-512 kernels on
repacked Q4_0 / Q4_K rows): Q4_0 decode 13.9 against 24.0 tok/s, Q4_K_M 17.3 against 25.6 on a
2-core AMX VM. For a fair comparison give a second build without AMX, e.g.
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
      -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX_VNNI=ON
      -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
      /tmp/lcp/bin/pip install llama-cpp-python==0.3.36 gguf numpy
and `--llamacpp-python python3 /tmp/lcp/bin/python`: each llama.cpp figure is then the best of
the builds (the native one was faster on F16 there: 12.4 against 9.5 tok/s decode).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

LLAMACPP_SNIPPET = r"""
import contextlib, json, os, sys, time
from llama_cpp import Llama
sys.path.insert(0, sys.argv[5])
import gguf_models
path, threads, prompt_len, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with (gguf_models.llama_cpp_without_extra_bufts()
      if os.environ.get("SAMPAN_LLAMACPP_NO_EXTRA_BUFTS") else contextlib.nullcontext()):
    llm = Llama(model_path=path, n_ctx=prompt_len + gen + 16, n_batch=prompt_len,
                n_ubatch=prompt_len, n_threads=threads, n_threads_batch=threads, verbose=False)
prompt = [259 + (i * 7919) % (llm.n_vocab() - 259) for i in range(prompt_len)]
llm.eval(prompt[:8])
llm.reset()
t0 = time.perf_counter()
llm.eval(prompt)
t1 = time.perf_counter()
for i in range(gen):
    llm.eval([259 + (i * 104729) % (llm.n_vocab() - 259)])
t2 = time.perf_counter()
print(json.dumps({"prefill_tok_s": prompt_len / (t1 - t0), "decode_tok_s": gen / (t2 - t1)}))
"""


def streamed_bytes(path):
    import gguf
    r = gguf.GGUFReader(path)
    total = sum(int(t.n_bytes) for t in r.tensors)
    embd = sum(int(t.n_bytes) for t in r.tensors if t.name == "token_embd.weight")
    tied = not any(t.name == "output.weight" for t in r.tensors)
    return total - (0 if tied else embd)


def run_sampan(args, path, env=None):
    out = subprocess.run([args.sampan, "bench", "--model", path, "--threads", str(args.threads),
                          "--prompt-len", str(args.prompt_len), "--gen", str(args.gen),
                          "--kv-cache-dtype", args.kv_cache_dtype,
                          "--repeat", "1"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, **(env or {})))
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    j = json.loads(line)
    return j["prefill_tok_s"], j["decode_tok_s"]


def run_sampan_fast_x(args, path):
    return run_sampan(args, path, env={"SAMPAN_GEMM_PRECISION": "bf16"})


def run_llamacpp_with(python, args, path):
    cmd = [python, "-c", LLAMACPP_SNIPPET, path, str(args.threads), str(args.prompt_len),
           str(args.gen), os.path.join(REPO, "tests", "reference")]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode < 0:
        # llama-cpp-python 0.3.36's AMX Q8_0 kernel crashes (SIGSEGV) on some CPUs: measure
        # again without llama.cpp's extra buffer types, and say so. That also drops its REPACK
        # buffer type (Q4_0 / Q4_K rows repacked for AVX2 / AVX-512), which makes its quantized
        # decode ~1.5-1.7x slower: pass a build without AMX in --llamacpp-python as well (see
        # the module docstring) so that the comparison keeps those kernels.
        print(f"note: llama.cpp ({python}) crashed on {os.path.basename(path)} (signal "
              f"{-out.returncode}); measuring it without its extra buffer types (AMX and REPACK)",
              file=sys.stderr, flush=True)
        out = subprocess.run(cmd, capture_output=True, text=True,
                             env=dict(os.environ, SAMPAN_LLAMACPP_NO_EXTRA_BUFTS="1"))
    if out.returncode != 0:
        raise SystemExit(f"error: llama.cpp ({python}) on {path} failed: "
                         f"{out.stderr.strip()[-300:]}")
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return j["prefill_tok_s"], j["decode_tok_s"]


def run_llamacpp(args, path):
    """llama.cpp's best prefill and best decode over the builds in --llamacpp-python."""
    best_p = best_d = 0.0
    for python in getattr(args, "llamacpp_python", None) or [sys.executable]:
        p, d = run_llamacpp_with(python, args, path)
        best_p, best_d = max(best_p, p), max(best_d, d)
    return best_p, best_d


def probe_gbs(args):
    out = subprocess.run([args.probe, "--threads", str(args.threads), "--json"],
                         capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    results = json.loads(line)["results"]
    return [r for r in results if r["threads"] == args.threads][0]["gbps_median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampan", default=os.path.join(REPO, "build", "sampan"))
    ap.add_argument("--probe", default=os.path.join(REPO, "build", "bench", "bandwidth_probe"))
    ap.add_argument("--model-dir", default="/tmp/sampan-bench")
    ap.add_argument("--types", nargs="+", default=["F16", "Q8_0", "Q4_0", "Q4_K_M"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv-cache-dtype", default="bf16", choices=["f32", "bf16"],
                    help="Sampan's KV cache (bf16: the width of llama.cpp's default F16 cache)")
    ap.add_argument("--llamacpp-python", nargs="+", default=[sys.executable],
                    help="Python interpreters with llama-cpp-python builds to run; llama.cpp's "
                         "best prefill and decode over them are reported")
    args = ap.parse_args()
    import gguf_models as G

    f16 = os.path.join(args.model_dir, "model-f16.gguf")
    if not os.path.exists(f16):
        subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic_model.py"), args.model_dir,
                        "--gguf", f16] + (["--gguf-only"] if os.path.exists(
                            os.path.join(args.model_dir, "config.json")) else []), check=True)
    files = {}
    for t in args.types:
        path = f16 if t == "F16" else os.path.join(args.model_dir, f"model-{t}.gguf")
        if not os.path.exists(path):
            G.quantize(f16, path, t, pure=False, threads=args.threads)
        files[t] = path
    best = {}
    gbs = 0.0
    for r in range(args.rounds):
        gbs = max(gbs, probe_gbs(args))
        for t, path in files.items():
            for engine, fn in (("sampan", run_sampan), ("sampan fast x", run_sampan_fast_x),
                               ("llama.cpp", run_llamacpp)):
                p, d = fn(args, path)
                b = best.setdefault((t, engine), [0.0, 0.0])
                b[0], b[1] = max(b[0], p), max(b[1], d)
                print(f"round {r}: {t:7s} {engine:13s} prefill {p:8.1f} tok/s  decode {d:6.2f} tok/s",
                      flush=True)
    print(f"\nread bandwidth (probe, {args.threads} threads): {gbs:.1f} GB/s")
    print(f"| weights | Sampan decode (fast x) | of bandwidth (fast x) | llama.cpp decode | "
          f"decode ratio (fast x) | Sampan prefill {args.prompt_len} | fast x | llama.cpp prefill "
          f"| prefill ratio (fast x) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t, path in files.items():
        sp, sd = best[(t, "sampan")]
        fp, fd = best[(t, "sampan fast x")]
        lp, ld = best[(t, "llama.cpp")]
        frac, ffrac = (streamed_bytes(path) * v / 1e9 / gbs for v in (sd, fd))
        print(f"| {t} | {sd:.1f} tok/s ({fd:.1f}) | {frac * 100:.0f} % ({ffrac * 100:.0f} %) | "
              f"{ld:.1f} tok/s | {sd / ld:.2f}x ({fd / ld:.2f}x) | "
              f"{sp:.0f} tok/s | {fp:.0f} tok/s | {lp:.0f} tok/s | {sp / lp:.2f}x "
              f"({fp / lp:.2f}x) |")


if __name__ == "__main__":
    main()
