#include "engine/ops/broadcast.h"

#include <algorithm>

#include "engine/core/error.h"

namespace sampan::ops {

Shape broadcast_shapes(const graph::Node& node, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Right-aligned: dimension i of the output is a's (i - (rank - |a|)) when that exists.
    const int64_t da = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t db = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    SAMPAN_CHECK(da == db || da == 1 || db == 1, ErrorCode::kInvalidArgument,
                 "node '{}' ({}): shapes {} and {} do not broadcast", node.name, node.op,
                 shape_str(a), shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& out) {
  Shape s(out.size(), 0);
  const size_t shift = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    s[shift + i] = shape[i] == 1 && out[shift + i] != 1 ? 0 : strides[i];
  }
  return s;
}

}  // namespace sampan::ops
