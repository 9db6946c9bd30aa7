// hadamard's CUDA kernel; the schema and shape checks (block a power of two dividing the row
// width) are in hadamard.cc.
#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/hadamard.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/hadamard.cuh"

namespace sampan::ops {
namespace {

// Any GPU gives a thread block 48 KB of shared memory, enough for a tile of one 8192-float
// block; only larger blocks need the device's opt-in limit asked.
constexpr int64_t kAlwaysSupportedBlock = 8192;

void run_cuda(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];   // [rows, n], rows may be spaced
  const Tensor& y = ctx.outputs[0];  // [rows, n]
  const int64_t block = ctx.attrs_as<HadamardAttrs>().block;
  if (block > kAlwaysSupportedBlock) {
    const int64_t max_block = cuda::hadamard_max_block();
    SAMPAN_CHECK(block <= max_block, ErrorCode::kUnsupported,
                 "hadamard block {} exceeds the largest this GPU's shared memory allows ({})",
                 block, max_block);
  }
  // Out of place in one pass: the kernel reads a tile before writing it, so no copy is needed.
  check_cuda(cuda::hadamard(x.dim(0), x.dim(1), block, x.data<float>(), row_stride(x),
                            y.data<float>(), row_stride(y), static_cast<cudaStream_t>(ctx.stream)),
             "hadamard launch");
}

const RegisterKernel kCuda("hadamard", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
