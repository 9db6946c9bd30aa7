#!/usr/bin/env bash
# scripts/gpu-check.sh [--quick] [--build-only] OUTDIR
#
# The CUDA backend's check on a GPU machine, run as is: installs what the build needs
# (scripts/setup.sh), configures a Release CUDA build in build-gpu/ (architecture "native" when a
# GPU is visible, else 90), builds the CUDA tests and GPU benchmarks, runs `ctest -L cuda`, then
# bench_cuda_gemm and bench_cuda_decode, and writes OUTDIR/summary.md with the GPU, the test
# counts and the key figures. Every log and JSON file lands in OUTDIR too.
#
#   --quick       bench_cuda_decode on its small smoke shape instead of the Llama-3-8B one
#   --build-only  configure and build, then stop (a first call when one command has a time limit)
#   --prebuilt PACK  no setup, configure or build: run what scripts/gpu-pack.sh packed in PACK
#                 (folder or --xz form) on a machine that can build, for GPU machines without a
#                 package registry. The pack's absolute build path is recreated here (the
#                 checkout linked to where it was built) and its libraries go on LD_LIBRARY_PATH
#                 beside this machine's CUDA libraries.
#
# Without a GPU it still builds and runs the tests (they skip), writes a summary saying so and
# exits 0. Exit status: 0 when every test passed or skipped and every benchmark ran (or none could
# run for want of a GPU); 1 when a test or a benchmark failed; 2 for bad usage or a failed build.
#
# Env: SAMPAN_JOBS (build jobs, default nproc), SAMPAN_GPU_BUILD_DIR (default build-gpu),
# SAMPAN_CUDA_ARCH (overrides the architecture choice), SAMPAN_SKIP_SETUP=1 (skip setup.sh),
# SAMPAN_BENCH_TIMEOUT (seconds per benchmark, default 180 with --quick, 420 without).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
BUILD_ONLY=0
PREBUILT=""
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --prebuilt) [[ $# -ge 2 ]] || { echo "gpu-check: --prebuilt needs the pack's folder" >&2; exit 2; }
                PREBUILT="$(cd "$2" && pwd)"; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
    *) [[ -z "$OUT" ]] || { echo "gpu-check: one OUTDIR only" >&2; exit 2; }; OUT="$1"; shift ;;
  esac
done
[[ -n "$OUT" ]] || { echo "usage: scripts/gpu-check.sh [--quick] [--build-only] OUTDIR" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
# A previous run's results must not pass for this one's.
rm -f "$OUT"/bench_cuda_*.json "$OUT"/bench_cuda_*.rc "$OUT"/bench_cuda_*.log "$OUT"/bench_cuda_*.txt \
  "$OUT/ctest.xml" "$OUT/summary.md"
BUILD="${SAMPAN_GPU_BUILD_DIR:-$REPO/build-gpu}"
[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"
JOBS="${SAMPAN_JOBS:-$(nproc)}"
# Below the 10 minutes one command may take on the shared GPU machines, so that a slow benchmark
# is stopped by us and the summary still gets written.
if ((QUICK)); then BENCH_TIMEOUT="${SAMPAN_BENCH_TIMEOUT:-180}"; else BENCH_TIMEOUT="${SAMPAN_BENCH_TIMEOUT:-420}"; fi
log() { echo "gpu-check: $*"; }

# ---- the GPU, as the driver sees it ---------------------------------------------------------
HAVE_GPU=0
if command -v nvidia-smi >/dev/null 2>&1 &&
   nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
     >"$OUT/gpu.csv" 2>"$OUT/nvidia-smi.err" && [[ -s "$OUT/gpu.csv" ]]; then
  HAVE_GPU=1
  log "GPU: $(head -1 "$OUT/gpu.csv")"
else
  : >"$OUT/gpu.csv"
  log "no GPU visible (nvidia-smi absent or lists none): tests will skip, benchmarks will not run"
fi

# ---- a pack built elsewhere (scripts/gpu-pack.sh) --------------------------------------------
if [[ -n "$PREBUILT" ]]; then
  if [[ -f "$PREBUILT/pack.tar.xz" && ! -f "$PREBUILT/build_path" ]]; then  # gpu-pack.sh --xz
    xz -dc "$PREBUILT/pack.tar.xz" | tar -C "$PREBUILT" -xf -
  fi
  [[ -f "$PREBUILT/build_path" && -d "$PREBUILT/build" ]] ||
    { log "$PREBUILT is not a pack made by scripts/gpu-pack.sh"; exit 2; }
  BUILD="$(cat "$PREBUILT/build_path")"
  SRC_AT="$(dirname "$BUILD")"     # where the checkout was when the pack was built
  if [[ "$(cd "$SRC_AT" 2>/dev/null && pwd -P)" != "$(cd "$REPO" && pwd -P)" ]]; then
    [[ ! -e "$SRC_AT" ]] || { log "$SRC_AT exists and is not this checkout: cannot recreate the pack's paths"; exit 2; }
    mkdir -p "$(dirname "$SRC_AT")" && ln -s "$REPO" "$SRC_AT"
  fi
  # A real build there (this is the machine that made the pack) is used as it is.
  if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then rm -rf "$BUILD" && cp -a "$PREBUILT/build" "$BUILD"; fi
  cuda_dirs="$(find / -xdev \( -name 'libcublasLt.so.*' -o -name 'libcudart.so.*' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)"
  export LD_LIBRARY_PATH="$PREBUILT/lib:$BUILD${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "prebuilt pack $PREBUILT at $BUILD; CUDA libraries from ${cuda_dirs:-nowhere found}"
fi

# ---- setup, configure, build ----------------------------------------------------------------
if [[ -z "$PREBUILT" && "${SAMPAN_SKIP_SETUP:-0}" != 1 ]]; then
  # A machine without network access may still have everything; configure says what is missing.
  bash "$REPO/scripts/setup.sh" >"$OUT/setup.log" 2>&1 || log "setup.sh failed (see setup.log); trying the build anyway"
fi

if [[ -z "$PREBUILT" ]]; then
# "native" makes CMake ask the driver, which fails without a GPU; 90 is what CI compiles.
ARCH="${SAMPAN_CUDA_ARCH:-}"
[[ -n "$ARCH" ]] || { if ((HAVE_GPU)); then ARCH=native; else ARCH=90; fi; }
log "configuring $BUILD (Release, CUDA architectures $ARCH)"
if ! cmake -S "$REPO" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSAMPAN_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DSAMPAN_BUILD_BENCH=ON -DSAMPAN_BUILD_TESTS=ON \
     >"$OUT/configure.log" 2>&1; then
  log "configure failed: $OUT/configure.log"; tail -20 "$OUT/configure.log"; exit 2
fi

# Only what this check runs: every test_cuda_* / bench_cuda_* target, plus the executable of any
# other test labelled `cuda` (read from CTest's listing), so a new CUDA test needs no edit here.
mapfile -t TARGETS < <(
  {
    ninja -C "$BUILD" -t targets all | sed -n 's/^\(\(test\|bench\)_cuda_[A-Za-z0-9_]*\): .*/\1/p'
    (cd "$BUILD" && ctest -L cuda --show-only=json-v1 2>/dev/null) | python3 -c '
import json, os, sys
try:
    for t in json.load(sys.stdin).get("tests", []):
        cmd = t.get("command") or []
        if cmd: print(os.path.basename(cmd[0]))
except ValueError:
    pass'
  } | sort -u | while read -r t; do
    ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1 && echo "$t"
  done)
if ((${#TARGETS[@]} == 0)); then
  log "no CUDA targets in $BUILD: was the CUDA backend configured? (see configure.log)"; exit 2
fi
log "building ${TARGETS[*]} with $JOBS jobs"
if ! ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}" >"$OUT/build.log" 2>&1; then
  log "build failed: $OUT/build.log"; grep -m 20 -E "error|FAILED" "$OUT/build.log" || true; exit 2
fi
fi
if ((BUILD_ONLY)); then log "built; --build-only: stopping here"; exit 0; fi

# ---- tests ----------------------------------------------------------------------------------
log "running ctest -L cuda"
set +e
(cd "$BUILD" && ctest -L cuda --output-on-failure --timeout 600 --output-junit "$OUT/ctest.xml") \
  >"$OUT/ctest.log" 2>&1
CTEST_RC=$?
set -e
tail -3 "$OUT/ctest.log" | sed 's/^/  /'
# With a GPU visible, a CUDA test that skipped did not run: a failure, not a pass.
if ((HAVE_GPU)) && grep -qE '\*\*\*Skipped|Not Run' "$OUT/ctest.log"; then
  log "a GPU is visible but these CUDA tests skipped:"
  grep -E '\*\*\*Skipped|Not Run' "$OUT/ctest.log" | sed 's/^/  /'
  CTEST_RC=1
fi

# ---- benchmarks -----------------------------------------------------------------------------
# Each writes its JSON in OUTDIR; its status goes to OUTDIR/<bench>.rc (77: no GPU; 124: timed
# out) for the summary.
run_bench() {  # name, then its arguments
  local name="$1"; shift
  local bin="$BUILD/bench/$name"
  if [[ ! -x "$bin" ]]; then echo missing >"$OUT/$name.rc"; return; fi
  log "running $name $*" >&2
  set +e
  timeout "$BENCH_TIMEOUT" "$bin" "$@" 2>"$OUT/$name.log"
  echo $? >"$OUT/$name.rc"
  set -e
}
if ((HAVE_GPU)); then
  run_bench bench_cuda_gemm --json >"$OUT/bench_cuda_gemm.json"
  # Sampan's formats and GGUF's Q8_0 / Q4_K / Q6_K blocks (issue 18: GGUF speed on a GPU).
  decode_args=(--json "$OUT/bench_cuda_decode.json" --formats bf16,fp8,int4,q8_0,q4_k,q6_k)
  if ((QUICK)); then decode_args+=(--quick); fi
  run_bench bench_cuda_decode "${decode_args[@]}" >"$OUT/bench_cuda_decode.txt"
fi

# ---- summary --------------------------------------------------------------------------------
set +e
python3 - "$OUT" "$HAVE_GPU" "$CTEST_RC" "$QUICK" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET

out, have_gpu, ctest_rc, quick = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4] == "1"
lines = ["# Sampan GPU check", ""]
failed = ctest_rc != 0

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def rc(name):
    try:
        with open(os.path.join(out, name + ".rc")) as f:
            return f.read().strip()
    except OSError:
        return None

def pct(x):
    return "-" if x is None else f"{100 * x:.0f} %"

def num(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)

lines.append("## Device")
gpu = open(os.path.join(out, "gpu.csv")).read().strip()
if gpu:
    lines += ["", "| GPU | memory | driver |", "|---|---|---|"]
    for row in gpu.splitlines():
        lines.append("| " + " | ".join(c.strip() for c in row.split(",")) + " |")
else:
    lines += ["", "No GPU visible (nvidia-smi absent or lists none)."]

lines += ["", "## Tests (`ctest -L cuda`)", ""]
try:
    cases = ET.parse(os.path.join(out, "ctest.xml")).getroot().iter("testcase")
    n_pass = n_fail = n_skip = 0
    bad = []
    for c in cases:
        if c.find("failure") is not None or c.find("error") is not None or c.get("status") == "fail":
            n_fail += 1
            bad.append(c.get("name"))
        elif c.find("skipped") is not None or c.get("status") in ("notrun", "disabled"):
            n_skip += 1
        else:
            n_pass += 1
    lines.append(f"passed {n_pass}, failed {n_fail}, skipped {n_skip} (log: ctest.log)")
    if bad:
        lines.append("failed: " + ", ".join(bad))
    failed = failed or n_fail > 0
except (OSError, ET.ParseError):
    lines.append(f"no JUnit report; ctest exit status {ctest_rc} (log: ctest.log)")

lines += ["", "## Benchmarks", ""]
if not have_gpu:
    lines.append("no GPU: tests skipped, benchmarks not run")
else:
    for name in ("bench_cuda_gemm", "bench_cuda_decode"):
        status = rc(name)
        if status != "0":
            why = {"missing": "not built", "77": "no CUDA device visible", "124": "timed out"}.get(
                status, f"exit status {status}")
            lines.append(f"- {name}: did not finish ({why}; log: {name}.log); any of its figures "
                         "below are the part it wrote before stopping")
            failed = failed or status not in ("77",)
    lines.append("")

    # bench_cuda_decode rewrites its JSON after every measurement, so a run cut short still
    # leaves what it measured; bench_cuda_gemm prints its JSON at the end only.
    dec = load("bench_cuda_decode.json")
    if dec:
        m = dec.get("model", {})
        lines += [f"Model: {m.get('name', '?')}" + (" (--quick smoke shape)" if dec.get("quick") else "")
                  + f"; device-to-device copy {num(dec.get('copy_gbps'))} GB/s.", ""]
        rows = [r for r in dec.get("decode", []) if r.get("batch") == 1]
        if rows:
            lines += ["### Batch-1 decode", "",
                      "| weights | KV | tok/s | MB streamed / token | GB/s | of d2d copy "
                      "| CUDA graphs | tok/s without graphs |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['weights']} | {r['kv']} | {num(r.get('tokens_per_s'))} | "
                             f"{num(r.get('bytes_per_step', 0) / 1e6, '{:.0f}')} | "
                             f"{num(r.get('achieved_gbps'))} | {pct(r.get('fraction_of_copy'))} | "
                             f"{'yes' if r.get('cuda_graphs') else 'no'} | "
                             f"{num(r.get('tokens_per_s_no_graphs'))} |")
            lines.append("")
        # Every batch size runs with the first --kv format; the others at batch 1 only.
        first_kv = next((r["kv"] for r in dec.get("decode", [])), None)
        rows = [r for r in dec.get("decode", []) if r.get("kv") == first_kv]
        if rows:
            lines += [f"### Decode throughput per batch (KV {first_kv})", "",
                      "| weights | batch | tok/s | ms / step |",
                      "|---|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['weights']} | {r['batch']} | {num(r.get('tokens_per_s'))} | "
                             f"{num(r.get('ms_per_step'), '{:.2f}')} |")
            lines.append("")
        rows = dec.get("prefill", [])
        if rows:
            lines += ["### Prefill", "", "| weights | prompts x tokens | tok/s |", "|---|---|---|"]
            for r in rows:
                lines.append(f"| {r['weights']} | {r['prompts']} x {r['prompt_len']} | "
                             f"{num(r.get('tokens_per_s'))} |")
            lines.append("")
        for s in dec.get("skipped", []):
            lines.append(f"- skipped {s.get('what')}: {s.get('why')}")
        for e in dec.get("errors", []):
            lines.append(f"- FAILED {e.get('what')}: {e.get('why')}")
        if dec.get("skipped") or dec.get("errors"):
            lines.append("")
        if dec.get("stand_in_kernels"):
            lines += ["Ran with the benchmark's own CUDA kernel for: "
                      + ", ".join(dec["stand_in_kernels"]) + " (the engine has none yet).", ""]

    gemm = load("bench_cuda_gemm.json") if rc("bench_cuda_gemm") == "0" else None
    if gemm:
        lines += ["### GEMM (bf16 weights: ours against cublasGemmEx on the same operands)", "",
                  "| m | n | k | TFLOP/s | cuBLAS TFLOP/s | ratio |", "|---|---|---|---|---|---|"]
        for r in gemm.get("results", []):
            if r.get("weights") == "bf16" and r.get("cublas_tflops"):
                lines.append(f"| {r['m']} | {r['n']} | {r['k']} | {r['tflops']:.1f} | "
                             f"{r['cublas_tflops']:.1f} | {r['tflops'] / r['cublas_tflops']:.2f} |")
        lines += ["", f"### GEMV (m = 1), weight stream against the d2d copy "
                  f"({num(gemm.get('copy_gbps'))} GB/s)", "",
                  "| weights | n | k | weight GB/s | of d2d copy |", "|---|---|---|---|---|"]
        for r in gemm.get("results", []):
            if r.get("m") == 1:
                lines.append(f"| {r['weights']} | {r['n']} | {r['k']} | {r['weight_gbps']:.0f} | "
                             f"{pct(r.get('fraction_of_copy'))} |")
        lines.append("")

lines += ["", "Result: " + ("FAILED" if failed else "ok"), ""]
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("\n".join(lines))
sys.exit(1 if failed else 0)
PY
STATUS=$?
set -e
log "summary: $OUT/summary.md"
sed 's/^/  /' "$OUT/summary.md"
exit "$STATUS"
