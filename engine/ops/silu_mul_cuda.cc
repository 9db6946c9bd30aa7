// silu_mul's CUDA kernel; the schema and shape checks are in silu_mul.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/silu_mul.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& g = ctx.inputs[0];   // [rows, n]
  const Tensor& u = ctx.inputs[1];   // [rows, n]
  const Tensor& y = ctx.outputs[0];  // [rows, n]
  check_cuda(cuda::silu_mul(g.dim(0), g.dim(1), g.data<float>(), row_stride(g), u.data<float>(),
                            row_stride(u), y.data<float>(), row_stride(y),
                            static_cast<cudaStream_t>(ctx.stream)),
             "silu_mul launch");
}

const RegisterKernel kCuda("silu_mul", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
