// gather_rows's CUDA kernel; the schema and shape checks are in gather_rows.cc.
#include "engine/core/cuda_stream.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/gather_rows.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];      // [rows, n] f32
  const Tensor& index = ctx.inputs[1];  // [m] i32
  const Tensor& y = ctx.outputs[0];     // [m, n] f32
  check_cuda(cuda::gather_rows(x.dim(0), x.dim(1), x.data<float>(), row_stride(x),
                               index.data<int32_t>(), index.dim(0), y.data<float>(), row_stride(y),
                               cuda::FaultSink{ctx.fault, ctx.fault_tag},
                               static_cast<cudaStream_t>(ctx.stream)),
             "gather_rows launch");
}

std::string fault_text(int32_t) { return "a row index outside the input's rows"; }

const RegisterKernel kCuda("gather_rows", DeviceType::kCUDA, run_cuda);
const RegisterFaultText kCudaFault("gather_rows", DeviceType::kCUDA, fault_text);

}  // namespace
}  // namespace sampan::ops
