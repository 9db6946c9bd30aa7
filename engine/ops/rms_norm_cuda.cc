// rms_norm's CUDA kernel; the schema and shape checks are in rms_norm.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/rms_norm.h"
#include "kernels/cuda/rms_norm.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];  // [rows, dim]
  const Tensor& y = ctx.outputs[0];  // [rows, dim]
  check_cuda(cuda::rms_norm(x.dim(0), x.dim(1), x.data<float>(), row_stride(x),
                            ctx.inputs[1].data<float>(),
                            ctx.attrs_as<RmsNormAttrs>().eps, y.data<float>(), row_stride(y),
                            static_cast<cudaStream_t>(ctx.stream)),
             "rms_norm launch");
}

const RegisterKernel kCuda("rms_norm", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
