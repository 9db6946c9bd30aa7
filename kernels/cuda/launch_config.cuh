// Launch-configuration arithmetic shared by the CUDA kernels. Plain host C++ with no CUDA header,
// so the limits it enforces (grid dimensions, block sizes, shared memory) are unit-tested on
// machines without a GPU (tests/cuda/test_cuda_host.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sampan::cuda {

constexpr int64_t kMaxGridX = 2147483647;  // gridDim.x limit, 2^31 - 1
constexpr int64_t kMaxGridY = 65535;       // gridDim.y (and z) limit
constexpr int kWarpSize = 32;
constexpr int kMaxBlockThreads = 1024;
// Dynamic shared memory a kernel may use without opting in (cudaFuncSetAttribute).
constexpr size_t kDefaultSharedBytes = 48 * 1024;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
constexpr int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Threads of a block that reduces one row of `units` loads (floats or float4s): whole warps (the
// block reduction shuffles full warps), about one load per thread so a long row keeps many
// loads in flight, at most `max_threads` (a multiple of 32, <= 1024).
constexpr int row_block_threads(int64_t units, int max_threads = kMaxBlockThreads) {
  return static_cast<int>(min64(max64(ceil_div(units, kWarpSize) * kWarpSize, kWarpSize),
                                max_threads));
}

// One block per row on gridDim.x; rows past the grid limit are looped over by the kernel.
constexpr unsigned row_grid(int64_t rows) { return static_cast<unsigned>(min64(rows, kMaxGridX)); }

struct Grid2 {
  unsigned x = 1;
  unsigned y = 1;
};

// Element-wise kernels over [rows, units]: gridDim.x tiles the columns in `threads`-wide steps,
// gridDim.y the rows; both are capped (y by the hardware, x to bound the grid of one huge flat
// row) and the kernels loop over what the grid does not cover. rows, units >= 1.
constexpr Grid2 rows_grid(int64_t rows, int64_t units, int threads, int64_t max_x = 65536) {
  return {static_cast<unsigned>(min64(ceil_div(units, threads), max_x)),
          static_cast<unsigned>(min64(rows, kMaxGridY))};
}

// How the Walsh-Hadamard kernel splits a row of n floats (n a multiple of block, block a power
// of two): a tile of whole blocks sits in shared memory, one thread block per tile.
struct HadamardPlan {
  int64_t blocks_per_tile = 1;  // Hadamard blocks in one tile (the last tile of a row may hold fewer)
  int64_t tiles_per_row = 1;
  int threads = kWarpSize;
  size_t shared_bytes = 0;      // dynamic shared memory of one thread block
};

// Small Hadamard blocks are packed into tiles of this many floats so each thread block has work
// for all its threads; a larger block is a tile of its own.
constexpr int64_t kHadamardTileFloats = 2048;
constexpr int kHadamardMaxThreads = 512;

constexpr HadamardPlan hadamard_plan(int64_t n, int64_t block) {
  HadamardPlan p;
  const int64_t blocks_per_row = n / block;
  p.blocks_per_tile = min64(max64(kHadamardTileFloats / block, 1), blocks_per_row);
  p.tiles_per_row = ceil_div(blocks_per_row, p.blocks_per_tile);
  const int64_t tile = p.blocks_per_tile * block;
  // One butterfly per thread per stage up to 512 threads; more butterflies per thread beyond.
  p.threads = row_block_threads(tile / 2, kHadamardMaxThreads);
  p.shared_bytes = static_cast<size_t>(tile) * sizeof(float);
  return p;
}

}  // namespace sampan::cuda
