#!/usr/bin/env bash
# Soak test of `sampan serve` under a closed-loop load whose clients sometimes give up:
#
#   bench/run_soak.sh [--duration S] [--concurrency C] [--disconnect-fraction F] [--sigterm-at S]
#                     [--sampan BIN] [--model-dir DIR] [--out DIR] [--max-running N]
#                     [--input-len N] [--output-len N] [--shutdown-grace S] [--timeout S]
#                     [--serve-args "ARGS"]   (more `sampan serve` flags, e.g. "--no-prefix-cache")
#
# Defaults: 600 s, 1000 clients, 0.1 of the requests abandoned on purpose, no SIGTERM.
#
# Makes the serve test model (tests/reference/make_serve_model.py, cached in --model-dir), starts
# `sampan serve` on 127.0.0.1 (free ports; --max-waiting above the concurrency so that nothing is
# refused with 429), runs `sampan bench-serve --concurrency C --duration S --disconnect-fraction F
# --json ...` against it, and samples the server every 10 s into samples.csv: RSS (VmRSS of
# /proc/PID/status) and /metrics (KV blocks used, requests running, waiting). At the end it
# prints the requests sent / completed / disconnected / failed (by kind), the RSS series after a
# 60 s warm-up (first, last, min, max, least-squares slope in MB per minute) and the KV blocks in
# use once the load is over (must be 0), then stops the server with SIGTERM (must exit 0).
#
# --sigterm-at S: sends SIGTERM to the server S seconds into the load, and 1 s later SIGINT to
# bench-serve (it stops sending and waits for the requests in flight). Checks that the server
# exits 0 within its --shutdown-grace (plus the few seconds it takes to cancel and flush), that
# bench-serve ends by itself (no request left hanging: none ends in a timeout), and lists what
# every failed request ended with, split into requests the server had started streaming and
# those it never did (refused connections while draining).
#
# Everything listens and connects on loopback only. Every wait is bounded; the script stops by
# itself (and kills what it started on exit). Exit status 0 when every check passed, 1 else, 2 for
# bad flags. Output in --out (default /tmp/sampan-soak-<time>): server.log, bench.json,
# bench.txt, bench.err, samples.csv, summary.txt.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DURATION=600
CONCURRENCY=1000
FRACTION=0.1
SIGTERM_AT=""
SAMPAN_BIN="${SAMPAN:-$REPO/build/sampan}"
MODEL_DIR="${SAMPAN_TEST_MODELS:-${XDG_CACHE_HOME:-$HOME/.cache}/sampan}/serve-model"
OUT=""
MAX_RUNNING=128
INPUT_LEN=64
OUTPUT_LEN=64
GRACE=30
TIMEOUT=300
SAMPLE_S=10
WARMUP_S=60
EXTRA_SERVE_ARGS=""

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
die_usage() { echo "error: $*" >&2; exit 2; }
is_num() { [[ "$1" =~ ^[0-9]+([.][0-9]+)?$ ]]; }

while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && { usage; exit 0; }
  [[ $# -ge 2 ]] || die_usage "$1 needs a value"
  case "$1" in
    --duration) DURATION="$2" ;;
    --concurrency) CONCURRENCY="$2" ;;
    --disconnect-fraction) FRACTION="$2" ;;
    --sigterm-at) SIGTERM_AT="$2" ;;
    --sampan) SAMPAN_BIN="$2" ;;
    --model-dir) MODEL_DIR="$2" ;;
    --out) OUT="$2" ;;
    --max-running) MAX_RUNNING="$2" ;;
    --input-len) INPUT_LEN="$2" ;;
    --output-len) OUTPUT_LEN="$2" ;;
    --shutdown-grace) GRACE="$2" ;;
    --timeout) TIMEOUT="$2" ;;
    --serve-args) EXTRA_SERVE_ARGS="$2" ;;
    *) die_usage "unknown flag $1 (see --help)" ;;
  esac
  shift 2
done
is_num "$DURATION" && [[ "$DURATION" != 0 ]] || die_usage "--duration: expected seconds > 0"
[[ "$CONCURRENCY" =~ ^[1-9][0-9]*$ ]] || die_usage "--concurrency: expected an integer >= 1"
is_num "$FRACTION" && python3 -c "import sys; sys.exit(0 if 0 <= float('$FRACTION') <= 1 else 1)" \
  || die_usage "--disconnect-fraction: expected a number in [0, 1]"
if [[ -n "$SIGTERM_AT" ]]; then
  is_num "$SIGTERM_AT" || die_usage "--sigterm-at: expected seconds"
  python3 -c "import sys; sys.exit(0 if float('$SIGTERM_AT') < float('$DURATION') else 1)" \
    || die_usage "--sigterm-at must be before the end of --duration"
fi
[[ "$MAX_RUNNING" =~ ^[1-9][0-9]*$ ]] || die_usage "--max-running: expected an integer >= 1"
is_num "$GRACE" || die_usage "--shutdown-grace: expected seconds"
is_num "$TIMEOUT" && [[ "$TIMEOUT" != 0 ]] || die_usage "--timeout: expected seconds > 0"
[[ -x "$SAMPAN_BIN" ]] || die_usage "no sampan binary at $SAMPAN_BIN (--sampan or \$SAMPAN)"
[[ -n "$OUT" ]] || OUT="/tmp/sampan-soak-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }

# ---- model (cached) ----
if [[ ! -f "$MODEL_DIR/serve_model.ok" ]]; then
  mkdir -p "$(dirname "$MODEL_DIR")"
  timeout 600 python3 "$REPO/tests/reference/make_serve_model.py" --out "$MODEL_DIR" >/dev/null
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
HTTP_PORT=$(free_port)
GRPC_PORT=$(free_port)
while [[ "$GRPC_PORT" == "$HTTP_PORT" ]]; do GRPC_PORT=$(free_port); done
URL="http://127.0.0.1:$HTTP_PORT"

SERVER_PID=""
BENCH_PID=""
SAMPLER_PID=""
cleanup() {
  for p in "$SAMPLER_PID" "$BENCH_PID" "$SERVER_PID"; do
    [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
to_ms() { python3 -c "print(int(float('$1') * 1000))"; }
secs() { printf '%d.%d' $(( $1 / 1000 )) $(( ($1 % 1000) / 100 )); }  # ms -> "S.d"

# Waits (bounded by $2 ms) for process $1 to end; sets WAIT_RC (its status, or "hung") and
# WAIT_MS.
wait_bounded() {
  local pid=$1 limit=$2 t0 rc
  t0=$(now_ms)
  while kill -0 "$pid" 2>/dev/null; do
    if (( $(now_ms) - t0 > limit )); then
      WAIT_RC=hung
      WAIT_MS=$limit
      return
    fi
    sleep 0.1
  done
  rc=0
  wait "$pid" || rc=$?
  WAIT_RC=$rc
  WAIT_MS=$(( $(now_ms) - t0 ))
}

# /metrics gauges as "kv running waiting" (empty when the server does not answer).
gauges() {
  curl -s --max-time 5 "$URL/metrics" 2>/dev/null | awk '
    $1 == "sampan:kv_cache_blocks_used" { kv = $2 }
    $1 == "sampan:num_requests_running" { run = $2 }
    $1 == "sampan:num_requests_waiting" { wait = $2 }
    END { if (kv != "") printf "%d %d %d\n", kv, run, wait }'
}

# ---- server ----
MAX_WAITING=$((CONCURRENCY + 64))
SERVER_ARGS=(serve --model "$MODEL_DIR" --host 127.0.0.1 --http-port "$HTTP_PORT"
             --grpc-port "$GRPC_PORT" --max-running "$MAX_RUNNING" --max-waiting "$MAX_WAITING"
             --max-connections $((CONCURRENCY * 2 + 256)) --shutdown-grace "$GRACE"
             --http-threads 2)
# shellcheck disable=SC2206  # word splitting wanted
[[ -n "$EXTRA_SERVE_ARGS" ]] && SERVER_ARGS+=($EXTRA_SERVE_ARGS)
say "server:  $SAMPAN_BIN ${SERVER_ARGS[*]}"
SAMPAN_LOG_LEVEL="${SAMPAN_LOG_LEVEL:-warn}" "$SAMPAN_BIN" "${SERVER_ARGS[@]}" \
  >"$OUT/server.log" 2>&1 </dev/null &
SERVER_PID=$!
ready=0
for _ in $(seq 1 600); do  # 120 s
  kill -0 "$SERVER_PID" 2>/dev/null || break
  if [[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/v2/health/ready")" == 200 ]]; then
    ready=1
    break
  fi
  sleep 0.2
done
if [[ $ready != 1 ]]; then
  echo "error: the server did not become ready; log tail:" >&2
  tail -20 "$OUT/server.log" >&2
  exit 1
fi

KV_TOTAL=$(curl -s --max-time 5 "$URL/metrics" | awk '$1 == "sampan:kv_cache_blocks_total" { printf "%d", $2 }')
say "KV cache: ${KV_TOTAL:-?} blocks"

# ---- sampler: every 10 s, until the server is gone or the time is up ----
echo "t_s,rss_mb,kv_blocks_used,running,waiting" > "$OUT/samples.csv"
DURATION_MS=$(to_ms "$DURATION")
TIMEOUT_MS=$(to_ms "$TIMEOUT")
GRACE_MS=$(to_ms "$GRACE")
T0=$(now_ms)
since_start() { secs $(( $(now_ms) - T0 )); }
SAMPLER_LIMIT_MS=$(( DURATION_MS + TIMEOUT_MS + GRACE_MS + 120000 ))
(
  trap - EXIT
  n=0
  while kill -0 "$SERVER_PID" 2>/dev/null; do
    t=$(since_start)
    rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$SERVER_PID/status" 2>/dev/null || true)
    read -r kv run wait <<<"$(gauges)" || true
    [[ -n "$rss" ]] && echo "$t,$rss,${kv:-},${run:-},${wait:-}" >> "$OUT/samples.csv"
    n=$((n + 1))
    (( $(now_ms) - T0 > SAMPLER_LIMIT_MS )) && break
    # Sleeps until the next multiple of 10 s since T0 (no drift).
    left=$(( T0 + n * SAMPLE_S * 1000 - $(now_ms) ))
    (( left < 100 )) && left=100
    sleep "$(secs "$left")"
  done
) &
SAMPLER_PID=$!

# ---- load ----
BENCH_ARGS=(bench-serve --url "$URL" --concurrency "$CONCURRENCY" --duration "$DURATION"
            --disconnect-fraction "$FRACTION" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN"
            --input-len-range 0.5 --output-len-range 0.5 --timeout "$TIMEOUT" --seed 1
            --json "$OUT/bench.json")
say "load:    $SAMPAN_BIN ${BENCH_ARGS[*]}"
"$SAMPAN_BIN" "${BENCH_ARGS[@]}" >"$OUT/bench.txt" 2>"$OUT/bench.err" </dev/null &
BENCH_PID=$!

SERVER_RC=""
SERVER_EXIT_S=""
if [[ -n "$SIGTERM_AT" ]]; then
  # Sleeps until S seconds in (bench-serve may end earlier only if it failed).
  SIGTERM_MS=$(to_ms "$SIGTERM_AT")
  while kill -0 "$BENCH_PID" 2>/dev/null && (( $(now_ms) - T0 < SIGTERM_MS )); do
    sleep 0.1
  done
  read -r kv run wait <<<"$(gauges)" || true
  say "SIGTERM to the server at $(since_start) s (running ${run:-?}, waiting ${wait:-?}, KV blocks ${kv:-?})"
  T_TERM=$(now_ms)
  kill -TERM "$SERVER_PID"
  sleep 1
  # bench-serve stops sending and waits for what is in flight (see bench-serve's Ctrl-C).
  kill -INT "$BENCH_PID" 2>/dev/null || true
  wait_bounded "$SERVER_PID" $(( GRACE_MS + 20000 ))
  SERVER_RC=$WAIT_RC
  SERVER_EXIT_S=$(secs $(( $(now_ms) - T_TERM )))
fi

wait_bounded "$BENCH_PID" $(( DURATION_MS + TIMEOUT_MS + 120000 ))
BENCH_RC=$WAIT_RC
BENCH_END=$(since_start)

KV_AFTER="n/a"
RUN_AFTER="n/a"
WAIT_AFTER="n/a"
if [[ -z "$SIGTERM_AT" ]]; then
  # The load is over: the server must free everything (bounded wait for the last cancellations).
  for _ in $(seq 1 150); do  # 30 s
    read -r KV_AFTER RUN_AFTER WAIT_AFTER <<<"$(gauges)" || true
    [[ "${KV_AFTER:-x}" == 0 && "${RUN_AFTER:-x}" == 0 && "${WAIT_AFTER:-x}" == 0 ]] && break
    sleep 0.2
  done
  # One last sample with the load over, then a graceful stop.
  rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$SERVER_PID/status" 2>/dev/null || true)
  echo "$(since_start),$rss,$KV_AFTER,$RUN_AFTER,$WAIT_AFTER" >> "$OUT/samples.csv.after"
  kill -TERM "$SERVER_PID"
  wait_bounded "$SERVER_PID" $(( GRACE_MS + 20000 ))
  SERVER_RC=$WAIT_RC
  SERVER_EXIT_S=$(secs "$WAIT_MS")
fi
kill "$SAMPLER_PID" 2>/dev/null || true
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""

# ---- report ----
say ""
say "bench-serve: exit ${BENCH_RC}, ended ${BENCH_END} s after the start"
[[ -s "$OUT/bench.err" ]] && tail -3 "$OUT/bench.err" | sed 's/^/  bench-serve stderr: /' | tee -a "$SUMMARY"
set +e  # the checks' status is read below
python3 - "$OUT" "$WARMUP_S" "${SIGTERM_AT:-}" "$KV_AFTER" "$RUN_AFTER" "$WAIT_AFTER" \
  "$SERVER_RC" "$SERVER_EXIT_S" "$GRACE" "$BENCH_RC" <<'EOF' | tee -a "$SUMMARY"
import collections, csv, json, os, sys
out, warmup, sigterm_at, kv, run, wait, server_rc, server_exit_s, grace, bench_rc = sys.argv[1:]
warmup = float(warmup)
grace = float(grace)
fails = 0
def check(name, ok, detail=""):
    global fails
    print(f"  {'ok  ' if ok else 'FAIL'}  {name}" + (f" ({detail})" if detail else ""))
    fails += 0 if ok else 1

rep = None
try:
    with open(os.path.join(out, "bench.json")) as f:
        rep = json.load(f)
except (OSError, ValueError) as e:
    print(f"no bench-serve JSON report: {e}")
if rep:
    s = rep["summary"]
    reqs = rep["requests"]
    print(f"requests sent:          {len(reqs)}")
    print(f"completed:              {s['completed']}")
    print(f"disconnected on purpose: {s['disconnected']}")
    print(f"errors:                 {s['failed']}  {dict(s['errors'])}")
    print(f"throughput:             {s['request_throughput']:.2f} req/s, "
          f"{s['output_throughput']:.1f} output tok/s; E2E p50 {s['e2e']['p50_ms'] / 1e3:.2f} s, "
          f"p99 {s['e2e']['p99_ms'] / 1e3:.2f} s; TTFT p50 {s['ttft']['p50_ms'] / 1e3:.2f} s")
    check("every request accounted for (completed + disconnected + errors == sent)",
          s["completed"] + s["disconnected"] + s["failed"] == len(reqs))
    check("no request timed out (none left hanging)", s["errors"].get("timeout", 0) == 0,
          f"{s['errors'].get('timeout', 0)} timeouts")
    if sigterm_at:
        # What the failed requests ended with: kind, whether the server had started streaming
        # them, and the message.
        kinds = collections.Counter()
        for r in reqs:
            if r["ok"] or r.get("disconnected"):
                continue
            started = "streaming" if r["chunk_s"] else "not started"
            msg = r.get("error", "")
            if msg.startswith("reading the stream after"):
                msg = "reading the stream after N chunks:" + msg.split(":", 1)[1]
            kinds[(r["error_kind"], started, msg[:90])] += 1
        print("failed requests by how they ended (kind, streamed?, message):")
        for (kind, started, msg), n in kinds.most_common():
            print(f"  {n:7d}  {kind:12s} {started:12s} {msg}")
        # Clean: a refusal before anything was accepted (connection refused, 503), or an accepted
        # request that ended with an error event from the server (http_503 after cancellation).
        unclean = sum(n for (kind, started, msg), n in kinds.items()
                      if kind in ("timeout", "protocol")
                      or (kind == "connection" and started == "streaming"))
        check("every accepted request finished or ended with a clean error", unclean == 0,
              f"{unclean} cut off or hanging")
    else:
        check("no errors", s["failed"] == 0, str(dict(s["errors"])))
    check("bench-serve ended by itself", bench_rc != "hung", f"exit {bench_rc}")
else:
    check("bench-serve wrote its report", False)

rows = []
with open(os.path.join(out, "samples.csv")) as f:
    for r in csv.DictReader(f):
        try:
            rows.append((float(r["t_s"]), float(r["rss_mb"]), r["kv_blocks_used"], r["running"],
                         r["waiting"]))
        except (TypeError, ValueError):
            pass
if rows:
    print(f"RSS samples:            {len(rows)} (every 10 s), "
          f"first {rows[0][1]:.1f} MB at {rows[0][0]:.0f} s, peak {max(r[1] for r in rows):.1f} MB")
    warm = [r for r in rows if r[0] >= warmup]
    if len(warm) >= 2:
        ts = [r[0] / 60 for r in warm]
        ys = [r[1] for r in warm]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        slope = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / max(
            1e-12, sum((t - mt) ** 2 for t in ts))
        print(f"RSS after {warmup:.0f} s warm-up:  first {ys[0]:.1f} MB, last {ys[-1]:.1f} MB, "
              f"min {min(ys):.1f}, max {max(ys):.1f}, slope {slope:+.2f} MB/min "
              f"({len(ys)} samples, {warm[0][0]:.0f}..{warm[-1][0]:.0f} s)")
    else:
        print(f"RSS after {warmup:.0f} s warm-up:  fewer than 2 samples")
    kv_series = [r[2] for r in rows if r[2] != ""]
    print(f"KV blocks used (samples): max {max((int(k) for k in kv_series), default=0)}")
if sigterm_at:
    ok = server_rc == "0" and server_exit_s and float(server_exit_s) <= grace + 10
    check(f"server exited 0 within --shutdown-grace {grace:g} s (+ cancel/flush allowance)",
          ok, f"exit {server_rc} after {server_exit_s} s")
    try:
        with open(os.path.join(out, "server.log"), errors="replace") as f:
            log = f.read()
        for line in log.splitlines():
            if "grace period over" in line or "stopped after" in line or "received SIG" in line:
                print("  server: " + line.strip()[:200])
    except OSError:
        pass
else:
    print(f"after the run:          KV blocks used {kv}, running {run}, waiting {wait}")
    check("KV blocks used after the run == 0", kv == "0", f"{kv}")
    check("nothing running or waiting after the run", run == "0" and wait == "0")
    check("server exits 0 on SIGTERM afterwards", server_rc == "0",
          f"exit {server_rc} after {server_exit_s} s")
sys.exit(1 if fails else 0)
EOF
PY_RC=${PIPESTATUS[0]}
say "output: $OUT"
exit $(( PY_RC != 0 ? 1 : 0 ))
