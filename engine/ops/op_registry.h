// Op schemas and per-backend kernels.
//
// Each op file in engine/ops registers one OpSchema (input counts, declared attributes,
// shape/dtype inference, shape checks shared by every backend) and one kernel launcher per
// backend it supports. A launcher turns Tensors into raw pointers and calls a kernel in
// kernels/<backend>. Registration happens in static initialisers inside libsampan, so there is no
// central table to keep by hand; the executor asks `supports()` at plan time so a missing kernel
// is an error before anything runs.
//
// Attributes. An op with attributes declares each one (name, type, required or not) in its
// schema and parses a node's attributes into its own struct deriving OpAttrs (declared in the
// op's header, engine/ops/<op>.h, where its backend files read it). The executor parses every
// node once when it plans and hands the struct to each shape inference and launch, so nothing on
// the per-step path looks an attribute up by name; a bad attribute is a one-line
// Error(kInvalidArgument) naming the node and the attribute before anything runs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::ops {

// Integer contents the executor tracks while it infers shapes (see TensorDesc::value).
using KnownValue = std::optional<std::vector<int64_t>>;
// Longest integer tensor whose contents inference tracks: shape vectors and their pieces.
constexpr int64_t kMaxKnownValue = 64;

struct TensorDesc {
  Shape shape;
  DType dtype = DType::kF32;
  bool present = true;  // false for an absent optional input
  // The contents, when known before the run ("shape values"): integer or bool constants of at
  // most kMaxKnownValue elements, and what ops compute from shapes and such values (shape,
  // gather, concat, unsqueeze, slice, integer arithmetic, cast, ...), row-major. An op whose
  // output shape depends on an input's contents (reshape, expand, constant_of_shape, range)
  // reads it here; when it is absent the op refuses the node with a one-line error, since a
  // plan cannot depend on data only the run computes. An op that can compute its output's
  // contents from known inputs sets them, so chains of shape arithmetic fold at plan time.
  KnownValue value;
};

// A node's attributes parsed by its op (see the top of the file); each op derives its own.
struct OpAttrs {
  virtual ~OpAttrs() = default;
};

enum class AttrType { kInt, kFloat, kString, kInts };

// One attribute an op reads. A float attribute may be given as an integer (as
// Attributes::get_float reads it); attributes a node has beyond those declared are ignored.
struct AttrDecl {
  std::string name;
  AttrType type = AttrType::kInt;
  bool required = true;  // false: the op's parse supplies a default
};

// Everything a kernel launcher sees for one node execution.
struct KernelContext {
  const graph::Node& node;
  const OpAttrs* attrs;  // the node's parsed attributes; null for an op that declares none
  const std::vector<Tensor>& inputs;   // absent optional inputs are undefined Tensors
  const std::vector<Tensor>& outputs;  // preallocated with the inferred shapes (or views)
  cpu::TaskRunner& runner;
  // The cudaStream_t every CUDA kernel of this node launches on (the executor's stream); null on
  // the CPU. A CUDA launcher queues work and returns: the executor synchronises the stream.
  void* stream = nullptr;
  // True while the executor records this launch into a CUDA graph (Executor::run, recurring):
  // the launcher must not wait for the stream, read device memory back or grow a buffer, since
  // nothing runs until the graph is replayed, and a replay re-runs only the recorded GPU work,
  // never the launcher's host code.
  bool capturing = false;
  // CUDA: where a kernel records an input only the device can find bad (an index it must not
  // follow; it skips that work instead): two device ints, fault[0] = fault_tag for the first
  // fault, fault[1] |= the kernel's reason bits (kernels/cuda/fault.cuh). The executor zeroes
  // them before a run and afterwards throws Error(kInvalidArgument) naming the node, in the
  // words of the op's RegisterFaultText. Null on the CPU, whose kernels check on the host.
  int32_t* fault = nullptr;
  int32_t fault_tag = 0;

  // The op's own attribute struct (the executor parsed it with that op's parse_attrs).
  template <class A>
  const A& attrs_as() const {
    return static_cast<const A&>(*attrs);
  }
};

using InferFn = std::function<std::vector<TensorDesc>(const graph::Node&,
                                                      const std::vector<TensorDesc>& inputs)>;
// Inference with the node's attributes already parsed (`attrs` is null for an op that declares
// none).
using TypedInferFn = std::function<std::vector<TensorDesc>(
    const graph::Node&, const OpAttrs* attrs, const std::vector<TensorDesc>& inputs)>;
using ParseAttrsFn = std::function<std::unique_ptr<const OpAttrs>(const graph::Node&)>;
using KernelFn = std::function<void(const KernelContext&)>;
// What a device kernel's fault reason bits mean, for the executor's error message.
using FaultTextFn = std::string (*)(int32_t reason);
// View ops produce outputs that alias an input's memory (no kernel runs, no buffer planned).
using ViewFn = std::function<std::vector<Tensor>(const graph::Node&, const OpAttrs* attrs,
                                                 const std::vector<Tensor>& inputs)>;

struct OpSchema {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;
  int n_outputs = 1;
  bool has_side_effects = false;  // writes a graph input in place (e.g. a KV cache)
  // With has_side_effects: the indices of the inputs it writes (empty: any of them). The CUDA
  // executor stages host inputs that no op writes and refuses host inputs that one does (a copy
  // would drop the writes), so naming only the written ones keeps q, positions, ... stageable.
  std::vector<int> written_inputs;
  // (node, inputs): parses the node's attributes first, for callers without a plan (tools,
  // tests); throws Error(kInvalidArgument) naming the node on bad shapes or attributes.
  InferFn infer;
  ViewFn view;  // set for view ops only
  // Set by with_attrs() for an op with attributes, left empty by one without.
  std::vector<AttrDecl> attrs;
  ParseAttrsFn parse_attrs;  // checks the node against `attrs`, then parses them
  // What the executor calls; add_schema() makes it call `infer` for an op without attributes.
  TypedInferFn infer_typed;
};

// Checks node.attrs against `decls`: "node 'n' (op): missing attribute 'a'" or "node 'n' (op):
// attribute 'a' is a string, expected an integer", Error(kInvalidArgument).
void check_attrs(const graph::Node& node, const std::vector<AttrDecl>& decls);

// An op's schema with typed attributes: `parse` reads a node's attributes (already checked
// against `decls`, so its getters cannot fail on type or presence) into the op's Attrs and
// checks their values; `infer` takes them parsed.
template <class Attrs>
OpSchema with_attrs(OpSchema schema, std::vector<AttrDecl> decls,
                    Attrs (*parse)(const graph::Node&),
                    std::vector<TensorDesc> (*infer)(const graph::Node&, const Attrs&,
                                                     const std::vector<TensorDesc>&)) {
  static_assert(std::is_base_of_v<OpAttrs, Attrs>);
  schema.attrs = decls;
  schema.parse_attrs = [parse, decls = std::move(decls)](const graph::Node& node) {
    check_attrs(node, decls);
    return std::unique_ptr<const OpAttrs>(std::make_unique<const Attrs>(parse(node)));
  };
  schema.infer_typed = [infer](const graph::Node& node, const OpAttrs* attrs,
                               const std::vector<TensorDesc>& in) {
    return infer(node, static_cast<const Attrs&>(*attrs), in);
  };
  schema.infer = [parse_attrs = schema.parse_attrs, infer](const graph::Node& node,
                                                          const std::vector<TensorDesc>& in) {
    const std::unique_ptr<const OpAttrs> attrs = parse_attrs(node);
    return infer(node, static_cast<const Attrs&>(*attrs), in);
  };
  return schema;
}

class OpRegistry {
 public:
  static OpRegistry& instance();

  void add_schema(OpSchema schema);
  void add_kernel(const std::string& op, DeviceType device, KernelFn fn);

  const OpSchema& schema(const std::string& op) const;  // throws kUnsupported for unknown ops
  bool has_schema(const std::string& op) const;
  bool supports(const std::string& op, DeviceType device) const;
  const KernelFn& kernel(const std::string& op, DeviceType device) const;
  void add_fault_text(const std::string& op, DeviceType device, FaultTextFn fn);
  FaultTextFn fault_text(const std::string& op, DeviceType device) const;  // null when none
  std::vector<std::string> op_names() const;

 private:
  std::map<std::string, OpSchema> schemas_;
  std::map<std::pair<std::string, DeviceType>, KernelFn> kernels_;
  std::map<std::pair<std::string, DeviceType>, FaultTextFn> fault_texts_;
};

struct RegisterOp {
  explicit RegisterOp(OpSchema schema) { OpRegistry::instance().add_schema(std::move(schema)); }
};
struct RegisterKernel {
  RegisterKernel(const std::string& op, DeviceType device, KernelFn fn) {
    OpRegistry::instance().add_kernel(op, device, std::move(fn));
  }
};
struct RegisterFaultText {
  RegisterFaultText(const std::string& op, DeviceType device, FaultTextFn fn) {
    OpRegistry::instance().add_fault_text(op, device, fn);
  }
};

// The contents of an i32/i64/u8/bool tensor of at most kMaxKnownValue elements (copied from the
// device when it lives there); nullopt for anything else.
KnownValue known_value(const Tensor& t);

// Shared shape-check helpers for schemas; each throws one line naming the node and input.
void expect_rank(const graph::Node& node, const TensorDesc& t, int index, int rank);
void expect_dtype(const graph::Node& node, const TensorDesc& t, int index, DType dtype);
void expect_dim(const graph::Node& node, const TensorDesc& t, int index, int dim, int64_t size);
// A 0/1 integer attribute (absent: 0) as a bool; any other value is Error(kInvalidArgument)
// "node 'n' (op): name = v is not 0 or 1".
bool flag_attr(const graph::Node& node, const char* name);
// Inputs of rank >= 1 whose rows (last dimension) are contiguous, viewed as a 2-D matrix.
int64_t row_stride(const Tensor& t);

}  // namespace sampan::ops
