"""CPU speed per instruction-set level: decode as a fraction of the measured read bandwidth,
batched decode, 512-token prefill, next to llama.cpp on the same weights, all in one run.

    python3 bench/bench_cpu_isa.py [--sampan build/sampan] [--probe build/bench/bandwidth_probe]
        [--model-dir /tmp/sampan-bench] [--isa avx2 avx512 ...] [--formats bf16 fp8 int4]
        [--threads 1 2] [--batch 1 4 8 16] [--prompt-len 512] [--gen 32] [--no-llamacpp]
        [--llamacpp-python PY [PY ...]]

For every ISA level the CPU has (lowered with SAMPAN_CPU_ISA; a level it lacks is listed as
skipped), every weight format (bf16 as stored, fp8 and int4 g128 quantized on load) and every
thread count, `sampan bench` measures prefill and decode; at the highest thread count it also
measures batched decode in the serving engine (`--batch`: the median step time when B sequences
decode together, relative to B = 1). llama.cpp (llama-cpp-python) runs the same synthetic
TinyLlama-1.1B-shaped model as F16, Q8_0 and Q4_0 GGUFs, the formats closest to bf16, fp8 and
int4. The bandwidth probe runs first, in the same session, so every fraction is from one run.
At every level but plain avx512, prefill and decode are measured again with
SAMPAN_GEMM_PRECISION=bf16 ("fast x": x rounded to int8 per group for int4 without AMX, in
prefill and in decode, to bf16 for the bf16 panels and AMX tiles).
Decode streams every linear weight once per token (`decode_bytes_per_token` of sampan bench;
for GGUF, the file's tensors less the gathered embedding table).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

# The levels of kernels/cpu/isa.h, lowest first, with the /proc/cpuinfo flags each one needs on
# top of the previous level.
LEVELS = [
    ("avx2", ["avx2", "fma", "f16c"]),
    ("avx2_vnni", ["avx_vnni"]),
    ("avx512", ["avx512f", "avx512bw", "avx512vl", "avx512dq"]),
    ("avx512_vnni", ["avx512_vnni"]),
    ("avx512_bf16", ["avx512_bf16"]),
    ("amx", ["amx_tile", "amx_bf16", "amx_int8"]),
]
QUANT = {"bf16": "none", "fp8": "fp8", "int4": "int4"}
GGUF_TYPE = {"bf16": "F16", "fp8": "Q8_0", "int4": "Q4_0"}
# The levels where SAMPAN_GEMM_PRECISION=bf16 changes the prefill kernels.
FAST_X_LEVELS = ("avx2", "avx2_vnni", "avx512_vnni", "avx512_bf16", "amx")


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def supported_levels(flags):
    """Levels whose flags the CPU has; a level also needs every lower one, except that
    avx2_vnni is a side branch (AVX-512 CPUs without AVX-VNNI still reach avx512)."""
    have = {}
    base_ok = True
    for name, need in LEVELS:
        ok = all(n in flags for n in need)
        if name == "avx2_vnni":
            have[name] = base_ok and ok
            continue
        base_ok = base_ok and ok
        have[name] = base_ok
    return have


def run_sampan(args, isa, fmt, threads, batch, precision=None):
    cmd = [args.sampan, "bench", "--model", args.model_dir, "--threads", str(threads),
           "--prompt-len", str(args.prompt_len), "--gen", str(args.gen),
           "--repeat", "2", "--quantization", QUANT[fmt]]
    if fmt == "int4":
        cmd += ["--group-size", "128"]
    if batch:
        cmd += ["--batch", ",".join(str(b) for b in args.batch)]
    env = dict(os.environ, SAMPAN_CPU_ISA=isa)
    if precision:
        env["SAMPAN_GEMM_PRECISION"] = precision
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed: {out.stderr.strip().splitlines()[-1:]}")
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)


def probe(args):
    out = subprocess.run([args.probe, "--threads", str(max(args.threads)), "--json"],
                         capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    return {r["threads"]: r["gbps_median"] for r in json.loads(line)["results"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sampan", default=os.path.join(REPO, "build", "sampan"))
    ap.add_argument("--probe", default=os.path.join(REPO, "build", "bench", "bandwidth_probe"))
    ap.add_argument("--model-dir", default="/tmp/sampan-bench")
    ap.add_argument("--isa", nargs="+", default=[name for name, _ in LEVELS])
    ap.add_argument("--formats", nargs="+", default=["bf16", "fp8", "int4"], choices=list(QUANT))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--batch", nargs="+", type=int, default=[1, 4, 8, 16])
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-python", nargs="+", default=[sys.executable],
                    help="Python interpreters with llama-cpp-python builds; the best of them is "
                         "reported (bench_gguf.py says why an AMX CPU wants a build without AMX)")
    args = ap.parse_args()

    if not os.path.exists(os.path.join(args.model_dir, "model.safetensors")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic_model.py"),
                        args.model_dir], check=True)
    if not os.path.exists(os.path.join(args.model_dir, "tokenizer.json")):  # an older model dir
        import make_synthetic_model
        make_synthetic_model.copy_tokenizer(args.model_dir)
    have = supported_levels(cpu_flags())
    gbs = probe(args)
    print("read bandwidth (probe): " +
          ", ".join(f"{t} thread{'s' if t > 1 else ''} {gbs[t]:.1f} GB/s" for t in args.threads),
          flush=True)

    rows = []
    for isa in args.isa:
        if not have.get(isa, False):
            print(f"{isa}: skipped (this CPU lacks it)", flush=True)
            rows.append((isa, None))
            continue
        for fmt in args.formats:
            for t in args.threads:
                j = run_sampan(args, isa, fmt, t, batch=(t == max(args.threads)))
                if j["isa"] != isa:
                    raise SystemExit(f"error: SAMPAN_CPU_ISA={isa} ran at {j['isa']}")
                frac = j["decode_gb_s"] / gbs[t]
                # Again with SAMPAN_GEMM_PRECISION=bf16 ("fast x") where it changes the kernels:
                # x rounded to int8 per group for int4 without AMX (prefill, and the decode
                # kernels but AMX-INT8's), to bf16 on AVX512-BF16 and AMX
                # (kernels/cpu/gemm_quant.h, gemm_cpu.h).
                if isa in FAST_X_LEVELS:
                    fj = run_sampan(args, isa, fmt, t, False, "bf16")
                    j["fast_x_prefill_tok_s"] = fj["prefill_tok_s"]
                    j["fast_x_decode_tok_s"] = fj["decode_tok_s"]
                    j["fast_x_frac"] = fj["decode_gb_s"] / gbs[t]
                fast = j.get("fast_x_prefill_tok_s")
                fdec = j.get("fast_x_decode_tok_s")
                print(f"{isa:12s} {fmt:5s} {t} thr: prefill {j['prefill_tok_s']:7.1f} tok/s"
                      + (f" ({fast:.1f} fast x)" if fast else "") +
                      f", decode {j['decode_tok_s']:6.2f} tok/s = {j['decode_gb_s']:5.1f} GB/s "
                      f"({frac * 100:.0f} % of probe)"
                      + (f" ({fdec:.2f} fast x)" if fdec else ""), flush=True)
                rows.append((isa, (fmt, t, j, frac)))

    lc = {}
    if not args.no_llamacpp:
        import bench_gguf
        import gguf_models as G
        f16 = os.path.join(args.model_dir, "model-f16.gguf")
        if not os.path.exists(f16):
            subprocess.run([sys.executable, os.path.join(HERE, "make_synthetic_model.py"),
                            args.model_dir, "--gguf", f16, "--gguf-only"], check=True)
        for fmt in args.formats:
            t_name = GGUF_TYPE[fmt]
            path = f16 if t_name == "F16" else os.path.join(args.model_dir, f"model-{t_name}.gguf")
            if not os.path.exists(path):
                G.quantize(f16, path, t_name, pure=False, threads=max(args.threads))
            for t in args.threads:
                ns = argparse.Namespace(threads=t, prompt_len=args.prompt_len, gen=args.gen,
                                        llamacpp_python=args.llamacpp_python)
                p, d = bench_gguf.run_llamacpp(ns, path)
                frac = bench_gguf.streamed_bytes(path) * d / 1e9 / gbs[t]
                lc[(fmt, t)] = (p, d, frac)
                print(f"llama.cpp    {t_name:5s} {t} thr: prefill {p:7.1f} tok/s, decode {d:6.2f} "
                      f"tok/s ({frac * 100:.0f} % of probe)", flush=True)

    print()
    print("| ISA | weights | threads | decode tok/s (fast x) | of bandwidth (fast x) | llama.cpp "
          "decode (same format) | decode ratio (fast x) | prefill tok/s (fast x) | llama.cpp "
          "prefill | prefill ratio (fast x) | batched decode step time vs B=1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for isa, r in rows:
        if r is None:
            print(f"| {isa} | skipped: the CPU lacks it | | | | | | | | | |")
            continue
        fmt, t, j, frac = r
        p, d, lfrac = lc.get((fmt, t), (None, None, None))
        batch = ", ".join(f"B={b['batch']}: {b.get('step_vs_batch1', 0):.2f}x"
                          for b in j.get("batch_decode", []))
        ltxt = f"{d:.1f} ({GGUF_TYPE[fmt]}, {lfrac * 100:.0f} %)" if d else "n/a"
        fast = j.get("fast_x_prefill_tok_s")
        ptxt = f"{j['prefill_tok_s']:.0f}" + (f" ({fast:.0f})" if fast else "")
        rtxt = (f"{j['prefill_tok_s'] / p:.2f}x" + (f" ({fast / p:.2f}x)" if fast else "")
                if p else "n/a")
        fdec, ffrac = j.get("fast_x_decode_tok_s"), j.get("fast_x_frac")
        dec = f"{j['decode_tok_s']:.1f}" + (f" ({fdec:.1f})" if fdec else "")
        ftxt = f"{frac * 100:.0f} %" + (f" ({ffrac * 100:.0f} %)" if fdec else "")
        dtxt = (f"{j['decode_tok_s'] / d:.2f}x" + (f" ({fdec / d:.2f}x)" if fdec else "")
                if d else "n/a")  # no llama.cpp run: n/a
        print(f"| {isa} | {fmt} | {t} | {dec} | {ftxt} | {ltxt} | "
              f"{dtxt} | {ptxt} | {f'{p:.0f}' if p else 'n/a'} | {rtxt} | {batch} |")


if __name__ == "__main__":
    main()
