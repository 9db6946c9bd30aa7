// Runs a Graph on one backend. At construction it checks that the backend has a kernel for
// every op and parses every node's attributes into its op's typed struct (a missing kernel or a
// bad attribute is an error before anything runs; launches never look an attribute up by name).
// Each run binds the input tensors; when their shapes differ from the previous run's it infers
// every shape again and plans intermediate memory into one reused arena, and otherwise reuses
// both (a decode step, CUDA-graph replays included, costs no inference).
//
// On a CUDA device the executor owns one non-blocking stream and launches every kernel on it.
// Graph constants (weights) are copied to the device on the first run and kept for the
// executor's lifetime; the graph's CPU tensors stay the source of truth, and a constant already
// on the device is used as is. Inputs may be on the CPU (copied into device buffers the executor
// keeps) or on the executor's device; an input the graph writes in place (a KV cache) must be
// on the device. run() synchronises the stream before returning, so outputs are ready and any
// CUDA error has become an Error. An index only the device can check (attention's block tables,
// gather_rows' rows) is skipped by its kernel and reported afterwards: run() then throws
// Error(kInvalidArgument) naming the node, after the rest of the run has completed (the CPU
// checks before running anything).
//
// CUDA graphs. A run marked `recurring` (a decode step: the same input shapes step after step)
// is keyed by its input shapes and the device addresses of its inputs. The first run of a key
// runs node by node (it warms what the launchers set up once: cuBLASLt algorithms, scratch
// buffers); the second records the launches into a CUDA graph; every later one replays it with
// a single launch. Only the kernels are recorded: the staging copies of host inputs run before
// each replay, so new values in the same shapes (token ids, positions, block tables) are seen.
// A launcher that cannot be recorded makes the key run node by node from then on (logged once).
// Captured graphs are dropped whenever the arena or a staged input's buffer is reallocated,
// since they hold its old addresses.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/cuda_stream.h"
#include "engine/core/tensor.h"
#include "engine/graph/graph.h"
#include "engine/graph/memory_planner.h"
#include "engine/ops/op_registry.h"
#include "kernels/cpu/task_runner.h"

namespace sampan::graph {

class Executor {
 public:
  // A CUDA device must exist (Error(kNotFound) otherwise; kUnsupported in a build without CUDA).
  Executor(const Graph& graph, cpu::TaskRunner& runner, Device device = Device::cpu());

  // `inputs` holds one tensor per graph input, by name. Returns the graph outputs in order, on
  // the executor's device; they view the executor's arena (or its constants and input buffers)
  // and stay valid until the next run.
  // `recurring`: the caller will run these shapes again (see CUDA graphs above); ignored on the
  // CPU and when graphs are off. Its inputs on the device (the KV pools) must stay where they are
  // between runs of one shape, which their addresses in the key ensure.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs, bool recurring = false);

  // On by default. Off: every run goes node by node (for comparison and debugging).
  void set_cuda_graphs(bool on);
  bool cuda_graphs() const { return cuda_graphs_; }
  struct GraphStats {
    int64_t captures = 0;  // graphs recorded
    int64_t replays = 0;   // runs served by a recorded graph (the capturing run included)
    int64_t failures = 0;  // keys that could not be recorded and run node by node
  };
  const GraphStats& graph_stats() const { return graph_stats_; }

  // Copies the graph constants to the device now instead of on the first run, so that a model
  // load reports running out of device memory (naming the constant and its bytes) before any
  // request depends on it. A no-op on the CPU and once done.
  void load_constants();

  // Plans memory for inputs of these shapes without running anything or allocating (for
  // reporting). Every graph input must be named.
  MemoryPlan plan_for(const std::map<std::string, Shape>& input_shapes);

  // Per-node wall time (CPU only): when on, every run adds each node's time to node_seconds()
  // (by node index; view ops cost nothing and stay 0). Off by default: timing costs two clock
  // reads per node.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<double>& node_seconds() const { return node_seconds_; }

  // Times shape inference ran over the whole graph (a run with the previous run's input shapes
  // reuses its shapes; plan_for always infers).
  int64_t inferences() const { return inferences_; }

  const MemoryPlan& plan() const { return plan_; }
  const Graph& graph() const { return graph_; }
  Device device() const { return device_; }
  // Graph constants copied to the device so far (each distinct tensor once); 0 on the CPU.
  int64_t uploaded_constants() const { return uploaded_constants_; }

 private:
  // One key's CUDA graph (see the top of the file).
  struct CapturedRun {
    int eager_runs = 0;
    bool failed = false;          // recording failed: this key runs node by node
    std::shared_ptr<void> exec;   // the cudaGraphExec_t
    std::vector<Tensor> outputs;  // what a replay leaves in the arena
  };

  void resolve_symbols();
  void bind_inputs(const std::map<std::string, Tensor>& inputs);
  void infer_shapes();
  void make_plan();
  void ensure_arena();
  void find_written_inputs();
  void upload_constants();
  Tensor stage_input(size_t index, const Tensor& host);
  void launch(size_t node_index, const std::vector<Tensor>& in, const std::vector<Tensor>& out);
  void finish_cuda_run();
  void throw_on_fault();
  void prepare(const std::map<std::string, Tensor>& inputs);
  std::vector<Tensor> launch_nodes();
  std::vector<Tensor> run_recurring();
  std::vector<Tensor> capture(CapturedRun& entry);
  void drop_graphs();

  const Graph& graph_;
  cpu::TaskRunner& runner_;
  Device device_;
  std::vector<Tensor> tensors_;   // by ValueId: bound inputs, constants, current intermediates
  std::vector<Shape> shapes_;     // by ValueId: inferred shapes of this run
  std::vector<DType> dtypes_;
  std::vector<ops::KnownValue> values_;  // by ValueId: contents known at inference (TensorDesc)
  // shapes_ and plan_ hold the inference and plan for the graph inputs' shapes in shapes_; false
  // from the moment an input's shape changes (or plan_for replaces them) until both are redone.
  bool planned_ = false;
  int64_t inferences_ = 0;
  // By graph input index and dimension: index of its symbol in symbol_names_, or -1 (fixed).
  std::vector<std::vector<int>> symbol_of_;
  std::vector<std::string> symbol_names_;
  std::vector<int64_t> symbol_values_;  // this run's bindings; -1 while unbound
  // By node index, resolved once at construction so runs do no name lookups.
  std::vector<const ops::OpSchema*> schemas_;
  std::vector<const ops::KernelFn*> kernels_;  // null for view ops
  std::vector<std::unique_ptr<const ops::OpAttrs>> attrs_;  // null for ops without attributes
  std::vector<int> buffer_of_;    // by ValueId: planned buffer index, or -1 (view/input/const)
  MemoryPlan plan_;
  std::shared_ptr<Storage> arena_;

  // CUDA only (null / empty on the CPU).
  std::unique_ptr<CudaStream> stream_;
  std::vector<bool> input_written_;  // by graph input index: a side-effect op writes it
  std::vector<std::shared_ptr<Storage>> input_buffers_;  // by graph input index: host inputs' copies
  std::vector<Tensor> staged_sources_;  // host sources of this run's copies, alive until the sync
  std::shared_ptr<Storage> fault_;      // two device ints: KernelContext::fault
  int32_t fault_host_[2] = {0, 0};      // their copy after a run
  std::map<TensorViewKey, Tensor> device_constants_;
  bool constants_uploaded_ = false;
  int64_t uploaded_constants_ = 0;
  const Node* last_launched_ = nullptr;
  bool profiling_ = false;
  std::vector<double> node_seconds_;

  // CUDA graphs, by (input shapes and strides, input addresses); see the top of the file.
  bool cuda_graphs_ = true;
  bool capturing_ = false;
  std::map<std::pair<std::vector<Shape>, std::vector<const void*>>, CapturedRun> graphs_;
  GraphStats graph_stats_;
};

}  // namespace sampan::graph
