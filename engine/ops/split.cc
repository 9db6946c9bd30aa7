// split(x [rows, n]) -> views [rows, sizes[i]] along the last dimension; attribute sizes.
// A view op: the outputs alias x's memory (row stride stays n), no kernel runs.
#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node& node, const std::vector<TensorDesc>& in) {
  expect_rank(node, in[0], 0, 2);
  const auto& sizes = node.attrs.get_ints("sizes");
  SAMPAN_CHECK(sizes.size() == node.outputs.size(), ErrorCode::kInvalidArgument,
               "node '{}' (split): {} sizes for {} outputs", node.name, sizes.size(),
               node.outputs.size());
  int64_t total = 0;
  std::vector<TensorDesc> out;
  for (int64_t s : sizes) {
    SAMPAN_CHECK(s >= 0, ErrorCode::kInvalidArgument, "node '{}' (split): negative size",
                 node.name);
    total += s;
    out.push_back({{in[0].shape[0], s}, in[0].dtype});
  }
  expect_dim(node, in[0], 0, 1, total);
  return out;
}

std::vector<Tensor> view(const graph::Node& node, const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  int64_t begin = 0;
  for (int64_t s : node.attrs.get_ints("sizes")) {
    out.push_back(in[0].slice(1, begin, begin + s));
    begin += s;
  }
  return out;
}

const RegisterOp kSchema({.name = "split", .min_inputs = 1, .max_inputs = 1, .n_outputs = -1,
                          .infer = infer, .view = view});

}  // namespace
}  // namespace sampan::ops
