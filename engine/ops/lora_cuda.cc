// lora's CUDA kernel; the schema, shape checks and the CPU kernel are in lora.cc, whose
// semantics this mirrors (kernels/cuda/lora.cuh). The adapter ids are a graph input on the
// device; reading them back to check them would stall the stream at every projection, so the
// kernel checks them: a token asking for an adapter outside [-1, n) reads no adapter weights,
// its output row is NaN and the executor's fault word ends the run in Error(kInvalidArgument)
// naming the node, once the rest of it has completed. The rank-r intermediate lives in the
// per-stream scratch (scratch_cuda.h).
#include <cuda_runtime.h>

#include <string>

#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "engine/ops/scratch_cuda.h"
#include "kernels/cuda/lora.cuh"

namespace sampan::ops {
namespace {

void run_cuda(const KernelContext& ctx) {
  const Tensor& y = ctx.inputs[0];      // [T, out] f32 (may be a column slice)
  const Tensor& x = ctx.inputs[1];      // [T, in] f32
  const Tensor& ids = ctx.inputs[2];    // [T] i32
  const Tensor& a = ctx.inputs[3];      // [n, r, in] f32
  const Tensor& b = ctx.inputs[4];      // [n, out, r] f32
  const Tensor& scale = ctx.inputs[5];  // [n] f32
  const Tensor& out = ctx.outputs[0];   // [T, out] f32
  const int64_t n_tokens = y.dim(0), r = a.dim(1);
  if (n_tokens == 0) return;
  SAMPAN_CHECK(ids.is_contiguous() && a.is_contiguous() && b.is_contiguous() &&
                   scale.is_contiguous(),
               ErrorCode::kInternal, "node '{}' (lora): ids, a, b and scale must be contiguous",
               ctx.node.name);
  SAMPAN_CHECK(y.rows_contiguous() && x.rows_contiguous() && out.rows_contiguous(),
               ErrorCode::kUnsupported, "node '{}' (lora): strided {} rows are not supported on CUDA",
               ctx.node.name, y.str());
  SAMPAN_CHECK(r >= 1 && r <= cuda::kLoraMaxRank, ErrorCode::kUnsupported,
               "node '{}' (lora): adapter rank {} is outside the 1..{} the CUDA kernel takes",
               ctx.node.name, r, cuda::kLoraMaxRank);
  auto* h = reinterpret_cast<float*>(stream_scratch(
      y.device(), ctx.stream, cuda::lora_scratch_bytes(n_tokens, x.dim(1), r), ctx.capturing,
      "lora"));
  check_cuda(cuda::lora_apply(n_tokens, x.dim(1), y.dim(1), a.dim(0), r, y.data<float>(),
                              row_stride(y), x.data<float>(), row_stride(x), ids.data<int32_t>(),
                              a.data<float>(), b.data<float>(), scale.data<float>(), h,
                              out.data<float>(), row_stride(out),
                              cuda::FaultSink{ctx.fault, ctx.fault_tag},
                              static_cast<cudaStream_t>(ctx.stream)),
             "lora launch");
}

std::string fault_text(int32_t) {
  return "a token asks for an adapter the graph does not have (ids must be -1 or below the "
         "number of adapters)";
}

const RegisterKernel kCuda("lora", DeviceType::kCUDA, run_cuda);
const RegisterFaultText kCudaFault("lora", DeviceType::kCUDA, fault_text);

}  // namespace
}  // namespace sampan::ops
