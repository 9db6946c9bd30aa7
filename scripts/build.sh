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
# ccache keys on the compiler's command line, which holds absolute paths: relative to the
# checkout, a fresh clone (CI's) reuses what any earlier clone compiled. NOHASHDIR does the same
# for the working directory that -g builds (Sanitize) would otherwise hash.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" >/dev/null
cmake --build "$dir" -j "$jobs"
