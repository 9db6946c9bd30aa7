// Runs a Graph on one backend. At construction it checks that the backend has a kernel for
// every op (a missing one is an error before anything runs). Each run binds the input tensors,
// infers every shape, and (when the input shapes changed) plans intermediate memory into one
// reused arena.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "engine/graph/memory_planner.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::graph {

class Executor {
 public:
  Executor(const Graph& graph, cpu::TaskRunner& runner, Device device = Device::cpu());

  // `inputs` holds one tensor per graph input, by name. Returns the graph outputs in order;
  // they view the executor's arena and stay valid until the next run.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  // Plans memory for inputs of these shapes without running anything or allocating (for
  // reporting). Every graph input must be named.
  MemoryPlan plan_for(const std::map<std::string, Shape>& input_shapes);

  const MemoryPlan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }

 private:
  void bind_and_infer(const std::map<std::string, Tensor>& inputs);
  void infer_shapes();
  void make_plan();
  void ensure_arena();

  const Graph& graph_;
  cpu::TaskRunner& runner_;
  Device device_;
  std::vector<Tensor> tensors_;   // by ValueId: bound inputs, constants, current intermediates
  std::vector<Shape> shapes_;     // by ValueId: inferred shapes of this run
  std::vector<DType> dtypes_;
  std::vector<Shape> planned_input_shapes_;
  // By node index, resolved once at construction so runs do no name lookups.
  std::vector<const ops::OpSchema*> schemas_;
  std::vector<const ops::KernelFn*> kernels_;  // null for view ops
  std::vector<int> buffer_of_;    // by ValueId: planned buffer index, or -1 (view/input/const)
  MemoryPlan plan_;
  std::shared_ptr<Storage> arena_;
};

}  // namespace sampan::graph
