#!/usr/bin/env bash
# The README's test command (also what CI runs): set up, build Release and run every test under
# CTest; then build under AddressSanitizer + UndefinedBehaviorSanitizer and run again there every
# unit and kernel test, every bad-input test, the parsers' end-to-end tests and one serving
# end-to-end test (CTest label `sanitize`; the 1,000-connection test runs once, in Release).
# Then the libFuzzer targets (tests/fuzz, label `fuzz`), each for a bounded time.
# Prints the 20 slowest tests of each phase (CTest's JUnit report), to keep CI's time in view.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CTEST_OUTPUT_ON_FAILURE=1
jobs="${SAMPAN_JOBS:-$(nproc)}"

# CUDA compiles for one architecture, so compile errors are caught on machines without a GPU
# (the GPU tests then report Skipped); scripts/gpu-check.sh runs them on a GPU.
cuda_args=(-DSAMPAN_CUDA=OFF)
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args=(-DSAMPAN_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${SAMPAN_TEST_CUDA_ARCH:-90}")
else
  echo "test: no nvcc found: the CUDA backend is not compiled in this run" >&2
fi

status=0
bash scripts/build.sh Release build "${cuda_args[@]}"
(cd build && ctest -j "$jobs" --timeout 1200 --output-junit junit.xml) || status=1
python3 scripts/slowest_tests.py build/junit.xml 20 || true

if [ "${SAMPAN_SKIP_SANITIZE:-0}" != "1" ]; then
  bash scripts/build.sh Sanitize build-sanitize -DSAMPAN_CUDA=OFF -DSAMPAN_BUILD_BENCH=OFF
  # detect_leaks: LeakSanitizer needs ptrace, which some containers forbid.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  (cd build-sanitize && ctest -j "$jobs" --timeout 1800 -L "^(unit|kernels|sanitize)$" \
      -E "\[load\]|1000 concurrent" --output-junit junit.xml) || status=1
  python3 scripts/slowest_tests.py build-sanitize/junit.xml 20 || true
fi
if [ "${SAMPAN_SKIP_FUZZ:-0}" != "1" ]; then
  # libFuzzer targets (tests/fuzz, clang): the parsers only, each fuzzed for a bounded time.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
      -DSAMPAN_FUZZ=ON -DSAMPAN_BUILD_TESTS=OFF -DSAMPAN_BUILD_BENCH=OFF -DSAMPAN_CUDA=OFF >/dev/null
  cmake --build build-fuzz --target fuzz_targets -j "$jobs"
  (cd build-fuzz && ctest -j "$jobs" -L fuzz --output-junit junit.xml) || status=1
fi
exit "$status"
