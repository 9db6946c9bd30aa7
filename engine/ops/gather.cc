// gather(data, indices i32|i64) along `axis` (default 0): out shape = data.shape[:axis] +
// indices.shape + data.shape[axis+1:]. A negative index counts from the end; one outside
// [-d, d) is an Error(kInvalidArgument) naming the node and the index, found before anything is
// written. Each (outer, index) pair copies one contiguous block of data.shape[axis+1:], so the
// embedding case (axis 0 of a [vocab, hidden] table) is one row copy per token. Known contents
// fold at inference when data's and indices' are both known.
#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::ops {
namespace {

struct GatherAttrs final : OpAttrs {
  int64_t axis = 0;  // normalised against data's rank by infer / the kernel
};

GatherAttrs parse(const graph::Node& node) {
  GatherAttrs a;
  a.axis = node.attrs.get_int("axis", 0);
  return a;
}

int64_t norm_axis(const graph::Node& node, int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  SAMPAN_CHECK(axis >= -r && axis < r, ErrorCode::kInvalidArgument,
               "node '{}' (gather): axis {} out of range for rank {}", node.name, axis, r);
  return axis < 0 ? axis + r : axis;
}

// The index made non-negative, or the one-line error naming the node and the index.
int64_t checked_index(const graph::Node& node, int64_t i, int64_t dim) {
  SAMPAN_CHECK(i >= -dim && i < dim, ErrorCode::kInvalidArgument,
               "node '{}' (gather): index {} out of range for axis of size {}", node.name, i,
               dim);
  return i < 0 ? i + dim : i;
}

// Copies blocks of `block_bytes`: out[o, j] = data[o, idx[j]], with data [outer, dim, block].
void gather_blocks(const uint8_t* data, int64_t outer, int64_t dim, int64_t block_bytes,
                   const std::vector<int64_t>& idx, uint8_t* out, cpu::TaskRunner& runner) {
  const int64_t n = static_cast<int64_t>(idx.size());
  const int64_t grain = cpu::util::ceil_div(1 << 15, std::max<int64_t>(block_bytes, 1));
  cpu::util::parallel_for(runner, outer * n, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t o = u / n, j = u % n;
      std::memcpy(out + u * block_bytes,
                  data + (o * dim + idx[static_cast<size_t>(j)]) * block_bytes,
                  static_cast<size_t>(block_bytes));
    }
  });
}

std::vector<TensorDesc> infer(const graph::Node& node, const GatherAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const TensorDesc& data = in[0];
  const TensorDesc& ind = in[1];
  SAMPAN_CHECK(ind.dtype == DType::kI32 || ind.dtype == DType::kI64, ErrorCode::kInvalidArgument,
               "node '{}' (gather): input 1 (indices) is {}, expected i32 or i64", node.name,
               dtype_name(ind.dtype));
  SAMPAN_CHECK(dtype_bits(data.dtype) % 8 == 0, ErrorCode::kUnsupported,
               "node '{}' (gather): {} data is not supported", node.name, dtype_name(data.dtype));
  const int64_t axis = norm_axis(node, a.axis, data.shape.size());
  const size_t ax = static_cast<size_t>(axis);
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), ind.shape.begin(), ind.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  TensorDesc d{out, data.dtype};
  if (ind.value) {
    std::vector<int64_t> idx;
    for (int64_t i : *ind.value) idx.push_back(checked_index(node, i, data.shape[ax]));
    if (data.value && shape_numel(out) <= kMaxKnownValue) {
      int64_t outer = 1, block = 1;
      for (size_t i = 0; i < ax; ++i) outer *= data.shape[i];
      for (size_t i = ax + 1; i < data.shape.size(); ++i) block *= data.shape[i];
      std::vector<int64_t> v(static_cast<size_t>(shape_numel(out)));
      cpu::SerialRunner serial;
      gather_blocks(reinterpret_cast<const uint8_t*>(data.value->data()), outer, data.shape[ax],
                    block * 8, idx, reinterpret_cast<uint8_t*>(v.data()), serial);
      d.value = std::move(v);
    }
  }
  return {d};
}

template <class I>
std::vector<int64_t> read_indices(const graph::Node& node, const Tensor& t, int64_t dim) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous();
  const I* p = c.data<I>();
  std::vector<int64_t> idx(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = checked_index(node, p[i], dim);
  return idx;
}

void run_cpu(const KernelContext& ctx) {
  const GatherAttrs& a = ctx.attrs_as<GatherAttrs>();
  const Tensor data = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor& ind = ctx.inputs[1];
  const Tensor& y = ctx.outputs[0];
  const int axis = static_cast<int>(norm_axis(ctx.node, a.axis, static_cast<size_t>(data.rank())));
  const int64_t dim = data.dim(axis);
  // Every index is checked before anything is written.
  const std::vector<int64_t> idx = ind.dtype() == DType::kI32
                                       ? read_indices<int32_t>(ctx.node, ind, dim)
                                       : read_indices<int64_t>(ctx.node, ind, dim);
  if (y.numel() == 0) return;
  int64_t outer = 1, block = 1;
  for (int d = 0; d < axis; ++d) outer *= data.dim(d);
  for (int d = axis + 1; d < data.rank(); ++d) block *= data.dim(d);
  gather_blocks(static_cast<const uint8_t*>(data.raw()), outer, dim,
                block * (dtype_bits(data.dtype()) / 8), idx, static_cast<uint8_t*>(y.raw()),
                ctx.runner);
}

const RegisterOp kSchema(with_attrs<GatherAttrs>({.name = "gather", .min_inputs = 2,
                                                  .max_inputs = 2},
                                                 {{"axis", AttrType::kInt, false}}, parse,
                                                 infer));
const RegisterKernel kCpu("gather", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
