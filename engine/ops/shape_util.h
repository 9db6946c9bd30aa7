// Helpers shared by the shape and data-movement ops (shape, reshape, flatten, squeeze,
// unsqueeze, identity, transpose, concat, slice, split, expand, constant_of_shape, range):
// axis normalisation, the known values of TensorDesc::value, and the strided copies of their
// CPU launchers. Every check throws one line naming the node and its op.
#pragma once

#include <string_view>
#include <vector>

#include "engine/ops/op_registry.h"

namespace sampan::ops {

// `axis` in [-rank, rank) as an index in [0, rank): "node 'n' (op): axis 3 is out of range for
// rank 3". Ops whose axis may equal rank (flatten, unsqueeze) pass rank + 1.
int normalize_axis(const graph::Node& node, int64_t axis, int rank);
// Each axis normalised; a repeated axis is refused ("node 'n' (op): axis 1 is repeated").
std::vector<int> normalize_axes(const graph::Node& node, const std::vector<int64_t>& axes,
                                int rank);

// The contents of input `index` (TensorDesc::value), or the one-line refusal of an op that needs
// them to know its output shape: "node 'n' (op): the <what> is computed at run time; only
// shapes known before the run are supported".
const std::vector<int64_t>& need_value(const graph::Node& node, const TensorDesc& t,
                                       std::string_view what);
// Input `index` must be i32 or i64 of rank `rank` (-1: any rank, and 0 or 1 for a scalar).
void expect_int_input(const graph::Node& node, const TensorDesc& t, int index, int rank);

// True when a tensor of this dtype and shape carries its contents in TensorDesc::value
// (i32/i64/u8/bool of at most kMaxKnownValue elements).
bool tracks_value(DType dtype, const Shape& shape);
// `values` stored as `dtype` keeps them (bool: 0/1; i32/u8: wrapped like the kernels' casts)
// when tracks_value(dtype, shape), else nullopt.
KnownValue make_value(DType dtype, const Shape& shape, std::vector<int64_t> values);
// The elements of the row-major `values` that a strided index map picks: out[i] =
// values[base + sum(i_d * strides[d])] over the index space `out_shape`.
std::vector<int64_t> pick_strided(const std::vector<int64_t>& values, const Shape& out_shape,
                                  int64_t base, const Shape& strides);

// Bytes per element of a copy kernel; refuses packed i4 naming the node.
int element_bytes(const graph::Node& node, DType dtype);

// The contents of an i32/i64/u8/bool CPU tensor (any strides, any size) as int64s.
std::vector<int64_t> read_ints(const Tensor& t);
// Stores `values` cast to t's dtype (f32, i32, i64, u8, bool) into the contiguous CPU tensor t.
void write_ints(const Tensor& t, const std::vector<int64_t>& values);

// x with the same elements in `shape` (row-major order): a view of x when x is contiguous. A
// non-contiguous x (a split output, a strided graph input) has no such view in general, since a
// Tensor's strides come only from slicing or reshaping a contiguous one: on the CPU the result
// is then a contiguous copy that the output owns (outside the executor's arena; the executor
// keeps it alive as the value's tensor), on a device an Error naming the node. Used by the view
// ops reshape, flatten, squeeze and unsqueeze.
Tensor reshaped(const graph::Node& node, const Tensor& x, const Shape& shape);

// Copies x, read through (shape, strides in elements, starting `offset` elements from x's data)
// into y at y's own strides, on the CPU: the launchers of transpose, slice, expand and concat.
// The reads may use zero or negative strides; y must not overlap x.
void copy_into(const Tensor& x, int64_t offset, const Shape& shape, const Shape& strides,
               const Tensor& y, cpu::TaskRunner& runner);

}  // namespace sampan::ops
