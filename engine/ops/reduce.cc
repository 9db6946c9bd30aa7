// reduce(x f32|i32|i64) -> x reduced over `axes`; attributes kind (mean, sum, max, min, prod),
// axes (ints; empty or absent: every dim), keepdims (default 1). f32 sums and means accumulate
// in double; integer mean truncates toward zero; an empty reduction gives sum 0, prod 1, mean
// NaN (f32) or 0, max/min the dtype's lowest/highest. Known integer contents fold at inference
// through the same loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/vec_util.h"

namespace sampan::ops {
namespace {

enum class ReduceKind { kMean, kSum, kMax, kMin, kProd };

struct ReduceAttrs final : OpAttrs {
  ReduceKind kind = ReduceKind::kSum;
  std::vector<int64_t> axes;  // as given; normalised against the rank by reduce_plan
  bool keepdims = true;
};

ReduceAttrs parse(const graph::Node& node) {
  ReduceAttrs a;
  const std::string& k = node.attrs.get_string("kind");
  constexpr std::pair<std::string_view, ReduceKind> kKinds[] = {
      {"mean", ReduceKind::kMean}, {"sum", ReduceKind::kSum}, {"max", ReduceKind::kMax},
      {"min", ReduceKind::kMin}, {"prod", ReduceKind::kProd}};
  bool found = false;
  for (const auto& [name, kind] : kKinds) {
    if (name == k) {
      a.kind = kind;
      found = true;
    }
  }
  SAMPAN_CHECK(found, ErrorCode::kInvalidArgument, "node '{}' (reduce): unknown kind '{}'",
               node.name, k);
  if (node.attrs.has("axes")) a.axes = node.attrs.get_ints("axes");
  a.keepdims = node.attrs.get_int("keepdims", 1) != 0;
  return a;
}

// Which dims of `shape` are reduced, and the output shape.
struct ReducePlan {
  std::vector<bool> reduced;
  Shape out;
};

ReducePlan reduce_plan(const graph::Node& node, const ReduceAttrs& a, const Shape& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  ReducePlan p;
  p.reduced.assign(shape.size(), a.axes.empty());
  for (int64_t ax : a.axes) {
    SAMPAN_CHECK(ax >= -rank && ax < rank, ErrorCode::kInvalidArgument,
                 "node '{}' (reduce): axis {} out of range for rank {}", node.name, ax, rank);
    const size_t d = static_cast<size_t>(ax < 0 ? ax + rank : ax);
    SAMPAN_CHECK(!p.reduced[d], ErrorCode::kInvalidArgument,
                 "node '{}' (reduce): axis {} given twice", node.name, ax);
    p.reduced[d] = true;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!p.reduced[d]) {
      p.out.push_back(shape[d]);
    } else if (a.keepdims) {
      p.out.push_back(1);
    }
  }
  return p;
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
Acc<T> init(ReduceKind k) {
  switch (k) {
    case ReduceKind::kMean:
    case ReduceKind::kSum: return 0;
    case ReduceKind::kProd: return 1;
    case ReduceKind::kMax:
      if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<double>::infinity();
      else return std::numeric_limits<T>::lowest();
    case ReduceKind::kMin:
      if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<double>::infinity();
      else return std::numeric_limits<T>::max();
  }
  return 0;
}

template <class T>
inline Acc<T> combine(ReduceKind k, Acc<T> acc, T v) {
  const Acc<T> x = static_cast<Acc<T>>(v);
  switch (k) {
    case ReduceKind::kMean:
    case ReduceKind::kSum:
      if constexpr (std::is_floating_point_v<T>) return acc + x;
      else return static_cast<Acc<T>>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(x));
    case ReduceKind::kProd:
      if constexpr (std::is_floating_point_v<T>) return acc * x;
      else return static_cast<Acc<T>>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(x));
    case ReduceKind::kMax: return x > acc || x != x ? x : acc;  // NaN wins
    case ReduceKind::kMin: return x < acc || x != x ? x : acc;
  }
  return acc;
}

template <class T>
T finish(ReduceKind k, Acc<T> acc, int64_t count) {
  if (k != ReduceKind::kMean) return static_cast<T>(acc);
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(acc / static_cast<double>(count));  // 0 / 0 = NaN when empty
  } else {
    return count == 0 ? T{0} : static_cast<T>(acc / count);
  }
}

// x: contiguous `shape`; y: contiguous, the kept dims in order. Dims are grouped into runs of
// equal "reduced" flag, so the innermost run is one loop: a row sum (reduced) or an
// element-wise accumulation into a row of y's accumulators (kept). Independent output rows run
// in parallel when the innermost run is reduced (the usual mean over the hidden size).
template <class T>
void reduce_typed(ReduceKind k, const Shape& shape, const std::vector<bool>& reduced,
                  const T* x, T* y, cpu::TaskRunner& runner) {
  std::vector<int64_t> size;
  std::vector<bool> red;
  int64_t count = 1, n_out = 1, total = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    total *= shape[d];
    if (reduced[d]) count *= shape[d]; else n_out *= shape[d];
    if (shape[d] == 1) continue;
    if (!size.empty() && red.back() == reduced[d]) {
      size.back() *= shape[d];
    } else {
      size.push_back(shape[d]);
      red.push_back(reduced[d]);
    }
  }
  std::vector<Acc<T>> acc(static_cast<size_t>(n_out), init<T>(k));
  if (total > 0) {
    if (size.empty()) {  // one element
      acc[0] = combine<T>(k, acc[0], x[0]);
    } else if (red.back() && (size.size() == 1 || (size.size() == 2 && !red[0]))) {
      const int64_t n = size.back();
      cpu::util::parallel_for(runner, n_out, cpu::util::ceil_div(16384, n),
                              [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          Acc<T> s = init<T>(k);
          const T* row = x + r * n;
          for (int64_t i = 0; i < n; ++i) s = combine<T>(k, s, row[i]);
          acc[static_cast<size_t>(r)] = s;
        }
      });
    } else {
      // Output strides of each run (0 for a reduced run), then an odometer over the runs.
      const size_t g = size.size();
      std::vector<int64_t> ostride(g, 0);
      for (int64_t s = 1, i = static_cast<int64_t>(g) - 1; i >= 0; --i) {
        if (!red[static_cast<size_t>(i)]) {
          ostride[static_cast<size_t>(i)] = s;
          s *= size[static_cast<size_t>(i)];
        }
      }
      const int64_t n = size.back();
      std::vector<int64_t> idx(g, 0);
      int64_t o = 0;
      for (int64_t base = 0; base < total; base += n) {
        const T* row = x + base;
        if (red.back()) {
          Acc<T> s = acc[static_cast<size_t>(o)];
          for (int64_t i = 0; i < n; ++i) s = combine<T>(k, s, row[i]);
          acc[static_cast<size_t>(o)] = s;
        } else {
          Acc<T>* a = acc.data() + o;
          for (int64_t i = 0; i < n; ++i) a[i] = combine<T>(k, a[i], row[i]);
        }
        for (int64_t i = static_cast<int64_t>(g) - 2; i >= 0; --i) {
          const size_t u = static_cast<size_t>(i);
          o += ostride[u];
          if (++idx[u] < size[u]) break;
          o -= size[u] * ostride[u];
          idx[u] = 0;
        }
      }
    }
  }
  for (int64_t i = 0; i < n_out; ++i) y[i] = finish<T>(k, acc[static_cast<size_t>(i)], count);
}

std::vector<TensorDesc> infer(const graph::Node& node, const ReduceAttrs& a,
                              const std::vector<TensorDesc>& in) {
  const DType t = in[0].dtype;
  SAMPAN_CHECK(t == DType::kF32 || t == DType::kI32 || t == DType::kI64,
               ErrorCode::kInvalidArgument, "node '{}' (reduce): input 0 is {}, expected f32, "
               "i32 or i64", node.name, dtype_name(t));
  const ReducePlan p = reduce_plan(node, a, in[0].shape);
  TensorDesc d{p.out, t};
  if (in[0].value && t != DType::kF32) {
    std::vector<int64_t> v(static_cast<size_t>(shape_numel(p.out)));
    cpu::SerialRunner serial;
    reduce_typed<int64_t>(a.kind, in[0].shape, p.reduced, in[0].value->data(), v.data(), serial);
    if (t == DType::kI32) {
      for (int64_t& e : v) e = static_cast<int32_t>(e);
    }
    d.value = std::move(v);
  }
  return {d};
}

void run_cpu(const KernelContext& ctx) {
  const ReduceAttrs& a = ctx.attrs_as<ReduceAttrs>();
  const Tensor x = ctx.inputs[0].is_contiguous() ? ctx.inputs[0] : ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  const ReducePlan p = reduce_plan(ctx.node, a, x.shape());
  switch (x.dtype()) {
    case DType::kF32:
      return reduce_typed<float>(a.kind, x.shape(), p.reduced, x.data<float>(), y.data<float>(),
                                 ctx.runner);
    case DType::kI32:
      return reduce_typed<int32_t>(a.kind, x.shape(), p.reduced, x.data<int32_t>(),
                                   y.data<int32_t>(), ctx.runner);
    case DType::kI64:
      return reduce_typed<int64_t>(a.kind, x.shape(), p.reduced, x.data<int64_t>(),
                                   y.data<int64_t>(), ctx.runner);
    default: break;
  }
}

const RegisterOp kSchema(with_attrs<ReduceAttrs>({.name = "reduce", .min_inputs = 1,
                                                  .max_inputs = 1},
                                                 {{"kind", AttrType::kString},
                                                  {"axes", AttrType::kInts, false},
                                                  {"keepdims", AttrType::kInt, false}},
                                                 parse, infer));
const RegisterKernel kCpu("reduce", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
