// The conv2d op's parsed attributes (the op: conv2d.cc; its CPU kernel: kernels/cpu/conv_cpu.h).
// Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/conv_cpu.h"

namespace sampan::ops {

struct Conv2dAttrs final : OpAttrs {
  std::array<int64_t, 2> strides{1, 1};       // >= 1
  std::array<int64_t, 4> pads{0, 0, 0, 0};    // top, left, bottom, right; >= 0
  std::array<int64_t, 2> dilations{1, 1};     // >= 1
  int64_t group = 1;                          // >= 1
  cpu::ConvEpilogue epilogue;                 // activation, act_min/act_max for clip
  // precision "bf16" (set by convert_precision_bf16): w is bf16, the GEMM's inputs are rounded
  // to bf16 and accumulate in f32 (cpu::conv2d_bf16). "f32" (the default): all f32.
  bool bf16 = false;
};

// Attribute `name` of a node of op `op`: exactly N integers, each >= min_value; `fallback` when
// absent. Throws Error(kInvalidArgument) naming the node, op and attribute.
template <size_t N>
std::array<int64_t, N> conv_ints_attr(const graph::Node& node, const char* op, const char* name,
                                      std::array<int64_t, N> fallback, int64_t min_value) {
  if (!node.attrs.has(name)) return fallback;
  const std::vector<int64_t>& v = node.attrs.get_ints(name);
  SAMPAN_CHECK(v.size() == N, ErrorCode::kInvalidArgument,
               "node '{}' ({}): attribute '{}' has {} values, expected {}", node.name, op, name,
               v.size(), N);
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N; ++i) {
    SAMPAN_CHECK(v[i] >= min_value, ErrorCode::kInvalidArgument,
                 "node '{}' ({}): attribute '{}' value {} is below {}", node.name, op, name, v[i],
                 min_value);
    out[i] = v[i];
  }
  return out;
}

// Reads strides, pads, dilations, group, activation, act_min, act_max, precision (all
// optional).
Conv2dAttrs parse_conv2d_attrs(const graph::Node& node);

// The f32 data of an input a conv launcher reads (`holder` keeps a contiguous copy when the
// executor hands a strided view).
inline const float* contiguous_data(const Tensor& t, Tensor& holder) {
  if (t.is_contiguous()) return t.data<float>();
  holder = t.contiguous();
  return holder.data<float>();
}

// Whether optional input i (bias, residual) was given.
inline bool conv_input_given(const KernelContext& ctx, size_t i) {
  return ctx.inputs.size() > i && ctx.inputs[i].defined() && ctx.inputs[i].numel() > 0;
}

// "none", "relu", "clip", "sigmoid", "hard_swish"; false for anything else.
bool conv_activation_from_name(const std::string& name, cpu::ConvActivation* out);

}  // namespace sampan::ops
