// The pool2d op's parsed attributes (the op: pool2d.cc; its CPU kernel: kernels/cpu/pool_cpu.h).
// Parsed once per node when the executor plans (op_registry.h).
#pragma once

#include <array>
#include <cstdint>

#include "engine/ops/op_registry.h"
#include "kernels/cpu/pool_cpu.h"

namespace sampan::ops {

struct Pool2dAttrs final : OpAttrs {
  cpu::PoolKind kind = cpu::PoolKind::kMax;
  bool global = false;                      // kernel = the whole plane, output [N, C, 1, 1]
  std::array<int64_t, 2> kernel{1, 1};      // unused when global
  std::array<int64_t, 2> strides{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // top, left, bottom, right
  std::array<int64_t, 2> dilations{1, 1};
  bool ceil_mode = false;
  bool count_include_pad = false;
};

// Reads kind (required), global, kernel (required unless global), strides, pads, dilations,
// ceil_mode, count_include_pad.
Pool2dAttrs parse_pool2d_attrs(const graph::Node& node);

// The kernel's geometry for an input of n images of c planes h x w (any layout): window, pads,
// output size (ceil_mode drops a last window starting beyond the input and its top/left pad).
cpu::PoolShape pool_shape(const Pool2dAttrs& a, int64_t n, int64_t c, int64_t h, int64_t w);

}  // namespace sampan::ops
