// rope's CUDA kernel; the schema and shape checks are in rope.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/rope.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];   // [n_tokens, n_heads * head_dim], rows may be spaced
  const Tensor& y = ctx.outputs[0];  // [n_tokens, n_heads * head_dim]
  check_cuda(cuda::rope(x.dim(0), ctx.node.attrs.get_int("n_heads"),
                        ctx.node.attrs.get_int("head_dim"), x.data<float>(), row_stride(x),
                        ctx.inputs[1].data<int32_t>(),  // positions [n_tokens]
                        ctx.inputs[2].data<float>(),    // inv_freq [head_dim / 2]
                        static_cast<float>(ctx.node.attrs.get_float("attn_factor", 1.0)),
                        y.data<float>(), row_stride(y), static_cast<cudaStream_t>(ctx.stream)),
             "rope launch");
}

const RegisterKernel kCuda("rope", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
