#!/usr/bin/env bash
# CPU benchmark: Sampan prefill/decode on a TinyLlama-1.1B-shaped model, decode bandwidth vs the
# machine's measured read bandwidth, and (when llama-cpp-python is importable) llama.cpp on the
# same weights in F16 side by side.
#
#   bench/run_cpu_bench.sh [--build-dir DIR] [--model-dir DIR] [--threads "1 2"]
#                          [--prompt-len 512] [--gen 32] [--no-llamacpp]
#
# Env: SAMPAN / PROBE override the binaries (default DIR/sampan and DIR/bench/bandwidth_probe),
# LLAMACPP_PYTHON is the python that has llama_cpp + gguf (default python3; skipped if absent).
# Decode is memory-bound: every token streams all weights but the embedding table (one row is
# gathered), so decode GB/s = those bytes x decode tok/s, compared with the probe's GB/s at the
# same thread count. The KV cache (~25 MB at 544 tokens here) is left out of the bytes.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$REPO/build"
MODEL_DIR=/tmp/sampan-bench
THREADS="1 2"
PROMPT_LEN=512
GEN=32
LLAMACPP=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --model-dir) MODEL_DIR="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --prompt-len) PROMPT_LEN="$2"; shift 2 ;;
    --gen) GEN="$2"; shift 2 ;;
    --no-llamacpp) LLAMACPP=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
SAMPAN="${SAMPAN:-$BUILD_DIR/sampan}"
PROBE="${PROBE:-$BUILD_DIR/bench/bandwidth_probe}"
LLAMACPP_PYTHON="${LLAMACPP_PYTHON:-python3}"
MAX_T=$(echo "$THREADS" | tr ' ' '\n' | sort -n | tail -1)
OUT_DIR="$(mktemp -d /tmp/sampan-bench-run.XXXXXX)"

for bin in "$SAMPAN" "$PROBE"; do
  [[ -x "$bin" ]] || { echo "error: $bin not found; build it (ninja -C $BUILD_DIR)" >&2; exit 1; }
done

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ -f "$MODEL_DIR/model.safetensors" && -f "$MODEL_DIR/config.json" ]]; then
  echo "== model: reusing $MODEL_DIR"
else
  echo "== model: writing $MODEL_DIR"
  python3 "$REPO/bench/make_synthetic_model.py" "$MODEL_DIR"
fi
STREAMED_BYTES=$(python3 - "$MODEL_DIR" "$REPO" <<'EOF'
import json, os, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests", "reference"))
import safetensors_io
d = sys.argv[1]
cfg = json.load(open(os.path.join(d, "config.json")))
h, _, _ = safetensors_io.read_header(os.path.join(d, "model.safetensors"))
size = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in h.items()}
total = sum(size.values())
# Untied: the embedding table is only gathered from. Tied: it is also the lm_head, read in full.
if not cfg.get("tie_word_embeddings", False):
    total -= size["model.embed_tokens.weight"]
print(total)
EOF
)
echo "   bytes streamed per decode token (weights less embedding table): $STREAMED_BYTES"

echo "== bandwidth probe ($PROBE --threads $MAX_T --json)"
"$PROBE" --threads "$MAX_T" --json 2>/dev/null | tee "$OUT_DIR/probe.json"

json_field() {  # json_field FILE KEY: the KEY of the last JSON line of FILE holding it
  python3 - "$1" "$2" <<'EOF'
import json, sys
val = None
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if sys.argv[2] in obj:
            val = obj[sys.argv[2]]
print("" if val is None else val)
EOF
}

probe_gbps() {  # probe_gbps THREADS
  python3 -c "import json,sys; r=json.load(open('$OUT_DIR/probe.json'))['results'];\
print(next((x['gbps_median'] for x in r if x['threads']==$1), ''))"
}

declare -A PREFILL DECODE
for t in $THREADS; do
  echo "== sampan bench --threads $t"
  if "$SAMPAN" bench --model "$MODEL_DIR" --prompt-len "$PROMPT_LEN" --gen "$GEN" --threads "$t" \
      > "$OUT_DIR/sampan_$t.txt" 2> "$OUT_DIR/sampan_$t.err"; then
    cat "$OUT_DIR/sampan_$t.txt"
    PREFILL[$t]=$(json_field "$OUT_DIR/sampan_$t.txt" prefill_tok_s)
    DECODE[$t]=$(json_field "$OUT_DIR/sampan_$t.txt" decode_tok_s)
  else
    echo "   sampan bench failed: $(tail -1 "$OUT_DIR/sampan_$t.err")"
  fi
done

declare -A LC_PREFILL LC_DECODE
if [[ $LLAMACPP == 1 ]] && "$LLAMACPP_PYTHON" -c "import llama_cpp, gguf" 2>/dev/null; then
  GGUF="$MODEL_DIR/model-f16.gguf"
  if [[ ! -f "$GGUF" ]]; then
    echo "== llama.cpp: writing $GGUF"
    "$LLAMACPP_PYTHON" "$REPO/bench/make_synthetic_model.py" "$MODEL_DIR" --gguf "$GGUF" --gguf-only
  fi
  for t in $THREADS; do
    echo "== llama.cpp (llama-cpp-python, F16) --threads $t"
    "$LLAMACPP_PYTHON" - "$GGUF" "$t" "$PROMPT_LEN" "$GEN" > "$OUT_DIR/llamacpp_$t.txt" \
        2> "$OUT_DIR/llamacpp_$t.err" <<'EOF' || echo "   llama.cpp run failed: $(tail -1 "$OUT_DIR/llamacpp_$t.err")"
import json, sys, time
import llama_cpp
from llama_cpp import Llama
path, threads, prompt_len, gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=path, n_ctx=prompt_len + gen + 16, n_batch=prompt_len, n_ubatch=prompt_len,
            n_threads=threads, n_threads_batch=threads, verbose=False)
# Ordinary vocabulary ids only (past <unk>, <s>, </s> and the 256 byte tokens).
prompt = [259 + (i * 7919) % (llm.n_vocab() - 259) for i in range(prompt_len)]
llm.eval(prompt[:8])  # warm-up: page in the weights, build the graphs
llm.reset()
t0 = time.perf_counter()
llm.eval(prompt)
t1 = time.perf_counter()
for i in range(gen):
    llm.eval([259 + (i * 104729) % (llm.n_vocab() - 259)])
t2 = time.perf_counter()
print(json.dumps({"engine": "llama.cpp " + llama_cpp.__version__, "threads": threads,
                  "prefill_tok_s": prompt_len / (t1 - t0), "decode_tok_s": gen / (t2 - t1)}))
EOF
    cat "$OUT_DIR/llamacpp_$t.txt"
    LC_PREFILL[$t]=$(json_field "$OUT_DIR/llamacpp_$t.txt" prefill_tok_s)
    LC_DECODE[$t]=$(json_field "$OUT_DIR/llamacpp_$t.txt" decode_tok_s)
  done
elif [[ $LLAMACPP == 1 ]]; then
  echo "== llama.cpp: skipped ($LLAMACPP_PYTHON cannot import llama_cpp and gguf;" \
       "pip install llama-cpp-python gguf, then set LLAMACPP_PYTHON)"
fi

echo
echo "== summary: prompt $PROMPT_LEN, gen $GEN, $STREAMED_BYTES bytes streamed per decode token"
printf "%-10s %8s %12s %11s %12s %11s %9s\n" engine threads prefill_tok/s decode_tok/s \
  decode_GB/s probe_GB/s of_probe
row() {  # row ENGINE THREADS PREFILL DECODE
  python3 - "$@" "$STREAMED_BYTES" "$(probe_gbps "$2")" <<'EOF'
import sys
engine, t, pre, dec, nbytes, probe = sys.argv[1:7]
def f(x, fmt):
    try:
        return fmt % float(x)
    except ValueError:
        return "n/a"
gbps = float(dec) * int(nbytes) / 1e9 if dec else None
frac = gbps / float(probe) if gbps and probe else None
print("%-10s %8s %12s %11s %12s %11s %9s" % (engine, t, f(pre, "%.1f"), f(dec, "%.2f"),
      f(gbps if gbps else "", "%.2f"), f(probe, "%.2f"), f(frac * 100 if frac else "", "%.0f %%")))
EOF
}
for t in $THREADS; do
  row sampan "$t" "${PREFILL[$t]:-}" "${DECODE[$t]:-}"
  if [[ -n "${LC_DECODE[$t]:-}" ]]; then row llama.cpp "$t" "${LC_PREFILL[$t]}" "${LC_DECODE[$t]}"; fi
done
echo "(raw outputs in $OUT_DIR)"
