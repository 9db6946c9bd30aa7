#include "engine/graph/graph.h"

#include <algorithm>
#include <set>

#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/ops/op_registry.h"

namespace sampan::graph {

// ---- Attributes ----------------------------------------------------------------------------

const AttrValue& Attributes::get(const std::string& name) const {
  auto it = map_.find(name);
  SAMPAN_CHECK(it != map_.end(), ErrorCode::kInvalidArgument, "attribute '{}' is missing", name);
  return it->second;
}

int64_t Attributes::get_int(const std::string& name) const {
  const AttrValue& v = get(name);
  SAMPAN_CHECK(std::holds_alternative<int64_t>(v), ErrorCode::kInvalidArgument,
               "attribute '{}' is not an integer", name);
  return std::get<int64_t>(v);
}

int64_t Attributes::get_int(const std::string& name, int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}

double Attributes::get_float(const std::string& name) const {
  const AttrValue& v = get(name);
  if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
  SAMPAN_CHECK(std::holds_alternative<double>(v), ErrorCode::kInvalidArgument,
               "attribute '{}' is not a number", name);
  return std::get<double>(v);
}

double Attributes::get_float(const std::string& name, double fallback) const {
  return has(name) ? get_float(name) : fallback;
}

const std::string& Attributes::get_string(const std::string& name) const {
  const AttrValue& v = get(name);
  SAMPAN_CHECK(std::holds_alternative<std::string>(v), ErrorCode::kInvalidArgument,
               "attribute '{}' is not a string", name);
  return std::get<std::string>(v);
}

std::string Attributes::get_string(const std::string& name, const std::string& fallback) const {
  return has(name) ? get_string(name) : fallback;
}

const std::vector<int64_t>& Attributes::get_ints(const std::string& name) const {
  const AttrValue& v = get(name);
  SAMPAN_CHECK(std::holds_alternative<std::vector<int64_t>>(v), ErrorCode::kInvalidArgument,
               "attribute '{}' is not an integer list", name);
  return std::get<std::vector<int64_t>>(v);
}

std::string Attributes::str() const {
  std::string s = "{";
  for (const auto& [k, v] : map_) {
    if (s.size() > 1) s += ", ";
    s += k + "=";
    if (auto* i = std::get_if<int64_t>(&v)) s += std::to_string(*i);
    if (auto* d = std::get_if<double>(&v)) s += fmt::format("{:g}", *d);
    if (auto* t = std::get_if<std::string>(&v)) s += *t;
    if (auto* l = std::get_if<std::vector<int64_t>>(&v)) s += shape_str(*l);
    if (auto* l = std::get_if<std::vector<double>>(&v)) s += fmt::format("{}", fmt::join(*l, ","));
  }
  return s + "}";
}

// ---- Graph ---------------------------------------------------------------------------------

std::string Graph::unique_name(const std::string& base) {
  int& n = name_counts_[base];
  return n++ == 0 ? base : fmt::format("{}#{}", base, n - 1);
}

ValueId Graph::add_input(const std::string& name, DType dtype, std::vector<Dim> shape) {
  SAMPAN_CHECK(find_input(name) == kNoValue, ErrorCode::kInvalidArgument,
               "graph input '{}' declared twice", name);
  Value v;
  v.name = name;
  v.kind = ValueKind::kInput;
  v.dtype = dtype;
  v.shape = std::move(shape);
  values_.push_back(std::move(v));
  const ValueId id = static_cast<ValueId>(values_.size() - 1);
  inputs_.push_back(id);
  return id;
}

ValueId Graph::add_constant(const std::string& name, Tensor tensor) {
  Value v;
  v.name = name;
  v.kind = ValueKind::kConstant;
  v.dtype = tensor.dtype();
  v.constant = std::move(tensor);
  values_.push_back(std::move(v));
  return static_cast<ValueId>(values_.size() - 1);
}

std::vector<ValueId> Graph::add_node(const std::string& op, const std::string& name,
                                     std::vector<ValueId> inputs, Attributes attrs,
                                     int n_outputs) {
  const ops::OpSchema& schema = ops::OpRegistry::instance().schema(op);
  const int n_in = static_cast<int>(inputs.size());
  SAMPAN_CHECK(n_in >= schema.min_inputs && n_in <= schema.max_inputs,
               ErrorCode::kInvalidArgument, "node '{}': op '{}' takes {}..{} inputs, got {}", name,
               op, schema.min_inputs, schema.max_inputs, n_in);
  for (ValueId in : inputs) {
    SAMPAN_CHECK(in == kNoValue || (in >= 0 && static_cast<size_t>(in) < values_.size()),
                 ErrorCode::kInvalidArgument, "node '{}': input value {} does not exist", name, in);
  }
  Node node;
  node.op = op;
  node.name = unique_name(name);
  node.inputs = std::move(inputs);
  node.attrs = std::move(attrs);
  const NodeId id = static_cast<NodeId>(nodes_.size());
  for (int i = 0; i < n_outputs; ++i) {
    Value v;
    v.name = n_outputs == 1 ? node.name : fmt::format("{}:{}", node.name, i);
    v.kind = ValueKind::kIntermediate;
    v.producer = id;
    values_.push_back(std::move(v));
    node.outputs.push_back(static_cast<ValueId>(values_.size() - 1));
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

void Graph::mark_output(ValueId v) {
  SAMPAN_CHECK(v >= 0 && static_cast<size_t>(v) < values_.size(), ErrorCode::kInvalidArgument,
               "graph output {} does not exist", v);
  outputs_.push_back(v);
}

ValueId Graph::find_input(const std::string& name) const {
  for (ValueId id : inputs_) {
    if (values_[static_cast<size_t>(id)].name == name) return id;
  }
  return kNoValue;
}

void Graph::replace_uses(ValueId from, ValueId to) {
  for (Node& n : nodes_) {
    if (n.dead) continue;
    for (ValueId& in : n.inputs) {
      if (in == from) in = to;
    }
  }
  for (ValueId& out : outputs_) {
    if (out == from) out = to;
  }
}

NodeId Graph::insert_node_before(NodeId before, Node node, int n_outputs) {
  SAMPAN_CHECK(before >= 0 && static_cast<size_t>(before) <= nodes_.size(), ErrorCode::kInternal,
               "insert position {} out of range", before);
  node.name = unique_name(node.name);
  node.outputs.clear();
  for (int i = 0; i < n_outputs; ++i) {
    Value v;
    v.name = n_outputs == 1 ? node.name : fmt::format("{}:{}", node.name, i);
    v.kind = ValueKind::kIntermediate;
    v.producer = before;
    values_.push_back(std::move(v));
    node.outputs.push_back(static_cast<ValueId>(values_.size() - 1));
  }
  for (Value& v : values_) {
    if (v.kind == ValueKind::kIntermediate && v.producer >= before &&
        std::find(node.outputs.begin(), node.outputs.end(),
                  static_cast<ValueId>(&v - values_.data())) == node.outputs.end()) {
      ++v.producer;
    }
  }
  nodes_.insert(nodes_.begin() + before, std::move(node));
  return before;
}

std::vector<NodeId> Graph::consumers(ValueId v) const {
  std::vector<NodeId> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].dead) continue;
    if (std::find(nodes_[i].inputs.begin(), nodes_[i].inputs.end(), v) != nodes_[i].inputs.end()) {
      out.push_back(static_cast<NodeId>(i));
    }
  }
  return out;
}

bool Graph::is_output(ValueId v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

void Graph::compact() {
  // Backward sweep: a node is live if it is not dead and some output is used by a live node or
  // is a graph output. Ops with side effects (writing a cache) declare it in their schema.
  std::vector<bool> used(values_.size(), false);
  for (ValueId v : outputs_) used[static_cast<size_t>(v)] = true;
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& n = nodes_[i];
    if (n.dead) continue;
    bool live = ops::OpRegistry::instance().schema(n.op).has_side_effects;
    for (ValueId o : n.outputs) live = live || used[static_cast<size_t>(o)];
    if (!live) {
      n.dead = true;
      continue;
    }
    for (ValueId in : n.inputs) {
      if (in != kNoValue) used[static_cast<size_t>(in)] = true;
    }
  }
  // A constant no live node reads any more (a conv weight folded with its batch norm, reordered
  // into a blocked layout, converted to bf16) releases its tensor: the graph would otherwise
  // hold both copies for the model's lifetime. The value stays, empty, so ValueIds do not move.
  for (size_t v = 0; v < values_.size(); ++v) {
    Value& val = values_[v];
    if (val.kind == ValueKind::kConstant && !used[v] && val.constant.defined() && val.constant.numel() > 0) {
      val.constant = Tensor::empty({0}, val.constant.dtype());
    }
  }
  std::vector<Node> kept;
  kept.reserve(nodes_.size());
  for (Node& n : nodes_) {
    if (!n.dead) kept.push_back(std::move(n));
  }
  nodes_ = std::move(kept);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    for (ValueId o : nodes_[i].outputs) values_[static_cast<size_t>(o)].producer = static_cast<NodeId>(i);
  }
}

void Graph::validate() const {
  std::vector<bool> defined(values_.size(), false);
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].kind != ValueKind::kIntermediate) defined[i] = true;
  }
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    for (ValueId in : n.inputs) {
      SAMPAN_CHECK(in == kNoValue || defined[static_cast<size_t>(in)], ErrorCode::kInternal,
                   "node '{}' reads '{}' before it is produced", n.name,
                   values_[static_cast<size_t>(in)].name);
    }
    for (ValueId o : n.outputs) defined[static_cast<size_t>(o)] = true;
  }
  for (ValueId o : outputs_) {
    SAMPAN_CHECK(defined[static_cast<size_t>(o)], ErrorCode::kInternal,
                 "graph output '{}' is never produced", values_[static_cast<size_t>(o)].name);
  }
}

std::string Graph::dump() const {
  std::string s;
  auto vname = [&](ValueId v) {
    return v == kNoValue ? std::string("-") : values_[static_cast<size_t>(v)].name;
  };
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    std::vector<std::string> ins, outs;
    for (ValueId v : n.inputs) ins.push_back(vname(v));
    for (ValueId v : n.outputs) outs.push_back(vname(v));
    s += fmt::format("{} = {}({}) {}\n", fmt::join(outs, ", "), n.op, fmt::join(ins, ", "),
                     n.attrs.str());
  }
  return s;
}

}  // namespace sampan::graph
