#include "engine/ops/op_registry.h"

#include "engine/core/error.h"

namespace sampan::ops {

OpRegistry& OpRegistry::instance() {
  static OpRegistry registry;
  return registry;
}

void OpRegistry::add_schema(OpSchema schema) {
  SAMPAN_CHECK(!schemas_.count(schema.name), ErrorCode::kInternal, "op '{}' registered twice",
               schema.name);
  schemas_.emplace(schema.name, std::move(schema));
}

void OpRegistry::add_kernel(const std::string& op, DeviceType device, KernelFn fn) {
  kernels_[{op, device}] = std::move(fn);
}

const OpSchema& OpRegistry::schema(const std::string& op) const {
  auto it = schemas_.find(op);
  SAMPAN_CHECK(it != schemas_.end(), ErrorCode::kUnsupported, "unknown op '{}'", op);
  return it->second;
}

bool OpRegistry::has_schema(const std::string& op) const { return schemas_.count(op) != 0; }

bool OpRegistry::supports(const std::string& op, DeviceType device) const {
  auto it = schemas_.find(op);
  if (it == schemas_.end()) return false;
  return it->second.view != nullptr || kernels_.count({op, device}) != 0;
}

const KernelFn& OpRegistry::kernel(const std::string& op, DeviceType device) const {
  auto it = kernels_.find({op, device});
  SAMPAN_CHECK(it != kernels_.end(), ErrorCode::kUnsupported, "op '{}' has no {} kernel", op,
               device == DeviceType::kCPU ? "cpu" : "cuda");
  return it->second;
}

void OpRegistry::add_fault_text(const std::string& op, DeviceType device, FaultTextFn fn) {
  fault_texts_[{op, device}] = fn;
}

FaultTextFn OpRegistry::fault_text(const std::string& op, DeviceType device) const {
  auto it = fault_texts_.find({op, device});
  return it == fault_texts_.end() ? nullptr : it->second;
}

std::vector<std::string> OpRegistry::op_names() const {
  std::vector<std::string> names;
  for (const auto& [name, _] : schemas_) names.push_back(name);
  return names;
}

void expect_rank(const graph::Node& node, const TensorDesc& t, int index, int rank) {
  SAMPAN_CHECK(static_cast<int>(t.shape.size()) == rank, ErrorCode::kInvalidArgument,
               "node '{}' ({}): input {} has shape {}, expected rank {}", node.name, node.op, index,
               shape_str(t.shape), rank);
}

void expect_dtype(const graph::Node& node, const TensorDesc& t, int index, DType dtype) {
  SAMPAN_CHECK(t.dtype == dtype, ErrorCode::kInvalidArgument,
               "node '{}' ({}): input {} is {}, expected {}", node.name, node.op, index,
               dtype_name(t.dtype), dtype_name(dtype));
}

void expect_dim(const graph::Node& node, const TensorDesc& t, int index, int dim, int64_t size) {
  const int r = static_cast<int>(t.shape.size());
  const int d = dim < 0 ? dim + r : dim;
  SAMPAN_CHECK(d >= 0 && d < r && t.shape[static_cast<size_t>(d)] == size,
               ErrorCode::kInvalidArgument,
               "node '{}' ({}): input {} has shape {}, expected dim {} = {}", node.name, node.op,
               index, shape_str(t.shape), dim, size);
}

int64_t row_stride(const Tensor& t) {
  SAMPAN_CHECK(t.rank() >= 1 && t.rows_contiguous(), ErrorCode::kInternal,
               "tensor {} does not have contiguous rows", t.str());
  return t.rank() >= 2 ? t.stride(-2) : t.dim(-1);
}

}  // namespace sampan::ops
