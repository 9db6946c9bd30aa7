// Paddle inference models into Sampan's graph IR, registered as the "paddle" model format.
//
// The PIR program (paddle.jit.save's default in 3.x: <prefix>.json + <prefix>.pdiparams) is one
// block of ops in order (PIR programs are in SSA and topologically sorted when saved; an input no
// earlier op makes is an error naming the node). Op names are serialized as "<dialect>.<op>":
// "1." is pd_op, "0." builtin; "p" is builtin.parameter (the weights, read from .pdiparams in
// sorted-name order). Every pd_op becomes one or a few ops of docs/CLASSIC_OPS.md through a table
// by name; anything else is refused with one line naming the file, the node
// ("pd_op.<op>_<index in the block>") and the op.
//
// The legacy ProgramDesc (*.pdmodel) is translated by paddle_legacy_import.cc.
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/loaders/paddle_file.h"
#include "engine/models/import_util.h"
#include "engine/models/model.h"
#include "proto/formats/paddle_framework.pb.h"

namespace sampan::models {

// paddle_legacy_import.cc
void build_paddle_legacy(const paddle::PaddlePaths& paths, Model& m);

namespace {

namespace fs = std::filesystem;
using graph::Attributes;
using graph::kNoValue;
using graph::ValueId;
using json = nlohmann::json;

std::string dialect_name(const std::string& serialized) {
  if (serialized == "p") return "builtin.parameter";
  const auto dot = serialized.find('.');
  if (dot == std::string::npos) return serialized;
  const std::string d = serialized.substr(0, dot), op = serialized.substr(dot + 1);
  if (d == "0") return "builtin." + op;
  if (d == "1") return "pd_op." + op;
  if (d == "2") return "cf." + op;
  return serialized;
}

// A PIR value's type: dtype and dims (-1: dynamic).
struct PirType {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
  bool known = false;
};

struct Pir {
  const std::string& path;
  Model& model;
  graph::Graph& g;
  std::map<int64_t, ValueId> values;
  std::map<int64_t, std::vector<int64_t>> lists;  // builtin.combine results (and ops' vector outputs)
  std::map<int64_t, PirType> types;
  const json* op = nullptr;
  int64_t next_synthetic = -1;  // ids below 0 name the elements of an op's vector output
  std::string op_name;    // "conv2d"
  std::string node_name;  // "pd_op.conv2d_12"
  std::map<std::string, const json*> attrs;

  [[noreturn]] void refuse(const std::string& why) const {
    fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' {}", path, node_name, op_name, why);
  }
  [[noreturn]] void bad(const std::string& why) const {
    fail(ErrorCode::kInvalidModel, "{}: node '{}' ({}): {}", path, node_name, op_name, why);
  }

  // --- attributes: {"AT": {"#": "0.a_i32", "D": 1}, "N": "groups"} ---
  const json* attr(const std::string& name) const {
    auto it = attrs.find(name);
    return it == attrs.end() ? nullptr : it->second;
  }
  static double scalar_of(const json& at) {
    const json& d = at.at("D");
    if (d.is_boolean()) return d.get<bool>() ? 1.0 : 0.0;
    if (d.is_number()) return d.get<double>();
    // Non-finite floats are strings in PIR json.
    const std::string s = d.get<std::string>();
    if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
    return std::numeric_limits<double>::quiet_NaN();
  }
  double attr_float(const std::string& name, double fallback) const {
    const json* a = attr(name);
    if (!a) return fallback;
    try {
      return scalar_of(*a);
    } catch (const json::exception&) {
      bad(fmt::format("attribute '{}' is not a number", name));
    }
  }
  int64_t attr_int(const std::string& name, int64_t fallback) const {
    return static_cast<int64_t>(attr_float(name, static_cast<double>(fallback)));
  }
  bool attr_bool(const std::string& name, bool fallback) const { return attr_float(name, fallback ? 1 : 0) != 0; }
  std::string attr_string(const std::string& name, const std::string& fallback) const {
    const json* a = attr(name);
    if (!a) return fallback;
    if (!a->at("D").is_string()) bad(fmt::format("attribute '{}' is not a string", name));
    return a->at("D").get<std::string>();
  }
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> fallback) const {
    const json* a = attr(name);
    if (!a) return fallback;
    const json& d = a->at("D");
    if (!d.is_array()) bad(fmt::format("attribute '{}' is not a list", name));
    std::vector<int64_t> out;
    for (const json& e : d) out.push_back(e.is_object() ? static_cast<int64_t>(scalar_of(e)) : e.get<int64_t>());
    return out;
  }

  // --- inputs ---
  int n_inputs() const { return op->contains("I") ? static_cast<int>(op->at("I").size()) : 0; }
  int64_t input_id(int i) const {
    if (i >= n_inputs()) bad(fmt::format("input {} is missing", i));
    return op->at("I").at(static_cast<size_t>(i)).at("%").get<int64_t>();
  }
  bool has_input(int i) const { return i < n_inputs() && input_id(i) != 0; }
  ValueId input(int i) const {
    const int64_t id = input_id(i);
    if (id == 0) bad(fmt::format("input {} is missing", i));
    auto it = values.find(id);
    if (it == values.end()) bad(fmt::format("input {} (%{}) is made by no earlier op", i, id));
    return it->second;
  }
  std::vector<ValueId> input_list(int i) const {
    auto it = lists.find(input_id(i));
    if (it == lists.end()) bad(fmt::format("input {} is not a builtin.combine list", i));
    std::vector<ValueId> out;
    for (int64_t id : it->second) {
      auto v = values.find(id);
      if (v == values.end()) bad(fmt::format("list input %{} is made by no earlier op", id));
      out.push_back(v->second);
    }
    return out;
  }
  const PirType& type_of(int i) const {
    auto it = types.find(input_id(i));
    if (it == types.end() || !it->second.known) bad(fmt::format("input {} has no recorded type", i));
    return it->second;
  }
  int64_t rank_of(int i) const { return static_cast<int64_t>(type_of(i).dims.size()); }
  const Tensor* constant(int i) const {
    const graph::Value& v = g.value(input(i));
    return v.kind == graph::ValueKind::kConstant ? &v.constant : nullptr;
  }
  std::vector<int64_t> constant_ints(int i, const char* what) const {
    const Tensor* t = constant(i);
    if (!t) refuse(fmt::format("with {} computed at run time is not supported (only a constant)", what));
    std::optional<std::vector<int64_t>> v = tensor_ints(*t);
    if (!v) bad(fmt::format("{} must be integers, not {}", what, dtype_name(t->dtype())));
    return *v;
  }
  double constant_scalar(int i, const char* what) const {
    const Tensor* t = constant(i);
    if (!t) refuse(fmt::format("with {} computed at run time is not supported (only a constant)", what));
    if (t->numel() != 1) bad(fmt::format("{} must hold one value, not {}", what, t->numel()));
    return static_cast<double>(t->to_f32().contiguous().data<float>()[0]);
  }

  // --- outputs ---
  int64_t output_id(int i) const {
    const json& o = op->at("O");
    if (!o.is_array() || i >= static_cast<int>(o.size())) bad(fmt::format("output {} is missing", i));
    return o.at(static_cast<size_t>(i)).at("%").get<int64_t>();
  }
  void bind(int i, ValueId v) {
    const int64_t id = output_id(i);
    if (values.count(id)) bad(fmt::format("output %{} is produced twice", id));
    g.mutable_value(v).name = fmt::format("{}:{}", node_name, i);
    values[id] = v;
  }
  ValueId emit(const std::string& sop, std::vector<ValueId> inputs, Attributes a) {
    const ValueId v = g.add(sop, node_name, std::move(inputs), std::move(a));
    bind(0, v);
    return v;
  }
  // An op whose output 0 is a vector (split): its elements get synthetic ids, which
  // builtin.split then binds to its own outputs.
  void emit_list(const std::string& sop, std::vector<ValueId> inputs, Attributes a, int n) {
    const std::vector<ValueId> vs = g.add_node(sop, node_name, std::move(inputs), std::move(a), n);
    std::vector<int64_t> ids;
    for (int k = 0; k < n; ++k) {
      g.mutable_value(vs[static_cast<size_t>(k)]).name = fmt::format("{}:{}", node_name, k);
      values[next_synthetic] = vs[static_cast<size_t>(k)];
      ids.push_back(next_synthetic--);
    }
    const int64_t id = output_id(0);
    if (lists.count(id)) bad(fmt::format("output %{} is produced twice", id));
    lists[id] = std::move(ids);
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
};

using Translate = std::function<void(Pir&)>;

PirType parse_type(const json& tt) {
  // {"#": "0.t_dtensor", "D": [{"#": "0.t_f32"}, [dims], "NCHW", [lod], offset]}
  PirType t;
  if (!tt.is_object() || !(tt.contains("#") && tt["#"] == "0.t_dtensor")) return t;
  const json& d = tt.at("D");
  const std::string ty = d.at(0).at("#").get<std::string>();
  static const std::map<std::string, DType> kTypes = {
      {"0.t_f32", DType::kF32}, {"0.t_f64", DType::kF32}, {"0.t_i32", DType::kI32}, {"0.t_i64", DType::kI64},
      {"0.t_bool", DType::kBool}, {"0.t_ui8", DType::kU8}, {"0.t_i8", DType::kI8}};
  auto it = kTypes.find(ty);
  if (it == kTypes.end()) return t;
  t.dtype = it->second;
  t.dims = d.at(1).get<std::vector<int64_t>>();
  t.known = true;
  return t;
}

void unary(Pir& p, const std::string& kind, Attributes extra = {}) {
  extra.set("kind", kind);
  p.emit("unary", {p.input(0)}, std::move(extra));
}
void binary(Pir& p, const std::string& kind) { p.emit("binary", {p.input(0), p.input(1)}, {{"kind", kind}}); }

void require_nchw(Pir& p) {
  const std::string f = p.attr_string("data_format", "NCHW");
  if (f != "NCHW" && f != "AnyLayout") p.refuse(fmt::format("with data_format {} is not supported (NCHW only)", f));
}

// Paddle paddings: [ph, pw] or [top, bottom, left, right] -> conv2d/pool2d (top, left, bottom, right).
std::vector<int64_t> pads_of(Pir& p) {
  const std::string algo = p.attr_string("padding_algorithm", "EXPLICIT");
  if (algo == "VALID") return {0, 0, 0, 0};
  if (algo != "EXPLICIT") p.refuse(fmt::format("with padding_algorithm {} is not supported", algo));
  const std::vector<int64_t> pd = p.attr_ints("paddings", {0, 0});
  if (pd.size() == 2) return {pd[0], pd[1], pd[0], pd[1]};
  if (pd.size() == 4) return {pd[0], pd[2], pd[1], pd[3]};
  p.bad(fmt::format("{} paddings", pd.size()));
}

void conv(Pir& p) {
  require_nchw(p);
  Attributes a;
  a.set("strides", p.attr_ints("strides", {1, 1}));
  a.set("pads", pads_of(p));
  a.set("dilations", p.attr_ints("dilations", {1, 1}));
  a.set("group", p.attr_int("groups", 1));
  a.set("activation", std::string("none"));
  p.emit("conv2d", {p.input(0), p.input(1)}, std::move(a));
}

void pool(Pir& p) {
  require_nchw(p);
  const std::string kind = p.attr_string("pooling_type", "max");
  if (kind != "max" && kind != "avg") p.bad(fmt::format("pooling_type '{}'", kind));
  Attributes a;
  a.set("kind", kind);
  const std::vector<int64_t> kernel = p.constant_ints(1, "kernel_size");
  if (p.attr_bool("global_pooling", false) ||
      (p.attr_bool("adaptive", false) && kernel == std::vector<int64_t>{1, 1})) {
    a.set("global", int64_t{1});
  } else if (p.attr_bool("adaptive", false)) {
    p.refuse("adaptive to an output other than 1x1 is not supported");
  } else {
    if (kernel.size() != 2) p.bad(fmt::format("kernel_size of {} dimensions", kernel.size()));
    a.set("kernel", kernel);
    a.set("strides", p.attr_ints("strides", {1, 1}));
    a.set("pads", pads_of(p));
    a.set("dilations", std::vector<int64_t>{1, 1});
    a.set("ceil_mode", int64_t{p.attr_bool("ceil_mode", false)});
    a.set("count_include_pad", int64_t{!p.attr_bool("exclusive", true)});
  }
  p.emit("pool2d", {p.input(0)}, std::move(a));
}

// Swaps the last two dimensions of input i (rank from its recorded type).
ValueId transposed_last2(Pir& p, int i, const char* suffix) {
  const int64_t r = p.rank_of(i);
  if (r < 2) p.refuse("transposing an operand of rank < 2 is not supported");
  std::vector<int64_t> perm(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) perm[static_cast<size_t>(k)] = k;
  std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
  return p.inner("transpose", suffix, {p.input(i)}, {{"perm", perm}});
}

void matmul(Pir& p) {
  ValueId a = p.input(0), b = p.input(1);
  if (p.attr_bool("transpose_x", false)) a = transposed_last2(p, 0, "trans_x");
  Attributes attrs;
  if (p.attr_bool("transpose_y", false)) {
    if (p.rank_of(1) == 2) attrs.set("trans_b", int64_t{1});
    else b = transposed_last2(p, 1, "trans_y");
  }
  p.emit("matmul", {a, b}, std::move(attrs));
}

// pd_op.scale(x, scale): scale·x + bias (bias_after_scale) or scale·(x + bias).
void scale(Pir& p) {
  const double bias = p.attr_float("bias", 0.0);
  const bool after = p.attr_bool("bias_after_scale", true);
  ValueId x = p.input(0);
  ValueId s = kNoValue;
  double sv = 1.0;
  if (p.has_input(1)) {
    if (p.constant(1)) sv = p.constant_scalar(1, "scale");
    else s = p.input(1);
  } else {
    sv = p.attr_float("scale", 1.0);
  }
  auto mul = [&](ValueId v, bool last) {
    if (s == kNoValue && sv == 1.0) return v;
    const ValueId f = s != kNoValue ? s : p.scalar_const("scale", static_cast<float>(sv));
    return last ? p.emit("binary", {v, f}, {{"kind", std::string("mul")}})
                : p.inner("binary", "mul", {v, f}, {{"kind", std::string("mul")}});
  };
  auto add = [&](ValueId v, bool last) {
    if (bias == 0.0) return v;
    const ValueId b = p.scalar_const("bias", static_cast<float>(bias));
    return last ? p.emit("binary", {v, b}, {{"kind", std::string("add")}})
                : p.inner("binary", "add", {v, b}, {{"kind", std::string("add")}});
  };
  const bool has_mul = s != kNoValue || sv != 1.0, has_add = bias != 0.0;
  if (!has_mul && !has_add) {
    p.emit("identity", {x}, {});
  } else if (after) {
    add(mul(x, !has_add), true);
    if (!has_add) return;
  } else {
    mul(add(x, !has_mul), true);
  }
}

void full(Pir& p) {
  const std::vector<int64_t> shape = p.attr_ints("shape", {});
  const DType dt = paddle::paddle_dtype_name(p.attr_string("dtype", "float32"), p.path + ": node '" + p.node_name + "'");
  if (dt != DType::kF32 && dt != DType::kI32 && dt != DType::kI64 && dt != DType::kBool) {
    p.refuse(fmt::format("of dtype {} is not supported", dtype_name(dt)));
  }
  for (int64_t d : shape) {
    if (d < 0 || d > (int64_t{1} << 24)) p.bad(fmt::format("shape [{}]", fmt::join(shape, ", ")));
  }
  p.values[p.output_id(0)] = p.g.add_constant(p.node_name, filled(shape, dt, p.attr_float("value", 0.0)));
}

void full_int_array(Pir& p) {
  const std::vector<int64_t> v = p.attr_ints("value", {});
  const DType dt = paddle::paddle_dtype_name(p.attr_string("dtype", "int64"), p.path + ": node '" + p.node_name + "'");
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dt == DType::kI32 ? DType::kI32 : DType::kI64);
  for (size_t k = 0; k < v.size(); ++k) {
    if (t.dtype() == DType::kI32) t.data<int32_t>()[k] = static_cast<int32_t>(v[k]);
    else t.data<int64_t>()[k] = v[k];
  }
  p.values[p.output_id(0)] = p.g.add_constant(p.node_name, t);
}

void layer_norm(Pir& p) {
  const int64_t rank = p.rank_of(0);
  int64_t axis = p.attr_int("begin_norm_axis", 1);
  if (axis < 0) axis += rank;
  std::vector<ValueId> in = {p.input(0)};
  const std::vector<int64_t>& xd = p.type_of(0).dims;
  std::vector<int64_t> norm_dims(xd.begin() + std::min<int64_t>(axis, rank), xd.end());
  for (int i : {1, 2}) {
    if (!p.has_input(i)) {
      if (i == 1 && p.has_input(2)) p.refuse("with a bias and no scale is not supported");
      continue;
    }
    ValueId v = p.input(i);
    if (norm_dims.size() != 1) {
      for (int64_t d : norm_dims) {
        if (d < 0) p.refuse("over several dimensions of unknown size is not supported");
      }
      v = p.inner("reshape", i == 1 ? "scale" : "bias", {v, p.ints_const(i == 1 ? "scale_shape" : "bias_shape", norm_dims)});
    }
    in.push_back(v);
  }
  // The last axis is written -1, the form fuse_add_layer_norm matches.
  p.emit("layer_norm", std::move(in), {{"axis", axis == rank - 1 ? int64_t{-1} : axis}, {"eps", p.attr_float("epsilon", 1e-5)}});
}

void embedding(Pir& p) {
  const int64_t pad = p.attr_int("padding_idx", -1);
  ValueId w = p.input(1);
  if (pad >= 0) {
    // Paddle writes zeros for the padding_idx rows whatever the table holds there.
    const Tensor* t = p.constant(1);
    if (!t || t->rank() != 2 || t->dtype() != DType::kF32) p.refuse("with padding_idx on a computed table is not supported");
    if (pad >= t->dim(0)) p.bad(fmt::format("padding_idx {} is past the table's {} rows", pad, t->dim(0)));
    Tensor c = Tensor::empty(t->shape(), DType::kF32);
    std::memcpy(c.data<float>(), t->contiguous().data<float>(), static_cast<size_t>(t->nbytes()));
    std::fill_n(c.data<float>() + pad * t->dim(1), t->dim(1), 0.0f);
    w = p.g.add_constant(p.node_name + "/table", c);
  }
  p.emit("gather", {w, p.input(0)}, {{"axis", int64_t{0}}});
}

void slice(Pir& p) {
  const std::vector<int64_t> axes = p.attr_ints("axes", {});
  const std::vector<int64_t> decrease = p.attr_ints("decrease_axis", {});
  std::vector<ValueId> in = {p.input(0), p.input(1), p.input(2), p.ints_const("axes", axes)};
  if (decrease.empty()) {
    p.emit("slice", std::move(in), {});
    return;
  }
  const ValueId s = p.inner("slice", "slice", std::move(in));
  // decrease_axis drops the sliced dimensions (all of them: a 0-D result, as Paddle 3.x gives).
  p.emit("squeeze", {s}, {{"axes", decrease}});
}

void stack(Pir& p) {
  const std::vector<ValueId> in = p.input_list(0);
  const int64_t axis = p.attr_int("axis", 0);
  if (axis < 0) p.refuse("with a negative axis is not supported");
  std::vector<ValueId> parts;
  for (size_t k = 0; k < in.size(); ++k) {
    parts.push_back(p.inner("unsqueeze", fmt::format("unsqueeze{}", k), {in[k]}, {{"axes", std::vector<int64_t>{axis}}}));
  }
  p.emit("concat", std::move(parts), {{"axis", axis}});
}

void unsqueeze(Pir& p) {
  std::vector<int64_t> axes = p.constant_ints(1, "axes");
  // Paddle inserts the axes one after another, each in the rank reached so far; for ascending
  // axes that is ONNX's numbering in the output.
  int64_t rank = p.rank_of(0);
  for (int64_t& a : axes) {
    if (a < 0) a += rank + 1;
    ++rank;
  }
  if (!std::is_sorted(axes.begin(), axes.end())) p.refuse("with axes out of ascending order is not supported");
  p.emit("unsqueeze", {p.input(0)}, {{"axes", axes}});
}

void flatten(Pir& p) {
  const int64_t rank = p.rank_of(0);
  int64_t start = p.attr_int("start_axis", 1), stop = p.attr_int("stop_axis", -1);
  if (start < 0) start += rank;
  if (stop < 0) stop += rank;
  if (rank == 0 || start < 0 || stop >= rank || start > stop) p.bad(fmt::format("axes {}..{} of rank {}", start, stop, rank));
  std::vector<int64_t> shape;
  for (int64_t k = 0; k < start; ++k) shape.push_back(0);
  shape.push_back(-1);
  for (int64_t k = stop + 1; k < rank; ++k) shape.push_back(0);
  p.emit("reshape", {p.input(0), p.ints_const("shape", shape)}, {});
}

// split(x, sections, axis) and split_with_num(x, axis){num}: one split node whose outputs
// builtin.split hands out. A section of -1 takes what the others leave (the axis must be known).
void split(Pir& p, bool with_num) {
  const int64_t axis = static_cast<int64_t>(p.constant_scalar(with_num ? 1 : 2, "axis"));
  if (with_num) {
    const int64_t n = p.attr_int("num", 0);
    if (n < 1) p.bad(fmt::format("num {}", n));
    p.emit_list("split", {p.input(0)}, {{"axis", axis}, {"exact", int64_t{1}}}, static_cast<int>(n));
    return;
  }
  std::vector<int64_t> sections = p.constant_ints(1, "sections");
  if (sections.empty()) p.bad("no sections");
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
    const std::vector<int64_t>& dims = p.type_of(0).dims;
    const int64_t rank = static_cast<int64_t>(dims.size());
    const int64_t ax = axis < 0 ? axis + rank : axis;
    if (ax < 0 || ax >= rank || dims[static_cast<size_t>(ax)] < 0) {
      p.refuse("with a -1 section along a dimension of unknown size is not supported");
    }
    sections[static_cast<size_t>(infer)] = dims[static_cast<size_t>(ax)] - known;
    if (sections[static_cast<size_t>(infer)] < 0) p.bad("sections longer than the axis");
  }
  const int n = static_cast<int>(sections.size());
  p.emit_list("split", {p.input(0)}, {{"axis", axis}, {"sizes", std::move(sections)}}, n);
}

void dropout(Pir& p) {
  if (!p.attr_bool("is_test", true)) p.refuse("in training mode is not supported");
  const std::string mode = p.attr_string("mode", "upscale_in_train");
  if (mode == "upscale_in_train") {
    p.emit("identity", {p.input(0)}, {});
  } else if (mode == "downgrade_in_infer") {
    const double prob = p.has_input(2) ? p.constant_scalar(2, "p") : p.attr_float("p", 0.5);
    p.emit("binary", {p.input(0), p.scalar_const("keep", static_cast<float>(1.0 - prob))}, {{"kind", std::string("mul")}});
  } else {
    p.bad(fmt::format("mode '{}'", mode));
  }
}

// Only ops exercised by tests/e2e/test_paddle_models.py are here; everything else is refused.
const std::map<std::string, Translate>& table() {
  static const std::map<std::string, Translate> t = {
      {"conv2d", conv},
      {"depthwise_conv2d", conv},
      {"batch_norm",
       [](Pir& p) {
         require_nchw(p);
         // PIR inputs: x, mean, variance, scale, bias.
         p.emit("batch_norm", {p.input(0), p.input(3), p.input(4), p.input(1), p.input(2)},
                {{"eps", p.attr_float("epsilon", 1e-5)}});
       }},
      {"pool2d", pool},
      {"relu", [](Pir& p) { unary(p, "relu"); }},
      {"sigmoid", [](Pir& p) { unary(p, "sigmoid"); }},
      {"tanh", [](Pir& p) { unary(p, "tanh"); }},
      {"hardswish", [](Pir& p) { unary(p, "hard_swish"); }},
      {"hardsigmoid",
       [](Pir& p) {
         unary(p, "hard_sigmoid", {{"alpha", p.attr_float("slope", 1.0 / 6)}, {"beta", p.attr_float("offset", 0.5)}});
       }},
      {"gelu", [](Pir& p) { unary(p, p.attr_bool("approximate", false) ? "gelu_tanh" : "gelu"); }},
      // PIR's elementwise ops broadcast like numpy (the legacy `axis` rule is gone).
      {"add", [](Pir& p) { binary(p, "add"); }},
      {"subtract", [](Pir& p) { binary(p, "sub"); }},
      {"multiply", [](Pir& p) { binary(p, "mul"); }},
      {"divide", [](Pir& p) { binary(p, "div"); }},
      {"matmul", matmul},
      {"scale", scale},
      {"full", full},
      {"full_int_array", full_int_array},
      {"layer_norm", layer_norm},
      {"softmax", [](Pir& p) { p.emit("softmax", {p.input(0)}, {{"axis", p.attr_int("axis", -1)}}); }},
      {"embedding", embedding},
      {"reshape", [](Pir& p) { p.emit("reshape", {p.input(0), p.input(1)}, {}); }},
      {"transpose", [](Pir& p) { p.emit("transpose", {p.input(0)}, {{"perm", p.attr_ints("perm", {})}}); }},
      {"flatten", flatten},
      {"unsqueeze", unsqueeze},
      {"slice", slice},
      {"stack", stack},
      {"shape64", [](Pir& p) { p.emit("shape", {p.input(0)}, {}); }},
      {"cast",
       [](Pir& p) {
         const DType dt = paddle::paddle_dtype_name(p.attr_string("dtype", ""), p.path + ": node '" + p.node_name + "'");
         p.emit("cast", {p.input(0)}, {{"to", std::string(dtype_name(dt))}});
       }},
      {"dropout", dropout},
      {"split", [](Pir& p) { split(p, false); }},
      {"split_with_num", [](Pir& p) { split(p, true); }},
  };
  return t;
}

// Ops whose extra outputs (batch_norm's saved statistics, layer_norm's mean and variance,
// dropout's mask) must not be read.
void check_extra_outputs(Pir& p, const std::set<int64_t>& consumed) {
  const json& o = p.op->at("O");
  if (!o.is_array()) return;
  for (size_t i = 1; i < o.size(); ++i) {
    const int64_t id = o[i].at("%").get<int64_t>();
    if (consumed.count(id)) p.refuse(fmt::format("output {} is not supported", i));
  }
}

std::vector<graph::Dim> dims_of(const std::string& input, const std::vector<int64_t>& dims) {
  std::vector<graph::Dim> out;
  for (size_t d = 0; d < dims.size(); ++d) {
    out.push_back(dims[d] >= 0 ? graph::Dim::fixed(dims[d]) : graph::Dim::sym(fmt::format("{}.{}", input, d)));
  }
  return out;
}

void build_pir(const paddle::PaddlePaths& paths, Model& m) {
  const std::string& path = paths.program;
  const std::string text = paddle::read_file_bytes(path, "program");
  auto doc = std::make_shared<json>();
  try {
    *doc = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorCode::kInvalidModel, "{}: is not a PIR json program: {}", path, e.what());
  }
  const json* ops = nullptr;
  try {
    const json& base = doc->at("base_code");
    SAMPAN_CHECK(base.is_object() && base.contains("magic") && base["magic"] == "pir", ErrorCode::kInvalidModel, "{}: base_code.magic is not 'pir'", path);
    const json& regions = doc->at("program").at("regions");
    SAMPAN_CHECK(regions.size() == 1 && regions[0].at("blocks").size() == 1, ErrorCode::kUnsupported,
                 "{}: programs of several regions or blocks are not supported", path);
    ops = &regions[0].at("blocks")[0].at("ops");
    SAMPAN_CHECK(ops->is_array(), ErrorCode::kInvalidModel, "{}: ops is not a list", path);
  } catch (const json::exception& e) {
    fail(ErrorCode::kInvalidModel, "{}: is not a PIR program: {}", path, e.what());
  }
  m.format = "paddle";
  m.architecture = fmt::format("paddle (pir v{})", doc->at("base_code").contains("version") ? doc->at("base_code")["version"].dump() : std::string("?"));
  m.builder_state = doc;

  Pir p{path, m, m.graph, {}, {}, {}, nullptr, -1, {}, {}, {}};
  std::set<int64_t> consumed;
  std::vector<paddle::ParamSpec> specs;
  std::map<std::string, int64_t> param_ids;
  try {
    for (const json& op : *ops) {
      if (op.contains("I")) {
        for (const json& in : op.at("I")) consumed.insert(in.at("%").get<int64_t>());
      }
      if (op.at("#") == "p") {
        // {"#": "p", "A": [.., .., .., "name"], "O": {"%": 1, "TT": ...}}
        const std::string name = op.at("A").back().get<std::string>();
        const PirType t = parse_type(op.at("O").at("TT"));
        specs.push_back({name, t.dims, t.dtype});
        SAMPAN_CHECK(!param_ids.count(name), ErrorCode::kInvalidModel, "{}: parameter '{}' is declared twice", path, name);
        param_ids[name] = op.at("O").at("%").get<int64_t>();
      }
    }
  } catch (const json::exception& e) {
    fail(ErrorCode::kInvalidModel, "{}: malformed op list: {}", path, e.what());
  }
  std::map<std::string, Tensor> params = paddle::read_pdiparams(paths.params, specs);
  for (auto& [name, t] : params) {
    p.values[param_ids.at(name)] = m.graph.add_constant(name, std::move(t));
  }

  std::vector<std::pair<int64_t, std::pair<std::string, ValueId>>> fetches;
  std::map<std::string, PirType> fetch_types;
  const auto& tab = table();
  for (size_t i = 0; i < ops->size(); ++i) {
    const json& op = (*ops)[i];
    const std::string serialized = op.at("#").get<std::string>();
    if (serialized == "p") continue;
    const std::string full_name = dialect_name(serialized);
    p.op = &op;
    p.op_name = full_name.substr(full_name.find('.') + 1);
    p.node_name = fmt::format("{}_{}", full_name, i);
    p.attrs.clear();
    try {
      if (op.contains("A") && op.at("A").is_array()) {
        for (const json& a : op.at("A")) {
          if (a.is_object() && a.contains("N") && a.contains("AT")) p.attrs[a.at("N").get<std::string>()] = &a.at("AT");
        }
      }
      if (op.contains("O") && op.at("O").is_array()) {
        for (const json& o : op.at("O")) {
          if (o.contains("TT")) p.types[o.at("%").get<int64_t>()] = parse_type(o.at("TT"));
        }
      }
      if (full_name == "builtin.combine") {
        std::vector<int64_t> ids;
        for (int k = 0; k < p.n_inputs(); ++k) ids.push_back(p.input_id(k));
        p.lists[p.output_id(0)] = ids;
        continue;
      }
      if (full_name == "builtin.split") {
        const std::vector<ValueId> parts = p.input_list(0);
        const json& outs = op.at("O");
        if (!outs.is_array() || outs.size() != parts.size()) {
          p.bad(fmt::format("{} outputs for a list of {}", outs.is_array() ? outs.size() : 0, parts.size()));
        }
        for (size_t k = 0; k < parts.size(); ++k) p.values[p.output_id(static_cast<int>(k))] = parts[k];
        continue;
      }
      if (full_name == "pd_op.data") {
        const std::string name = p.attr_string("name", "");
        if (name.empty()) p.bad("a data op without a name");
        const DType dt = paddle::paddle_dtype_name(p.attr_string("dtype", "float32"), fmt::format("{}: input '{}'", path, name));
        std::vector<graph::Dim> dims = dims_of(name, p.attr_ints("shape", {}));
        p.values[p.output_id(0)] = m.graph.add_input(name, dt, dims);
        m.signature.inputs.push_back({name, name, TensorRole::kData, dt, std::move(dims), -1});
        continue;
      }
      if (full_name == "pd_op.fetch") {
        const std::string name = p.attr_string("name", "");
        if (name.empty()) p.bad("a fetch op without a name");
        fetches.push_back({p.attr_int("col", static_cast<int64_t>(fetches.size())), {name, p.input(0)}});
        // The program states each fetched tensor's type (dims -1 where they vary): the
        // signature carries it so `sampan info` and the servers' metadata show real shapes.
        auto t = p.types.find(p.output_id(0));
        if (t != p.types.end() && t->second.known) fetch_types[name] = t->second;
        continue;
      }
      auto it = serialized.rfind("1.", 0) == 0 ? tab.find(p.op_name) : tab.end();
      // In-place variants (batch_norm_, relu_, ...) compute the same values.
      if (it == tab.end() && serialized.rfind("1.", 0) == 0 && !p.op_name.empty() && p.op_name.back() == '_') {
        it = tab.find(p.op_name.substr(0, p.op_name.size() - 1));
      }
      if (it == tab.end()) {
        fail(ErrorCode::kUnsupported, "{}: node '{}': op '{}' is not supported", path, p.node_name, p.op_name);
      }
      it->second(p);
      check_extra_outputs(p, consumed);
    } catch (const json::exception& e) {
      fail(ErrorCode::kInvalidModel, "{}: node '{}': malformed op: {}", path, p.node_name, e.what());
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (msg.rfind(path, 0) == 0) throw;
      fail(e.code(), "{}: node '{}': {}", path, p.node_name, msg);
    }
  }
  SAMPAN_CHECK(!m.signature.inputs.empty(), ErrorCode::kInvalidModel, "{}: the program has no pd_op.data inputs", path);
  SAMPAN_CHECK(!fetches.empty(), ErrorCode::kInvalidModel, "{}: the program has no pd_op.fetch outputs", path);
  std::stable_sort(fetches.begin(), fetches.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [col, f] : fetches) {
    auto& [name, v] = f;
    v = m.graph.add("identity", name, {v});
    m.graph.mutable_value(v).name = name;
    m.graph.mark_output(v);
    DType dt = DType::kF32;
    std::vector<graph::Dim> dims;
    if (auto t = fetch_types.find(name); t != fetch_types.end()) {
      dt = t->second.dtype;
      dims = dims_of(name, t->second.dims);
    }
    m.signature.outputs.push_back({name, name, TensorRole::kData, dt, std::move(dims), -1});
  }
  m.graph.validate();
}

void build_paddle(const std::string& path, const LoadOptions&, Model& m) {
  const std::optional<paddle::PaddlePaths> paths = paddle::paddle_paths(path);
  SAMPAN_CHECK(paths.has_value(), ErrorCode::kNotFound, "{}: no Paddle program found", path);
  if (paths->pir) {
    build_pir(*paths, m);
    return;
  }
  build_paddle_legacy(*paths, m);
}

std::optional<std::string> detect_paddle(const std::string& path) {
  if (fs::path(path).extension() == ".onnx") return std::nullopt;
  if (paddle::paddle_paths(path)) return path;
  return std::nullopt;
}

const bool kRegistered = (register_model_format({"paddle", detect_paddle, build_paddle}), true);

}  // namespace
}  // namespace sampan::models
