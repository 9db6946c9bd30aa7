#!/usr/bin/env bash
# scripts/gpu-pack.sh [--xz] [BUILD_DIR] [DEST]
#
# Packs what `scripts/gpu-check.sh --prebuilt` needs from a CUDA build made on this machine, for a
# GPU machine that cannot build Sampan itself (no package registry there, so no gRPC, Catch2,
# spdlog...): the CUDA test and benchmark executables, libsampan.so, CTest's files, and the
# shared libraries they load that are neither glibc's nor CUDA's (CUDA's come from the GPU
# machine's toolkit, whose major version must match). Default BUILD_DIR build-gpu, DEST .gpu
# (ignored by git); DEST/build is laid out like BUILD_DIR, DEST/lib holds the libraries.
# --xz: DEST holds only pack.tar.xz instead (~12 MB against ~27 MB: the device tool carries at
# most 64 MiB, the checkout included); gpu-check --prebuilt unpacks it in place.
#
# On the GPU machine, from the repository root (CTest's files hold this machine's absolute paths,
# so the checkout must be reachable at the same path there; gpu-check --prebuilt links it):
#   scripts/gpu-check.sh --prebuilt .gpu OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
XZ=0
if [[ "${1:-}" == --xz ]]; then XZ=1; shift; fi
BUILD="${1:-build-gpu}"
DEST="${2:-.gpu}"
[[ -f "$BUILD/CTestTestfile.cmake" ]] || { echo "gpu-pack: $BUILD is not a configured build" >&2; exit 2; }
grep -q '^SAMPAN_CUDA:STRING=ON' "$BUILD/CMakeCache.txt" ||
  { echo "gpu-pack: $BUILD was not configured with -DSAMPAN_CUDA=ON" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST/build/tests" "$DEST/build/bench" "$DEST/lib"
abs_build="$(cd "$BUILD" && pwd)"
echo "$abs_build" >"$DEST/build_path"
cp -a "$BUILD"/libsampan.so* "$DEST/build/"
(cd "$BUILD" && find . -name CTestTestfile.cmake -o -name '*_include-*.cmake' -o -name '*_tests-*.cmake') |
  while read -r f; do mkdir -p "$DEST/build/$(dirname "$f")"; cp "$BUILD/$f" "$DEST/build/$f"; done
cp "$BUILD"/tests/test_cuda_* "$DEST/build/tests/" 2>/dev/null || true
cp "$BUILD"/bench/bench_cuda_* "$DEST/build/bench/" 2>/dev/null || true
strip --strip-unneeded "$DEST"/build/libsampan.so* "$DEST"/build/tests/test_cuda_* "$DEST"/build/bench/bench_cuda_* 2>/dev/null || true
# Libraries: whatever ldd resolves outside glibc, libstdc++/libgcc and CUDA.
for bin in "$DEST"/build/libsampan.so "$DEST"/build/tests/test_cuda_* "$DEST"/build/bench/bench_cuda_*; do
  [[ -f "$bin" && ! "$bin" = *.cmake ]] || continue
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    libcuda.so*|libcudart.so*|libcublas*.so*|libnvidia*|libsampan*) ;;
    *) cp -L "$lib" "$DEST/lib/" ;;
  esac
done
if ((XZ)); then
  tar -C "$DEST" -cf - build_path build lib | xz -T0 -3 >"$DEST.tar.xz.tmp"
  rm -rf "$DEST" && mkdir -p "$DEST" && mv "$DEST.tar.xz.tmp" "$DEST/pack.tar.xz"
fi
du -sh "$DEST" | awk '{print "gpu-pack: " $1 " in " "'"$DEST"'"}'
