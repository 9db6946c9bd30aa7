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
  SAMPAN_CHECK(schema.attrs.empty() || schema.parse_attrs, ErrorCode::kInternal,
               "op '{}' declares attributes but no parse_attrs", schema.name);
  if (!schema.infer_typed) {
    schema.infer_typed = [infer = schema.infer](const graph::Node& node, const OpAttrs*,
                                                const std::vector<TensorDesc>& in) {
      return infer(node, in);
    };
  }
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

namespace {

const char* attr_type_name(AttrType t) {
  switch (t) {
    case AttrType::kInt: return "an integer";
    case AttrType::kFloat: return "a number";
    case AttrType::kString: return "a string";
    case AttrType::kInts: return "an integer list";
  }
  return "?";
}

const char* attr_value_type_name(const graph::AttrValue& v) {
  if (std::holds_alternative<int64_t>(v)) return "an integer";
  if (std::holds_alternative<double>(v)) return "a float";
  if (std::holds_alternative<std::string>(v)) return "a string";
  if (std::holds_alternative<std::vector<int64_t>>(v)) return "an integer list";
  return "a float list";
}

bool has_type(const graph::AttrValue& v, AttrType t) {
  switch (t) {
    case AttrType::kInt: return std::holds_alternative<int64_t>(v);
    case AttrType::kFloat:  // an integer reads as a number, as Attributes::get_float does
      return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
    case AttrType::kString: return std::holds_alternative<std::string>(v);
    case AttrType::kInts: return std::holds_alternative<std::vector<int64_t>>(v);
  }
  return false;
}

}  // namespace

void check_attrs(const graph::Node& node, const std::vector<AttrDecl>& decls) {
  const auto& all = node.attrs.all();
  for (const AttrDecl& d : decls) {
    auto it = all.find(d.name);
    if (it == all.end()) {
      SAMPAN_CHECK(!d.required, ErrorCode::kInvalidArgument,
                   "node '{}' ({}): missing attribute '{}'", node.name, node.op, d.name);
      continue;
    }
    SAMPAN_CHECK(has_type(it->second, d.type), ErrorCode::kInvalidArgument,
                 "node '{}' ({}): attribute '{}' is {}, expected {}", node.name, node.op, d.name,
                 attr_value_type_name(it->second), attr_type_name(d.type));
  }
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

bool flag_attr(const graph::Node& node, const char* name) {
  const int64_t v = node.attrs.get_int(name, 0);
  SAMPAN_CHECK(v == 0 || v == 1, ErrorCode::kInvalidArgument,
               "node '{}' ({}): {} = {} is not 0 or 1", node.name, node.op, name, v);
  return v == 1;
}

int64_t row_stride(const Tensor& t) {
  SAMPAN_CHECK(t.rank() >= 1 && t.rows_contiguous(), ErrorCode::kInternal,
               "tensor {} does not have contiguous rows", t.str());
  return t.rank() >= 2 ? t.stride(-2) : t.dim(-1);
}

KnownValue known_value(const Tensor& t) {
  const DType d = t.dtype();
  if (d != DType::kI32 && d != DType::kI64 && d != DType::kU8 && d != DType::kBool) return std::nullopt;
  if (t.numel() > kMaxKnownValue) return std::nullopt;
  const Tensor host = t.device().type == DeviceType::kCPU ? t.contiguous() : t.to(Device::cpu()).contiguous();
  std::vector<int64_t> v(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (d) {
      case DType::kI32: v[i] = host.data<int32_t>()[i]; break;
      case DType::kI64: v[i] = host.data<int64_t>()[i]; break;
      default: v[i] = host.data<uint8_t>()[i]; break;
    }
  }
  return v;
}

}  // namespace sampan::ops
