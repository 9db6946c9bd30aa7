// identity(x [any]) -> x. A view op: the output is x itself (same memory, same strides), and its
// known value is x's.
#include "engine/ops/op_registry.h"

namespace sampan::ops {
namespace {

std::vector<TensorDesc> infer(const graph::Node&, const std::vector<TensorDesc>& in) {
  return {{in[0].shape, in[0].dtype, true, in[0].value}};
}

std::vector<Tensor> view(const graph::Node&, const OpAttrs*, const std::vector<Tensor>& in) {
  return {in[0]};
}

const RegisterOp kSchema({.name = "identity", .min_inputs = 1, .max_inputs = 1, .infer = infer,
                          .view = view});

}  // namespace
}  // namespace sampan::ops
