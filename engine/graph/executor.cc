#include "engine/graph/executor.h"

#include <algorithm>
#include <chrono>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/ops/op_registry.h"

namespace sampan::graph {

using ops::KnownValue;
using ops::known_value;

Executor::Executor(const Graph& graph, cpu::TaskRunner& runner, Device device)
    : graph_(graph), runner_(runner), device_(device) {
  graph_.validate();
  const auto& registry = ops::OpRegistry::instance();
  for (const Node& n : graph_.nodes()) {
    SAMPAN_CHECK(registry.supports(n.op, device.type), ErrorCode::kUnsupported,
                 "node '{}': op '{}' has no kernel on {}", n.name, n.op, device.str());
    const ops::OpSchema& schema = registry.schema(n.op);
    schemas_.push_back(&schema);
    kernels_.push_back(schema.view ? nullptr : &registry.kernel(n.op, device.type));
    attrs_.push_back(schema.parse_attrs ? schema.parse_attrs(n) : nullptr);
  }
  const size_t nv = graph_.n_values();
  tensors_.resize(nv);
  shapes_.resize(nv);
  dtypes_.resize(nv);
  values_.resize(nv);
  for (size_t v = 0; v < nv; ++v) {
    const Value& val = graph_.value(static_cast<ValueId>(v));
    if (val.kind == ValueKind::kConstant) {
      tensors_[v] = val.constant;
      shapes_[v] = val.constant.shape();
      dtypes_[v] = val.constant.dtype();
      values_[v] = known_value(val.constant);
    } else if (val.kind == ValueKind::kInput) {
      dtypes_[v] = val.dtype;  // a run binds only tensors of this dtype
    }
  }
  resolve_symbols();
  if (device_.type == DeviceType::kCUDA) {
    stream_ = std::make_unique<CudaStream>(device_.index);
    fault_ = Storage::allocate(2 * sizeof(int32_t), device_);
    find_written_inputs();
    input_buffers_.resize(graph_.inputs().size());
  }
}

void Executor::resolve_symbols() {
  std::map<std::string, int> index;
  for (ValueId id : graph_.inputs()) {
    std::vector<int>& dims = symbol_of_.emplace_back();
    for (const Dim& dim : graph_.value(id).shape) {
      if (!dim.symbolic()) {
        dims.push_back(-1);
        continue;
      }
      auto [it, fresh] = index.emplace(dim.symbol, static_cast<int>(symbol_names_.size()));
      if (fresh) symbol_names_.push_back(dim.symbol);
      dims.push_back(it->second);
    }
  }
  symbol_values_.assign(symbol_names_.size(), -1);
}

void Executor::find_written_inputs() {
  // root[v]: the graph input whose memory v is (the input itself or a view of it), or -1.
  std::vector<int> root(graph_.n_values(), -1);
  for (size_t i = 0; i < graph_.inputs().size(); ++i) {
    root[static_cast<size_t>(graph_.inputs()[i])] = static_cast<int>(i);
  }
  input_written_.assign(graph_.inputs().size(), false);
  for (size_t ni = 0; ni < graph_.nodes().size(); ++ni) {
    const Node& n = graph_.nodes()[ni];
    if (schemas_[ni]->has_side_effects) {
      const std::vector<int>& written = schemas_[ni]->written_inputs;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (!written.empty() && std::find(written.begin(), written.end(), static_cast<int>(i)) ==
                                    written.end()) {
          continue;
        }
        const ValueId v = n.inputs[i];
        const int r = v == kNoValue ? -1 : root[static_cast<size_t>(v)];
        if (r >= 0) input_written_[static_cast<size_t>(r)] = true;
      }
    }
    if (!kernels_[ni] && !n.inputs.empty() && n.inputs[0] != kNoValue) {
      for (ValueId out : n.outputs) root[static_cast<size_t>(out)] = root[static_cast<size_t>(n.inputs[0])];
    }
  }
}

namespace {

// Storage::allocate with a message that says which buffer failed (the allocator names only the
// size): an out-of-memory error is what an operator acts on, so it must say what to shrink.
std::shared_ptr<Storage> allocate_named(size_t bytes, Device device, const std::string& what) {
  try {
    return Storage::allocate(bytes, device);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    fail(ErrorCode::kOutOfMemory, "{} ({} bytes on {}): {}", what, bytes, device.str(), e.what());
  }
}

}  // namespace

void Executor::upload_constants() {
  if (constants_uploaded_) return;
  // Tensors already uploaded stay on the device if a later one fails, so a retry (after memory
  // was freed elsewhere) copies only what is missing.
  for (size_t v = 0; v < graph_.n_values(); ++v) {
    const Value& val = graph_.value(static_cast<ValueId>(v));
    if (val.kind != ValueKind::kConstant || tensors_[v].device() == device_) continue;
    const Tensor& c = val.constant;
    SAMPAN_CHECK(c.device().type == DeviceType::kCPU, ErrorCode::kInvalidArgument,
                 "constant '{}' is on {}, the graph runs on {}", val.name, c.device().str(),
                 device_.str());
    // Tied weights (the embedding table reused as the LM head) are one tensor in two places:
    // one device copy serves both.
    const TensorViewKey key = view_key(c);
    auto it = device_constants_.find(key);
    if (it == device_constants_.end()) {
      Tensor d;
      try {
        d = c.to(device_);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kOutOfMemory) throw;
        fail(ErrorCode::kOutOfMemory, "uploading constant '{}' ({}, {} bytes) to {}: {}",
             val.name, c.str(), c.nbytes(), device_.str(), e.what());
      }
      it = device_constants_.emplace(key, std::move(d)).first;
      ++uploaded_constants_;
    }
    tensors_[v] = it->second;
  }
  constants_uploaded_ = true;
}

void Executor::load_constants() {
  if (!stream_) return;
  cuda_set_device(device_.index);
  upload_constants();
}

Tensor Executor::stage_input(size_t index, const Tensor& host) {
  const Tensor src = host.contiguous();
  const size_t bytes = static_cast<size_t>(src.nbytes());
  std::shared_ptr<Storage>& buf = input_buffers_[index];
  if (!buf || buf->bytes() < bytes) {
    drop_graphs();  // they read the old buffer
    buf.reset();    // free the old buffer before allocating the larger one
    buf = allocate_named(std::max<size_t>(bytes, 64), device_,
                         fmt::format("device buffer for graph input '{}' {}",
                                     graph_.value(graph_.inputs()[index]).name, src.str()));
  }
  cuda_copy_async(buf->data(), src.raw(), bytes, stream_->handle());
  // A pinned host source is read by the DMA after this returns: keep it alive until the sync.
  staged_sources_.push_back(src);
  return Tensor::from_storage(buf, 0, src.shape(), src.dtype());
}

void Executor::bind_inputs(const std::map<std::string, Tensor>& inputs) {
  std::fill(symbol_values_.begin(), symbol_values_.end(), -1);
  for (size_t index = 0; index < graph_.inputs().size(); ++index) {
    const ValueId id = graph_.inputs()[index];
    const Value& val = graph_.value(id);
    auto it = inputs.find(val.name);
    SAMPAN_CHECK(it != inputs.end(), ErrorCode::kInvalidArgument, "graph input '{}' is not bound",
                 val.name);
    const Tensor& t = it->second;
    SAMPAN_CHECK(t.dtype() == val.dtype, ErrorCode::kInvalidArgument,
                 "graph input '{}' is {}, expected {}", val.name, dtype_name(t.dtype()),
                 dtype_name(val.dtype));
    SAMPAN_CHECK(t.rank() == static_cast<int>(val.shape.size()), ErrorCode::kInvalidArgument,
                 "graph input '{}' has shape {}, expected rank {}", val.name,
                 shape_str(t.shape()), val.shape.size());
    for (size_t d = 0; d < val.shape.size(); ++d) {
      const int64_t got = t.shape()[d];
      const int sym = symbol_of_[index][d];
      if (sym < 0) {
        SAMPAN_CHECK(got == val.shape[d].size, ErrorCode::kInvalidArgument,
                     "graph input '{}' has dim {} = {}, expected {}", val.name, d, got,
                     val.shape[d].size);
        continue;
      }
      int64_t& bound = symbol_values_[static_cast<size_t>(sym)];
      SAMPAN_CHECK(bound < 0 || bound == got, ErrorCode::kInvalidArgument,
                   "graph input '{}' has dim {} = {} but '{}' is {} elsewhere", val.name, d, got,
                   symbol_names_[static_cast<size_t>(sym)], bound);
      bound = got;
    }
    const bool on_device = t.device() == device_;
    const bool host_to_cuda =
        device_.type == DeviceType::kCUDA && t.device().type == DeviceType::kCPU;
    SAMPAN_CHECK(on_device || host_to_cuda, ErrorCode::kInvalidArgument,
                 "graph input '{}' is on {}, the graph runs on {}", val.name, t.device().str(),
                 device_.str());
    // A copy would take the graph's in-place writes and drop them.
    SAMPAN_CHECK(on_device || !input_written_[index], ErrorCode::kInvalidArgument,
                 "graph input '{}' is written in place by the graph and must be on {}, not {}",
                 val.name, device_.str(), t.device().str());
    tensors_[static_cast<size_t>(id)] = on_device ? t : stage_input(index, t);
    Shape& shape = shapes_[static_cast<size_t>(id)];
    if (shape != t.shape()) {
      shape = t.shape();
      planned_ = false;
    }
  }
}

void Executor::infer_shapes() {
  ++inferences_;
  std::vector<ops::TensorDesc> in;
  for (size_t ni = 0; ni < graph_.nodes().size(); ++ni) {
    const Node& n = graph_.nodes()[ni];
    in.clear();
    for (ValueId v : n.inputs) {
      if (v == kNoValue) {
        in.push_back({{}, DType::kF32, false});
      } else {
        in.push_back({shapes_[static_cast<size_t>(v)], dtypes_[static_cast<size_t>(v)], true,
                      values_[static_cast<size_t>(v)]});
      }
    }
    std::vector<ops::TensorDesc> out = schemas_[ni]->infer_typed(n, attrs_[ni].get(), in);
    SAMPAN_CHECK(out.size() == n.outputs.size(), ErrorCode::kInternal,
                 "node '{}': op '{}' inferred {} outputs, node has {}", n.name, n.op, out.size(),
                 n.outputs.size());
    for (size_t i = 0; i < out.size(); ++i) {
      shapes_[static_cast<size_t>(n.outputs[i])] = out[i].shape;
      dtypes_[static_cast<size_t>(n.outputs[i])] = out[i].dtype;
      KnownValue& known = values_[static_cast<size_t>(n.outputs[i])];
      known = std::move(out[i].value);
      SAMPAN_CHECK(!known || static_cast<int64_t>(known->size()) == shape_numel(out[i].shape),
                   ErrorCode::kInternal, "node '{}': op '{}' inferred {} values for shape {}",
                   n.name, n.op, known->size(), shape_str(out[i].shape));
    }
  }
}

void Executor::make_plan() {
  const auto& nodes = graph_.nodes();
  const int n_steps = static_cast<int>(nodes.size());
  buffer_of_.assign(graph_.n_values(), -1);
  // root_[v]: the planned buffer that holds v's memory (views share their source's buffer).
  std::vector<int> root(graph_.n_values(), -1);
  std::vector<BufferRequest> requests;
  for (int i = 0; i < n_steps; ++i) {
    const Node& n = nodes[static_cast<size_t>(i)];
    const bool is_view = kernels_[static_cast<size_t>(i)] == nullptr;
    for (ValueId in : n.inputs) {
      if (in == kNoValue) continue;
      const int r = root[static_cast<size_t>(in)];
      if (r >= 0) requests[static_cast<size_t>(r)].last_use = i;
    }
    for (ValueId out : n.outputs) {
      if (is_view) {
        root[static_cast<size_t>(out)] = n.inputs.empty() ? -1 : root[static_cast<size_t>(n.inputs[0])];
        continue;
      }
      const int64_t bytes = dtype_storage_bytes(dtypes_[static_cast<size_t>(out)],
                                                shape_numel(shapes_[static_cast<size_t>(out)]));
      requests.push_back({bytes, i, i});
      root[static_cast<size_t>(out)] = static_cast<int>(requests.size() - 1);
      buffer_of_[static_cast<size_t>(out)] = root[static_cast<size_t>(out)];
    }
  }
  for (ValueId out : graph_.outputs()) {
    const int r = root[static_cast<size_t>(out)];
    if (r >= 0) requests[static_cast<size_t>(r)].last_use = n_steps;
  }
  plan_ = plan_memory(requests);
}

void Executor::ensure_arena() {
  if (!arena_ || arena_->bytes() < static_cast<size_t>(plan_.arena_bytes)) {
    drop_graphs();   // they write the old arena
    arena_.reset();  // free the old arena before allocating the larger one
    arena_ = allocate_named(static_cast<size_t>(std::max<int64_t>(plan_.arena_bytes, 64)), device_,
                            fmt::format("executor arena for {} intermediate buffers",
                                        plan_.offsets.size()));
  }
}

MemoryPlan Executor::plan_for(const std::map<std::string, Shape>& input_shapes) {
  for (ValueId id : graph_.inputs()) {
    const Value& val = graph_.value(id);
    auto it = input_shapes.find(val.name);
    SAMPAN_CHECK(it != input_shapes.end(), ErrorCode::kInvalidArgument,
                 "graph input '{}' has no shape", val.name);
    shapes_[static_cast<size_t>(id)] = it->second;
  }
  planned_ = false;  // the next run() infers and plans for its own shapes
  infer_shapes();
  make_plan();
  return plan_;
}

void Executor::launch(size_t ni, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const Node& n = graph_.nodes()[ni];
  if (!stream_) {
    (*kernels_[ni])(ops::KernelContext{n, attrs_[ni].get(), in, out, runner_});
    return;
  }
  last_launched_ = &n;
  try {
    (*kernels_[ni])(ops::KernelContext{n, attrs_[ni].get(), in, out, runner_,
                                       stream_->handle(), capturing_,
                                       static_cast<int32_t*>(fault_->data()),
                                       static_cast<int32_t>(ni + 1)});
#ifndef NDEBUG
    // Debug builds check every launch and wait for every node, so an asynchronous fault is
    // reported against the node that caused it rather than at the end of the run (not while
    // recording a graph: nothing runs then, and waiting would end the recording).
    check_cuda(cuda_take_last_error(), "kernel launch");
    if (!capturing_) stream_->synchronize("kernel");
#endif
  } catch (const Error& e) {
    fail(e.code(), "node '{}' ({}) on {}: {}", n.name, n.op, device_.str(), e.what());
  }
}

void Executor::finish_cuda_run() {
  // Kernels run asynchronously: a fault surfaces here, after the last launch, and any node may
  // have caused it (a Debug build waits after every node and names the culprit).
  const std::string what =
      last_launched_ ? fmt::format("graph run on {} (last node launched: '{}' ({}))",
                                   device_.str(), last_launched_->name, last_launched_->op)
                     : fmt::format("graph run on {}", device_.str());
  last_launched_ = nullptr;
  cuda_copy_async(fault_host_, fault_->data(), sizeof(fault_host_), stream_->handle());
  stream_->synchronize(what);
  staged_sources_.clear();  // the copies that read them are done
  throw_on_fault();
}

void Executor::throw_on_fault() {
  const int32_t tag = fault_host_[0];
  if (tag <= 0 || static_cast<size_t>(tag) > graph_.nodes().size()) return;
  const Node& n = graph_.nodes()[static_cast<size_t>(tag - 1)];
  const ops::FaultTextFn text = ops::OpRegistry::instance().fault_text(n.op, device_.type);
  fail(ErrorCode::kInvalidArgument,
       "node '{}' ({}) on {}: {} (that work was skipped; the rest of the run completed)", n.name,
       n.op, device_.str(),
       text ? text(fault_host_[1]) : fmt::format("bad input, reason {:#x}", fault_host_[1]));
}

std::vector<Tensor> Executor::run(const std::map<std::string, Tensor>& inputs, bool recurring) {
  if (!stream_) {
    prepare(inputs);
    return launch_nodes();
  }
  cuda_set_device(device_.index);
  try {
    upload_constants();
    prepare(inputs);  // queues the staging copies of host inputs: before any replay
    cuda_memset_async(fault_->data(), 0, 2 * sizeof(int32_t), stream_->handle());
    std::vector<Tensor> result = recurring && cuda_graphs_ ? run_recurring() : launch_nodes();
    finish_cuda_run();
    return result;
  } catch (...) {
    // Work already queued may still read the input buffers and the arena: let it finish before
    // the caller (or the next run) frees or reuses them. Its own error, if any, is secondary.
    last_launched_ = nullptr;
    try {
      stream_->synchronize("");
    } catch (const Error&) {
    }
    staged_sources_.clear();
    throw;
  }
}

void Executor::set_cuda_graphs(bool on) {
  cuda_graphs_ = on;
  if (!on) drop_graphs();
}

void Executor::drop_graphs() {
  // Destroying an executable graph whose replay is still queued is legal: CUDA finishes it.
  graphs_.clear();
}

std::vector<Tensor> Executor::run_recurring() {
  std::vector<Shape> layout;
  std::vector<const void*> addresses;
  for (ValueId id : graph_.inputs()) {
    const Tensor& t = tensors_[static_cast<size_t>(id)];
    layout.push_back(t.shape());
    layout.push_back(t.strides());
    addresses.push_back(t.raw());
  }
  // Enough for every decode batch size of a server; a flood of new keys starts over rather than
  // growing without bound.
  constexpr size_t kMaxGraphs = 256;
  if (graphs_.size() >= kMaxGraphs) drop_graphs();
  CapturedRun& entry = graphs_[{std::move(layout), std::move(addresses)}];
  if (entry.exec) {
    cuda_graph_launch(entry.exec.get(), stream_->handle(), "replaying a CUDA graph");
    ++graph_stats_.replays;
    return entry.outputs;
  }
  if (entry.failed || entry.eager_runs++ == 0) return launch_nodes();
  return capture(entry);
}

std::vector<Tensor> Executor::capture(CapturedRun& entry) {
  void* stream = stream_->handle();
  std::vector<Tensor> outputs;
  void* exec = nullptr;
  try {
    cuda_begin_capture(stream);
    capturing_ = true;
    outputs = launch_nodes();
    capturing_ = false;
    exec = cuda_end_capture(stream, "recording a CUDA graph");
  } catch (const Error& e) {
    capturing_ = false;
    cuda_abort_capture(stream);
    last_launched_ = nullptr;
    entry.failed = true;
    ++graph_stats_.failures;
    log::warn("executor on {}: these input shapes run without a CUDA graph: {}", device_.str(),
              e.what());
    return launch_nodes();  // nothing ran while recording: run the step now
  }
  entry.exec = std::shared_ptr<void>(exec, cuda_graph_destroy);
  entry.outputs = outputs;
  ++graph_stats_.captures;
  cuda_graph_launch(exec, stream, "replaying a CUDA graph");
  ++graph_stats_.replays;
  return outputs;
}

void Executor::prepare(const std::map<std::string, Tensor>& inputs) {
  bind_inputs(inputs);
  // Inference and the plan depend only on the input shapes (dtypes and attributes are fixed):
  // the same shapes as the last run that got this far give the same results.
  if (planned_) return;
  infer_shapes();
  make_plan();
  ensure_arena();
  planned_ = true;
}

std::vector<Tensor> Executor::launch_nodes() {
  std::vector<Tensor> in, out;
  for (size_t ni = 0; ni < graph_.nodes().size(); ++ni) {
    const Node& n = graph_.nodes()[ni];
    in.clear();
    out.clear();
    for (ValueId v : n.inputs) in.push_back(v == kNoValue ? Tensor() : tensors_[static_cast<size_t>(v)]);
    if (!kernels_[ni]) {
      out = schemas_[ni]->view(n, attrs_[ni].get(), in);
    } else {
      for (ValueId v : n.outputs) {
        const int b = buffer_of_[static_cast<size_t>(v)];
        out.push_back(Tensor::from_storage(arena_, static_cast<size_t>(plan_.offsets[static_cast<size_t>(b)]),
                                           shapes_[static_cast<size_t>(v)],
                                           dtypes_[static_cast<size_t>(v)]));
      }
      if (profiling_ && !stream_) {
        const auto t0 = std::chrono::steady_clock::now();
        launch(ni, in, out);
        node_seconds_.resize(graph_.nodes().size(), 0.0);
        node_seconds_[ni] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } else {
        launch(ni, in, out);
      }
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) tensors_[static_cast<size_t>(n.outputs[i])] = out[i];
  }
  std::vector<Tensor> result;
  for (ValueId v : graph_.outputs()) result.push_back(tensors_[static_cast<size_t>(v)]);
  return result;
}

}  // namespace sampan::graph
