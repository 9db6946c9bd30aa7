// ONNX graphs into Sampan's graph IR: every ONNX node becomes one (sometimes two) of the ops in
// docs/CLASSIC_OPS.md. The translation is a table by op_type; what the table lacks is refused with
// one line naming the file, the node and the op. Registered as the "onnx" model format.
//
// Before translating, the nodes are put in topological order (the specification requires it,
// but files in the wild are not always sorted), which also finds the two structural faults a
// file can have: an input no node, initializer or graph input makes, and a cycle.
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/loaders/onnx_file.h"
#include "engine/models/import_util.h"
#include "engine/models/model.h"
#include "proto/formats/onnx.pb.h"

namespace sampan::models {
namespace {

namespace fs = std::filesystem;
namespace pb = onnx_format;
using graph::Attributes;
using graph::AttrValue;
using graph::kNoValue;
using graph::ValueId;

// AttributeProto.AttributeType values.
enum : int32_t { kAttrFloat = 1, kAttrInt = 2, kAttrString = 3, kAttrTensor = 4, kAttrFloats = 6, kAttrInts = 7 };

struct Importer {
  const onnx::OnnxFile& file;
  Model& model;
  graph::Graph& g;
  std::map<std::string, ValueId> values;  // ONNX tensor name -> value
  const pb::NodeProto* node = nullptr;    // being translated
  std::string node_name;
  int64_t opset = 0;

  [[noreturn]] void refuse(const std::string& why) const {
    fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' {}", file.path, node_name,
         node->op_type(), why);
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail(ErrorCode::kInvalidArgument, "{}: node '{}' ({}): {}", file.path, node_name,
         node->op_type(), why);
  }

  // --- attributes ---
  const pb::AttributeProto* attr(const std::string& name) const {
    for (const auto& a : node->attribute()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  void expect_type(const pb::AttributeProto& a, int32_t type, const char* what) const {
    // Files written before IR 3 may leave `type` unset; the field present then decides.
    if (a.type() != 0 && a.type() != type) {
      static const char* names[] = {"UNDEFINED", "FLOAT", "INT", "STRING", "TENSOR", "GRAPH", "FLOATS",
                                    "INTS", "STRINGS", "TENSORS", "GRAPHS"};
      const std::string have = a.type() > 0 && a.type() <= 10 ? names[a.type()] : std::to_string(a.type());
      bad(fmt::format("attribute '{}' is {}, expected {}", a.name(), have, what));
    }
  }
  int64_t attr_int(const std::string& name, int64_t fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    expect_type(*a, kAttrInt, "INT");
    return a->i();
  }
  double attr_float(const std::string& name, double fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    expect_type(*a, kAttrFloat, "FLOAT");
    return a->f();
  }
  std::string attr_string(const std::string& name, const std::string& fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    expect_type(*a, kAttrString, "STRING");
    return a->s();
  }
  std::optional<std::vector<int64_t>> attr_ints(const std::string& name) const {
    const auto* a = attr(name);
    if (!a) return std::nullopt;
    expect_type(*a, kAttrInts, "INTS");
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
    auto v = attr_ints(name);
    return v ? *v : fallback;
  }

  // --- inputs ---
  int n_inputs() const { return node->input_size(); }
  bool has_input(int i) const { return i < node->input_size() && !node->input(i).empty(); }
  ValueId input(int i) const {
    if (!has_input(i)) bad(fmt::format("input {} is missing", i));
    return values.at(node->input(i));
  }
  ValueId optional_input(int i) const { return has_input(i) ? input(i) : kNoValue; }
  const Tensor* constant(int i) const {
    if (!has_input(i)) return nullptr;
    const graph::Value& v = g.value(input(i));
    return v.kind == graph::ValueKind::kConstant ? &v.constant : nullptr;
  }
  // An input that must be a constant list of integers (Squeeze's axes, Split's sizes...).
  std::vector<int64_t> constant_ints(int i, const char* what) const {
    const Tensor* t = constant(i);
    if (!t) refuse(fmt::format("with {} computed at run time is not supported (only a constant)", what));
    std::optional<std::vector<int64_t>> v = tensor_ints(*t);
    if (!v) bad(fmt::format("{} must be INT64, not {}", what, dtype_name(t->dtype())));
    return *v;
  }
  double constant_scalar(int i, const char* what) const {
    const Tensor* t = constant(i);
    if (!t) refuse(fmt::format("with {} computed at run time is not supported (only a constant)", what));
    if (t->numel() != 1) bad(fmt::format("{} must hold one value, not {}", what, t->numel()));
    return static_cast<double>(t->to_f32().contiguous().data<float>()[0]);
  }

  // --- emission ---
  // Adds a Sampan node for the current ONNX node; its outputs take the ONNX output names.
  std::vector<ValueId> emit(const std::string& op, std::vector<ValueId> inputs, Attributes attrs,
                            int n_outputs = 1) {
    std::vector<ValueId> outs = g.add_node(op, node_name, std::move(inputs), std::move(attrs), n_outputs);
    for (int i = 0; i < n_outputs && i < node->output_size(); ++i) bind(node->output(i), outs[static_cast<size_t>(i)]);
    return outs;
  }
  // A helper node inside a translation (its output is not an ONNX tensor).
  ValueId inner(const std::string& op, const std::string& suffix, std::vector<ValueId> inputs,
                Attributes attrs = {}) {
    return g.add(op, node_name + "/" + suffix, std::move(inputs), std::move(attrs));
  }
  void bind(const std::string& onnx_name, ValueId v) {
    if (onnx_name.empty()) return;
    if (values.count(onnx_name)) bad(fmt::format("output '{}' is produced twice", onnx_name));
    g.mutable_value(v).name = onnx_name;
    values[onnx_name] = v;
  }
  void bind_output(ValueId v) { bind(node->output(0), v); }
  // Outputs past `used` (indices, masks, saved statistics) may exist but nothing may read them.
  void only_outputs(int used, const std::set<std::string>& consumed) const {
    for (int i = used; i < node->output_size(); ++i) {
      if (!node->output(i).empty() && consumed.count(node->output(i))) {
        refuse(fmt::format("output {} ('{}') is not supported", i, node->output(i)));
      }
    }
  }
};

using Translate = std::function<void(Importer&)>;

void unary(Importer& im, const std::string& kind, Attributes extra = {}) {
  extra.set("kind", kind);
  im.emit("unary", {im.input(0)}, std::move(extra));
}

void binary(Importer& im, const std::string& kind) {
  im.emit("binary", {im.input(0), im.input(1)}, {{"kind", kind}});
}

// Max/Min/Sum over any number of inputs: a chain of binary nodes.
void variadic(Importer& im, const std::string& kind) {
  if (im.n_inputs() < 1) im.bad("needs at least one input");
  ValueId acc = im.input(0);
  for (int i = 1; i < im.n_inputs(); ++i) {
    acc = i + 1 == im.n_inputs()
              ? im.emit("binary", {acc, im.input(i)}, {{"kind", kind}})[0]
              : im.inner("binary", fmt::format("{}{}", kind, i), {acc, im.input(i)}, {{"kind", kind}});
  }
  if (im.n_inputs() == 1) im.emit("identity", {acc}, {});
}

// The pads of a conv or pool node: explicit `pads`, or what auto_pad SAME_UPPER / SAME_LOWER
// gives. SAME keeps ceil(in / stride) outputs; with stride 1 (the usual SAME layer) its total pad
// is (kernel - 1) * dilation whatever the input size, so it becomes explicit pads here (the odd
// unit goes to the end for SAME_UPPER, to the beginning for SAME_LOWER). With a stride > 1 it
// depends on the input size, which the graph only knows at run time: refused.
std::vector<int64_t> pads_of(Importer& im, size_t spatial, const std::vector<int64_t>& kernel,
                             const std::vector<int64_t>& strides,
                             const std::vector<int64_t>& dilations) {
  const std::string auto_pad = im.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (kernel.size() != spatial || strides.size() != spatial || dilations.size() != spatial) {
      im.bad("kernel_shape, strides and dilations must have one entry per spatial dimension");
    }
    std::vector<int64_t> pads(2 * spatial, 0);
    for (size_t d = 0; d < spatial; ++d) {
      if (strides[d] != 1) {
        im.refuse(fmt::format("with auto_pad {} and stride {} is not supported (the pads depend on "
                              "the input size; give explicit pads)", auto_pad, strides[d]));
      }
      const int64_t total = (kernel[d] - 1) * dilations[d];
      if (kernel[d] < 1 || dilations[d] < 1) im.bad("kernel_shape and dilations must be >= 1");
      const int64_t small = total / 2;
      pads[d] = auto_pad == "SAME_UPPER" ? small : total - small;
      pads[spatial + d] = total - pads[d];
    }
    return pads;
  }
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    im.bad(fmt::format("auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", auto_pad));
  }
  std::vector<int64_t> pads = im.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (auto_pad == "VALID") pads.assign(2 * spatial, 0);
  if (pads.size() != 2 * spatial) im.bad(fmt::format("{} pads for {} spatial dimensions", pads.size(), spatial));
  return pads;  // ONNX order (begins, then ends) is conv2d's (top, left, bottom, right)
}

void conv(Importer& im) {
  std::vector<int64_t> kernel = im.attr_ints("kernel_shape", {});
  if (const Tensor* w = im.constant(1); w && kernel.empty() && w->rank() >= 3) {
    kernel.assign(w->shape().begin() + 2, w->shape().end());
  }
  if (kernel.size() != 2) im.refuse("is supported for 2-D images only (kernel of 2 dimensions)");
  Attributes a;
  const std::vector<int64_t> strides = im.attr_ints("strides", {1, 1});
  const std::vector<int64_t> dilations = im.attr_ints("dilations", {1, 1});
  a.set("strides", strides);
  a.set("pads", pads_of(im, 2, kernel, strides, dilations));
  a.set("dilations", dilations);
  a.set("group", im.attr_int("group", 1));
  a.set("activation", std::string("none"));
  std::vector<ValueId> in = {im.input(0), im.input(1)};
  if (im.has_input(2)) in.push_back(im.input(2));
  im.emit("conv2d", std::move(in), std::move(a));
}

void conv_transpose(Importer& im) {
  std::vector<int64_t> kernel = im.attr_ints("kernel_shape", {});
  if (const Tensor* w = im.constant(1); w && kernel.empty() && w->rank() >= 3) {
    kernel.assign(w->shape().begin() + 2, w->shape().end());
  }
  if (kernel.size() != 2) im.refuse("is supported for 2-D images only (kernel of 2 dimensions)");
  if (im.attr_ints("output_shape")) {
    im.refuse("with output_shape is not supported (give pads and output_padding)");
  }
  const std::string auto_pad = im.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    im.refuse(fmt::format("with auto_pad {} is not supported (give explicit pads)", auto_pad));
  }
  Attributes a;
  a.set("strides", im.attr_ints("strides", {1, 1}));
  std::vector<int64_t> pads = im.attr_ints("pads", {0, 0, 0, 0});
  if (auto_pad == "VALID") pads.assign(4, 0);
  if (pads.size() != 4) im.bad(fmt::format("{} pads for 2 spatial dimensions", pads.size()));
  a.set("pads", pads);
  a.set("dilations", im.attr_ints("dilations", {1, 1}));
  a.set("output_padding", im.attr_ints("output_padding", {0, 0}));
  a.set("group", im.attr_int("group", 1));
  std::vector<ValueId> in = {im.input(0), im.input(1)};
  if (im.has_input(2)) in.push_back(im.input(2));
  im.emit("conv_transpose2d", std::move(in), std::move(a));
}

void pool(Importer& im, const std::string& kind, bool global) {
  Attributes a;
  a.set("kind", kind);
  if (global) {
    a.set("global", int64_t{1});
  } else {
    const std::vector<int64_t> kernel = im.attr_ints("kernel_shape", {});
    if (kernel.size() != 2) im.refuse("is supported for 2-D images only (kernel_shape of 2)");
    a.set("kernel", kernel);
    const std::vector<int64_t> strides = im.attr_ints("strides", {1, 1});
    const std::vector<int64_t> dilations = im.attr_ints("dilations", {1, 1});
    a.set("strides", strides);
    a.set("pads", pads_of(im, 2, kernel, strides, dilations));
    a.set("dilations", dilations);
    a.set("ceil_mode", im.attr_int("ceil_mode", 0));
    a.set("count_include_pad", im.attr_int("count_include_pad", 0));
  }
  im.emit("pool2d", {im.input(0)}, std::move(a));
}

void gemm(Importer& im) {
  ValueId a = im.input(0);
  if (im.attr_int("transA", 0) != 0) a = im.inner("transpose", "transA", {a}, {{"perm", std::vector<int64_t>{1, 0}}});
  const double alpha = im.attr_float("alpha", 1.0);
  const double beta = im.attr_float("beta", 1.0);
  Attributes attrs{{"trans_b", im.attr_int("transB", 0)}, {"alpha", alpha}};
  std::vector<ValueId> in = {a, im.input(1)};
  // A constant C of one row (the usual bias) is the matmul's bias; anything else is added.
  const Tensor* c = im.constant(2);
  const bool bias = c && c->dtype() == DType::kF32 &&
                    (c->rank() == 1 || (c->rank() == 2 && c->dim(0) == 1));
  if (bias) {
    Tensor b = c->contiguous().reshape({c->numel()});
    if (beta != 1.0) {
      Tensor scaled = Tensor::empty(b.shape(), DType::kF32);
      for (int64_t i = 0; i < b.numel(); ++i) scaled.data<float>()[i] = static_cast<float>(beta * b.data<float>()[i]);
      b = scaled;
    }
    in.push_back(im.g.add_constant(im.node_name + "/bias", b));
    im.emit("matmul", std::move(in), std::move(attrs));
    return;
  }
  if (!im.has_input(2)) {
    im.emit("matmul", std::move(in), std::move(attrs));
    return;
  }
  const ValueId ab = im.inner("matmul", "ab", std::move(in), std::move(attrs));
  ValueId cv = im.input(2);
  if (beta != 1.0) {
    const ValueId bc = im.g.add_constant(im.node_name + "/beta", Tensor::from_f32({}, {static_cast<float>(beta)}));
    cv = im.inner("binary", "beta_c", {cv, bc}, {{"kind", std::string("mul")}});
  }
  im.emit("binary", {ab, cv}, {{"kind", std::string("add")}});
}

void reduce(Importer& im, const std::string& kind) {
  std::vector<int64_t> axes;
  // Axes became an input in opset 13 (ReduceSum) and 18 (the others).
  if (auto a = im.attr_ints("axes")) axes = *a;
  else if (im.has_input(1)) axes = im.constant_ints(1, "axes");
  if (axes.empty() && im.attr_int("noop_with_empty_axes", 0) != 0) {
    im.emit("identity", {im.input(0)}, {});
    return;
  }
  im.emit("reduce", {im.input(0)}, {{"kind", kind}, {"axes", axes}, {"keepdims", im.attr_int("keepdims", 1)}});
}

std::string cast_target(Importer& im, int32_t onnx_type) {
  return dtype_name(onnx::onnx_dtype(onnx_type, fmt::format("{}: node '{}'", im.file.path, im.node_name)));
}

const std::map<std::string, Translate>& table() {
  static const std::map<std::string, Translate> t = {
      {"Conv", conv},
      {"BatchNormalization",
       [](Importer& im) {
         if (im.attr_int("training_mode", 0) != 0) im.refuse("in training mode is not supported");
         im.emit("batch_norm", {im.input(0), im.input(1), im.input(2), im.input(3), im.input(4)},
                 {{"eps", im.attr_float("epsilon", 1e-5)}});
       }},
      {"MaxPool", [](Importer& im) { pool(im, "max", false); }},
      {"AveragePool", [](Importer& im) { pool(im, "avg", false); }},
      {"GlobalAveragePool", [](Importer& im) { pool(im, "avg", true); }},
      {"GlobalMaxPool", [](Importer& im) { pool(im, "max", true); }},
      {"Relu", [](Importer& im) { unary(im, "relu"); }},
      {"Sigmoid", [](Importer& im) { unary(im, "sigmoid"); }},
      {"Tanh", [](Importer& im) { unary(im, "tanh"); }},
      {"Erf", [](Importer& im) { unary(im, "erf"); }},
      {"Sqrt", [](Importer& im) { unary(im, "sqrt"); }},
      {"Exp", [](Importer& im) { unary(im, "exp"); }},
      {"Log", [](Importer& im) { unary(im, "log"); }},
      {"Neg", [](Importer& im) { unary(im, "neg"); }},
      {"Abs", [](Importer& im) { unary(im, "abs"); }},
      {"Reciprocal", [](Importer& im) { unary(im, "reciprocal"); }},
      {"Floor", [](Importer& im) { unary(im, "floor"); }},
      {"Ceil", [](Importer& im) { unary(im, "ceil"); }},
      {"Not", [](Importer& im) { unary(im, "not"); }},
      {"Softplus", [](Importer& im) { unary(im, "softplus"); }},
      {"HardSwish", [](Importer& im) { unary(im, "hard_swish"); }},
      {"HardSigmoid",
       [](Importer& im) {
         unary(im, "hard_sigmoid", {{"alpha", im.attr_float("alpha", 0.2)}, {"beta", im.attr_float("beta", 0.5)}});
       }},
      {"LeakyRelu", [](Importer& im) { unary(im, "leaky_relu", {{"alpha", im.attr_float("alpha", 0.01)}}); }},
      {"Gelu",
       [](Importer& im) {
         const std::string approx = im.attr_string("approximate", "none");
         if (approx != "none" && approx != "tanh") im.bad(fmt::format("approximate '{}'", approx));
         unary(im, approx == "tanh" ? "gelu_tanh" : "gelu");
       }},
      {"Clip",
       [](Importer& im) {
         double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
         if (im.opset < 11) {
           lo = im.attr_float("min", lo);
           hi = im.attr_float("max", hi);
         } else {
           if (im.has_input(1)) lo = im.constant_scalar(1, "min");
           if (im.has_input(2)) hi = im.constant_scalar(2, "max");
         }
         unary(im, "clip", {{"min", lo}, {"max", hi}});
       }},
      {"Add", [](Importer& im) { binary(im, "add"); }},
      {"Sub", [](Importer& im) { binary(im, "sub"); }},
      {"Mul", [](Importer& im) { binary(im, "mul"); }},
      {"Div", [](Importer& im) { binary(im, "div"); }},
      {"Pow", [](Importer& im) { binary(im, "pow"); }},
      {"ConvTranspose", conv_transpose},
      // fmod = 0: the remainder takes the divisor's sign (integers only, as ONNX requires);
      // fmod = 1: C's fmod, the dividend's sign.
      {"Mod", [](Importer& im) { binary(im, im.attr_int("fmod", 0) != 0 ? "fmod" : "mod"); }},
      {"Equal", [](Importer& im) { binary(im, "equal"); }},
      {"Less", [](Importer& im) { binary(im, "less"); }},
      {"LessOrEqual", [](Importer& im) { binary(im, "less_equal"); }},
      {"Greater", [](Importer& im) { binary(im, "greater"); }},
      {"GreaterOrEqual", [](Importer& im) { binary(im, "greater_equal"); }},
      {"And", [](Importer& im) { binary(im, "and"); }},
      {"Or", [](Importer& im) { binary(im, "or"); }},
      {"Xor", [](Importer& im) { binary(im, "xor"); }},
      {"Max", [](Importer& im) { variadic(im, "max"); }},
      {"Min", [](Importer& im) { variadic(im, "min"); }},
      {"Sum", [](Importer& im) { variadic(im, "add"); }},
      {"Where", [](Importer& im) { im.emit("where", {im.input(0), im.input(1), im.input(2)}, {}); }},
      {"MatMul", [](Importer& im) { im.emit("matmul", {im.input(0), im.input(1)}, {}); }},
      {"Gemm", gemm},
      {"LayerNormalization",
       [](Importer& im) {
         std::vector<ValueId> in = {im.input(0), im.input(1)};
         if (im.has_input(2)) in.push_back(im.input(2));
         im.emit("layer_norm", std::move(in), {{"axis", im.attr_int("axis", -1)}, {"eps", im.attr_float("epsilon", 1e-5)}});
       }},
      {"Softmax",
       [](Importer& im) {
         // Before opset 13 Softmax flattened to 2-D at `axis` (default 1); exporters use the
         // last axis, where both definitions agree, and that is what Sampan runs.
         const int64_t axis = im.attr_int("axis", im.opset < 13 ? 1 : -1);
         im.emit("softmax", {im.input(0)}, {{"axis", axis}});
       }},
      {"ReduceMean", [](Importer& im) { reduce(im, "mean"); }},
      {"ReduceSum", [](Importer& im) { reduce(im, "sum"); }},
      {"ReduceMax", [](Importer& im) { reduce(im, "max"); }},
      {"ReduceMin", [](Importer& im) { reduce(im, "min"); }},
      {"ReduceProd", [](Importer& im) { reduce(im, "prod"); }},
      {"Gather", [](Importer& im) { im.emit("gather", {im.input(0), im.input(1)}, {{"axis", im.attr_int("axis", 0)}}); }},
      {"Reshape",
       [](Importer& im) { im.emit("reshape", {im.input(0), im.input(1)}, {{"allowzero", im.attr_int("allowzero", 0)}}); }},
      {"Flatten", [](Importer& im) { im.emit("flatten", {im.input(0)}, {{"axis", im.attr_int("axis", 1)}}); }},
      {"Transpose", [](Importer& im) { im.emit("transpose", {im.input(0)}, {{"perm", im.attr_ints("perm", {})}}); }},
      {"Squeeze",
       [](Importer& im) {
         std::vector<int64_t> axes = im.attr_ints("axes", {});
         if (im.has_input(1)) axes = im.constant_ints(1, "axes");
         im.emit("squeeze", {im.input(0)}, {{"axes", axes}});
       }},
      {"Unsqueeze",
       [](Importer& im) {
         std::vector<int64_t> axes = im.attr_ints("axes", {});
         if (im.has_input(1)) axes = im.constant_ints(1, "axes");
         if (axes.empty()) im.bad("no axes");
         im.emit("unsqueeze", {im.input(0)}, {{"axes", axes}});
       }},
      {"Concat",
       [](Importer& im) {
         if (!im.attr("axis")) im.bad("attribute 'axis' is missing");
         std::vector<ValueId> in;
         for (int i = 0; i < im.n_inputs(); ++i) in.push_back(im.input(i));
         im.emit("concat", std::move(in), {{"axis", im.attr_int("axis", 0)}});
       }},
      {"Slice",
       [](Importer& im) {
         if (im.opset < 10) {
           // Attributes before opset 10: made constants so that one op covers both forms.
           auto as_const = [&](const char* name, std::vector<int64_t> v) {
             Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
             std::copy(v.begin(), v.end(), t.data<int64_t>());
             return im.g.add_constant(im.node_name + "/" + name, t);
           };
           std::vector<ValueId> in = {im.input(0), as_const("starts", im.attr_ints("starts", {})),
                                      as_const("ends", im.attr_ints("ends", {}))};
           if (auto axes = im.attr_ints("axes")) in.push_back(as_const("axes", *axes));
           im.emit("slice", std::move(in), {});
           return;
         }
         std::vector<ValueId> in = {im.input(0), im.input(1), im.input(2)};
         in.push_back(im.optional_input(3));
         in.push_back(im.optional_input(4));
         while (in.back() == kNoValue) in.pop_back();
         im.emit("slice", std::move(in), {});
       }},
      {"Split",
       [](Importer& im) {
         std::vector<int64_t> sizes = im.attr_ints("split", {});
         if (im.has_input(1)) sizes = im.constant_ints(1, "split sizes");
         if (sizes.empty()) {
           // Equal parts: opset 18 names their count (the last part may be shorter), earlier
           // opsets take the outputs' count and need it to divide the axis.
           Attributes attrs{{"axis", im.attr_int("axis", 0)}};
           if (im.opset >= 18) {
             const int64_t n = im.attr_int("num_outputs", im.node->output_size());
             if (n != im.node->output_size()) {
               im.bad(fmt::format("num_outputs {} for {} outputs", n, im.node->output_size()));
             }
           } else {
             attrs.set("exact", int64_t{1});
           }
           im.emit("split", {im.input(0)}, std::move(attrs), im.node->output_size());
           return;
         }
         if (static_cast<int>(sizes.size()) != im.node->output_size()) {
           im.bad(fmt::format("{} sizes for {} outputs", sizes.size(), im.node->output_size()));
         }
         im.emit("split", {im.input(0)}, {{"sizes", sizes}, {"axis", im.attr_int("axis", 0)}},
                 im.node->output_size());
       }},
      {"Pad",
       [](Importer& im) {
         const std::string mode = im.attr_string("mode", "constant");
         if (im.opset < 11) {
           std::vector<int64_t> pads = im.attr_ints("pads", {});
           Tensor p = Tensor::empty({static_cast<int64_t>(pads.size())}, DType::kI64);
           std::copy(pads.begin(), pads.end(), p.data<int64_t>());
           std::vector<ValueId> in = {im.input(0), im.g.add_constant(im.node_name + "/pads", p)};
           const double v = im.attr_float("value", 0.0);
           if (v != 0.0) in.push_back(im.g.add_constant(im.node_name + "/value", Tensor::from_f32({}, {static_cast<float>(v)})));
           im.emit("pad", std::move(in), {{"mode", mode}});
           return;
         }
         if (im.has_input(3)) im.refuse("with an axes input is not supported");
         std::vector<ValueId> in = {im.input(0), im.input(1)};
         if (im.has_input(2)) in.push_back(im.input(2));
         im.emit("pad", std::move(in), {{"mode", mode}});
       }},
      {"Expand", [](Importer& im) { im.emit("expand", {im.input(0), im.input(1)}, {}); }},
      {"Cast",
       [](Importer& im) {
         im.emit("cast", {im.input(0)}, {{"to", cast_target(im, static_cast<int32_t>(im.attr_int("to", 0)))}});
       }},
      {"Shape",
       [](Importer& im) {
         Attributes a;
         if (im.attr("start")) a.set("start", im.attr_int("start", 0));
         if (im.attr("end")) a.set("end", im.attr_int("end", 0));
         im.emit("shape", {im.input(0)}, std::move(a));
       }},
      {"ConstantOfShape",
       [](Importer& im) {
         double value = 0;
         std::string dtype = "f32";
         if (const auto* a = im.attr("value")) {
           const Tensor t = onnx::onnx_tensor(im.file, a->t(), fmt::format("node '{}' value", im.node_name));
           if (t.numel() != 1) im.bad("value must hold one element");
           dtype = dtype_name(t.dtype());
           value = static_cast<double>(t.to_f32().contiguous().data<float>()[0]);
           if (t.dtype() == DType::kI64) value = static_cast<double>(t.contiguous().data<int64_t>()[0]);
         }
         im.emit("constant_of_shape", {im.input(0)}, {{"value", value}, {"dtype", dtype}});
       }},
      {"Range", [](Importer& im) { im.emit("range", {im.input(0), im.input(1), im.input(2)}, {}); }},
      {"Identity", [](Importer& im) { im.emit("identity", {im.input(0)}, {}); }},
      {"Dropout", [](Importer& im) { im.emit("identity", {im.input(0)}, {}); }},
  };
  return t;
}

// The Constant op: a graph constant under its output's name.
void constant_node(Importer& im) {
  Tensor t;
  if (const auto* a = im.attr("value")) {
    t = onnx::onnx_tensor(im.file, a->t(), fmt::format("node '{}'", im.node_name));
  } else if (const auto* f = im.attr("value_float")) {
    t = Tensor::from_f32({}, {f->f()});
  } else if (const auto* fs = im.attr("value_floats")) {
    t = Tensor::from_f32({fs->floats_size()}, std::vector<float>(fs->floats().begin(), fs->floats().end()));
  } else if (const auto* i = im.attr("value_int")) {
    t = Tensor::empty({}, DType::kI64);
    t.data<int64_t>()[0] = i->i();
  } else if (const auto* is = im.attr("value_ints")) {
    t = Tensor::empty({is->ints_size()}, DType::kI64);
    std::copy(is->ints().begin(), is->ints().end(), t.data<int64_t>());
  } else {
    im.refuse("without a value, value_float(s) or value_int(s) attribute is not supported");
  }
  if (im.node->output_size() != 1) im.bad("must have one output");
  const ValueId v = im.g.add_constant(im.node->output(0), t);
  im.values[im.node->output(0)] = v;
}

// Nodes in an order where every input is made before it is read.
std::vector<int> topological_order(const onnx::OnnxFile& file, const pb::GraphProto& gp,
                                   const std::set<std::string>& available,
                                   const std::vector<std::string>& names) {
  const int n = gp.node_size();
  std::map<std::string, int> producer;
  for (int i = 0; i < n; ++i) {
    for (const std::string& o : gp.node(i).output()) {
      if (o.empty()) continue;
      SAMPAN_CHECK(!producer.count(o) && !available.count(o), ErrorCode::kInvalidArgument,
                   "{}: node '{}': output '{}' is already defined", file.path, names[static_cast<size_t>(i)], o);
      producer[o] = i;
    }
  }
  std::vector<int> pending(static_cast<size_t>(n), 0);
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (const std::string& in : gp.node(i).input()) {
      if (in.empty() || available.count(in)) continue;
      auto it = producer.find(in);
      SAMPAN_CHECK(it != producer.end(), ErrorCode::kInvalidArgument,
                   "{}: node '{}': input '{}' is made by no node, initializer or graph input",
                   file.path, names[static_cast<size_t>(i)], in);
      ++pending[static_cast<size_t>(i)];
      users[static_cast<size_t>(it->second)].push_back(i);
    }
  }
  std::vector<int> order, ready;
  for (int i = n - 1; i >= 0; --i) {
    if (pending[static_cast<size_t>(i)] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    const int i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)]) {
      if (--pending[static_cast<size_t>(u)] == 0) ready.push_back(u);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i) {
      if (pending[static_cast<size_t>(i)] > 0) {
        fail(ErrorCode::kInvalidArgument, "{}: node '{}': the graph has a cycle through this node",
             file.path, names[static_cast<size_t>(i)]);
      }
    }
  }
  return order;
}

std::vector<graph::Dim> input_dims(const onnx::OnnxFile& file, const pb::ValueInfoProto& vi) {
  std::vector<graph::Dim> dims;
  const auto& shape = vi.type().tensor_type().shape();
  for (int d = 0; d < shape.dim_size(); ++d) {
    const auto& dim = shape.dim(d);
    if (dim.has_dim_value()) {
      SAMPAN_CHECK(dim.dim_value() >= 0, ErrorCode::kInvalidArgument,
                   "{}: graph input '{}': dimension {} is {}", file.path, vi.name(), d, dim.dim_value());
      dims.push_back(graph::Dim::fixed(dim.dim_value()));
    } else if (dim.has_dim_param() && !dim.dim_param().empty()) {
      dims.push_back(graph::Dim::sym(dim.dim_param()));
    } else {
      dims.push_back(graph::Dim::sym(fmt::format("{}.{}", vi.name(), d)));  // unnamed: its own
    }
  }
  return dims;
}

void build_onnx(const std::string& path, const LoadOptions&, Model& m) {
  const onnx::OnnxFile file = onnx::read_onnx(path);
  const pb::GraphProto& gp = file.model->graph();
  m.format = "onnx";
  m.architecture = file.model->producer_name().empty() ? "onnx" : "onnx (" + file.model->producer_name() + ")";
  m.builder_state = file.model;

  Importer im{file, m, m.graph, {}, nullptr, {}, file.opset};
  std::set<std::string> available;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& t = gp.initializer(i);
    SAMPAN_CHECK(!t.name().empty() && !im.values.count(t.name()), ErrorCode::kInvalidArgument,
                 "{}: initializer {} has an empty or repeated name '{}'", path, i, t.name());
    im.values[t.name()] = m.graph.add_constant(t.name(), onnx::onnx_tensor(file, t, fmt::format("initializer '{}'", t.name())));
    available.insert(t.name());
  }
  SAMPAN_CHECK(gp.sparse_initializer_size() == 0, ErrorCode::kUnsupported,
               "{}: sparse initializers are not supported", path);
  for (const auto& vi : gp.input()) {
    if (available.count(vi.name())) continue;  // IR < 4 lists initializers as inputs too
    SAMPAN_CHECK(vi.type().has_tensor_type(), ErrorCode::kUnsupported,
                 "{}: graph input '{}' is not a tensor", path, vi.name());
    const DType dtype = onnx::onnx_dtype(vi.type().tensor_type().elem_type(),
                                         fmt::format("{}: graph input '{}'", path, vi.name()));
    SAMPAN_CHECK(!vi.name().empty() && !im.values.count(vi.name()), ErrorCode::kInvalidArgument,
                 "{}: graph input '{}' is named twice or not at all", path, vi.name());
    std::vector<graph::Dim> dims = input_dims(file, vi);
    im.values[vi.name()] = m.graph.add_input(vi.name(), dtype, dims);
    available.insert(vi.name());
    m.signature.inputs.push_back({vi.name(), vi.name(), TensorRole::kData, dtype, std::move(dims), -1});
  }
  SAMPAN_CHECK(!m.signature.inputs.empty(), ErrorCode::kInvalidArgument, "{}: the graph has no inputs", path);

  std::vector<std::string> names;
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& n = gp.node(i);
    names.push_back(!n.name().empty() ? n.name() : fmt::format("{}_{}", n.op_type(), i));
  }
  std::set<std::string> consumed;
  for (const auto& n : gp.node()) consumed.insert(n.input().begin(), n.input().end());
  for (const auto& o : gp.output()) consumed.insert(o.name());

  for (int i : topological_order(file, gp, available, names)) {
    const pb::NodeProto& n = gp.node(i);
    im.node = &n;
    im.node_name = names[static_cast<size_t>(i)];
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' of domain '{}' is not supported", path,
           im.node_name, n.op_type(), n.domain());
    }
    if (n.op_type() == "Constant") {
      constant_node(im);
      continue;
    }
    const auto& t = table();
    auto it = t.find(n.op_type());
    if (it == t.end()) {
      fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' is not supported", path, im.node_name, n.op_type());
    }
    try {
      it->second(im);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(path, 0) == 0) throw;
      fail(e.code(), "{}: node '{}': {}", path, im.node_name, msg);
    }
    const int used = (n.op_type() == "Split") ? n.output_size() : 1;
    im.only_outputs(used, consumed);
  }

  for (const auto& o : gp.output()) {
    auto it = im.values.find(o.name());
    SAMPAN_CHECK(it != im.values.end(), ErrorCode::kInvalidArgument,
                 "{}: graph output '{}' is made by no node", path, o.name());
    ValueId v = it->second;
    // An output that is an input or a constant still gets its own node, so that every output
    // is a value the executor computes.
    if (m.graph.value(v).kind != graph::ValueKind::kIntermediate) {
      v = m.graph.add("identity", o.name() + "/out", {v});
    }
    m.graph.mark_output(v);
    DType dtype = DType::kF32;
    if (o.type().has_tensor_type() && o.type().tensor_type().elem_type() != 0) {
      dtype = onnx::onnx_dtype(o.type().tensor_type().elem_type(), fmt::format("{}: graph output '{}'", path, o.name()));
    }
    m.signature.outputs.push_back({o.name(), o.name(), TensorRole::kData, dtype, input_dims(file, o), -1});
  }
  SAMPAN_CHECK(!m.signature.outputs.empty(), ErrorCode::kInvalidArgument, "{}: the graph has no outputs", path);
  m.graph.validate();
}

// A path ending in .onnx (whether or not it exists: reading it names the problem), or a
// directory without config.json holding exactly one .onnx file.
std::optional<std::string> detect_onnx(const std::string& path) {
  if (fs::path(path).extension() == ".onnx") return path;
  std::error_code ec;
  if (!fs::is_directory(path, ec) || fs::exists(fs::path(path) / "config.json", ec)) return std::nullopt;
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.path().extension() == ".onnx") found.push_back(e.path().string());
  }
  SAMPAN_CHECK(found.size() <= 1, ErrorCode::kInvalidArgument,
               "{}: holds {} .onnx files; pass the one to load", path, found.size());
  if (found.empty()) return std::nullopt;
  return found[0];
}

const bool kRegistered = (register_model_format({"onnx", detect_onnx, build_onnx}), true);

}  // namespace
}  // namespace sampan::models
