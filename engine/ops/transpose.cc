// transpose(x [d0, ..., d(r-1)]) -> [d(perm[0]), ..., d(perm[r-1])]; attribute perm (ints;
// empty: reverse). A copy (a kernel op, not a view): the consumers of a transpose (matmul,
// softmax, layer_norm) read contiguous rows, and a Tensor cannot hold a permuted view anyway.
// BERT's [B, S, H, D] -> [B, H, S, D] (whole D rows) and [B, H, S, D] -> [B, H, D, S] (a tiled
// 2-D transpose per (B, H)) take the fast paths of kernels/cpu/transpose_cpu.h.
#include "engine/ops/transpose.h"

#include "engine/core/error.h"
#include "engine/ops/shape_util.h"
#include "kernels/cpu/transpose_cpu.h"

namespace sampan::ops {

TransposeAttrs parse_transpose_attrs(const graph::Node& node) {
  TransposeAttrs a;
  if (node.attrs.has("perm")) a.perm = node.attrs.get_ints("perm");
  return a;
}

std::vector<int> transpose_perm(const graph::Node& node, const TransposeAttrs& attrs, int rank) {
  std::vector<int> perm;
  if (attrs.perm.empty()) {
    for (int d = rank; d-- > 0;) perm.push_back(d);
    return perm;
  }
  bool ok = static_cast<int>(attrs.perm.size()) == rank;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : attrs.perm) {
    ok = ok && p >= 0 && p < rank && !seen[static_cast<size_t>(p)];
    if (!ok) break;
    seen[static_cast<size_t>(p)] = true;
    perm.push_back(static_cast<int>(p));
  }
  SAMPAN_CHECK(ok, ErrorCode::kInvalidArgument,
               "node '{}' (transpose): perm {} is not a permutation of {} dims", node.name,
               shape_str(attrs.perm), rank);
  return perm;
}

namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const TransposeAttrs& a,
                              const std::vector<TensorDesc>& in) {
  element_bytes(node, in[0].dtype);
  const std::vector<int> perm = transpose_perm(node, a, static_cast<int>(in[0].shape.size()));
  Shape out, src_strides;
  const Shape strides = contiguous_strides(in[0].shape);
  for (int p : perm) {
    out.push_back(in[0].shape[static_cast<size_t>(p)]);
    src_strides.push_back(strides[static_cast<size_t>(p)]);
  }
  KnownValue value;
  if (in[0].value && tracks_value(in[0].dtype, out)) {
    value = pick_strided(*in[0].value, out, 0, src_strides);
  }
  return {{out, in[0].dtype, true, std::move(value)}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const std::vector<int> perm = transpose_perm(ctx.node, ctx.attrs_as<TransposeAttrs>(), x.rank());
  // x may be a strided view (a split output): read it through its own strides.
  Shape strides;
  for (int p : perm) strides.push_back(x.stride(p));
  copy_into(x, 0, ctx.outputs[0].shape(), strides, ctx.outputs[0], ctx.runner);
}

const RegisterOp kSchema(with_attrs<TransposeAttrs>({.name = "transpose", .min_inputs = 1,
                                                     .max_inputs = 1},
                                                    {{"perm", AttrType::kInts, false}},
                                                    parse_transpose_attrs, infer));
const RegisterKernel kCpu("transpose", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
