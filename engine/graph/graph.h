// Graph IR: values (inputs, constants, intermediates) and nodes (op applications) in
// topological order. The IR knows nothing about language models: an op is a name looked up in
// the op registry, its parameters are Attributes, and graph inputs have shapes whose dimensions
// are numbers or named symbols ("n_tokens", "batch") bound when the graph runs. LLM graphs,
// and later BERT/ResNet graphs imported from ONNX or Paddle files, are all built from it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/tensor.h"

namespace sampan::graph {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

// A dimension of a graph input: a fixed size, or a symbol bound at run time from the actual
// input tensors (every input naming a symbol must agree on its value).
struct Dim {
  int64_t size = 0;
  std::string symbol;  // empty: fixed size

  static Dim fixed(int64_t n) { return {n, {}}; }
  static Dim sym(std::string name) { return {0, std::move(name)}; }
  bool symbolic() const { return !symbol.empty(); }
};

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// Named op parameters. Getters throw a one-line Error naming the attribute when it is missing or
// has another type.
class Attributes {
 public:
  Attributes() = default;
  Attributes(std::initializer_list<std::pair<const std::string, AttrValue>> init) : map_(init) {}

  void set(const std::string& name, AttrValue v) { map_[name] = std::move(v); }
  bool has(const std::string& name) const { return map_.count(name) != 0; }
  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name) const;
  double get_float(const std::string& name, double fallback) const;
  const std::string& get_string(const std::string& name) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::map<std::string, AttrValue>& all() const { return map_; }
  std::string str() const;  // "{eps=1e-05, n_heads=32}"

 private:
  const AttrValue& get(const std::string& name) const;
  std::map<std::string, AttrValue> map_;
};

enum class ValueKind {
  kInput,         // bound by the caller on every run (activations, positions, caches)
  kConstant,      // a tensor fixed at build time (weights; usually mmapped, never copied)
  kIntermediate,  // produced by a node; memory comes from the executor's planned arena
};

struct Value {
  std::string name;
  ValueKind kind = ValueKind::kIntermediate;
  DType dtype = DType::kF32;
  std::vector<Dim> shape;  // inputs only; intermediates get shapes by inference at plan time
  Tensor constant;         // kConstant only
  NodeId producer = -1;    // kIntermediate only
};

struct Node {
  std::string op;    // registered op name, e.g. "rms_norm"
  std::string name;  // unique, for messages: "layers.3.attn_norm"
  std::vector<ValueId> inputs;   // kNoValue marks an absent optional input
  std::vector<ValueId> outputs;
  Attributes attrs;
  bool dead = false;  // removed by a pass; dropped by compact()
};

class Graph {
 public:
  ValueId add_input(const std::string& name, DType dtype, std::vector<Dim> shape);
  ValueId add_constant(const std::string& name, Tensor tensor);
  // Appends a node; its outputs are new intermediate values named "<name>:<i>" (or "<name>"
  // when it has one output). The op must be registered and its input count valid.
  std::vector<ValueId> add_node(const std::string& op, const std::string& name,
                                std::vector<ValueId> inputs, Attributes attrs = {},
                                int n_outputs = 1);
  ValueId add(const std::string& op, const std::string& name, std::vector<ValueId> inputs,
              Attributes attrs = {}) {
    return add_node(op, name, std::move(inputs), std::move(attrs), 1)[0];
  }
  void mark_output(ValueId v);

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutable_node(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  Value& mutable_value(ValueId id) { return values_.at(static_cast<size_t>(id)); }
  size_t n_values() const { return values_.size(); }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  ValueId find_input(const std::string& name) const;  // kNoValue when absent

  // Rewiring for passes: every use of `from` (node inputs and graph outputs) becomes `to`.
  void replace_uses(ValueId from, ValueId to);
  // Inserts a node right before node `before` so topological order holds; returns its id.
  // Ids of later nodes shift by one.
  NodeId insert_node_before(NodeId before, Node node, int n_outputs);
  // Live nodes that read `v`.
  std::vector<NodeId> consumers(ValueId v) const;
  bool is_output(ValueId v) const;
  // Drops dead nodes and nodes whose outputs nobody uses (not graph outputs and no live
  // consumer), keeping order. Values stay (ids are stable); unused ones are simply not planned,
  // and an unused constant's tensor is released (left empty). Call it on a finished graph only:
  // a constant added for a node not yet added is unused too.
  void compact();
  // Checks the invariants passes must keep: topological order, every input defined.
  void validate() const;
  std::string dump() const;

 private:
  std::string unique_name(const std::string& base);
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<ValueId> outputs_;
  std::map<std::string, int> name_counts_;
};

}  // namespace sampan::graph
