#!/usr/bin/env bash
# bench/run_fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
# Runs every libFuzzer target of tests/fuzz (or the ones named: safetensors, gguf, tokenizer,
# chat_template, openai_request, kserve_json, kserve_proto, serve_config) for longer than CI's
# 20 s (default 600 s each), one after the other, and prints per target: executions, exec/s,
# coverage (libFuzzer's `cov:` edges and `ft:` features), corpus size and crashes. Inputs it
# grows stay in build-fuzz/tests/fuzz/corpus/<target>; crashes go to build-fuzz/tests/fuzz/
# artifacts/. A crash is fixed in the code and its input committed as
# tests/fuzz/corpus/<target>/crash-<what> (docs/RELIABILITY.md lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
shift || true
jobs="${SAMPAN_JOBS:-$(nproc)}"
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DSAMPAN_FUZZ=ON -DSAMPAN_BUILD_TESTS=OFF -DSAMPAN_BUILD_BENCH=OFF -DSAMPAN_CUDA=OFF >/dev/null
fi
cmake --build build-fuzz --target fuzz_targets -j "$jobs" >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cc; do t=$(basename "$f" .cc); targets+=("${t#fuzz_}"); done
fi
dir=build-fuzz/tests/fuzz
mkdir -p "$dir/artifacts" "$dir/logs"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export SAMPAN_LOG_LEVEL=off
printf '| target | seconds | executions | exec/s | cov | ft | corpus | crashes |\n'
printf '|---|---|---|---|---|---|---|---|\n'
status=0
for t in "${targets[@]}"; do
  mkdir -p "$dir/corpus/$t"
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=2048
        -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-")
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="tests/fuzz/$t.dict")
  dirs=("$dir/corpus/$t" "tests/fuzz/corpus/$t")
  [ "$t" = chat_template ] && dirs+=(../shared/fixtures/chat_templates)
  log="$dir/logs/$t.log"
  before=$(ls "$dir/artifacts" | grep -c "^$t-" || true)
  "$dir/fuzz_$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1 || status=1
  after=$(ls "$dir/artifacts" | grep -c "^$t-" || true)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
  printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$secs" "$runs" "$rate" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$((after - before))"
done
exit "$status"
