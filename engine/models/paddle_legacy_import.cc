// Legacy Paddle inference programs (ProgramDesc protobuf, *.pdmodel, as paddle.static.
// save_inference_model and FLAGS_enable_pir_api=0 write them) into Sampan's graph IR.
//
// Block 0's ops are translated in order: `feed` ops define the inputs (in `col` order), `fetch`
// ops the outputs (in `col` order, named after the fetched variable); the persistable variables
// (feed/fetch lists excluded) are the parameters, read from *.pdiparams in sorted-name order.
// Variables' declared dims (-1: dynamic) give ranks where a translation needs one. Elementwise
// ops follow Paddle's `axis` rule: y is aligned to x's dims starting at `axis` (-1 or equal
// ranks: numpy broadcasting). Anything not in the table is refused with one line naming the file,
// the node ("<op type>_<index in block 0>") and the op.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/loaders/paddle_file.h"
#include "engine/models/import_util.h"
#include "engine/models/model.h"
#include "proto/formats/paddle_framework.pb.h"

namespace sampan::models {

void build_paddle_legacy(const paddle::PaddlePaths& paths, Model& m);

namespace {

using graph::Attributes;
using graph::kNoValue;
using graph::ValueId;
namespace pb = paddle_format;

struct VarInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
  bool known = false;
};

struct Leg {
  const std::string& path;
  Model& model;
  graph::Graph& g;
  std::map<std::string, ValueId> values;
  std::map<std::string, VarInfo> vars;
  const pb::OpDesc* op = nullptr;
  std::string node_name;

  [[noreturn]] void refuse(const std::string& why) const {
    fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' {}", path, node_name, op->type(), why);
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail(ErrorCode::kInvalidModel, "{}: node '{}' ({}): {}", path, node_name, op->type(), why);
  }

  // --- attributes ---
  const pb::OpDesc::Attr* attr(const std::string& name) const {
    for (const auto& a : op->attrs()) {
      if (a.name() == name) return &a;
    }
    return nullptr;
  }
  double attr_float(const std::string& name, double fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    switch (a->type()) {
      case pb::FLOAT: return a->f();
      case pb::FLOAT64: return a->float64();
      case pb::INT: return a->i();
      case pb::LONG: return static_cast<double>(a->l());
      case pb::BOOLEAN: return a->b() ? 1 : 0;
      default: bad(fmt::format("attribute '{}' is not a number", name));
    }
  }
  int64_t attr_int(const std::string& name, int64_t fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    if (a->type() == pb::INT) return a->i();
    if (a->type() == pb::LONG) return a->l();
    if (a->type() == pb::BOOLEAN) return a->b();
    bad(fmt::format("attribute '{}' is not an integer", name));
  }
  bool attr_bool(const std::string& name, bool fallback) const { return attr_int(name, fallback ? 1 : 0) != 0; }
  std::string attr_string(const std::string& name, const std::string& fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    if (a->type() != pb::STRING) bad(fmt::format("attribute '{}' is not a string", name));
    return a->s();
  }
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
    const auto* a = attr(name);
    if (!a) return fallback;
    if (a->type() == pb::INTS) return {a->ints().begin(), a->ints().end()};
    if (a->type() == pb::LONGS) return {a->longs().begin(), a->longs().end()};
    bad(fmt::format("attribute '{}' is not a list of integers", name));
  }

  // --- inputs ---
  std::vector<std::string> args(const std::string& param) const {
    for (const auto& v : op->inputs()) {
      if (v.parameter() == param) return {v.arguments().begin(), v.arguments().end()};
    }
    return {};
  }
  bool has(const std::string& param) const { return !args(param).empty(); }
  std::string arg(const std::string& param) const {
    const auto a = args(param);
    if (a.empty()) bad(fmt::format("input '{}' is missing", param));
    return a[0];
  }
  ValueId value(const std::string& var) const {
    auto it = values.find(var);
    if (it == values.end()) bad(fmt::format("variable '{}' is made by no earlier op", var));
    return it->second;
  }
  ValueId in(const std::string& param) const { return value(arg(param)); }
  const VarInfo& info(const std::string& param) const {
    auto it = vars.find(arg(param));
    if (it == vars.end() || !it->second.known) bad(fmt::format("input '{}' has no declared type", param));
    return it->second;
  }
  int64_t rank(const std::string& param) const { return static_cast<int64_t>(info(param).dims.size()); }
  const Tensor* constant(const std::string& param) const {
    const graph::Value& v = g.value(in(param));
    return v.kind == graph::ValueKind::kConstant ? &v.constant : nullptr;
  }

  // --- outputs ---
  std::string out_name(const std::string& param) const {
    for (const auto& v : op->outputs()) {
      if (v.parameter() == param && v.arguments_size() > 0) return v.arguments(0);
    }
    bad(fmt::format("output '{}' is missing", param));
  }
  ValueId emit(const std::string& sop, std::vector<ValueId> inputs, Attributes a, const std::string& param = "Out") {
    const ValueId v = g.add(sop, node_name, std::move(inputs), std::move(a));
    bind(param, v);
    return v;
  }
  void bind(const std::string& param, ValueId v) {
    const std::string name = out_name(param);
    g.mutable_value(v).name = fmt::format("{}:{}", node_name, name);
    values[name] = v;
  }
  ValueId inner(const std::string& sop, const std::string& suffix, std::vector<ValueId> inputs, Attributes a = {}) {
    return g.add(sop, node_name + "/" + suffix, std::move(inputs), std::move(a));
  }
  ValueId scalar_const(const std::string& suffix, float v) {
    return g.add_constant(node_name + "/" + suffix, Tensor::from_f32({}, {v}));
  }
  ValueId ints_const(const std::string& suffix, const std::vector<int64_t>& v) {
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI64);
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return g.add_constant(node_name + "/" + suffix, t);
  }
  // A list of 1-element (or 0-D) integer tensors as one 1-D int64 tensor.
  ValueId ints_of_list(const std::string& param, const std::string& suffix) {
    std::vector<ValueId> parts;
    const auto names = args(param);
    for (size_t k = 0; k < names.size(); ++k) {
      const ValueId r = inner("reshape", fmt::format("{}{}", suffix, k), {value(names[k]), ints_const(fmt::format("{}{}_shape", suffix, k), {1})});
      parts.push_back(inner("cast", fmt::format("{}{}_i64", suffix, k), {r}, {{"to", std::string("i64")}}));
    }
    if (parts.size() == 1) return parts[0];
    return inner("concat", suffix, std::move(parts), {{"axis", int64_t{0}}});
  }
};

using Translate = std::function<void(Leg&)>;

void unary(Leg& p, const std::string& kind, Attributes extra = {}) {
  extra.set("kind", kind);
  p.emit("unary", {p.in("X")}, std::move(extra));
}

void require_nchw(Leg& p, const char* attr) {
  const std::string f = p.attr_string(attr, "NCHW");
  if (f != "NCHW" && f != "AnyLayout") p.refuse(fmt::format("with {} {} is not supported (NCHW only)", attr, f));
}

std::vector<int64_t> pads_of(Leg& p) {
  const std::string algo = p.attr_string("padding_algorithm", "EXPLICIT");
  if (algo == "VALID") return {0, 0, 0, 0};
  if (algo != "EXPLICIT") p.refuse(fmt::format("with padding_algorithm {} is not supported", algo));
  const std::vector<int64_t> pd = p.attr_ints("paddings", {0, 0});
  if (pd.size() == 2) return {pd[0], pd[1], pd[0], pd[1]};
  if (pd.size() == 4) return {pd[0], pd[2], pd[1], pd[3]};
  p.bad(fmt::format("{} paddings", pd.size()));
}

void conv(Leg& p) {
  require_nchw(p, "data_format");
  Attributes a;
  a.set("strides", p.attr_ints("strides", {1, 1}));
  a.set("pads", pads_of(p));
  a.set("dilations", p.attr_ints("dilations", {1, 1}));
  a.set("group", p.attr_int("groups", 1));
  a.set("activation", std::string("none"));
  std::vector<ValueId> in = {p.in("Input"), p.in("Filter")};
  if (p.has("Bias")) in.push_back(p.in("Bias"));
  p.emit("conv2d", std::move(in), std::move(a), "Output");
}

void pool(Leg& p) {
  require_nchw(p, "data_format");
  const std::string kind = p.attr_string("pooling_type", "max");
  if (kind != "max" && kind != "avg") p.bad(fmt::format("pooling_type '{}'", kind));
  Attributes a;
  a.set("kind", kind);
  const std::vector<int64_t> kernel = p.attr_ints("ksize", {});
  const bool adaptive = p.attr_bool("adaptive", false);
  if (p.attr_bool("global_pooling", false) || (adaptive && kernel == std::vector<int64_t>{1, 1})) {
    a.set("global", int64_t{1});
  } else if (adaptive) {
    p.refuse("adaptive to an output other than 1x1 is not supported");
  } else {
    if (kernel.size() != 2) p.bad(fmt::format("ksize of {} dimensions", kernel.size()));
    a.set("kernel", kernel);
    a.set("strides", p.attr_ints("strides", {1, 1}));
    a.set("pads", pads_of(p));
    a.set("dilations", std::vector<int64_t>{1, 1});
    a.set("ceil_mode", int64_t{p.attr_bool("ceil_mode", false)});
    a.set("count_include_pad", int64_t{!p.attr_bool("exclusive", true)});
  }
  p.emit("pool2d", {p.in("X")}, std::move(a));
}

// elementwise_*: y aligned to x's dims from `axis` (trailing 1s appended to y for numpy).
void elementwise(Leg& p, const std::string& kind) {
  ValueId x = p.in("X"), y = p.in("Y");
  const int64_t axis = p.attr_int("axis", -1);
  if (axis != -1) {
    const int64_t rx = p.rank("X"), ry = p.rank("Y");
    if (rx > ry) {
      if (axis < 0 || axis + ry > rx) p.bad(fmt::format("axis {} for ranks {} and {}", axis, rx, ry));
      std::vector<int64_t> axes;
      for (int64_t k = axis + ry; k < rx; ++k) axes.push_back(k - axis);  // trailing dims of y's view
      if (!axes.empty()) y = p.inner("unsqueeze", "align_y", {y}, {{"axes", axes}});
    } else if (rx < ry) {
      p.refuse("with y of higher rank than x and an explicit axis is not supported");
    }
  }
  p.emit("binary", {x, y}, {{"kind", kind}});
}

ValueId transposed_last2(Leg& p, const std::string& param, ValueId v, const char* suffix) {
  const int64_t r = p.rank(param);
  if (r < 2) p.refuse("transposing an operand of rank < 2 is not supported");
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) perm[static_cast<size_t>(k)] = k;
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  return p.inner("transpose", suffix, {v}, {{"perm", perm}});
}

void matmul_common(Leg& p, bool tx, bool ty, double alpha) {
  ValueId a = p.in("X"), b = p.in("Y");
  if (tx) a = transposed_last2(p, "X", a, "trans_x");
  Attributes attrs;
  if (ty) {
    if (p.rank("Y") == 2) attrs.set("trans_b", int64_t{1});
    else b = transposed_last2(p, "Y", b, "trans_y");
  }
  if (alpha == 1.0) {
    p.emit("matmul", {a, b}, std::move(attrs));
    return;
  }
  const ValueId mm = p.inner("matmul", "matmul", {a, b}, std::move(attrs));
  p.emit("binary", {mm, p.scalar_const("alpha", static_cast<float>(alpha))}, {{"kind", std::string("mul")}});
}

// mul: x flattened to 2-D at x_num_col_dims, y at y_num_col_dims; the result keeps x's leading
// dims and y's trailing ones.
void mul(Leg& p) {
  const int64_t xn = p.attr_int("x_num_col_dims", 1), yn = p.attr_int("y_num_col_dims", 1);
  const int64_t rx = p.rank("X"), ry = p.rank("Y");
  if (yn != 1 || ry != 2) p.refuse("with y other than a matrix is not supported");
  if (xn < 1 || xn >= rx) p.bad(fmt::format("x_num_col_dims {} for rank {}", xn, rx));
  ValueId x = p.in("X");
  if (xn != rx - 1) {
    std::vector<int64_t> shape(static_cast<size_t>(xn), 0);
    for (int64_t k = 0; k < xn; ++k) {
      if (p.info("X").dims[static_cast<size_t>(k)] >= 0) shape[static_cast<size_t>(k)] = p.info("X").dims[static_cast<size_t>(k)];
    }
    shape.push_back(-1);
    x = p.inner("reshape", "flatten_x", {x, p.ints_const("x_shape", shape)});
  }
  p.emit("matmul", {x, p.in("Y")}, {});
}

void scale(Leg& p) {
  const double bias = p.attr_float("bias", 0.0);
  const bool after = p.attr_bool("bias_after_scale", true);
  ValueId x = p.in("X");
  ValueId s = p.has("ScaleTensor") ? p.in("ScaleTensor") : kNoValue;
  const double sv = p.attr_float("scale", 1.0);
  const bool has_mul = s != kNoValue || sv != 1.0, has_add = bias != 0.0;
  auto mulv = [&](ValueId v, bool last) {
    const ValueId f = s != kNoValue ? s : p.scalar_const("scale", static_cast<float>(sv));
    return last ? p.emit("binary", {v, f}, {{"kind", std::string("mul")}})
                : p.inner("binary", "mul", {v, f}, {{"kind", std::string("mul")}});
  };
  auto addv = [&](ValueId v, bool last) {
    const ValueId b = p.scalar_const("bias", static_cast<float>(bias));
    return last ? p.emit("binary", {v, b}, {{"kind", std::string("add")}})
                : p.inner("binary", "add", {v, b}, {{"kind", std::string("add")}});
  };
  if (!has_mul && !has_add) {
    p.emit("identity", {x}, {});
  } else if (!has_add) {
    mulv(x, true);
  } else if (!has_mul) {
    addv(x, true);
  } else if (after) {
    addv(mulv(x, false), true);
  } else {
    mulv(addv(x, false), true);
  }
}

void layer_norm(Leg& p) {
  const int64_t rank = p.rank("X");
  int64_t axis = p.attr_int("begin_norm_axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) p.bad(fmt::format("begin_norm_axis {} for rank {}", axis, rank));
  std::vector<ValueId> in = {p.in("X")};
  const std::vector<int64_t>& xd = p.info("X").dims;
  std::vector<int64_t> norm_dims(xd.begin() + axis, xd.end());
  if (p.has("Bias") && !p.has("Scale")) p.refuse("with a bias and no scale is not supported");
  for (const char* param : {"Scale", "Bias"}) {
    if (!p.has(param)) continue;
    ValueId v = p.in(param);
    if (norm_dims.size() != 1) {
      for (int64_t d : norm_dims) {
        if (d < 0) p.refuse("over several dimensions of unknown size is not supported");
      }
      v = p.inner("reshape", param, {v, p.ints_const(std::string(param) + "_shape", norm_dims)});
    }
    in.push_back(v);
  }
  // The last axis is written -1, the form fuse_add_layer_norm matches.
  p.emit("layer_norm", std::move(in), {{"axis", axis == rank - 1 ? int64_t{-1} : axis}, {"eps", p.attr_float("epsilon", 1e-5)}}, "Y");
}

void lookup(Leg& p) {
  const int64_t pad = p.attr_int("padding_idx", -1);
  ValueId w = p.in("W");
  if (pad >= 0) {
    const Tensor* t = p.constant("W");
    if (!t || t->rank() != 2 || t->dtype() != DType::kF32) p.refuse("with padding_idx on a computed table is not supported");
    if (pad >= t->dim(0)) p.bad(fmt::format("padding_idx {} is past the table's {} rows", pad, t->dim(0)));
    Tensor c = Tensor::empty(t->shape(), DType::kF32);
    std::memcpy(c.data<float>(), t->contiguous().data<float>(), static_cast<size_t>(t->nbytes()));
    std::fill_n(c.data<float>() + pad * t->dim(1), t->dim(1), 0.0f);
    w = p.g.add_constant(p.node_name + "/table", c);
  }
  p.emit("gather", {w, p.in("Ids")}, {{"axis", int64_t{0}}});
}

void reshape(Leg& p) {
  ValueId shape;
  if (p.has("Shape")) shape = p.inner("cast", "shape_i64", {p.in("Shape")}, {{"to", std::string("i64")}});
  else if (p.has("ShapeTensor")) shape = p.ints_of_list("ShapeTensor", "shape");
  else shape = p.ints_const("shape", p.attr_ints("shape", {}));
  p.emit("reshape", {p.in("X"), shape}, {});
}

void slice(Leg& p) {
  const std::vector<int64_t> axes = p.attr_ints("axes", {});
  auto bound = [&](const char* which) {
    const std::string tensor = std::string(which) + "Tensor";
    if (p.has(tensor)) return p.inner("cast", std::string(which) + "_i64", {p.in(tensor)}, {{"to", std::string("i64")}});
    if (p.has(tensor + "List")) return p.ints_of_list(tensor + "List", which);
    return p.ints_const(which, p.attr_ints(which == std::string("Starts") ? "starts" : "ends", {}));
  };
  std::vector<ValueId> in = {p.in("Input"), bound("Starts"), bound("Ends"), p.ints_const("axes", axes)};
  const std::vector<int64_t> decrease = p.attr_ints("decrease_axis", {});
  if (decrease.empty()) {
    p.emit("slice", std::move(in), {});
    return;
  }
  const ValueId s = p.inner("slice", "slice", std::move(in));
  p.emit("squeeze", {s}, {{"axes", decrease}});
}

void unsqueeze(Leg& p) {
  if (p.has("AxesTensor") || p.has("AxesTensorList")) p.refuse("with axes computed at run time is not supported");
  std::vector<int64_t> axes = p.attr_ints("axes", {});
  int64_t rank = p.rank("X");
  for (int64_t& a : axes) {
    if (a < 0) a += rank + 1;
    ++rank;
  }
  if (!std::is_sorted(axes.begin(), axes.end())) p.refuse("with axes out of ascending order is not supported");
  p.emit("unsqueeze", {p.in("X")}, {{"axes", axes}});
}

void squeeze(Leg& p) {
  std::vector<int64_t> axes = p.attr_ints("axes", {});
  const int64_t rank = p.rank("X");
  const auto& xd = p.info("X").dims;
  if (axes.empty()) {
    for (int64_t k = 0; k < rank; ++k) {
      if (xd[static_cast<size_t>(k)] == 1) axes.push_back(k);
      else if (xd[static_cast<size_t>(k)] < 0) p.refuse("with no axes over dims of unknown size is not supported");
    }
  }
  std::vector<int64_t> keep;
  for (int64_t& a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) p.bad(fmt::format("axis out of range for rank {}", rank));
    // Paddle leaves a dim that is not 1 in place.
    if (xd[static_cast<size_t>(a)] == 1 || xd[static_cast<size_t>(a)] < 0) keep.push_back(a);
  }
  if (keep.empty()) {
    p.emit("identity", {p.in("X")}, {});
    return;
  }
  std::sort(keep.begin(), keep.end());
  keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  p.emit("squeeze", {p.in("X")}, {{"axes", keep}});
}

void flatten(Leg& p) {
  const int64_t rank = p.rank("X");
  int64_t start = p.attr_int("start_axis", 1), stop = p.attr_int("stop_axis", -1);
  if (start < 0) start += rank;
  if (stop < 0) stop += rank;
  if (rank == 0 || start < 0 || stop >= rank || start > stop) p.bad(fmt::format("axes {}..{} of rank {}", start, stop, rank));
  std::vector<int64_t> shape;
  for (int64_t k = 0; k < start; ++k) shape.push_back(0);
  shape.push_back(-1);
  for (int64_t k = stop + 1; k < rank; ++k) shape.push_back(0);
  p.emit("reshape", {p.in("X"), p.ints_const("shape", shape)}, {});
}

void concat(Leg& p) {
  if (p.has("AxisTensor")) p.refuse("with an axis computed at run time is not supported");
  std::vector<ValueId> in;
  for (const auto& n : p.args("X")) in.push_back(p.value(n));
  if (in.empty()) p.bad("no inputs");
  int64_t axis = p.attr_int("axis", 0);
  if (axis < 0) axis += p.rank("X");
  p.emit("concat", std::move(in), {{"axis", axis}});
}

void dropout(Leg& p) {
  // An inference program: dropout as at test time whatever is_test says.
  const std::string mode = p.attr_string("dropout_implementation", "downgrade_in_infer");
  if (mode == "upscale_in_train") {
    p.emit("identity", {p.in("X")}, {});
  } else if (mode == "downgrade_in_infer") {
    const double prob = p.attr_float("dropout_prob", 0.5);
    p.emit("binary", {p.in("X"), p.scalar_const("keep", static_cast<float>(1.0 - prob))}, {{"kind", std::string("mul")}});
  } else {
    p.bad(fmt::format("dropout_implementation '{}'", mode));
  }
}

void fill_constant(Leg& p) {
  if (p.has("ShapeTensor") || p.has("ShapeTensorList") || p.has("ValueTensor")) {
    p.refuse("with a shape or value computed at run time is not supported");
  }
  const std::vector<int64_t> shape = p.attr_ints("shape", {});
  const DType dt = paddle::paddle_dtype(static_cast<int32_t>(p.attr_int("dtype", pb::VarType::FP32)),
                                        p.path + ": node '" + p.node_name + "'");
  if (dt != DType::kF32 && dt != DType::kI32 && dt != DType::kI64 && dt != DType::kBool) {
    p.refuse(fmt::format("of dtype {} is not supported", dtype_name(dt)));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t{1} << 24) || (n *= d) > (int64_t{1} << 24)) p.bad(fmt::format("shape [{}]", fmt::join(shape, ", ")));
  }
  double v = p.attr_float("value", 0.0);
  const std::string sv = p.attr_string("str_value", "");
  if (!sv.empty()) {
    try {
      v = std::stod(sv);
    } catch (const std::exception&) {
      p.bad(fmt::format("str_value '{}'", sv));
    }
  }
  const ValueId c = p.g.add_constant(p.node_name, filled(shape, dt, v));
  p.values[p.out_name("Out")] = c;
}

void gather(Leg& p) {
  if (p.has("Axis")) p.refuse("with an axis computed at run time is not supported");
  p.emit("gather", {p.in("X"), p.in("Index")}, {{"axis", p.attr_int("axis", 0)}});
}

// split(X){axis, num | sections} -> Out (several variables). A section of -1 takes what the
// others leave (the axis must be declared); axis or sections given as tensors are refused.
void legacy_split(Leg& p) {
  if (p.has("AxisTensor") || p.has("SectionsTensorList")) {
    p.refuse("with axis or sections computed at run time is not supported");
  }
  std::vector<std::string> outs;
  for (const auto& v : p.op->outputs()) {
    if (v.parameter() == "Out") outs.assign(v.arguments().begin(), v.arguments().end());
  }
  if (outs.empty()) p.bad("output 'Out' is missing");
  const int64_t axis = p.attr_int("axis", 0);
  std::vector<int64_t> sections = p.attr_ints("sections", {});
  Attributes a{{"axis", axis}};
  if (sections.empty()) {
    const int64_t num = p.attr_int("num", 0);
    if (num != static_cast<int64_t>(outs.size())) p.bad(fmt::format("num {} for {} outputs", num, outs.size()));
    a.set("exact", int64_t{1});
  } else {
    if (sections.size() != outs.size()) p.bad(fmt::format("{} sections for {} outputs", sections.size(), outs.size()));
    int64_t infer = -1, known = 0;
    for (size_t k = 0; k < sections.size(); ++k) {
      if (sections[k] == -1 && infer < 0) {
        infer = static_cast<int64_t>(k);
      } else if (sections[k] < 0) {
        p.bad(fmt::format("section {} is {}", k, sections[k]));
      } else {
        known += sections[k];
      }
    }
    if (infer >= 0) {
      const std::vector<int64_t>& dims = p.info("X").dims;
      const int64_t rank = static_cast<int64_t>(dims.size());
      const int64_t ax = axis < 0 ? axis + rank : axis;
      if (ax < 0 || ax >= rank || dims[static_cast<size_t>(ax)] < 0) {
        p.refuse("with a -1 section along a dimension of unknown size is not supported");
      }
      sections[static_cast<size_t>(infer)] = dims[static_cast<size_t>(ax)] - known;
      if (sections[static_cast<size_t>(infer)] < 0) p.bad("sections longer than the axis");
    }
    a.set("sizes", std::move(sections));
  }
  const std::vector<ValueId> vs = p.g.add_node("split", p.node_name, {p.in("X")}, std::move(a), static_cast<int>(outs.size()));
  for (size_t k = 0; k < outs.size(); ++k) {
    p.g.mutable_value(vs[k]).name = fmt::format("{}:{}", p.node_name, outs[k]);
    p.values[outs[k]] = vs[k];
  }
}

const std::map<std::string, Translate>& table() {
  static const std::map<std::string, Translate> t = {
      {"conv2d", conv},
      {"depthwise_conv2d", conv},
      {"batch_norm",
       [](Leg& p) {
         require_nchw(p, "data_layout");
         p.emit("batch_norm", {p.in("X"), p.in("Scale"), p.in("Bias"), p.in("Mean"), p.in("Variance")},
                {{"eps", p.attr_float("epsilon", 1e-5)}}, "Y");
       }},
      {"pool2d", pool},
      {"relu", [](Leg& p) { unary(p, "relu"); }},
      {"sigmoid", [](Leg& p) { unary(p, "sigmoid"); }},
      {"tanh", [](Leg& p) { unary(p, "tanh"); }},
      {"hard_swish",
       [](Leg& p) {
         if (p.attr_float("threshold", 6) != 6 || p.attr_float("scale", 6) != 6 || p.attr_float("offset", 3) != 3) {
           p.refuse("with threshold/scale/offset other than 6/6/3 is not supported");
         }
         unary(p, "hard_swish");
       }},
      {"hard_sigmoid",
       [](Leg& p) {
         unary(p, "hard_sigmoid", {{"alpha", p.attr_float("slope", 0.2)}, {"beta", p.attr_float("offset", 0.5)}});
       }},
      {"gelu", [](Leg& p) { unary(p, p.attr_bool("approximate", false) ? "gelu_tanh" : "gelu"); }},
      {"elementwise_add", [](Leg& p) { elementwise(p, "add"); }},
      {"elementwise_sub", [](Leg& p) { elementwise(p, "sub"); }},
      {"elementwise_mul", [](Leg& p) { elementwise(p, "mul"); }},
      {"elementwise_div", [](Leg& p) { elementwise(p, "div"); }},
      {"matmul_v2", [](Leg& p) { matmul_common(p, p.attr_bool("trans_x", false), p.attr_bool("trans_y", false), 1.0); }},
      {"matmul",
       [](Leg& p) {
         matmul_common(p, p.attr_bool("transpose_X", false), p.attr_bool("transpose_Y", false), p.attr_float("alpha", 1.0));
       }},
      {"mul", mul},
      {"scale", scale},
      {"layer_norm", layer_norm},
      {"split", legacy_split},
      {"softmax", [](Leg& p) { p.emit("softmax", {p.in("X")}, {{"axis", p.attr_int("axis", -1)}}); }},
      {"lookup_table_v2", lookup},
      {"reshape2", reshape},
      {"transpose2", [](Leg& p) { p.emit("transpose", {p.in("X")}, {{"perm", p.attr_ints("axis", {})}}); }},
      {"flatten_contiguous_range", flatten},
      {"unsqueeze2", unsqueeze},
      {"squeeze2", squeeze},
      {"concat", concat},
      {"slice", slice},
      {"shape", [](Leg& p) { p.emit("shape", {p.in("Input")}, {}); }},
      {"cast",
       [](Leg& p) {
         const DType dt = paddle::paddle_dtype(static_cast<int32_t>(p.attr_int("out_dtype", pb::VarType::FP32)),
                                               p.path + ": node '" + p.node_name + "'");
         p.emit("cast", {p.in("X")}, {{"to", std::string(dtype_name(dt))}});
       }},
      {"fill_constant", fill_constant},
      {"gather", gather},
      {"dropout", dropout},
  };
  return t;
}

}  // namespace

void build_paddle_legacy(const paddle::PaddlePaths& paths, Model& m) {
  const std::string& path = paths.program;
  const auto prog = paddle::read_pdmodel(path);
  const pb::BlockDesc& block = prog->blocks(0);
  m.format = "paddle";
  m.architecture = fmt::format("paddle (ProgramDesc v{})", prog->has_version() ? prog->version().version() : 0);

  Leg p{path, m, m.graph, {}, {}, nullptr, {}};
  for (const pb::VarDesc& v : block.vars()) {
    VarInfo vi;
    if (v.type().type() == pb::VarType::DENSE_TENSOR && v.type().has_dense_tensor()) {
      const auto& td = v.type().dense_tensor().tensor();
      vi.dims.assign(td.dims().begin(), td.dims().end());
      try {
        vi.dtype = paddle::paddle_dtype(td.data_type(), path);
        vi.known = true;
      } catch (const Error&) {
      }
    }
    p.vars[v.name()] = std::move(vi);
  }
  std::map<std::string, Tensor> params = paddle::read_pdiparams(paths.params, paddle::pdmodel_params(*prog, path));
  for (auto& [name, t] : params) p.values[name] = m.graph.add_constant(name, std::move(t));

  // Inputs, in feed col order; dynamic dim 0 shared by several inputs is "batch".
  std::vector<std::pair<int64_t, std::string>> feeds;
  std::vector<std::pair<int64_t, std::string>> fetches;
  for (int i = 0; i < block.ops_size(); ++i) {
    const pb::OpDesc& op = block.ops(i);
    p.op = &op;
    p.node_name = fmt::format("{}_{}", op.type(), i);
    if (op.type() == "feed") feeds.push_back({p.attr_int("col", static_cast<int64_t>(feeds.size())), p.out_name("Out")});
  }
  std::stable_sort(feeds.begin(), feeds.end());
  int dyn0 = 0;
  for (const auto& [col, name] : feeds) {
    auto it = p.vars.find(name);
    if (it != p.vars.end() && !it->second.dims.empty() && it->second.dims[0] < 0) ++dyn0;
  }
  for (const auto& [col, name] : feeds) {
    auto it = p.vars.find(name);
    SAMPAN_CHECK(it != p.vars.end() && it->second.known, ErrorCode::kInvalidModel,
                 "{}: input '{}' has no declared dense tensor type", path, name);
    std::vector<graph::Dim> dims;
    const auto& d = it->second.dims;
    for (size_t k = 0; k < d.size(); ++k) {
      if (d[k] >= 0) dims.push_back(graph::Dim::fixed(d[k]));
      else if (k == 0 && dyn0 > 1) dims.push_back(graph::Dim::sym("batch"));
      else dims.push_back(graph::Dim::sym(fmt::format("{}.{}", name, k)));
    }
    p.values[name] = m.graph.add_input(name, it->second.dtype, dims);
    m.signature.inputs.push_back({name, name, TensorRole::kData, it->second.dtype, std::move(dims), -1});
  }

  const auto& tab = table();
  for (int i = 0; i < block.ops_size(); ++i) {
    const pb::OpDesc& op = block.ops(i);
    p.op = &op;
    p.node_name = fmt::format("{}_{}", op.type(), i);
    if (op.type() == "feed") continue;
    try {
      if (op.type() == "fetch") {
        fetches.push_back({p.attr_int("col", static_cast<int64_t>(fetches.size())), p.arg("X")});
        p.value(p.arg("X"));
        continue;
      }
      auto it = tab.find(op.type());
      if (it == tab.end()) {
        fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' is not supported", path, p.node_name, op.type());
      }
      it->second(p);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(path, 0) == 0) throw;
      fail(e.code(), "{}: node '{}': {}", path, p.node_name, msg);
    }
  }
  SAMPAN_CHECK(!m.signature.inputs.empty(), ErrorCode::kInvalidModel, "{}: the program has no feed inputs", path);
  SAMPAN_CHECK(!fetches.empty(), ErrorCode::kInvalidModel, "{}: the program has no fetch outputs", path);
  std::stable_sort(fetches.begin(), fetches.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [col, name] : fetches) {
    ValueId v = m.graph.add("identity", name, {p.values.at(name)});
    m.graph.mutable_value(v).name = name;
    m.graph.mark_output(v);
    m.signature.outputs.push_back({name, name, TensorRole::kData, DType::kF32, {}, -1});
  }
  m.graph.validate();
}

}  // namespace sampan::models
