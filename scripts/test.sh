#!/usr/bin/env bash
# The README's test command (also what CI runs): set up, build Release and run every test
# under CTest; then build under AddressSanitizer + UndefinedBehaviorSanitizer and run every unit,
# kernel and end-to-end test again there (all but the long HF-tokenizers corpus comparison,
# e2e.test_tokenize, which takes ~5 minutes under ASan; the same code paths run in the
# normalizer and pre-tokenizer e2e tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CTEST_OUTPUT_ON_FAILURE=1
jobs="${SAMPAN_JOBS:-$(nproc)}"

bash scripts/build.sh Release build
(cd build && ctest -j "$jobs" --timeout 1200)

if [ "${SAMPAN_SKIP_SANITIZE:-0}" != "1" ]; then
  bash scripts/build.sh Sanitize build-sanitize -DSAMPAN_CUDA=OFF -DSAMPAN_BUILD_BENCH=OFF
  # detect_leaks: LeakSanitizer needs ptrace, which some containers forbid.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  (cd build-sanitize && ctest -j "$jobs" --timeout 1800 -L "unit|kernels|e2e" -E "^e2e\.test_tokenize$")
fi
