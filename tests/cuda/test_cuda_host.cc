// Host-side logic of the CUDA backend that runs without a GPU: launch-configuration arithmetic
// (grid limits, block sizes, shared memory) checked against the hardware limits it must respect,
// CUDA error translation, and the executor's refusal of a device that is not there.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/graph/executor.h"
#include "kernels/cuda/launch_config.cuh"
#include "kernels/cuda/lora.cuh"

using namespace sampan;

TEST_CASE("row kernels use whole warps, at most the block limit", "[cuda_host]") {
  using cuda::row_block_threads;
  CHECK(row_block_threads(1) == 32);
  CHECK(row_block_threads(7) == 32);
  CHECK(row_block_threads(33) == 64);
  CHECK(row_block_threads(1024) == 1024);
  CHECK(row_block_threads(4099) == 1024);
  CHECK(row_block_threads(int64_t{1} << 40) == 1024);
  CHECK(row_block_threads(4099, 256) == 256);
  for (int64_t units = 1; units < 5000; units += 37) {
    const int t = row_block_threads(units);
    CHECK(t % 32 == 0);
    CHECK(t >= 32);
    CHECK(t <= 1024);
  }
}

TEST_CASE("grids stay inside the hardware limits and kernels loop past them", "[cuda_host]") {
  CHECK(cuda::row_grid(1) == 1u);
  CHECK(cuda::row_grid(17) == 17u);
  CHECK(cuda::row_grid(int64_t{1} << 40) == 2147483647u);
  const cuda::Grid2 many_rows = cuda::rows_grid(70000, 3, 256);
  CHECK(many_rows.y == 65535u);
  CHECK(many_rows.x == 1u);
  const cuda::Grid2 one_long_row = cuda::rows_grid(1, int64_t{1} << 40, 256);
  CHECK(one_long_row.y == 1u);
  CHECK(one_long_row.x == 65536u);
  const cuda::Grid2 small = cuda::rows_grid(3, 1025, 256);
  CHECK(small.x == 5u);
  CHECK(small.y == 3u);
}

TEST_CASE("the Hadamard plan covers each row with tiles of whole blocks", "[cuda_host]") {
  const cuda::HadamardPlan two = cuda::hadamard_plan(4096, 2);
  CHECK(two.blocks_per_tile == 1024);
  CHECK(two.tiles_per_row == 2);
  CHECK(two.threads == 512);
  CHECK(two.shared_bytes == 2048 * sizeof(float));
  const cuda::HadamardPlan odd = cuda::hadamard_plan(3 * 512, 512);  // fewer blocks than a tile
  CHECK(odd.blocks_per_tile == 3);
  CHECK(odd.tiles_per_row == 1);
  const cuda::HadamardPlan big = cuda::hadamard_plan(2 * 16384, 16384);
  CHECK(big.blocks_per_tile == 1);
  CHECK(big.tiles_per_row == 2);
  CHECK(big.shared_bytes == 65536);  // more than the default 48 KB: the launcher opts in
  CHECK(big.shared_bytes > cuda::kDefaultSharedBytes);
  for (int64_t block = 1; block <= (int64_t{1} << 15); block *= 2) {
    for (int64_t blocks : {1, 2, 3, 5, 43, 1000}) {
      const int64_t n = block * blocks;
      const cuda::HadamardPlan p = cuda::hadamard_plan(n, block);
      const int64_t tile = p.blocks_per_tile * block;
      INFO("block " << block << " n " << n);
      CHECK(p.blocks_per_tile >= 1);
      CHECK((p.tiles_per_row - 1) * tile < n);  // no empty tile
      CHECK(p.tiles_per_row * tile >= n);       // every block covered
      CHECK(p.threads % 32 == 0);
      CHECK(p.threads <= 1024);
      CHECK(p.shared_bytes == static_cast<size_t>(tile) * sizeof(float));
      // Blocks up to 8192 fit the default shared memory (the launcher asks the device only above).
      if (block <= 8192) CHECK(p.shared_bytes <= cuda::kDefaultSharedBytes);
    }
  }
}

TEST_CASE("the LoRA shrink's slices cover `in` in aligned steps, many for few tokens",
          "[cuda_host]") {
  using cuda::lora_slice_len;
  using cuda::lora_slices;
  for (int64_t in : {1, 7, 63, 128, 260, 2048, 4096, 5632, 14336, 100000}) {
    for (int64_t t : {1, 2, 8, 9, 64, 100, 511, 512, 4095, 4096, 70000}) {
      INFO("in " << in << ", tokens " << t);
      const int64_t len = lora_slice_len(t, in), n = lora_slices(t, in);
      CHECK(len % 128 == 0);  // float4 steps of 32 lanes start aligned in every slice
      CHECK(n >= 1);
      CHECK(n * len >= in);        // covered
      CHECK((n - 1) * len < in);   // no empty slice
      CHECK(n <= (in + 127) / 128);
      CHECK(n <= cuda::kMaxGridY);
      if (t >= 4096) CHECK(n == 1);
    }
  }
  CHECK(lora_slices(1, 4096) == 32);  // a decode token: 32 warps read A, 128 elements each
  CHECK(lora_slices(64, 4096) == 32);
  CHECK(lora_slices(512, 4096) == 8);
  CHECK(cuda::lora_scratch_bytes(3, 4096, 16) == 3 * 32 * 16 * sizeof(float));
}

TEST_CASE("CUDA errors become Errors with the right code", "[cuda_host]") {
  CHECK_NOTHROW(check_cuda(cudaSuccess, "nothing"));
  try {
    check_cuda(cudaErrorMemoryAllocation, "allocating the thing");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kOutOfMemory);
    CHECK_THAT(e.what(), Catch::StartsWith("allocating the thing: CUDA error cudaErrorMemoryAllocation"));
  }
  try {
    check_cuda(cudaErrorInvalidValue, "launching");
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInternal);
    CHECK_THAT(e.what(), Catch::Contains("cudaErrorInvalidValue"));
  }
}

TEST_CASE("a CUDA executor needs a CUDA device", "[cuda_host]") {
  ThreadPool pool(1);
  graph::Graph g;
  const graph::ValueId x = g.add_input("x", DType::kF32, {graph::Dim::fixed(2), graph::Dim::fixed(4)});
  g.mark_output(g.add("add", "sum", {x, x}));
  if (cuda_device_count() > 0) {
    graph::Executor ex(g, pool, Device::cuda(0));
    CHECK(ex.device() == Device::cuda(0));
    CHECK_THROWS_WITH(graph::Executor(g, pool, Device::cuda(cuda_device_count())),
                      Catch::Contains("does not exist"));
    return;
  }
  try {
    graph::Executor ex(g, pool, Device::cuda(0));
    FAIL("an executor on a missing GPU was made");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kNotFound);
    CHECK_THAT(e.what(), Catch::Contains("cuda:0 does not exist (0 CUDA device(s) visible)"));
  }
  CHECK_THROWS_WITH(Tensor::from_f32({2}, {1, 2}).to(Device::cuda(0)),
                    Catch::Contains("cuda:0 does not exist"));
}
