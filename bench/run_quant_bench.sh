#!/usr/bin/env bash
# Decode speed of quantized weights: Sampan on a TinyLlama-1.1B-shaped model in bf16, FP8 and
# INT4 g128 (written once by `sampan quantize`, so the bytes on disk are the bytes streamed), at
# each thread count, as a fraction of the read bandwidth bench/bandwidth_probe measures in the
# same run (issue 5, item 6).
#
#   bench/run_quant_bench.sh [--build-dir DIR] [--model-dir DIR] [--threads "1 2"] [--gen 32]
#
# Bytes per token are what `sampan bench` reports as decode_bytes_per_token: every constant a
# linear node reads (packed weights, scales, zero points, biases) — the embedding table is only
# gathered from. The KV cache of a short prompt is left out (a few MB next to 0.6-2.2 GB).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$REPO/build"
MODEL_DIR=/tmp/sampan-bench
THREADS="1 2"
GEN=32
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --model-dir) MODEL_DIR="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --gen) GEN="$2"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
SAMPAN="${SAMPAN:-$BUILD_DIR/sampan}"
PROBE="${PROBE:-$BUILD_DIR/bench/bandwidth_probe}"
for bin in "$SAMPAN" "$PROBE"; do
  [[ -x "$bin" ]] || { echo "error: $bin not found; build it (ninja -C $BUILD_DIR)" >&2; exit 1; }
done
MAX_T=$(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -1)
OUT_DIR="$(mktemp -d /tmp/sampan-quant-bench.XXXXXX)"
echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"

[[ -f "$MODEL_DIR/model.safetensors" ]] || python3 "$REPO/bench/make_synthetic_model.py" "$MODEL_DIR"
declare -A DIRS=([bf16]="$MODEL_DIR" [fp8]="$MODEL_DIR-fp8" [int4]="$MODEL_DIR-int4")
[[ -f "${DIRS[fp8]}/config.json" ]] || "$SAMPAN" quantize --model "$MODEL_DIR" --out "${DIRS[fp8]}" --scheme fp8
[[ -f "${DIRS[int4]}/config.json" ]] || "$SAMPAN" quantize --model "$MODEL_DIR" --out "${DIRS[int4]}" --scheme int4 --group-size 128

"$PROBE" --threads "$MAX_T" --json 2>/dev/null > "$OUT_DIR/probe.json"
python3 - "$OUT_DIR/probe.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(f"   read bandwidth, {r['threads']} thread(s): {r['gbps_median']:.2f} GB/s")
PY
for fmt in bf16 fp8 int4; do
  for t in $THREADS; do
    "$SAMPAN" bench --model "${DIRS[$fmt]}" --prompt-len 16 --gen "$GEN" --threads "$t" --repeat 3 \
      > "$OUT_DIR/$fmt-$t.json" 2> "$OUT_DIR/$fmt-$t.err" || { echo "   $fmt/$t failed: $(tail -1 "$OUT_DIR/$fmt-$t.err")"; }
  done
done
python3 - "$OUT_DIR" "$THREADS" <<'PY'
import json, os, sys
out, threads = sys.argv[1], [int(t) for t in sys.argv[2].split()]
probe = {r["threads"]: r["gbps_median"] for r in json.load(open(os.path.join(out, "probe.json")))["results"]}
print("| weights | threads | decode tok/s | bytes/token | GB/s streamed | measured read GB/s | fraction |")
print("|---|---|---|---|---|---|---|")
for fmt in ("bf16", "fp8", "int4"):
    for t in threads:
        p = os.path.join(out, f"{fmt}-{t}.json")
        try:
            j = json.loads(open(p).read().strip().splitlines()[-1])
        except Exception:
            continue
        gbs = j["decode_bytes_per_token"] * j["decode_tok_s"] / 1e9
        bw = probe.get(t)
        frac = f"{100 * gbs / bw:.0f} %" if bw else "?"
        print(f"| {fmt} | {t} | {j['decode_tok_s']:.2f} | {j['decode_bytes_per_token'] / 1e6:.0f} MB | "
              f"{gbs:.2f} | {bw:.2f} | {frac} |")
PY
