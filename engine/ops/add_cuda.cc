// add's CUDA kernel; the schema and shape checks are in add.cc.
#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/add.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& a = ctx.inputs[0];   // any shape
  const Tensor& b = ctx.inputs[1];   // a's shape
  const Tensor& y = ctx.outputs[0];  // a's shape
  if (a.numel() == 0) return;
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  if (a.is_contiguous() && b.is_contiguous() && y.is_contiguous()) {
    // Any shape, one flat row.
    const int64_t n = a.numel();
    check_cuda(cuda::add(1, n, a.data<float>(), n, b.data<float>(), n, y.data<float>(), n, stream),
               "add launch");
    return;
  }
  // Column slices (of a fused projection) are matrices with spaced rows; there is no
  // device-side packing copy yet for any other layout.
  SAMPAN_CHECK(a.rank() == 2 && a.rows_contiguous() && b.rows_contiguous() && y.rows_contiguous(),
               ErrorCode::kUnsupported, "add of strided {} tensors is not supported on CUDA",
               a.str());
  check_cuda(cuda::add(a.dim(0), a.dim(1), a.data<float>(), row_stride(a), b.data<float>(),
                       row_stride(b), y.data<float>(), row_stride(y), stream),
             "add launch");
}

const RegisterKernel kCuda("add", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
