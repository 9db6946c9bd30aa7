// split(x [rows, n]) -> views [rows, sizes[i]] along the last dimension; attribute sizes.
// A view op: the outputs alias x's memory (row stride stays n), no kernel runs.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

// Only this file reads them: a view op has no backend files.
struct SplitAttrs final : OpAttrs {
  std::vector<int64_t> sizes;  // one per output, none negative
};

SplitAttrs parse(const graph::Node& node) {
  SplitAttrs a;
  a.sizes = node.attrs.get_ints("sizes");
  SAMPAN_CHECK(a.sizes.size() == node.outputs.size(), ErrorCode::kInvalidArgument,
               "node '{}' (split): {} sizes for {} outputs", node.name, a.sizes.size(),
               node.outputs.size());
  for (int64_t s : a.sizes) {
    SAMPAN_CHECK(s >= 0, ErrorCode::kInvalidArgument, "node '{}' (split): negative size",
                 node.name);
  }
  return a;
}

std::vector<TensorDesc> infer(const graph::Node& node, const SplitAttrs& a,
                              const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  int64_t total = 0;
  std::vector<TensorDesc> out;
  for (int64_t s : a.sizes) {
    total += s;
    out.push_back({{in[0].shape[0], s}, in[0].dtype});
  }
  expect_dim(node, in[0], 0, 1, total);
  return out;
}

std::vector<Tensor> view(const graph::Node&, const OpAttrs* attrs, const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  int64_t begin = 0;
  for (int64_t s : static_cast<const SplitAttrs*>(attrs)->sizes) {
    out.push_back(in[0].slice(1, begin, begin + s));
    begin += s;
  }
  return out;
}

const RegisterOp kSchema(with_attrs<SplitAttrs>({.name = "split", .min_inputs = 1,
                                                 .max_inputs = 1, .n_outputs = -1, .view = view},
                                                {{"sizes", AttrType::kInts}}, parse, infer));

}  // namespace
}  // namespace sampan::ops
