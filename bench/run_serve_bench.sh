#!/usr/bin/env bash
# Serving benchmark: offline engine throughput (bench_engine) vs the same engine behind
# `sampan serve` (bench/serve_bench.py, streaming /v1/completions) at the same concurrencies,
# on a TinyLlama-1.1B-shaped model, with the served/offline throughput ratio per concurrency.
#
#   bench/run_serve_bench.sh [--build-dir DIR] [--model-dir DIR] [--concurrency "1 4 16 64"]
#                            [--prompt-len 128] [--output-len 64] [--requests N] [--threads T]
#
# Env: SAMPAN / BENCH_ENGINE override the binaries (default DIR/sampan, DIR/bench/bench_engine).
# The model (bench/make_synthetic_model.py, ~2.2 GB) is shared with run_cpu_bench.sh; a sibling
# directory DIR-serve gets links to its weights plus the Llama SentencePiece tokenizer from
# tests/data, which the engine needs to load it. Both runs use the same engine options.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$REPO/build"
MODEL_DIR=/tmp/sampan-bench
CONCURRENCY="1 4 16 64"
PROMPT_LEN=128
OUTPUT_LEN=64
REQUESTS=0
THREADS=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --model-dir) MODEL_DIR="$2"; shift 2 ;;
    --concurrency) CONCURRENCY="$2"; shift 2 ;;
    --prompt-len) PROMPT_LEN="$2"; shift 2 ;;
    --output-len) OUTPUT_LEN="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
SAMPAN="${SAMPAN:-$BUILD_DIR/sampan}"
BENCH_ENGINE="${BENCH_ENGINE:-$BUILD_DIR/bench/bench_engine}"
OUT_DIR="$(mktemp -d /tmp/sampan-serve-bench.XXXXXX)"
MAX_C=$(echo "$CONCURRENCY" | tr ' ' '\n' | sort -n | tail -1)

if [[ ! -x "$SAMPAN" ]]; then
  echo "error: $SAMPAN not found; build it (ninja -C $BUILD_DIR sampan)" >&2
  exit 1
fi

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -f "$MODEL_DIR/model.safetensors" && -f "$MODEL_DIR/config.json" ]]; then
  echo "== model: reusing $MODEL_DIR"
else
  echo "== model: writing $MODEL_DIR"
  python3 "$REPO/bench/make_synthetic_model.py" "$MODEL_DIR"
fi
SERVE_DIR="${MODEL_DIR%/}-serve"
mkdir -p "$SERVE_DIR"
ln -sf "$MODEL_DIR/config.json" "$SERVE_DIR/config.json"
ln -sf "$MODEL_DIR/model.safetensors" "$SERVE_DIR/model.safetensors"
cp "$REPO/tests/data/tokenizers/llama-spm/tokenizer.json" "$SERVE_DIR/"
cp "$REPO/tests/data/tokenizers/llama-spm/tokenizer_config.json" "$SERVE_DIR/"

# bench_engine gives each run max_running N and no prefix cache (its prompts are random); the
# server gets the largest N (a smaller batch never needs more) and distinct prompts per request.
ENGINE_FLAGS=(--max-running "$MAX_C" --max-model-len $((PROMPT_LEN + OUTPUT_LEN + 16))
              --no-prefix-cache)
[[ "$THREADS" != 0 ]] && ENGINE_FLAGS+=(--threads "$THREADS")

if [[ -x "$BENCH_ENGINE" ]]; then
  BENCH_ENGINE_ARGS=(--prompt "$PROMPT_LEN" --gen "$OUTPUT_LEN" --concurrency "${CONCURRENCY// /,}")
  [[ "$THREADS" != 0 ]] && BENCH_ENGINE_ARGS+=(--threads "$THREADS")
  echo "== offline: $BENCH_ENGINE $SERVE_DIR ${BENCH_ENGINE_ARGS[*]}"
  "$BENCH_ENGINE" "$SERVE_DIR" "${BENCH_ENGINE_ARGS[@]}" > "$OUT_DIR/offline.txt" \
      2> "$OUT_DIR/offline.err" || echo "   bench_engine failed: $(tail -1 "$OUT_DIR/offline.err")"
  cat "$OUT_DIR/offline.txt"
else
  echo "== offline: $BENCH_ENGINE not built; ratios will be n/a (ninja -C $BUILD_DIR bench_engine)"
  : > "$OUT_DIR/offline.txt"
fi

PORT=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0));
print(s.getsockname()[1])")
echo "== served: $SAMPAN serve --model $SERVE_DIR --http-port $PORT ${ENGINE_FLAGS[*]}"
SAMPAN_LOG_LEVEL=warn "$SAMPAN" serve --model "$SERVE_DIR" --host 127.0.0.1 --http-port "$PORT" \
  --grpc-port -1 --max-waiting 4096 "${ENGINE_FLAGS[@]}" > "$OUT_DIR/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill -TERM $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:$PORT/v2/health/ready" > /dev/null 2>&1; then break; fi
  if ! kill -0 $SERVER_PID 2>/dev/null; then
    echo "error: the server exited:" >&2
    tail -5 "$OUT_DIR/server.log" >&2
    exit 1
  fi
  sleep 0.5
done
python3 "$REPO/bench/serve_bench.py" --url "http://127.0.0.1:$PORT" --concurrency "$CONCURRENCY" \
  --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --requests "$REQUESTS" \
  --json "$OUT_DIR/served.json" | tee "$OUT_DIR/served.txt"

echo
echo "== served vs offline (output tokens/s; prompt $PROMPT_LEN, output $OUTPUT_LEN)"
python3 - "$OUT_DIR/offline.txt" "$OUT_DIR/served.json" <<'EOF'
import json, sys
offline = {}
# bench_engine prints a table and one JSON object {"bench": "engine", "runs": [{"n", "out_tok_s",
# ...}]}: N requests submitted at once, output tokens/s over the whole run (prefill included).
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        o = json.loads(line)
    except ValueError:
        continue
    for r in o.get("runs", []):
        offline[int(r["n"])] = float(r["out_tok_s"])
served = json.load(open(sys.argv[2]))["levels"]
print("%11s %14s %14s %7s %10s %10s" % ("concurrency", "offline_tok/s", "served_tok/s", "ratio",
                                        "TTFT_p50", "ITL_p50"))
for r in served:
    c = r["concurrency"]
    off = offline.get(c)
    ratio = "%.2f" % (r["output_tok_s"] / off) if off else "n/a"
    print("%11d %14s %14.2f %7s %8.1fms %8.1fms" % (c, "%.2f" % off if off else "n/a",
          r["output_tok_s"], ratio, r["ttft_p50_ms"], r["itl_p50_ms"]))
EOF
echo "(raw outputs in $OUT_DIR)"
