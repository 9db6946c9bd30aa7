// linear's CUDA kernel; the schema, slot layout and shape checks are in linear.cc, and the paths
// per weight format (cuBLASLt, W4A16/W8A16 GEMV, FP8 tensor cores, GGUF blocks: gemm_ggml.cuh)
// in kernels/cuda/gemm.cuh.
#include "engine/core/cuda_stream.h"
#include "engine/core/error.h"
#include "engine/ops/linear.h"
#include "engine/ops/op_registry.h"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm_ggml.cuh"

namespace sampan::ops {
namespace {

// Input slots as linear.cc lays them out: 1 + i weight i, then biases, scales and zeros of the
// b blocks, each group optional (missing trailing groups, or kNoValue, leave it absent).
enum class Slot { kBias = 1, kScales = 2, kZeros = 3 };

const Tensor* slot_tensor(const KernelContext& ctx, int b, int i, Slot s) {
  const size_t idx = static_cast<size_t>(1 + static_cast<int>(s) * b + i);
  if (idx >= ctx.inputs.size() || !ctx.inputs[idx].defined() || ctx.inputs[idx].numel() == 0) {
    return nullptr;
  }
  SAMPAN_CHECK(ctx.inputs[idx].is_contiguous(), ErrorCode::kInternal,
               "node '{}': input {} of linear not contiguous", ctx.node.name, idx);
  return &ctx.inputs[idx];
}

void run_cuda(const KernelContext& ctx) {
  // The schema has checked n_blocks, the epilogue name and every slot's dtype and shape.
  const LinearAttrs& a = ctx.attrs_as<LinearAttrs>();
  const int b = a.n_blocks;
  const Tensor& x = ctx.inputs[0];   // [rows, k] f32, rows contiguous
  const Tensor& y = ctx.outputs[0];  // [rows, n] or [rows, n_0] for silu_mul
  // u8 weights: GGUF blocks of a.ggml_type (linear.cc checked the type and k against it).
  SAMPAN_CHECK(ctx.inputs[1].dtype() != DType::kU8 || cuda::ggml_cuda_supported(a.ggml_type),
               ErrorCode::kUnsupported, "node '{}': GGUF {} weights have no CUDA kernel",
               ctx.node.name, ggml_type_name(a.ggml_type) ? ggml_type_name(a.ggml_type) : "block");
  SAMPAN_CHECK(!a.round_x, ErrorCode::kUnsupported,
               "node '{}': round_x_bf16 has no CUDA kernel (bf16 training runs on the CPU)",
               ctx.node.name);
  if (x.dim(0) == 0) return;
  cuda::GemmWeights w;
  w.dtype = ctx.inputs[1].dtype();
  w.k = x.dim(1);
  w.n_blocks = b;
  w.group_size = a.group_size;
  w.ggml_type = a.ggml_type;
  for (int i = 0; i < b; ++i) {
    const Tensor& wi = ctx.inputs[static_cast<size_t>(1 + i)];  // [rows_i, k]
    SAMPAN_CHECK(wi.is_contiguous(), ErrorCode::kInternal, "node '{}': weight {} not contiguous",
                 ctx.node.name, i);
    w.data[i] = wi.raw();
    w.rows[i] = wi.dim(0);
    if (const Tensor* bias = slot_tensor(ctx, b, i, Slot::kBias)) w.bias[i] = bias->data<float>();
    if (const Tensor* s = slot_tensor(ctx, b, i, Slot::kScales)) {
      w.scales[i] = s->raw();
      if (w.dtype == DType::kI4) w.scale_dtype = s->dtype();
    }
    if (const Tensor* z = slot_tensor(ctx, b, i, Slot::kZeros)) w.zeros[i] = z->data<int8_t>();
  }
  const cuda::GemmStatus status =
      cuda::gemm(x.dim(0), x.data<float>(), row_stride(x), w, a.epilogue, y.data<float>(),
                 row_stride(y), static_cast<cudaStream_t>(ctx.stream));
  SAMPAN_CHECK(status.cublas == 0, ErrorCode::kInternal, "linear on CUDA ({} weights, k {}): {}",
               dtype_name(w.dtype), w.k, cuda::cublas_status_name(status.cublas));
  check_cuda(status.cuda, "linear launch");
}

const RegisterKernel kCuda("linear", DeviceType::kCUDA, run_cuda);

}  // namespace
}  // namespace sampan::ops
