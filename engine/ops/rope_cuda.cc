// rope's CUDA kernel; the schema and shape checks are in rope.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/rope.h"
#include "kernels/cuda/rope.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const RopeAttrs& a = ctx.attrs_as<RopeAttrs>();
  const Tensor& x = ctx.inputs[0];   // [n_tokens, n_heads * head_dim], rows may be spaced
  const Tensor& y = ctx.outputs[0];  // [n_tokens, n_heads * head_dim]
  check_cuda(cuda::rope(x.dim(0), a.n_heads, a.head_dim, x.data<float>(), row_stride(x),
                        ctx.inputs[1].data<int32_t>(),  // positions [n_tokens]
                        ctx.inputs[2].data<float>(),    // inv_freq [head_dim / 2]
                        a.attn_factor, y.data<float>(), row_stride(y),
                        static_cast<cudaStream_t>(ctx.stream)),
             "rope launch");
}

const RegisterKernel kCuda("rope", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
