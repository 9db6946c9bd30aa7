// pool2d(x [N, C, H, W] f32) -> y [N, C, Ho, Wo]: ONNX MaxPool / AveragePool (global = 0) and
// GlobalMaxPool / GlobalAveragePool (global = 1, Ho = Wo = 1).
// Attributes: kind "max" | "avg"; kernel [2] (required unless global); strides [2] (1, 1);
// pads [4] top, left, bottom, right (0s); dilations [2] (1, 1); ceil_mode, count_include_pad,
// global (0/1, default 0).
// Ho = floor or ceil((H + pt + pb - d * (kh - 1) - 1) / s) + 1; with ceil_mode a last window
// that would start beyond the input and its top/left pad is dropped (ONNX and PyTorch agree).
#include "engine/ops/pool2d.h"

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

template <size_t N>
std::array<int64_t, N> ints_attr(const graph::Node& node, const char* name,
                                 std::array<int64_t, N> fallback, int64_t min_value) {
  if (!node.attrs.has(name)) return fallback;
  const std::vector<int64_t>& v = node.attrs.get_ints(name);
  SAMPAN_CHECK(v.size() == N, ErrorCode::kInvalidArgument,
               "node '{}' (pool2d): attribute '{}' has {} values, expected {}", node.name, name,
               v.size(), N);
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N; ++i) {
    SAMPAN_CHECK(v[i] >= min_value, ErrorCode::kInvalidArgument,
                 "node '{}' (pool2d): attribute '{}' value {} is below {}", node.name, name, v[i],
                 min_value);
    out[i] = v[i];
  }
  return out;
}

bool flag(const graph::Node& node, const char* name) {
  const int64_t v = node.attrs.get_int(name, 0);
  SAMPAN_CHECK(v == 0 || v == 1, ErrorCode::kInvalidArgument,
               "node '{}' (pool2d): attribute '{}' = {}, expected 0 or 1", node.name, name, v);
  return v == 1;
}

// One output dimension (see the top of the file).
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad_lo, int64_t pad_hi, int64_t d,
                 bool ceil_mode) {
  const int64_t span = in + pad_lo + pad_hi - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad_lo) --out;
  return out;
}

}  // namespace

Pool2dAttrs parse_pool2d_attrs(const graph::Node& node) {
  Pool2dAttrs a;
  const std::string& kind = node.attrs.get_string("kind");
  SAMPAN_CHECK(kind == "max" || kind == "avg", ErrorCode::kInvalidArgument,
               "node '{}' (pool2d): unknown kind '{}' (max or avg)", node.name, kind);
  a.kind = kind == "max" ? cpu::PoolKind::kMax : cpu::PoolKind::kAvg;
  a.global = flag(node, "global");
  a.ceil_mode = flag(node, "ceil_mode");
  a.count_include_pad = flag(node, "count_include_pad");
  if (!a.global) {
    SAMPAN_CHECK(node.attrs.has("kernel"), ErrorCode::kInvalidArgument,
                 "node '{}' (pool2d): missing attribute 'kernel'", node.name);
    a.kernel = ints_attr<2>(node, "kernel", {1, 1}, 1);
    a.strides = ints_attr<2>(node, "strides", {1, 1}, 1);
    a.pads = ints_attr<4>(node, "pads", {0, 0, 0, 0}, 0);
    a.dilations = ints_attr<2>(node, "dilations", {1, 1}, 1);
  }
  return a;
}

cpu::PoolShape pool_shape(const Pool2dAttrs& a, int64_t n, int64_t c, int64_t h, int64_t w) {
  cpu::PoolShape s;
  s.kind = a.kind;
  s.n = n;
  s.c = c;
  s.h = h;
  s.w = w;
  s.count_include_pad = a.count_include_pad;
  if (a.global) {
    s.kh = s.h;
    s.kw = s.w;
    s.ho = s.wo = 1;
    return s;
  }
  s.kh = a.kernel[0];
  s.kw = a.kernel[1];
  s.stride_h = a.strides[0];
  s.stride_w = a.strides[1];
  s.pad_t = a.pads[0];
  s.pad_l = a.pads[1];
  s.pad_b = a.pads[2];
  s.pad_r = a.pads[3];
  s.dil_h = a.dilations[0];
  s.dil_w = a.dilations[1];
  s.ho = out_size(s.h, s.kh, s.stride_h, s.pad_t, s.pad_b, s.dil_h, a.ceil_mode);
  s.wo = out_size(s.w, s.kw, s.stride_w, s.pad_l, s.pad_r, s.dil_w, a.ceil_mode);
  return s;
}

namespace {

// x: [N, C, H, W].
cpu::PoolShape pool_shape(const Pool2dAttrs& a, const Shape& x) {
  return ops::pool_shape(a, x[0], x[1], x[2], x[3]);
}

std::vector<TensorDesc> infer(const graph::Node& node, const Pool2dAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 4);
  expect_dtype(node, in[0], 0, DType::kF32);
  const cpu::PoolShape s = pool_shape(a, in[0].shape);
  SAMPAN_CHECK(a.global || (s.ho >= 1 && s.wo >= 1), ErrorCode::kInvalidArgument,
               "node '{}' (pool2d): input {} is smaller than the window {}x{} with pads",
               node.name, shape_str(in[0].shape), s.kh, s.kw);
  SAMPAN_CHECK(!a.global || (s.h >= 1 && s.w >= 1), ErrorCode::kInvalidArgument,
               "node '{}' (pool2d): global pooling of an empty plane {}", node.name,
               shape_str(in[0].shape));
  return {{{s.n, s.c, s.ho, s.wo}, DType::kF32}};
}

void run_cpu(const KernelContext& ctx) {
  const Tensor x = ctx.inputs[0].contiguous();
  const Tensor& y = ctx.outputs[0];
  cpu::pool2d(pool_shape(ctx.attrs_as<Pool2dAttrs>(), x.shape()), x.data<float>(),
              y.data<float>(), ctx.runner);
}

const RegisterOp kSchema(with_attrs<Pool2dAttrs>({.name = "pool2d", .min_inputs = 1,
                                                  .max_inputs = 1},
                                                 {{"kind", AttrType::kString},
                                                  {"kernel", AttrType::kInts, false},
                                                  {"strides", AttrType::kInts, false},
                                                  {"pads", AttrType::kInts, false},
                                                  {"dilations", AttrType::kInts, false},
                                                  {"ceil_mode", AttrType::kInt, false},
                                                  {"count_include_pad", AttrType::kInt, false},
                                                  {"global", AttrType::kInt, false}},
                                                 parse_pool2d_attrs, infer));
const RegisterKernel kCpu("pool2d", DeviceType::kCPU, run_cpu);

}  // namespace
}  // namespace sampan::ops
