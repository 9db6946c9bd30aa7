// add_rms_norm's CUDA kernel; the schema and shape checks are in add_rms_norm.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/rms_norm.h"
#include "kernels/cuda/add_rms_norm.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];    // [rows, dim]
  const Tensor& r = ctx.inputs[1];    // [rows, dim]
  const Tensor& sum = ctx.outputs[0];  // [rows, dim]
  const Tensor& y = ctx.outputs[1];    // [rows, dim]
  check_cuda(cuda::add_rms_norm(x.dim(0), x.dim(1), x.data<float>(), row_stride(x),
                                r.data<float>(), row_stride(r), ctx.inputs[2].data<float>(),
                                ctx.attrs_as<RmsNormAttrs>().eps,
                                sum.data<float>(), row_stride(sum), y.data<float>(),
                                row_stride(y), static_cast<cudaStream_t>(ctx.stream)),
             "add_rms_norm launch");
}

const RegisterKernel kCuda("add_rms_norm", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
