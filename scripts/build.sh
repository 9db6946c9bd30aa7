#!/usr/bin/env bash
# scripts/build.sh [BUILD_TYPE] [BUILD_DIR] [extra cmake args...]
# Configures and builds Sampan (Release by default into build/). SAMPAN_CUDA=AUTO: the CUDA
# backend is compiled when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
type="${1:-Release}"
dir="${2:-build}"
shift $(( $# > 2 ? 2 : $# )) || true
jobs="${SAMPAN_JOBS:-$(nproc)}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
cmake --build "$dir" -j "$jobs"
