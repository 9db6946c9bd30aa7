// Op schemas and per-backend kernels.
//
// Each op file in engine/ops registers one OpSchema (input counts, shape/dtype inference, shape
// checks shared by every backend) and one kernel launcher per backend it supports. A launcher
// turns Tensors into raw pointers and calls a kernel in kernels/<backend>. Registration happens
// in static initialisers inside libsampan, so there is no central table to keep by hand; the
// executor asks `supports()` at plan time so a missing kernel is an error before anything runs.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::ops {

struct TensorDesc {
  Shape shape;
  DType dtype = DType::kF32;
  bool present = true;  // false for an absent optional input
};

// Everything a kernel launcher sees for one node execution.
struct KernelContext {
  const graph::Node& node;
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
};

using InferFn = std::function<std::vector<TensorDesc>(const graph::Node&,
                                                      const std::vector<TensorDesc>& inputs)>;
using KernelFn = std::function<void(const KernelContext&)>;
// What a device kernel's fault reason bits mean, for the executor's error message.
using FaultTextFn = std::string (*)(int32_t reason);
// View ops produce outputs that alias an input's memory (no kernel runs, no buffer planned).
using ViewFn = std::function<std::vector<Tensor>(const graph::Node&,
                                                 const std::vector<Tensor>& inputs)>;

struct OpSchema {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;
  int n_outputs = 1;
  bool has_side_effects = false;  // writes a graph input in place (e.g. a KV cache)
  InferFn infer;                  // throws Error(kInvalidArgument) naming the node on bad shapes
  ViewFn view;                    // set for view ops only
};

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

// Shared shape-check helpers for schemas; each throws one line naming the node and input.
void expect_rank(const graph::Node& node, const TensorDesc& t, int index, int rank);
void expect_dtype(const graph::Node& node, const TensorDesc& t, int index, DType dtype);
void expect_dim(const graph::Node& node, const TensorDesc& t, int index, int dim, int64_t size);
// Inputs of rank >= 1 whose rows (last dimension) are contiguous, viewed as a 2-D matrix.
int64_t row_stride(const Tensor& t);

}  // namespace sampan::ops
